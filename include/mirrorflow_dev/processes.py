"""Loopback ports and processes, for the local servers of ``mirrorflow_dev``: free ports to bind,
and whether a process (by PID, never by name) still runs."""

from __future__ import annotations

import socket
import time
from pathlib import Path


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (another process may still take it)."""
    return free_ports(1)[0]


def free_ports(n: int) -> list[int]:
    """``n`` distinct free ports: all sockets stay bound until every port is chosen."""
    socks: list[socket.socket] = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


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
