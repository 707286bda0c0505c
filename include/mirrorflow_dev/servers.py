"""What the throwaway servers (Keycloak, the schema registries) share: started as this process's
children, waited for until a URL answers, and stopped by PID only while the PID is provably theirs
(``owned``: a check of /proc/<pid>/cmdline, so that a reused PID belonging to something else is never
signalled)."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import psutil

from mirrorflow_dev.processes import log_tail, process_alive, start_logged, wait_gone

log = logging.getLogger(__name__)

# Servers started by this Python process: reaped on stop (an exited child not waited for stays a zombie).
_children: dict[int, subprocess.Popen[bytes]] = {}


def start(cmd: Sequence[str], log_file: Path, env: Mapping[str, str], cwd: Path) -> subprocess.Popen[bytes]:
    proc = start_logged(cmd, log_file, env, cwd=cwd)
    _children[proc.pid] = proc
    return proc


@contextlib.contextmanager
def starting(
    name: str, home: Path, log_file: Path, stop: Callable[[], object], error: type[Exception]
) -> Iterator[None]:
    """A server's start-up: if anything in it fails, the server is stopped (``stop``, which must
    allow for a server not started yet) and ``error`` carries the log's last lines; a Ctrl-C passes
    as it is, once the server is stopped."""
    try:
        yield
    except BaseException as exc:
        tail = log_tail(log_file)
        stop()
        if not isinstance(exc, Exception):
            raise
        raise error(f"{name} did not start in {home}: {exc}\n{tail}") from exc


def wait_served(
    proc: subprocess.Popen[bytes], url: str, timeout: float, name: str, error: type[Exception]
) -> None:
    """Until ``url`` answers; ``error`` if ``proc`` exits first or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while True:
        rc = proc.poll()
        if rc is not None:
            raise error(f"{name} exited with code {rc} during start-up")
        # URLError, HTTPError and refused connections alike
        with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=5):
            return
        if time.monotonic() >= deadline:
            raise error(f"{url} not served after {timeout:.0f}s")
        time.sleep(0.5)


def cmdline(pid: int) -> list[str]:
    """The arguments ``pid`` runs with (none once it is gone)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def stop(pid: int, owned: Callable[[int], bool], name: str, error: type[Exception], timeout: float) -> bool:
    """Stop server ``pid`` if it runs and is ``owned``: SIGTERM to it, then SIGKILL to it and its owned
    children (a JVM a script started) after ``timeout``. True if a running server was stopped;
    ``error`` if one survives SIGKILL."""
    stopped = False
    if pid > 0 and process_alive(pid) and owned(pid):
        pids = (pid, *(child.pid for child in _children_of(pid) if owned(child.pid)))
        _signal(pid, owned, signal.SIGTERM)
        if not all(wait_gone(p, timeout) for p in pids):
            log.warning("%s pid %s still runs %.0fs after SIGTERM, sending SIGKILL", name, pid, timeout)
            for p in pids:
                _signal(p, owned, signal.SIGKILL)
            if not all(wait_gone(p, 10.0) for p in pids):
                raise error(f"{name} pid {pid} (with {pids[1:]}) survived SIGKILL")
        stopped = True
    child = _children.pop(pid, None)
    if child is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(5)
    return stopped


def _children_of(pid: int) -> list[psutil.Process]:
    try:
        children: list[psutil.Process] = psutil.Process(pid).children()
    except psutil.NoSuchProcess:
        return []
    return children


def _signal(pid: int, owned: Callable[[int], bool], sig: signal.Signals) -> None:
    if process_alive(pid) and owned(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
