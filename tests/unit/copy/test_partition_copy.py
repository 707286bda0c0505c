"""A planned partition's copy as it runs (``copy.partition_copy``): the records it counts, where each
lands, the sequence its next batch takes, and the result a commit reads, with fakes for nothing but
plain values."""

from __future__ import annotations

import pytest

from mirrorflow.copy.partition_copy import PartitionCopy
from mirrorflow.core.plan import PartitionPlan
from mirrorflow.errors import TargetStateError, TransientError
from mirrorflow.kafka.faults import FaultPolicy

PLAN = PartitionPlan("orders", 0, 100, 200, "primary.orders", 40)


def test_records_counted_one_after_another_make_one_run_and_no_layout() -> None:
    part = PartitionCopy(PLAN, 0, 100)
    part.count(range(100, 150))
    part.count([150, 151, 152])

    assert (part.runs, part.records, part.landing) == ([(100, 40, 53)], 53, 93)
    result = part.result()
    assert (result.records, result.sync_points, result.target_gaps) == (53, (), ())


def test_a_jump_in_source_offsets_is_a_sync_point_and_one_in_target_offsets_a_target_gap() -> None:
    # 100 dropped (a transform, or a copy the remote topic's cleaner removed), a marker at target 43.
    part = PartitionCopy(PLAN, 0, 100)
    part.count([101, 102, 103, 104], [41, 42, 44, 45])

    assert part.runs == [(101, 41, 2), (103, 44, 2)]
    result = part.result()
    assert result.sync_points == ((101, 41),)
    assert result.target_gaps == ((40, 41), (43, 44))


def test_records_found_already_written_are_counted_where_they_are_and_the_new_ones_land_after_the_end() -> (
    None
):
    # An earlier attempt committed 10 records at 40-49 and its marker at 50: this one writes from 51.
    part = PartitionCopy(PLAN, 0, 100, first_new=51)
    part.count(range(100, 110), range(40, 50))
    part.already_written = 10
    assert part.landing == 51
    part.count(range(110, 115))

    assert part.runs == [(100, 40, 10), (110, 51, 5)]
    assert (part.result().skipped, part.result().target_gaps) == (10, ((50, 51),))


def test_the_next_sequence_follows_what_this_transaction_appended_and_wraps_as_the_brokers_do() -> None:
    part = PartitionCopy(PLAN, 0, 100, in_transaction=3, first_sequence=(1 << 31) - 2)
    part.acked = 4

    assert part.appended == 7
    assert part.next_sequence == 5


def test_a_copy_short_of_its_plan_says_where_it_stopped() -> None:
    part = PartitionCopy(PLAN, 0, 100)
    part.count(range(100, 120))
    part.position = 120

    assert part.result().source_end == 120
    part.position = 200
    assert part.result().source_end is None


def test_under_isolate_a_partitions_own_error_stops_it_alone_and_its_result_carries_the_error() -> None:
    part = PartitionCopy(PLAN, 0, 100)
    part.acked = 2
    refused = TargetStateError("someone else's records")

    part.give_up(refused, FaultPolicy(isolate=True))
    part.give_up(TargetStateError("a later error"), FaultPolicy(isolate=True))

    result = part.result()
    assert result.failure is not None
    assert (result.failure.kind, result.failure.message) == ("TargetStateError", "someone else's records")
    assert (result.records, result.appended, result.target_start) == (0, 2, 40)
    with pytest.raises(TargetStateError):
        PartitionCopy(PLAN, 0, 100).give_up(refused, FaultPolicy(isolate=False))
    with pytest.raises(TransientError):  # a passing fault fails the attempt, isolate or not
        PartitionCopy(PLAN, 0, 100).give_up(TransientError("away"), FaultPolicy(isolate=True))
