"""The verify plan from a batch log: its ranges (log starts, gaps, remote topics, target retention),
the offset maps of ranges compared record by record, and the plan document."""

from __future__ import annotations

import json

import numpy as np
import pytest
from verify_cases import FLOW, KEYED, TWO, vrange

from mirrorflow.core.progress import Batch
from mirrorflow.core.verify_plan import (
    OffsetMap,
    VerifyPlan,
    VerifyRange,
    compacts,
    stamps_append_time,
    verify_plan,
)
from mirrorflow.errors import PlanError


def batch(
    source: tuple[int, int],
    target: tuple[int, int],
    *sync_points: tuple[int, int],
    topic: str = "orders",
    partition: int = 0,
    remote: str | None = None,
) -> Batch:
    remote_topic = remote or f"primary.{topic}"
    b = Batch(topic, partition, remote_topic, *source, *target, target[1] - target[0], 0, sync_points)
    b.validate()
    return b


def test_a_gapless_log_is_one_range_per_partition_from_the_first_batch() -> None:
    log = [batch((0, 10), (5, 15)), batch((10, 25), (15, 30)), batch((0, 4), (0, 4), partition=1)]

    plan = verify_plan(FLOW, "r1", log[::-1], {("orders", 0): 0, ("orders", 1): 0})

    assert plan == VerifyPlan(FLOW, "r1", (vrange((0, 25), (5, 30)), vrange((0, 4), (0, 4), partition=1)))
    assert plan.records == 29


def test_a_moved_log_start_starts_at_the_target_copy_of_the_first_record_left() -> None:
    # Batch 2: records 10-14, commit marker 15, records 16-19 -> target 15-24.
    log = [batch((0, 10), (0, 10)), batch((10, 20), (10, 19), (16, 15))]

    def start(log_start: int) -> tuple[int, int] | None:
        plan = verify_plan(FLOW, "r1", log, {("orders", 0): log_start})
        return (plan.ranges[0].source_start, plan.ranges[0].target_start) if plan.ranges else None

    assert [start(s) for s in (0, 7, 10, 14, 15, 16, 19)] == [
        (0, 0), (7, 7), (10, 10), (14, 14), (15, 15), (16, 15), (19, 18),
    ]  # fmt: skip
    # The marker's offset has no record: from 15 or 16, the source range starts with record 16.
    assert verify_plan(FLOW, "r1", log, {("orders", 0): 15}).ranges[0] == vrange((15, 20), (15, 19))
    assert verify_plan(FLOW, "r1", log, {("orders", 0): 20}).ranges == ()  # everything deleted
    assert verify_plan(FLOW, "r1", log, {("orders", 0): 99}).ranges == ()


def test_a_log_start_before_the_first_batch_starts_at_the_first_batch() -> None:
    log = [batch((100, 110), (0, 10))]

    assert verify_plan(FLOW, "r1", log, {("orders", 0): 3}).ranges == (vrange((100, 110), (0, 10)),)


def test_only_the_chosen_topics_are_planned() -> None:
    log = [batch((0, 5), (0, 5)), batch((0, 3), (0, 3), topic="payments")]
    # A topic left out needs no log start (e.g. deleted from the source).
    plan = verify_plan(FLOW, "r1", log, {("payments", 0): 1}, frozenset({"payments"}))

    assert plan.ranges == (vrange((1, 3), (1, 3), topic="payments"),)
    with pytest.raises(PlanError, match="no log start offset given for orders-0"):
        verify_plan(FLOW, "r1", log, {("payments", 0): 1})


def test_a_gap_splits_the_history_and_neither_side_of_it_is_compared() -> None:
    # Records 10-19 were deleted before they were mirrored; an interrupted attempt had left 3 of
    # them on the target (10-12), which the source no longer has.
    log = [batch((0, 10), (0, 10)), batch((20, 30), (13, 23))]

    stale = verify_plan(FLOW, "r1", log, {("orders", 0): 4})
    assert stale.ranges == (vrange((4, 10), (4, 10)), vrange((20, 30), (13, 23)))
    # The log start is past the gap whenever the gap was found: one range, after the gap.
    now = verify_plan(FLOW, "r1", log, {("orders", 0): 20})
    assert now.ranges == (vrange((20, 30), (13, 23)),)
    assert verify_plan(FLOW, "r1", log, {("orders", 0): 25}).ranges == (vrange((25, 30), (18, 23)),)


