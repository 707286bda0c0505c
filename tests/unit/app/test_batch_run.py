"""A run's turn as the plan's sensor reads it (the flow's lock in the offsets database, read only), and
what the copy task leaves for the commit task."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from config_texts import ONE_FLOW

from mirrorflow.app.batch_run import execute_copy, run_turn
from mirrorflow.config.model import parse_config
from mirrorflow.core.plan import CopyResult, Plan
from mirrorflow.core.turn import EarlierRun
from mirrorflow.errors import WriterFencedError
from mirrorflow.store.flow_lock import acquire_lock, lock_holder, release_lock
from mirrorflow.store.offsets_store import OffsetsStore
from mirrorflow.store.run_documents import find_document, save_document

FLOW = "primary->backup"


def test_a_run_waits_while_another_run_holds_the_lock_and_takes_nothing(tmp_path: Path) -> None:
    config = parse_config(
        ONE_FLOW + f"mirrorflow.offsets.db.url = sqlite:///{tmp_path / 'offsets.db'}\n", env={}
    )
    with OffsetsStore(config.offsets_db_url) as store:
        assert run_turn(config, FLOW, "run-2", None).due
        acquire_lock(store, FLOW, "run-1", ttl_seconds=3600)

        waiting = run_turn(config, FLOW, "run-2", None)
        assert waiting.holder is not None and waiting.holder.run_id == "run-1"
        assert run_turn(config, FLOW, "run-1", None).due  # its own lock
        assert lock_holder(store, FLOW) == "run-1"
        earlier = EarlierRun("run-0", "queued", datetime(2025, 3, 1, tzinfo=UTC))
        assert run_turn(config, FLOW, "run-1", earlier).earlier == earlier

        release_lock(store, FLOW, "run-1")
        assert run_turn(config, FLOW, "run-2", None).due
        assert lock_holder(store, FLOW) is None


def test_a_fenced_copy_fails_its_task_and_leaves_the_newer_attempts_result(tmp_path: Path) -> None:
    # A newer attempt of the run's copy took over and saved its result: the fenced one saves no
    # failure note over it, and its task fails (Airflow retries an attempt that is still its own).
    config = parse_config(
        ONE_FLOW + f"mirrorflow.offsets.db.url = sqlite:///{tmp_path / 'offsets.db'}\n", env={}
    )
    flow = config.flow(FLOW)
    plan = Plan(FLOW, "run-1", "2026-11-28T00:00:00+00:00", ())
    result = CopyResult(FLOW, "run-1", ())
    with OffsetsStore(config.offsets_db_url) as store:
        save_document(store, FLOW, "run-1", "result", result.to_json())

    def fenced() -> CopyResult:
        raise WriterFencedError("a newer attempt of the flow fenced its writer")

    with pytest.raises(WriterFencedError):
        execute_copy(config, flow, plan, fenced)
    with OffsetsStore(config.offsets_db_url) as store:
        assert find_document(store, FLOW, "run-1", "copy_failed") is None
        assert find_document(store, FLOW, "run-1", "result") == result.to_json()
