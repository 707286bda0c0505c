"""The planner as a pure function: metadata and committed progress in, a plan and its anchors out."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from mirrorflow.errors import SourceDataLostError, TargetStateError
from mirrorflow.offsets_store import PartitionProgress
from mirrorflow.plan import PartitionPlan, PartitionState
from mirrorflow.planner import PlannerInput, PlannerOutput, SourceOffsets, make_plan

FLOW = "primary->backup"
RUN = "manual__2026-01-01T00:00:00+00:00"
CREATED = "2026-01-01T00:00:05+00:00"
REMOTE = {"orders": "primary.orders", "payments": "primary.payments"}

TP = tuple[str, int]


def plan(
    source: Mapping[TP, tuple[int, int]],
    target_ends: Mapping[TP, int],
    progress: Mapping[TP, tuple[int, int]] | None = None,
    cap: int = 1000,
    ride_along: frozenset[str] = frozenset(),
) -> PlannerOutput:
    """``source``: (topic, partition) -> (log start, end); ``progress``: -> (next source, next target)."""
    return make_plan(
        PlannerInput(
            flow=FLOW,
            run_id=RUN,
            created_at=CREATED,
            source={tp: SourceOffsets(*offsets) for tp, offsets in source.items()},
            remote_topics=REMOTE,
            target_ends=target_ends,
            progress={tp: PartitionProgress(tp[0], tp[1], *pos) for tp, pos in (progress or {}).items()},
            max_records_per_partition=cap,
            ride_along=ride_along,
        )
    )


def test_new_partition_starts_at_source_log_start_and_target_end_and_is_anchored() -> None:
    out = plan({("orders", 0): (40, 100)}, {("primary.orders", 0): 7})

    assert out.plan.flow == FLOW
    assert out.plan.run_id == RUN
    assert out.plan.created_at == CREATED
    assert out.plan.partitions == (PartitionPlan("orders", 0, 40, 100, "primary.orders", 7),)
    assert out.plan.states == (PartitionState("orders", 0, "primary.orders", 40, 100, 40),)
    assert out.anchors == (PartitionProgress("orders", 0, 40, 7),)
    assert out.plan.max_records == 60


def test_committed_progress_resumes_where_it_left_and_is_not_anchored_again() -> None:
    out = plan(
        {("orders", 0): (0, 100)},
        # The target holds 5 records past the committed position (an interrupted attempt): the plan
        # still starts at the committed target offset, the copy recognises what is already there.
        {("primary.orders", 0): 35},
        progress={("orders", 0): (60, 30)},
    )

    assert out.plan.partitions == (PartitionPlan("orders", 0, 60, 100, "primary.orders", 30),)
    assert out.plan.states == (PartitionState("orders", 0, "primary.orders", 0, 100, 60),)
    assert out.anchors == ()


def test_per_run_cap_bounds_each_range() -> None:
    out = plan(
        {("orders", 0): (0, 100), ("orders", 1): (10, 13), ("payments", 0): (500, 1000)},
        {("primary.orders", 0): 0, ("primary.orders", 1): 0, ("primary.payments", 0): 250},
        progress={("payments", 0): (700, 250)},
        cap=25,
    )

    assert out.plan.partitions == (
        PartitionPlan("orders", 0, 0, 25, "primary.orders", 0),
        PartitionPlan("orders", 1, 10, 13, "primary.orders", 0),
        PartitionPlan("payments", 0, 700, 725, "primary.payments", 250),
    )
    assert out.plan.max_records == 25 + 3 + 25
    # States report the lag before this run: from the committed (or anchored) position to the end.
    assert [s.lag for s in out.plan.states] == [100, 3, 300]


def test_partitions_with_nothing_new_get_a_state_but_no_range() -> None:
    out = plan(
        {("orders", 0): (0, 50), ("orders", 1): (20, 20)},
        {("primary.orders", 0): 80, ("primary.orders", 1): 3},
        progress={("orders", 0): (50, 80)},
    )

    assert out.plan.partitions == ()
    assert out.plan.max_records == 0
    assert out.plan.states == (
        PartitionState("orders", 0, "primary.orders", 0, 50, 50),
        PartitionState("orders", 1, "primary.orders", 20, 20, 20),
    )
    assert [s.lag for s in out.plan.states] == [0, 0]
    # A new, empty partition is still anchored: its first record will land at the target's end.
    assert out.anchors == (PartitionProgress("orders", 1, 20, 3),)


def test_ride_along_topics_are_copied_only_with_something_else() -> None:
    source = {("orders", 0): (0, 10), ("payments", 0): (0, 5)}
    target_ends = {("primary.orders", 0): 10, ("primary.payments", 0): 0}
    progress = {("orders", 0): (10, 10), ("payments", 0): (0, 0)}

    alone = plan(source, target_ends, progress, ride_along=frozenset({"payments"}))
    assert alone.plan.partitions == ()
    assert [s.lag for s in alone.plan.states] == [0, 5]  # still reported as lag

    source[("orders", 0)] = (0, 12)
    along = plan(source, target_ends, progress, ride_along=frozenset({"payments"}))
    assert [(p.topic, p.source_start, p.source_end) for p in along.plan.partitions] == [
        ("orders", 10, 12),
        ("payments", 0, 5),
    ]


def test_progress_below_source_log_start_is_data_loss_naming_the_exact_range() -> None:
    with pytest.raises(SourceDataLostError) as caught:
        plan(
            {("orders", 0): (0, 100), ("orders", 3): (50, 120)},
            {("primary.orders", 0): 0, ("primary.orders", 3): 40},
            progress={("orders", 0): (0, 0), ("orders", 3): (42, 40)},
        )

    message = str(caught.value)
    assert f"flow {FLOW}:" in message
    assert "orders-3 offsets [42, 50) were deleted from the source" in message
    assert "Nothing was copied" in message


def test_progress_past_source_end_means_a_recreated_source_topic() -> None:
    with pytest.raises(TargetStateError) as caught:
        plan({("orders", 2): (0, 10)}, {("primary.orders", 2): 500}, progress={("orders", 2): (400, 500)})

    message = str(caught.value)
    assert "committed progress for orders-2 is at offset 400 but the source partition ends at 10" in message
    assert "deleted and recreated" in message


def test_target_end_below_committed_target_position_names_the_remote_partition() -> None:
    with pytest.raises(TargetStateError) as caught:
        plan({("orders", 1): (0, 100)}, {("primary.orders", 1): 90}, progress={("orders", 1): (60, 120)})

    message = str(caught.value)
    assert "remote partition primary.orders-1 ends at offset 90, before the 120 already mirrored" in message
    assert "deleted, recreated or truncated" in message


def test_target_end_equal_to_committed_position_is_fine() -> None:
    out = plan({("orders", 1): (0, 100)}, {("primary.orders", 1): 120}, progress={("orders", 1): (60, 120)})

    assert out.plan.partitions == (PartitionPlan("orders", 1, 60, 100, "primary.orders", 120),)


def test_output_is_ordered_by_topic_then_numeric_partition() -> None:
    source = {
        ("payments", 0): (0, 1),
        ("orders", 10): (0, 1),
        ("orders", 2): (0, 1),
        ("orders", 0): (0, 0),
    }
    ends = {("primary.payments", 0): 0, ("primary.orders", 10): 0, ("primary.orders", 2): 0}
    out = plan(source, {**ends, ("primary.orders", 0): 0})

    assert [(p.topic, p.partition) for p in out.plan.partitions] == [
        ("orders", 2),
        ("orders", 10),
        ("payments", 0),
    ]
    assert [(s.topic, s.partition) for s in out.plan.states] == [
        ("orders", 0),
        ("orders", 2),
        ("orders", 10),
        ("payments", 0),
    ]
    assert [(a.topic, a.partition) for a in out.anchors] == [
        ("orders", 0),
        ("orders", 2),
        ("orders", 10),
        ("payments", 0),
    ]
