"""The throwaway PostgreSQL server: loopback only, password over TCP, PID-safe stop, clear failures."""

from __future__ import annotations

import os
import pwd
import re
import socket
import subprocess
from pathlib import Path

import psycopg2
import pytest
from sqlalchemy import create_engine, text

from mirrorflow_dev import local_postgres
from mirrorflow_dev.local_postgres import LocalPostgres, LocalPostgresError
from mirrorflow_dev.processes import process_alive

pytestmark = pytest.mark.postgres


def _server_uid() -> int:
    return pwd.getpwnam(local_postgres.SERVER_USER).pw_uid if os.geteuid() == 0 else os.geteuid()


def test_server_on_loopback_with_a_password_over_tcp_then_stopped_and_deleted() -> None:
    server = local_postgres.start_postgres(database="offsets")
    try:
        assert server.password not in repr(server)
        assert server.url == (
            f"postgresql+psycopg2://mirrorflow:{server.password}@127.0.0.1:{server.port}/offsets"
        )
        uid_line = next(
            line
            for line in Path(f"/proc/{server.pid}/status").read_text().splitlines()
            if line.startswith("Uid:")
        )
        assert uid_line.split()[1:] == [str(_server_uid())] * 4  # never root
        assert server.home.stat().st_uid == _server_uid()
        assert (server.data_dir / "postmaster.pid").read_text().split("\n", 1)[0] == str(server.pid)

        engine = create_engine(server.url)
        try:
            with engine.connect() as conn:
                settings = conn.execute(
                    text(
                        "SELECT current_database(), current_setting('listen_addresses'), "
                        "current_setting('server_encoding'), current_setting('lc_collate'), "
                        "current_setting('unix_socket_directories')"
                    )
                ).one()
        finally:
            engine.dispose()
        assert tuple(settings) == ("offsets", "127.0.0.1", "UTF8", "C", str(server.home / "socket"))

        with pytest.raises(psycopg2.OperationalError, match="password authentication failed"):
            psycopg2.connect(
                host="127.0.0.1", port=server.port, user=server.user, password="wrong", dbname="offsets"
            )

        # Each role has a schema of its own: the same table name holds different rows for each.
        for name in ("alice", "bob"):
            url = local_postgres.create_user(server, name, {"timezone": "Asia/Kolkata"})
            assert url == f"postgresql+psycopg2://{name}:{server.password}@127.0.0.1:{server.port}/offsets"
            engine = create_engine(url)
            try:
                with engine.begin() as conn:
                    conn.execute(text("CREATE TABLE owner (name text)"))
                    conn.execute(text("INSERT INTO owner VALUES (current_user)"))
                    assert conn.execute(text("SELECT name, current_schema FROM owner")).all() == [
                        (name, name)
                    ]
                    assert conn.execute(text("SHOW timezone")).scalar_one() == "Asia/Kolkata"
            finally:
                engine.dispose()
    finally:
        stopped = local_postgres.stop_postgres(server)
    assert stopped is True
    assert not process_alive(server.pid)
    assert not server.home.exists()
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", server.port)) != 0, "nothing listens on the port any more"
    assert local_postgres.stop_postgres(server) is False, "stopping twice is a no-op"


def test_stop_never_signals_a_foreign_process_with_a_reused_pid(tmp_path: Path) -> None:
    home = tmp_path / "stale"
    (home / "data").mkdir(parents=True)
    foreign = subprocess.Popen(["sleep", "60"])
    try:
        stale = LocalPostgres(port=1, pid=foreign.pid, home=home, database="x", password="p")
        assert local_postgres.stop_postgres(stale) is False
        assert foreign.poll() is None, "an unrelated process must survive"
        assert not home.exists()
    finally:
        foreign.terminate()
        foreign.wait(10)


def test_missing_server_programs_name_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(local_postgres, "DEBIAN_ROOT", tmp_path / "postgresql")
    message = (
        "PostgreSQL server programs (initdb, pg_ctl, postgres) not found on PATH nor in "
        f"{tmp_path}/postgresql/<version>/bin: run `make setup` (installs Debian's postgresql package)"
    )
    with pytest.raises(LocalPostgresError) as info:
        local_postgres.start_postgres()
    assert str(info.value) == message


def test_newest_debian_version_is_chosen(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setattr(local_postgres, "DEBIAN_ROOT", tmp_path)
    for version, programs in (("9.6", 3), ("15", 3), ("16", 2)):  # 16 lacks postgres: not usable
        folder = tmp_path / version / "bin"
        folder.mkdir(parents=True)
        for program in local_postgres.SERVER_PROGRAMS[:programs]:
            (folder / program).write_text("#!/bin/sh\n")
            (folder / program).chmod(0o755)
    assert local_postgres.server_binaries() == tmp_path / "15" / "bin"


def test_failed_start_is_explained_and_leaves_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        monkeypatch.setattr(local_postgres, "free_port", lambda: port)
        with pytest.raises(LocalPostgresError) as info:
            local_postgres.start_postgres(timeout=30)
    message = str(info.value)
    home = re.match(r"PostgreSQL did not start in (\S+): pg_ctl failed \(rc 1\)", message)
    assert home is not None, message
    assert 'could not bind IPv4 address "127.0.0.1": Address already in use' in message
    assert not Path(home.group(1)).exists()
