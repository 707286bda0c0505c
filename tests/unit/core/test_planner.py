"""The planner as a pure function: metadata and committed progress in, a plan and its anchors out."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import pytest

from mirrorflow.core.plan import PartitionPlan, PartitionState, SourceGap
from mirrorflow.core.planner import (
    PlannerInput,
    PlannerOutput,
    SourceOffsets,
    count_copied_past_gap,
    find_gaps,
    make_plan,
)
from mirrorflow.core.progress import PartitionProgress, TopicIdentity
from mirrorflow.core.topic_partitions import TP
from mirrorflow.errors import SourceDataLostError, SourceTopicRecreatedError, TargetStateError

FLOW = "primary->backup"
RUN = "manual__2026-01-01T00:00:00+00:00"
CREATED = "2026-01-01T00:00:05+00:00"
REMOTE = {"orders": "primary.orders", "payments": "primary.payments"}


def planner_input(
    source: Mapping[TP, tuple[int, int]],
    target_ends: Mapping[TP, int],
    progress: Mapping[TP, tuple[int, int]] | None = None,
    cap: int = 1000,
    ride_along: frozenset[str] = frozenset(),
    skip_lost: bool = False,
    copied_past_gap: Mapping[TP, int] | None = None,
    topic_ids: Mapping[str, str] | None = None,
    known_topic_ids: Mapping[str, str] | None = None,
) -> PlannerInput:
    """``source``: (topic, partition) -> (log start, end); ``progress``: -> (next source, next target)."""
    return PlannerInput(
        flow=FLOW,
        run_id=RUN,
        created_at=CREATED,
        source={tp: SourceOffsets(*offsets) for tp, offsets in source.items()},
        remote_topics=REMOTE,
        target_ends=target_ends,
        progress={tp: PartitionProgress(tp[0], tp[1], *pos) for tp, pos in (progress or {}).items()},
        max_records_per_partition=cap,
        ride_along=ride_along,
        skip_lost=skip_lost,
        copied_past_gap=copied_past_gap or {},
        topic_ids=topic_ids or {},
        known_topic_ids=known_topic_ids or {},
    )


def plan(*args: Any, **kwargs: Any) -> PlannerOutput:
    """``make_plan`` of ``planner_input(*args, **kwargs)``."""
    return make_plan(planner_input(*args, **kwargs))


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


def test_a_plan_of_ride_along_topics_alone_is_copied_in_process() -> None:
    source = {("orders", 0): (0, 10), ("payments", 0): (0, 5)}
    target_ends = {("primary.orders", 0): 10, ("primary.payments", 0): 0}
    progress = {("orders", 0): (10, 10), ("payments", 0): (0, 0)}

    alone = plan(source, target_ends, progress, ride_along=frozenset({"payments"}))
    assert alone.plan.partitions == (PartitionPlan("payments", 0, 0, 5, "primary.payments", 0),)
    assert alone.plan.in_process is True

    source[("orders", 0)] = (0, 12)
    along = plan(source, target_ends, progress, ride_along=frozenset({"payments"}))
    assert [(p.topic, p.source_start, p.source_end) for p in along.plan.partitions] == [
        ("orders", 10, 12),
        ("payments", 0, 5),
    ]
    assert along.plan.in_process is False
    caught_up = plan(
        source, {**target_ends, ("primary.payments", 0): 5}, {**progress, ("payments", 0): (5, 5)}
    )
    assert caught_up.plan.in_process is False


def test_data_loss_names_every_lost_range_and_what_to_do() -> None:
    with pytest.raises(SourceDataLostError) as caught:
        plan(
            {("orders", 0): (300, 400), ("orders", 1): (0, 100), ("orders", 2): (50, 120)},
            {("primary.orders", 0): 120, ("primary.orders", 1): 0, ("primary.orders", 2): 0},
            progress={("orders", 0): (120, 120), ("orders", 1): (0, 0), ("orders", 2): (0, 0)},
        )

    assert str(caught.value) == (
        "flow primary->backup: source records were deleted from the source (retention or delete-records) "
        "before they were mirrored: orders-0 [120, 300) (180 offsets), orders-2 [0, 50) (50 offsets). "
        "Nothing was copied or committed. Until the loss is accepted, every run of the flow fails here. "
        "To accept it, set `primary->backup.mirrorflow.on.source.data.loss = skip` and run the flow "
        "again: it continues after each lost range and records it in the offsets table (mirror_gaps) "
        "and the run report."
    )


def test_progress_past_source_end_means_a_recreated_source_topic() -> None:
    with pytest.raises(SourceTopicRecreatedError) as caught:
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


def test_a_target_end_past_the_committed_position_with_nothing_planned_is_left_to_the_next_copy() -> None:
    # The copy's own commit marker (and an aborted attempt's records) lie past the last record it
    # committed; whether anything else wrote there, the next copy's read-back of committed records
    # tells.
    out = plan({("orders", 1): (0, 100)}, {("primary.orders", 1): 123}, progress={("orders", 1): (100, 120)})

    assert out.plan.partitions == ()


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


# --- source data lost before it was mirrored: mirrorflow.on.source.data.loss = skip -------------


def test_skip_resumes_each_lost_partition_at_its_log_start_and_carries_the_gaps() -> None:
    out = plan(
        {("orders", 0): (300, 400), ("orders", 1): (0, 100), ("orders", 2): (50, 120)},
        {("primary.orders", 0): 120, ("primary.orders", 1): 10, ("primary.orders", 2): 0},
        progress={("orders", 0): (120, 120), ("orders", 1): (10, 10), ("orders", 2): (0, 0)},
        skip_lost=True,
    )

    assert out.plan.gaps == (
        SourceGap("orders", 0, 120, 300, 120, 120),
        SourceGap("orders", 2, 0, 50, 0, 0),
    )
    assert out.plan.partitions == (
        PartitionPlan("orders", 0, 300, 400, "primary.orders", 120),
        PartitionPlan("orders", 1, 10, 100, "primary.orders", 10),
        PartitionPlan("orders", 2, 50, 120, "primary.orders", 0),
    )
    # The lag counts from the end of the gap: lost offsets are not left to copy.
    assert [s.committed for s in out.plan.states] == [300, 10, 50]
    assert [s.lag for s in out.plan.states] == [100, 90, 70]
    assert out.anchors == ()


def test_records_left_by_an_interrupted_attempt_stay_in_the_gap_unless_they_copy_later_ones() -> None:
    # Committed (100, 40); an attempt copied 30 records to target [40, 70) before the source deleted
    # offsets up to 150. Of those 30, the last 12 are copies of records from 150 on: from offset 58.
    inp = planner_input(
        {("orders", 0): (150, 400)},
        {("primary.orders", 0): 70},
        progress={("orders", 0): (100, 40)},
        skip_lost=True,
    )
    assert find_gaps(inp) == (SourceGap("orders", 0, 100, 150, 40, 70),)

    out = make_plan(replace(inp, copied_past_gap={("orders", 0): 58}))

    assert out.plan.gaps == (SourceGap("orders", 0, 100, 150, 40, 58),)
    # The copy finds 12 records past target_start already there and skips exactly those.
    assert out.plan.partitions == (PartitionPlan("orders", 0, 150, 400, "primary.orders", 58),)


def test_a_gap_is_carried_even_when_nothing_is_copied() -> None:
    out = plan(
        {("orders", 0): (80, 80), ("payments", 0): (5, 9)},
        {("primary.orders", 0): 30, ("primary.payments", 0): 0},
        progress={("orders", 0): (30, 30), ("payments", 0): (0, 0)},
        ride_along=frozenset({"payments"}),
        skip_lost=True,
    )

    # Nothing after the orders gap; the ride-along records after the payments gap are copied in process.
    assert out.plan.partitions == (PartitionPlan("payments", 0, 5, 9, "primary.payments", 0),)
    assert out.plan.in_process is True
    assert out.plan.gaps == (SourceGap("orders", 0, 30, 80, 30, 30), SourceGap("payments", 0, 0, 5, 0, 0))
    assert [s.lag for s in out.plan.states] == [0, 4]


def test_a_truncated_target_is_refused_even_with_skip() -> None:
    with pytest.raises(TargetStateError, match=r"remote partition primary\.orders-0 ends at offset 5"):
        plan(
            {("orders", 0): (50, 60)},
            {("primary.orders", 0): 5},
            progress={("orders", 0): (20, 20)},
            skip_lost=True,
        )


@pytest.mark.parametrize(
    ("left", "following", "copied"),
    [
        ([], [b"a"], 0),
        ([b"x", b"y"], [], 0),
        ([b"x", b"y"], [b"a", b"b"], 0),  # every record left copies a lost one
        ([b"x", b"a", b"b"], [b"a", b"b", b"c"], 2),
        ([b"a", b"b"], [b"a", b"b", b"c"], 2),  # the attempt copied nothing that was lost
        ([b"a", b"x", b"a"], [b"a", b"b"], 1),  # an earlier equal record is not an end
        ([b"a", b"a", b"a"], [b"a", b"a", b"b"], 2),  # the longest end: nothing copied twice
    ],
)
def test_copies_past_a_gap_are_the_longest_end_of_what_was_left_that_starts_what_follows(
    left: list[bytes], following: list[bytes], copied: int
) -> None:
    assert count_copied_past_gap(left, following) == copied


# --- recreated source topics -----------------------------------------------------------------


def test_topic_ids_seen_for_the_first_time_are_recorded_and_known_ones_are_not() -> None:
    out = plan(
        {("orders", 0): (0, 5), ("payments", 0): (0, 5)},
        {("primary.orders", 0): 0, ("primary.payments", 0): 0},
        topic_ids={"orders": "id-orders", "payments": "id-payments"},
        known_topic_ids={"orders": "id-orders"},
    )

    assert out.topics == (TopicIdentity("payments", "id-payments", "primary.payments"),)


def test_a_changed_topic_id_stops_the_plan_naming_both_ids_and_the_recovery() -> None:
    with pytest.raises(SourceTopicRecreatedError) as caught:
        plan(
            {("orders", 0): (0, 900), ("payments", 0): (0, 5)},
            {("primary.orders", 0): 500, ("primary.payments", 0): 5},
            # The new topic already holds more records than were mirrored of the old one: only the
            # id tells them apart.
            progress={("orders", 0): (500, 500), ("payments", 0): (5, 5)},
            topic_ids={"orders": "new-id", "payments": "id-payments"},
            known_topic_ids={"orders": "old-id", "payments": "id-payments"},
        )

    assert str(caught.value) == (
        "flow primary->backup: source topics were deleted and recreated since they were first mirrored: "
        "orders (mirrored topic id old-id, now new-id) into primary.orders. Nothing was copied: the "
        "flow's progress, batch log and remote topics belong to the old topics, and the new records "
        "must not be mixed into them unnoticed. To mirror the topic anew: delete its remote topic on "
        "the target (or keep it, and the new records are appended after the old copy), forget the "
        "flow's state of the topic while no run of the flow is going (python -m "
        "mirrorflow.store forget-topic --flow 'primary->backup' --topic orders), then run the "
        "flow again."
    )


def test_a_run_start_places_new_partitions_only() -> None:
    inp = planner_input(
        {("orders", 0): (40, 100), ("orders", 1): (0, 50)},
        {("primary.orders", 0): 7, ("primary.orders", 1): 30},
        progress={("orders", 1): (20, 30)},
    )

    out = make_plan(replace(inp, starts={("orders", 0): 90, ("orders", 1): 45}))

    assert out.anchors == (PartitionProgress("orders", 0, 90, 7),)
    assert [(p.partition, p.source_start, p.source_end, p.target_start) for p in out.plan.partitions] == [
        (0, 90, 100, 7),
        (1, 20, 50, 30),
    ]


def test_a_bound_ends_ranges_early_and_one_behind_progress_plans_nothing() -> None:
    inp = planner_input(
        {("orders", 0): (0, 100), ("orders", 1): (0, 50), ("payments", 0): (0, 10)},
        {("primary.orders", 0): 60, ("primary.orders", 1): 30, ("primary.payments", 0): 0},
        progress={("orders", 0): (60, 60), ("orders", 1): (30, 30)},
    )

    out = make_plan(replace(inp, bounds={("orders", 0): 75, ("orders", 1): 12}))

    assert [(p.topic, p.partition, p.source_start, p.source_end) for p in out.plan.partitions] == [
        ("orders", 0, 60, 75),
        ("payments", 0, 0, 10),
    ]
    # The lag still counts up to the source's end: a bounded run is not caught up.
    assert [s.lag for s in out.plan.states] == [40, 20, 10]
