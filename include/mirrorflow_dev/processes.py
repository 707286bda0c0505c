"""Loopback ports and processes, for the local servers of ``mirrorflow_dev``: free ports to bind,
whether a process (by PID, never by name) still runs, and stopping one started here."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (another process may still take it)."""
    return free_ports(1)[0]


# Ports are chosen from here up to the start of the kernel's ephemeral range, which it hands out to
# outgoing connections: a port chosen there can be taken by any client's connect() between the
# choice and the server's bind ("Address already in use" when a broker starts).
_LOWEST_PORT = 10_000
_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_PORT_ATTEMPTS = 1_000


def free_ports(n: int) -> list[int]:
    """``n`` distinct ports below the ephemeral range, free when chosen: all sockets stay bound
    until every port is chosen."""
    highest = _ephemeral_start() - 1
    socks: list[socket.socket] = []
    try:
        for _ in range(_PORT_ATTEMPTS):
            if len(socks) == n:
                return [s.getsockname()[1] for s in socks]
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                s.bind(("127.0.0.1", random.randint(_LOWEST_PORT, highest)))
            except OSError:  # in use (or in TIME_WAIT): another try
                s.close()
                continue
            socks.append(s)
        raise OSError(f"no {n} free ports between {_LOWEST_PORT} and {highest} in {_PORT_ATTEMPTS} tries")
    finally:
        for s in socks:
            s.close()


def _ephemeral_start() -> int:
    """The first port of the kernel's ephemeral range (Linux's default where it cannot be read)."""
    try:
        return int(_EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


def port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        # Java binds with SO_REUSEADDR, so a TIME_WAIT left by a previous broker must not count.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def process_alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie (an exited child nobody reaped yet)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    # The state letter follows the command name, which is in parentheses and may hold spaces.
    state = stat.rpartition(")")[2].split()[:1]
    return bool(state) and state[0] not in ("Z", "X")


def wait_gone(pid: int, timeout: float) -> bool:
    """Poll until ``pid`` is gone or a zombie; False if it still runs after ``timeout`` seconds.

    For processes this Python process does not reap (not its children, or daemonized).
    """
    deadline = time.monotonic() + timeout
    while process_alive(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    return True


def stop_process(proc: subprocess.Popen[bytes], group: bool, timeout: float = 30.0) -> None:
    """SIGTERM, then SIGKILL after ``timeout``: to the PID, or to its process group (own session)."""

    def send(sig: signal.Signals) -> None:
        try:
            if group:
                os.killpg(proc.pid, sig)
            else:
                os.kill(proc.pid, sig)
        except ProcessLookupError:
            pass

    if proc.poll() is None:
        send(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            send(signal.SIGKILL)
            proc.wait(10)
    if group:  # children of the group (e.g. spark-submit's JVM) may outlive the leader
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            return
        send(signal.SIGTERM)
        time.sleep(5)
        send(signal.SIGKILL)


def start_logged(
    cmd: Sequence[str], log: Path, env: Mapping[str, str] | None = None, cwd: Path | None = None
) -> subprocess.Popen[bytes]:
    """Start a command in its own session (so its whole group can be stopped) with output to ``log``,
    in ``cwd`` (default: the log's folder)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        return subprocess.Popen(
            list(cmd),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=None if env is None else dict(env),
            cwd=cwd or log.parent,
            start_new_session=True,
        )


def log_tail(log_file: Path, lines: int = 40) -> str:
    """The last ``lines`` of a server's log, headed by its path, for an error saying why it failed."""
    try:
        body = log_file.read_text(errors="replace").splitlines()[-lines:]
    except OSError:
        body = []
    return f"--- {log_file} (last lines)\n" + ("\n".join(body) or "(no log output)")
