"""A throwaway PostgreSQL server on loopback, for tests and development.

``start_postgres`` creates a new temporary folder (the server's *home*), runs ``initdb`` into it and
starts the server with ``pg_ctl``; ``create_user`` gives each client (a test) a role and a schema of
its own, so it sees an empty database; ``stop_postgres`` stops the server and deletes the home::

    home/data/          the cluster: UTF8, locale C (byte order, as SQLite compares text)
    home/socket/        the Unix socket directory
    home/postgres.log   the server's output

Invariants: the server listens on 127.0.0.1 only, on a port that was free at start; Unix-socket
connections are trusted, TCP connections need the superuser's random password. Durability is off
(fsync, full-page writes, synchronous commit): a crash of the machine may lose the cluster, which
nobody keeps. Run as root, initdb and the server run as the unprivileged ``postgres`` user (PostgreSQL
refuses to run as root), which then owns the home. The server is stopped by its PID only, and only
after /proc/<pid>/cmdline proves it is the ``postgres`` of that data directory (a reused PID belonging
to something else is never signalled).
"""

from __future__ import annotations

import logging
import os
import pwd
import re
import secrets
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy.engine import URL

from mirrorflow_dev.processes import free_port, log_tail, process_alive, wait_gone

log = logging.getLogger(__name__)

SERVER_PROGRAMS = ("initdb", "pg_ctl", "postgres")
DEBIAN_ROOT = Path("/usr/lib/postgresql")  # Debian's postgresql-<version>: <root>/<version>/bin
SERVER_USER = "postgres"  # created by Debian's package; the server runs as this user under root
SUPERUSER = "mirrorflow"
_MAINTENANCE_DB = "postgres"  # created by initdb; CREATE DATABASE is issued from there


class LocalPostgresError(RuntimeError):
    """A local server could not be found, started or stopped; the message says why (with its log)."""


@dataclass(frozen=True)
class LocalPostgres:
    """A started server. ``pid`` is the postmaster; ``home`` is absolute and holds all of its state."""

    port: int
    pid: int
    home: Path
    database: str
    password: str = field(repr=False)
    user: str = SUPERUSER

    @property
    def url(self) -> str:
        """SQLAlchemy URL of ``database`` as the superuser (password included)."""
        return self.url_for()

    @property
    def data_dir(self) -> Path:
        return self.home / "data"

    def url_for(self, database: str | None = None, *, user: str | None = None) -> str:
        """SQLAlchemy URL (psycopg2 driver, password included) of ``database`` (default: the one made
        at start) as ``user`` (default: the superuser); every user has the server's password."""
        url = URL.create(
            "postgresql+psycopg2",
            username=user or self.user,
            password=self.password,
            host="127.0.0.1",
            port=self.port,
            database=database or self.database,
        )
        return url.render_as_string(hide_password=False)


# ------------------------------------------------------------------------------------------ lookup


def server_binaries() -> Path:
    """The folder holding ``initdb``, ``pg_ctl`` and ``postgres``.

    The folder of ``pg_ctl`` on PATH (symlinks resolved) if it holds all three, else Debian's
    /usr/lib/postgresql/<version>/bin of the newest version that does.
    """
    candidates: list[Path] = []
    on_path = shutil.which("pg_ctl")
    if on_path is not None:
        candidates.append(Path(on_path).resolve().parent)
    candidates += sorted(DEBIAN_ROOT.glob("*/bin"), key=lambda p: _version(p.parent.name), reverse=True)
    for folder in candidates:
        if all(os.access(folder / program, os.X_OK) for program in SERVER_PROGRAMS):
            return folder
    raise LocalPostgresError(
        f"PostgreSQL server programs ({', '.join(SERVER_PROGRAMS)}) not found on PATH nor in "
        f"{DEBIAN_ROOT}/<version>/bin: run `make setup` (installs Debian's postgresql package)"
    )


