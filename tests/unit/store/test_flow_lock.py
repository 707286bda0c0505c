"""A flow's lock on real SQLite files: every case of flow_lock_cases.py (taking, waiting, releasing,
racing and crashing processes, a DR window's lease and handover); tests/integration/
test_offsets_store_postgres.py runs them on PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import pytest

# The cases' tests and fixtures, imported for pytest to collect them here, on SQLite.
from flow_lock_cases import *  # noqa: F403
from offsets_store_cases import clock, store  # noqa: F401 (the cases' fixtures)


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'offsets.db'}"
