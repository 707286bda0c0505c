"""The offsets table on real SQLite files: every case of offsets_store_cases.py (anchors, commits, the
CLI) and batch_log_cases.py (the batch log) on a
SQLite file of each test's own, and what only SQLite, or no database at all, shows.
tests/integration/test_offsets_store_postgres.py runs the same cases on a real PostgreSQL server.
"""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

# The cases' tests and fixtures, imported for pytest to collect them here, on SQLite.
from batch_log_cases import *  # noqa: F403
from offsets_store_cases import *  # noqa: F403
from offsets_store_cases import FLOW, TABLES, store_cli

from mirrorflow.errors import TransientError
from mirrorflow.store import database
from mirrorflow.store.offsets_store import OffsetsStore


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    """A new, empty offsets database: a SQLite file in a folder that does not exist yet."""
    return f"sqlite:///{tmp_path / 'state' / 'nested' / 'offsets.db'}"


def test_sqlite_file_and_its_folder_are_created_on_first_use(tmp_path: Path) -> None:
    # SQLite only: a PostgreSQL database is created by its administrator, never by the store.
    path = tmp_path / "state" / "nested" / "offsets.db"
    store = OffsetsStore(f"sqlite:///{path}")
    assert not path.exists()
    assert store.progress(FLOW) == {}
    store.close()
    with sqlite3.connect(path) as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert tables == TABLES


def test_a_sqlite_file_keeps_the_time_of_its_host(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # SQLite only: the file lives on this host, so its clock is this host's; PostgreSQL's is the
    # server's (tests/integration/test_offsets_store_postgres.py).
    ahead = datetime.now(UTC) + timedelta(minutes=10)
    monkeypatch.setattr(database, "host_now", lambda: ahead)
    with OffsetsStore(db_url) as store:
        assert store.now() == ahead


def test_unreachable_database_is_transient_with_redacted_url() -> None:
    store = OffsetsStore("postgresql+psycopg2://mirror:s3cret@127.0.0.1:1/offsets?connect_timeout=2")
    with pytest.raises(TransientError) as info:
        store.progress(FLOW)
    message = str(info.value)
    assert "postgresql+psycopg2://mirror:***@127.0.0.1:1/offsets" in message
    assert "s3cret" not in message
    assert store.url == "postgresql+psycopg2://mirror:***@127.0.0.1:1/offsets?connect_timeout=2"


def test_cli_unreachable_database_fails_with_redacted_url() -> None:
    result = store_cli(
        "show", "--flow", FLOW, "--db", "postgresql+psycopg2://u:pw@127.0.0.1:1/x?connect_timeout=2"
    )
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.startswith("error: offsets database postgresql+psycopg2://u:***@127.0.0.1:1/x")
    assert ":pw@" not in result.stderr
