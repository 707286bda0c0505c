"""A run's turn as the plan's sensor reads it: the flow's lock in the offsets database, read only."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from config_texts import ONE_FLOW

from mirrorflow.app.runner import run_turn
from mirrorflow.config.model import parse_config
from mirrorflow.core.turn import EarlierRun
from mirrorflow.store.offsets_store import OffsetsStore

FLOW = "primary->backup"


def test_a_run_waits_while_another_run_holds_the_lock_and_takes_nothing(tmp_path: Path) -> None:
    config = parse_config(
        ONE_FLOW + f"mirrorflow.offsets.db.url = sqlite:///{tmp_path / 'offsets.db'}\n", env={}
    )
    with OffsetsStore(config.offsets_db_url) as store:
        assert run_turn(config, FLOW, "run-2", None).due
        store.acquire_lock(FLOW, "run-1", ttl_seconds=3600)

        waiting = run_turn(config, FLOW, "run-2", None)
        assert waiting.holder is not None and waiting.holder.run_id == "run-1"
        assert run_turn(config, FLOW, "run-1", None).due  # its own lock
        assert store.lock_holder(FLOW) == "run-1"
        earlier = EarlierRun("run-0", "queued", datetime(2025, 3, 1, tzinfo=UTC))
        assert run_turn(config, FLOW, "run-1", earlier).earlier == earlier

        store.release_lock(FLOW, "run-1")
        assert run_turn(config, FLOW, "run-2", None).due
        assert store.lock_holder(FLOW) is None
