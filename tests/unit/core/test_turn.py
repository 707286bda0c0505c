"""A run's turn: earlier runs and the flow's lock, the wait against its limit, the message it fails with."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from mirrorflow.core.progress import LockInfo
from mirrorflow.core.turn import EarlierRun, Turn, lock_free_for, ready, turn
from mirrorflow.errors import TurnTimeoutError

FLOW = "primary->backup"
NOW = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
HELD = LockInfo(FLOW, "backfill__2025-03-02", NOW - timedelta(minutes=5), NOW + timedelta(hours=19))
EARLIER = EarlierRun("backfill__2025-03-03", "running", datetime(2025, 3, 3, tzinfo=UTC))


@pytest.mark.parametrize(
    ("lock", "free"),
    [
        (None, True),
        (HELD, False),
        (LockInfo(FLOW, "scheduled__1", HELD.acquired_at, HELD.expires_at), True),  # its own lock
        (LockInfo(FLOW, HELD.run_id, HELD.acquired_at, NOW), True),  # expired: acquire_lock takes it over
        (LockInfo(FLOW, HELD.run_id, HELD.acquired_at, NOW + timedelta(seconds=1)), False),
    ],
    ids=["unlocked", "held", "held-by-the-run", "expired", "expiring"],
)
def test_the_lock_is_free_for_a_run_unless_another_run_holds_it_unexpired(
    lock: LockInfo | None, free: bool
) -> None:
    assert lock_free_for(lock, "scheduled__1", NOW) is free
    assert turn(FLOW, "scheduled__1", None, lock, NOW) == Turn(
        FLOW, "scheduled__1", holder=None if free else lock
    )


def test_a_run_waits_for_an_earlier_unfinished_run_and_for_the_lock() -> None:
    assert turn(FLOW, "backfill__2025-03-04", None, None, NOW).due
    assert not turn(FLOW, "backfill__2025-03-04", EARLIER, None, NOW).due
    both = turn(FLOW, "backfill__2025-03-04", EARLIER, HELD, NOW)

    assert not both.due
    assert both.waiting_for() == (
        "run backfill__2025-03-03 (logical date 2025-03-03T00:00:00+00:00, running) to finish and the "
        "flow's lock, held by run backfill__2025-03-02 until it is released or expires at "
        "2030-01-02T22:04:05+00:00"
    )


def test_a_due_run_is_ready_whatever_it_waited_and_a_waiting_one_until_its_limit() -> None:
    waiting = turn(FLOW, "scheduled__1", None, HELD, NOW)

    assert ready(Turn(FLOW, "scheduled__1"), 10_000, 60) is True
    assert ready(waiting, 0, 60) is False
    assert ready(waiting, 59.9, 60) is False
    with pytest.raises(TurnTimeoutError):
        ready(waiting, 60, 60)
    with pytest.raises(TurnTimeoutError):
        ready(waiting, 0, 0)  # a limit of 0: the first look decides


def test_giving_up_names_the_holder_and_the_earlier_run_and_what_to_do() -> None:
    with pytest.raises(TurnTimeoutError) as raised:
        ready(turn(FLOW, "backfill__2025-03-04", EARLIER, HELD, NOW), 3600.4, 3600)

    assert str(raised.value) == (
        "flow primary->backup: run backfill__2025-03-04 waited 3600 s for its turn (trigger param "
        "lock_wait_timeout_seconds: 3600) and did not start; nothing was written. Clear it once what it "
        "waited for is done, or trigger a new run with a longer lock_wait_timeout_seconds. The earlier "
        "run backfill__2025-03-03 (logical date 2025-03-03T00:00:00+00:00, running) has not finished, "
        "and a flow's runs copy in logical-date order. Wait for it to finish; if it never will (a run of "
        "a paused backfill), cancel its backfill or mark it failed. flow primary->backup is locked by "
        "run backfill__2025-03-02 since 2030-01-02T02:59:05+00:00; the lock expires at "
        "2030-01-02T22:04:05+00:00. If run backfill__2025-03-02 is still going, wait for it to finish. "
        "If it is dead, release its lock with: python -m mirrorflow.store release-lock --flow "
        "'primary->backup'"
    )