def test_a_new_remote_topic_starts_a_new_range() -> None:
    log = [batch((0, 10), (0, 10)), batch((10, 20), (10, 20), remote="other.orders")]

    plan = verify_plan(FLOW, "r1", log, {("orders", 0): 0})

    assert plan.ranges == (
        vrange((0, 10), (0, 10)),
        VerifyRange("orders", 0, "other.orders", 10, 20, 10, 20),
    )


def test_target_log_starts_start_at_the_first_record_the_target_still_holds() -> None:
    # Source 0-9 -> target 0-9; records 10-14, marker 15, 16-19 -> target 10-18.
    log = [batch((0, 10), (0, 10)), batch((10, 20), (10, 19), (16, 15))]

    def plan(target_start: int, source_start: int = 0) -> tuple[VerifyRange, ...]:
        starts = {("primary.orders", 0): target_start}
        return verify_plan(FLOW, "r1", log, {("orders", 0): source_start}, target_log_starts=starts).ranges

    assert plan(0) == (vrange((0, 20), (0, 19)),)
    assert plan(12) == (vrange((12, 20), (12, 19)),)
    assert plan(15) == (vrange((16, 20), (15, 19)),)  # target 15 holds source record 16
    assert plan(15, source_start=17) == (vrange((17, 20), (16, 19)),)  # the source is the later
    assert plan(19) == ()


def test_verify_ranges_refuse_what_no_mirror_commits() -> None:
    with pytest.raises(PlanError, match="non-empty on the source"):
        vrange((5, 5), (0, 0))
    with pytest.raises(PlanError, match="more target records than source offsets"):
        vrange((0, 2), (0, 3))
    with pytest.raises(PlanError, match=r"target ranges of primary\.orders-0 overlap at offset 4"):
        VerifyPlan(FLOW, "r1", (vrange((0, 5), (0, 5)), vrange((10, 15), (4, 9))))
    with pytest.raises(PlanError, match="source ranges of orders-0 overlap at offset 4"):
        VerifyPlan(FLOW, "r1", (vrange((0, 5), (0, 5)), vrange((4, 15), (5, 9))))
    assert vrange((0, 5), (3, 3)).records == 0  # only markers / aborted records: nothing to compare


def test_compacted_and_logappendtime_ranges_carry_their_offset_map_from_their_first_record() -> None:
    # orders-0: source 5, 9, 14 and 19 held no record (compacted before the copy, markers).
    log = [
        batch((0, 10), (0, 8), (6, 5)),
        batch((10, 20), (8, 16), (15, 12)),
        batch((0, 4), (0, 4), topic="plain"),
    ]
    starts = {("orders", 0): 3, ("plain", 0): 0}

    plan = verify_plan(FLOW, "r1", log, starts, compacted={"orders"}, log_append_time={"primary.plain"})

    assert plan.ranges == (
        VerifyRange(
            "orders", 0, "primary.orders", 3, 20, 3, 16, True, ((3, 3, 2), (6, 5, 3), (10, 8, 4), (15, 12, 4))
        ),
        VerifyRange("plain", 0, "primary.plain", 0, 4, 0, 4, runs=((0, 0, 4),), log_append_time=True),
    )
    assert [r.by_record for r in plan.ranges] == [True, True]
    # The target no longer holds offsets 3-5: the map starts at source offset 7, target offset 6.
    kept = verify_plan(
        FLOW, "r1", log, starts, compacted={"orders"}, target_log_starts={("primary.orders", 0): 6}
    )
    assert kept.ranges[0].runs == ((7, 6, 2), (10, 8, 4), (15, 12, 4))
    assert (kept.ranges[1].runs, kept.ranges[1].by_record) == ((), False)


