"""The recovery point (``core.recovery_point``): what a commit proves, what the status page shows,
and what a minute of history keeps."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from mirrorflow.core.plan import PartitionPlan, Plan
from mirrorflow.core.recovery_point import RecoveryPoint, minute_of, mirrored_as_of, worst_seconds
from mirrorflow.core.report import PartitionReport, RunReport

T0 = datetime(2030, 1, 2, 3, 4, 5, 600_000, tzinfo=UTC)
PLAN = Plan(
    "primary->backup",
    "run-1",
    T0.isoformat(),
    (
        PartitionPlan("orders", 0, 0, 10, "primary.orders", 0),
        PartitionPlan("orders", 1, 0, 10, "primary.orders", 0),
    ),
)


def report(*lags: int) -> RunReport:
    parts = tuple(
        PartitionReport("orders", p, "primary.orders", records=10, lag=lag) for p, lag in enumerate(lags)
    )
    return RunReport("primary->backup", "run-1", parts)


def test_a_commit_that_left_the_whole_flow_caught_up_proves_the_plans_creation_time() -> None:
    assert mirrored_as_of(PLAN, report(0, 0)) == T0
    # A partition still lagging, or a plan of only some topics, proves nothing.
    assert mirrored_as_of(PLAN, report(0, 3)) is None
    assert mirrored_as_of(replace(PLAN, narrowed=True), report(0, 0)) is None


@pytest.mark.parametrize(
    ("as_of", "caught_up", "state", "seconds", "text"),
    [
        (T0, True, "caught up", 0.0, "0 s (caught up)"),
        (T0, False, "behind", 12.5, "at most 12.5 s"),
        (T0 - timedelta(minutes=5), None, "behind", 312.5, "at most 0:05:12"),
        (None, False, "none yet", None, "none yet (no run has caught up with the source)"),
        (None, True, "caught up", 0.0, "0 s (caught up)"),
    ],
)
def test_the_point_shown_is_0_only_when_the_source_read_live_holds_nothing_more(
    as_of: datetime | None, caught_up: bool | None, state: str, seconds: float | None, text: str
) -> None:
    point = RecoveryPoint.of(as_of, T0 + timedelta(seconds=12.5), caught_up)

    assert (point.state, point.seconds, point.text) == (state, seconds, text)


def test_a_clock_behind_the_stored_point_shows_0_s_behind_never_negative() -> None:
    assert RecoveryPoint.of(T0, T0 - timedelta(seconds=3), False).seconds == 0.0
    assert RecoveryPoint("unknown").text == "unknown"


def test_a_minute_of_history_keeps_the_worst_point_a_commit_in_it_ended() -> None:
    assert minute_of(T0) == datetime(2030, 1, 2, 3, 4, tzinfo=UTC)
    # The age of the previous point at this commit: the top of the sawtooth.
    assert worst_seconds(T0 - timedelta(seconds=30), T0, T0 + timedelta(seconds=2)) == 32.0
    # A flow's first commit: the age of its own point.
    assert worst_seconds(None, T0, T0 + timedelta(seconds=2)) == 2.0
