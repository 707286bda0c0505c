"""CopyGuard: only the lock holder's copy runs, and it ends itself before the lock expires."""

from __future__ import annotations

import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest

from mirrorflow.app.copy_guard import EXIT_CODE, MARGIN, lock_deadline
from mirrorflow.errors import FlowLockedError
from mirrorflow.store.flow_lock import acquire_lock, lock_info
from mirrorflow.store.offsets_store import OffsetsStore

FLOW = "primary->backup"


def test_the_deadline_is_the_lock_expiry_less_a_margin_for_the_holder_only(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'offsets.db'}"
    with pytest.raises(FlowLockedError, match=r"run run-1 does not hold the flow's lock \(nobody does\)"):
        lock_deadline(url, FLOW, "run-1")
    with OffsetsStore(url) as store:
        acquire_lock(store, FLOW, "run-1", ttl_seconds=3600)
        expires = lock_info(store, FLOW).expires_at  # type: ignore[union-attr]

        left = expires - MARGIN - store.now()

    assert left - timedelta(seconds=5) < lock_deadline(url, FLOW, "run-1") <= left
    with pytest.raises(FlowLockedError, match=r"run run-2 does not hold the flow's lock \(run run-1 does\)"):
        lock_deadline(url, FLOW, "run-2")


def test_the_process_ends_itself_at_the_deadline() -> None:
    code = (
        "import time; from datetime import timedelta; from mirrorflow.app.copy_guard import exit_at; "
        "exit_at(timedelta(seconds=1), 'copy'); time.sleep(60)"
    )
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=False
    )

    assert done.returncode == EXIT_CODE
    assert done.stderr.startswith("copy: stopped after 1 s, before its run's lock expires")
    assert time.monotonic() - began < 20