def test_a_range_over_the_copys_transactions_leaves_their_markers_and_aborted_records_out() -> None:
    # The second micro-batch landed past the first one's commit marker (5) and an aborted attempt's
    # record (6): target offsets 5-6 hold none of the mirror's records.
    log = [batch((0, 5), (0, 5)), Batch("orders", 0, "primary.orders", 5, 10, 5, 12, 5, 0, (), ((5, 7),))]
    starts = {("orders", 0): 0}

    (whole,) = verify_plan(FLOW, "r1", log, starts, compacted={"orders"}).ranges
    (kept,) = verify_plan(
        FLOW, "r1", log, starts, compacted={"orders"}, target_log_starts={("primary.orders", 0): 6}
    ).ranges

    assert whole == VerifyRange(
        "orders", 0, "primary.orders", 0, 10, 0, 12, True, ((0, 0, 5), (5, 7, 5)), target_gaps=((5, 7),)
    )
    assert whole.records == 10
    # The target keeps nothing before 6: the range starts with the next record, source offset 5.
    assert kept == VerifyRange(
        "orders", 0, "primary.orders", 5, 10, 6, 12, True, ((5, 7, 5),), target_gaps=((6, 7),)
    )
    assert OffsetMap.of(whole).sources(np.array([0, 4, 7, 11])).tolist() == [0, 4, 5, 9]
    with pytest.raises(PlanError, match=r"target offsets \[5, 6\] hold no record"):
        OffsetMap.of(whole).sources(np.array([5, 6]))
    assert VerifyPlan.from_json(VerifyPlan(FLOW, "r1", (whole,)).to_json()).ranges == (whole,)


def test_an_offset_map_maps_target_offsets_to_source_ones_and_back() -> None:
    offsets = OffsetMap(((3, 3, 2), (6, 5, 3), (10, 8, 2)))

    assert offsets.sources(np.array([3, 4, 5, 7, 8, 9])).tolist() == [3, 4, 6, 8, 10, 11]
    # -1: no record was copied from there.
    assert offsets.targets(np.array([2, 3, 4, 5, 6, 8, 9, 11, 12])).tolist() == [
        -1,
        3,
        4,
        -1,
        5,
        7,
        -1,
        9,
        -1,
    ]


@pytest.mark.parametrize(
    "fields",
    [
        {"compacted": True},  # records, but no map
        {"runs": ((0, 0, 5),)},  # a map for a range compared by digest
        {"compacted": True, "runs": ((0, 1, 4),)},  # not from the target start, and no target gap
        {"compacted": True, "runs": ((0, 0, 3), (2, 3, 2))},  # the first run (0-2) overlaps the second
        {"compacted": True, "runs": ((8, 0, 5),)},  # source offsets 8-12, past the range's end
        {"compacted": True, "runs": ((0, 0, 4),)},  # ends before the target range does
    ],
)
def test_a_range_refuses_an_offset_map_that_does_not_fit(fields: dict[str, object]) -> None:
    with pytest.raises(PlanError, match="offset map"):
        VerifyRange("orders", 0, "primary.orders", 0, 10, 0, 5, **fields)  # type: ignore[arg-type]


def test_which_topic_configs_compact_and_stamp_the_append_time() -> None:
    policies = ("compact", "delete", "compact,delete", "delete, compact")
    assert [compacts({"cleanup.policy": p}) for p in policies] == [True, False, True, True]
    assert stamps_append_time({"message.timestamp.type": "LogAppendTime"})
    assert not stamps_append_time({"message.timestamp.type": "CreateTime"})


def test_a_plan_survives_json() -> None:
    assert VerifyPlan.from_json(TWO.to_json()) == TWO
    assert VerifyPlan.from_json(KEYED.to_json()) == KEYED
    assert VerifyPlan.from_json(VerifyPlan(FLOW, "r2", ()).to_json()) == VerifyPlan(FLOW, "r2", ())


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "not a valid verify plan"),
        (
            json.dumps({"version": 9, "flow": FLOW, "run_id": "r", "ranges": []}),
            "verify plan version 9, expected 3",
        ),
        # A plan of before compacted ranges were marked: it would compare them by digest.
        (
            json.dumps({"version": 1, "flow": FLOW, "run_id": "r", "ranges": []}),
            "verify plan version 1, expected 3",
        ),
        # A plan of before runs had lengths: its runs would read as a dense target range.
        (
            json.dumps({"version": 2, "flow": FLOW, "run_id": "r", "ranges": []}),
            "verify plan version 2, expected 3",
        ),
        (json.dumps({"version": 3, "flow": FLOW, "run_id": "r"}), "not a valid verify plan"),
        (
            json.dumps({"version": 3, "flow": FLOW, "run_id": "r", "ranges": [{"topic": "t"}]}),
            "not a valid verify plan",
        ),
    ],
)
def test_a_damaged_plan_is_a_plan_error(text: str, message: str) -> None:
    with pytest.raises(PlanError, match=message):
        VerifyPlan.from_json(text)