def _version(name: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", name))


def _server_account() -> pwd.struct_passwd | None:
    """The user to run initdb and the server as: ``None`` (ourselves) unless we are root."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam(SERVER_USER)
    except KeyError:
        raise LocalPostgresError(
            f"PostgreSQL refuses to run as root and there is no {SERVER_USER!r} user to run it as: "
            "run `make setup` (Debian's postgresql package creates it)"
        ) from None


# ---------------------------------------------------------------------------------------- starting


def start_postgres(*, database: str = "mirrorflow", timeout: float = 60.0) -> LocalPostgres:
    """Start a new server with an empty ``database`` and return once clients can use it.

    Ready means: ``pg_ctl start -w`` saw the server accept connections and ``database`` was created
    over TCP with the superuser's password. If anything fails, the server (if it started) is stopped,
    the home is deleted and ``LocalPostgresError`` carries the log's last lines.
    """
    binaries = server_binaries()
    account = _server_account()
    home = Path(tempfile.mkdtemp(prefix="mirrorflow-postgres-")).resolve()
    data_dir, log_file, socket_dir = home / "data", home / "postgres.log", home / "socket"
    try:
        password = secrets.token_urlsafe(18)
        password_file = home / "password"
        password_file.write_text(f"{password}\n")  # mkdtemp made home 0700: nobody else reads it
        socket_dir.mkdir()
        for path in (home, password_file, socket_dir):
            _hand_over(path, account)
        _run(
            [
                binaries / "initdb",
                f"--pgdata={data_dir}",
                f"--username={SUPERUSER}",
                f"--pwfile={password_file}",
                "--encoding=UTF8",
                "--locale=C",
                "--auth-local=trust",
                "--auth-host=scram-sha-256",
                "--no-sync",  # nothing to keep: skip the final fsync of the new cluster
            ],
            account,
            cwd=home,
            timeout=timeout,
        )
        password_file.unlink()
        port = free_port()
        with (data_dir / "postgresql.conf").open("a") as conf:  # later settings override earlier ones
            conf.write(
                f"listen_addresses = '127.0.0.1'\n"
                f"port = {port}\n"
                f"unix_socket_directories = {_quote(str(socket_dir))}\n"
                "fsync = off\nfull_page_writes = off\nsynchronous_commit = off\n"
            )
        # pg_ctl detaches the server (own session, output to the log file) and waits until it
        # accepts connections; the server is not our child, so stopping polls /proc for it.
        _run(
            [binaries / "pg_ctl", "start", "-D", data_dir, "-l", log_file, "-w", "-t", str(int(timeout))],
            account,
            cwd=home,
            timeout=timeout + 10,
        )
        pid = _postmaster_pid(data_dir)
        if pid is None:
            raise LocalPostgresError(f"pg_ctl reported a start but {data_dir}/postmaster.pid is missing")
        server = LocalPostgres(port=port, pid=pid, home=home, database=database, password=password)
        _execute(server, _MAINTENANCE_DB, _statement("CREATE DATABASE {}", database))
        log.info("postgres ready on 127.0.0.1:%s (pid %s, %s)", port, pid, home)
        return server
    except BaseException as error:
        tail = log_tail(log_file)
        _stop(_postmaster_pid(data_dir), home)
        if not isinstance(error, Exception):
            raise  # Ctrl-C: cleaned up, nothing to explain
        raise LocalPostgresError(f"PostgreSQL did not start in {home}: {error}\n{tail}") from error


def create_user(server: LocalPostgres, name: str, settings: Mapping[str, str] | None = None) -> str:
    """Create the login role ``name`` with a schema of its own, also ``name``, in the server's
    database, and return the role's SQLAlchemy URL.

    The role's sessions create and find unqualified tables in its schema (``search_path`` starts
    with ``"$user"``; since PostgreSQL 15 nobody else may create in ``public``): each role sees a new,
    empty database, for the price of a schema. ``settings`` (e.g. ``{"timezone": "Asia/Kolkata"}``)
    become the defaults of the role's sessions.
    """
    _execute(
        server,
        server.database,
        _statement("CREATE ROLE {} LOGIN PASSWORD {password}", name, password=server.password),
        _statement("CREATE SCHEMA {0} AUTHORIZATION {0}", name),
        *(
            _statement("ALTER ROLE {} SET {} TO {value}", name, k, value=v)
            for k, v in (settings or {}).items()
        ),
    )
    return server.url_for(user=name)


def _statement(template: str, *names: str, **values: str) -> Any:
    """``template`` with its ``{}`` fields filled by ``names`` quoted as identifiers and its
    ``{key}`` fields by ``values`` quoted as literals (a psycopg2 ``Composed``)."""
    from psycopg2 import sql  # noqa: PLC0415  lazy: finding, starting and stopping servers need no driver

    return sql.SQL(template).format(
        *(sql.Identifier(n) for n in names), **{k: sql.Literal(v) for k, v in values.items()}
    )


def _execute(server: LocalPostgres, database: str, *statements: Any) -> None:
    """Run ``statements`` on ``database`` as the superuser over TCP, each in its own transaction
    (``CREATE DATABASE`` cannot run inside one)."""
    import psycopg2  # noqa: PLC0415  lazy: finding, starting and stopping servers need no driver

    conn = psycopg2.connect(
        host="127.0.0.1",
        port=server.port,
        user=server.user,
        password=server.password,
        dbname=database,
        connect_timeout=10,
    )
    try:
        conn.autocommit = True
        with conn.cursor() as cursor:
            for statement in statements:
                cursor.execute(statement)
    finally:
        conn.close()


def _hand_over(path: Path, account: pwd.struct_passwd | None) -> None:
    if account is not None:
        os.chown(path, account.pw_uid, account.pw_gid)


def _run(cmd: Sequence[str | Path], account: pwd.struct_passwd | None, *, cwd: Path, timeout: float) -> None:
    as_account: dict[str, Any] = (
        {} if account is None else {"user": account.pw_uid, "group": account.pw_gid, "extra_groups": []}
    )
    args = [str(c) for c in cmd]
    result = subprocess.run(
        args, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False, **as_account
    )
    if result.returncode != 0:
        raise LocalPostgresError(
            f"{Path(args[0]).name} failed (rc {result.returncode}):\n{result.stdout}{result.stderr}".rstrip()
        )


def _quote(value: str) -> str:
    """A postgresql.conf string literal."""
    return "'" + value.replace("'", "''") + "'"


# ---------------------------------------------------------------------------------------- stopping


def stop_postgres(server: LocalPostgres, timeout: float = 30.0) -> bool:
    """Stop ``server`` by its PID and delete its home. True if a running server was stopped.

    The PID is signalled only while it is the ``postgres`` of this data directory: SIGQUIT (immediate
    shutdown: clients are cut off, and no final checkpoint is written for a cluster about to be
    deleted), SIGKILL after ``timeout``. Stopping twice is a no-op.
    """
    return _stop(server.pid, server.home, timeout)


def _stop(pid: int | None, home: Path, timeout: float = 30.0) -> bool:
    stopped = False
    if pid is not None and process_alive(pid) and _is_server_of(pid, home / "data"):
        _shut_down(pid, timeout)
        stopped = True
    if home.exists():
        shutil.rmtree(home)
    return stopped


def _postmaster_pid(data_dir: Path) -> int | None:
    """The PID on the first line of postmaster.pid (written by the server itself), if any."""
    try:
        return int((data_dir / "postmaster.pid").read_text().split("\n", 1)[0])
    except (OSError, ValueError):
        return None


def _is_server_of(pid: int, data_dir: Path) -> bool:
    """Whether ``pid`` runs ``postgres -D <data_dir>`` (PID-reuse guard)."""
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return False
    return Path(args[0]).name == "postgres" and str(data_dir) in args


def _shut_down(pid: int, timeout: float) -> None:
    for sig, wait in ((signal.SIGQUIT, timeout), (signal.SIGKILL, 10.0)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        if wait_gone(pid, wait):
            return
        log.warning("postgres pid %s still runs %.0fs after %s", pid, wait, sig.name)
    raise LocalPostgresError(f"postgres pid {pid} survived SIGKILL")
