"""The offsets table on a real PostgreSQL server (one per session, a role and schema per test): every
case of offsets_store_cases.py and handover_cases.py, with the same expectations as on SQLite
(tests/unit/store/test_offsets_store.py).
"""

from __future__ import annotations

import time

import pytest

# The cases' tests and fixtures, imported for pytest to collect them here, on PostgreSQL.
from handover_cases import *  # noqa: F403
from offsets_store_cases import *  # noqa: F403
from offsets_store_cases import FLOW
from sqlalchemy import create_engine, text

from mirrorflow.errors import TransientError
from mirrorflow.store.database import create_store_engine
from mirrorflow.store.handover import renew_lock
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
        store.acquire_lock(FLOW, "w1", 30)
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
