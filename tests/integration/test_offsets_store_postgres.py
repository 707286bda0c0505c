"""The offsets table on a real PostgreSQL server (one per session, a role and schema per test): every
case of offsets_store_cases.py and handover_cases.py, with the same expectations as on SQLite
(tests/unit/store/test_offsets_store.py).
"""

from __future__ import annotations

import pytest

# The cases' tests and fixtures, imported for pytest to collect them here, on PostgreSQL.
from handover_cases import *  # noqa: F403
from offsets_store_cases import *  # noqa: F403


@pytest.fixture
def db_url(postgres_db_url: str) -> str:
    """A new, empty offsets database: a role and schema of this test's own on the session's server."""
    return postgres_db_url
