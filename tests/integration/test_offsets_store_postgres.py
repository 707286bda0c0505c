"""The offsets table on a real PostgreSQL server (one per session, a role and schema per test): every
case of offsets_store_cases.py, flow_lock_cases.py and batch_log_cases.py, with the
same expectations as on SQLite (tests/unit/store/test_offsets_store.py).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest
from batch_log_cases import *  # noqa: F403

# The cases' tests and fixtures, imported for pytest to collect them here, on PostgreSQL.
from flow_lock_cases import *  # noqa: F403
from offsets_store_cases import *  # noqa: F403
from offsets_store_cases import FLOW
from sqlalchemy import create_engine, text

from mirrorflow.errors import FlowLockedError, TransientError
from mirrorflow.store import database
from mirrorflow.store.database import create_store_engine
from mirrorflow.store.flow_lock import acquire_lock, renew_lock
from mirrorflow.store.offsets_store import OffsetsStore


@pytest.fixture
def db_url(postgres_db_url: str) -> str:
    """A new, empty offsets database: a role and schema of this test's own on the session's server."""
    return postgres_db_url


def test_a_lease_renewal_behind_a_stuck_transaction_fails_in_time(db_url: str) -> None:
    """A transaction elsewhere holding the flow's lock row (stuck, not dead): the window's renewal
    waits no longer than the lock-wait timeout, and fails as passing, long before its 30 s lease
    would run out, so the window finds out and stops in time (``app.window_lease``)."""
    with OffsetsStore(db_url) as store, OffsetsStore(db_url) as other:
        acquire_lock(store, FLOW, "w1", 30)
        stuck = create_engine(db_url)
        try:
            with stuck.begin() as conn:
                conn.execute(text("SELECT 1 FROM mirror_locks FOR UPDATE"))
                started = time.monotonic()
                with pytest.raises(TransientError):
                    renew_lock(other, FLOW, "w1", 30)
                waited = time.monotonic() - started
        finally:
            stuck.dispose()
        assert 5 < waited < 20, waited
        with create_store_engine(db_url, "the test's database", 1).connect() as conn:
            assert conn.execute(text("SHOW statement_timeout")).scalar() == "20s"


def test_a_host_whose_clock_runs_ahead_neither_takes_a_live_lease_over_nor_stamps_its_time(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Leases are judged by the server's clock (``store.database.DatabaseClock``): a worker whose wall
    clock runs ten minutes ahead sees a window's 30 s lease as live, as the server does."""
    with OffsetsStore(db_url) as store:
        acquire_lock(store, FLOW, "w1", 30)
    monkeypatch.setattr(database, "host_now", lambda: datetime.now(UTC) + timedelta(minutes=10))
    with OffsetsStore(db_url) as skewed:
        assert database.host_now() - datetime.now(UTC) > timedelta(minutes=9)
        with pytest.raises(FlowLockedError, match="locked by run w1"):
            acquire_lock(skewed, FLOW, "w2", 30)
        with create_engine(db_url).connect() as conn:
            server = conn.execute(text("SELECT clock_timestamp()")).scalar_one()
        assert abs(skewed.now() - server) < timedelta(seconds=1)
