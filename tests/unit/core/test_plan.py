"""Plan and copy result files: JSON round trips, validation, run folders, atomic writes; and the batch
rows the commit derives from a plan and its result (``core.report.batches_for``)."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import replace

import pytest

from mirrorflow.core.plan import (
    CopyResult,
    PartitionPlan,
    PartitionResult,
    PartitionState,
    Plan,
)
from mirrorflow.core.progress import Batch
from mirrorflow.core.report import batches_for, build_report
from mirrorflow.core.schema_ids import SchemaIdMap
from mirrorflow.errors import PlanError

FLOW = "primary->backup"
RUN = "manual__2026-01-01T00:00:00+00:00"

ORDERS_0 = PartitionPlan("orders", 0, 10, 20, "primary.orders", 100)
ORDERS_1 = PartitionPlan("orders", 1, 0, 5, "primary.orders", 0)
PLAN = Plan(
    flow=FLOW,
    run_id=RUN,
    created_at="2026-01-01T00:00:05+00:00",
    partitions=(ORDERS_0, ORDERS_1),
    states=(
        PartitionState("orders", 0, "primary.orders", 3, 25, 10),
        PartitionState("orders", 1, "primary.orders", 0, 5, 0),
        PartitionState("orders", 2, "primary.orders", 7, 7, 7),
    ),
)
RESULT = CopyResult(
    flow=FLOW,
    run_id=RUN,
    partitions=(
        PartitionResult(
            "orders", 0, records=8, skipped=2, bytes=640, target_start=100, sync_points=((10, 100), (13, 102))
        ),
        PartitionResult("orders", 1, records=5, skipped=0, bytes=50, target_start=0),
    ),
)


# --- JSON round trips ----------------------------------------------------------------------------


def test_plan_round_trips_exactly() -> None:
    text = PLAN.to_json()

    assert json.loads(text)["version"] == 1
    assert Plan.from_json(text) == PLAN
    assert Plan.from_json(text).to_json() == text


def test_a_plans_schema_id_map_round_trips_exactly() -> None:
    mapped = dataclasses.replace(
        PLAN,
        schema_ids=SchemaIdMap(
            ids=((1, 11), (2, 12)),
            held=((1, "orders-value"), (2, "orders-value"), (3, "shop.Order")),
            subjects=("orders-value",),
            framed_values=("orders",),
            undeclared_keys=("orders",),
            registry="http://sr:8081",
            strategies=("TopicNameStrategy",),
        ),
    )
    text = mapped.to_json()

    assert json.loads(text)["schema_ids"] == {
        "ids": [[1, 11], [2, 12]],
        "held": [[1, "orders-value"], [2, "orders-value"], [3, "shop.Order"]],
        "subjects": ["orders-value"],
        "framed_keys": [],
        "framed_values": ["orders"],
        "undeclared_keys": ["orders"],
        "undeclared_values": [],
        "registry": "http://sr:8081",
        "strategies": ["TopicNameStrategy"],
    }
    assert Plan.from_json(text) == mapped
    # A plan written before schemas travelled maps none.
    older = {k: v for k, v in json.loads(PLAN.to_json()).items() if k != "schema_ids"}
    assert not Plan.from_json(json.dumps(older)).schema_ids


def test_empty_plan_round_trips_exactly() -> None:
    empty = Plan(FLOW, RUN, "2026-01-01T00:00:05+00:00", ())

    assert Plan.from_json(empty.to_json()) == empty
    assert empty.max_records == 0


def test_copy_result_round_trips_exactly_with_sync_points_as_tuples() -> None:
    text = RESULT.to_json()
    back = CopyResult.from_json(text)

    assert back == RESULT
    assert back.partitions[0].sync_points == ((10, 100), (13, 102))
    assert back.partitions[0].target_end == 108
    assert back.to_json() == text
    stopped = CopyResult(FLOW, RUN, (replace(RESULT.partitions[0], source_end=14),))
    assert CopyResult.from_json(stopped.to_json()).partitions[0].source_end == 14


def test_max_records_sums_the_planned_ranges() -> None:
    assert PLAN.max_records == 10 + 5


def _sized(*sizes: int) -> Plan:
    parts = tuple(PartitionPlan("t", i, 0, n, "primary.t", 0) for i, n in enumerate(sizes))
    return Plan(FLOW, RUN, "2026-01-01T00:00:05+00:00", parts)


def _shape(groups: list[tuple[PartitionPlan, ...]]) -> list[list[tuple[int, int]]]:
    return [[(p.partition, p.source_end) for p in g] for g in groups]


def test_task_groups_balance_planned_records_and_keep_plan_order() -> None:
    # Largest first onto the least loaded (ties: the first): 9+3+2 | 8+4+1 | 7+5 = 14, 13, 12.
    assert _shape(_sized(1, 9, 3, 8, 2, 7, 4, 5).task_groups(3)) == [
        [(1, 9), (2, 3), (4, 2)],
        [(0, 1), (3, 8), (6, 4)],
        [(5, 7), (7, 5)],
    ]


def test_a_small_plan_is_copied_by_fewer_tasks_than_cores() -> None:
    assert _sized(3000, 4000).task_count(2) == 1
    assert _sized(6000, 6000).task_count(2) == 2
    assert _sized(60_000, 60_000).task_count(8) == 8
    assert _sized().task_count(2) == 1


def test_task_groups_never_exceed_the_partitions_and_drop_nothing() -> None:
    assert _shape(_sized(5, 5).task_groups(8)) == [[(0, 5)], [(1, 5)]]
    assert _shape(_sized(5, 5, 5).task_groups(1)) == [[(0, 5), (1, 5), (2, 5)]]
    assert _sized().task_groups(4) == []


# --- validation ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("start", "end", "shown"),
    [(5, 5, "[5, 5)"), (6, 5, "[6, 5)"), (-1, 5, "[-1, 5)")],
)
def test_empty_or_negative_source_range_is_refused(start: int, end: int, shown: str) -> None:
    with pytest.raises(PlanError) as caught:
        PartitionPlan("orders", 3, start, end, "primary.orders", 0)

    assert str(caught.value) == f"orders-3: source range {shown} is empty or negative"


def test_negative_target_start_is_refused() -> None:
    with pytest.raises(PlanError, match=r"^orders-3: negative target start -1$"):
        PartitionPlan("orders", 3, 0, 1, "primary.orders", -1)


def test_a_partition_planned_twice_is_refused() -> None:
    again = PartitionPlan("orders", 0, 20, 30, "primary.orders", 110)

    with pytest.raises(PlanError) as caught:
        Plan(FLOW, RUN, "now", (ORDERS_0, ORDERS_1, again))

    assert str(caught.value) == "primary->backup: partition orders-0 planned twice"


@pytest.mark.parametrize(
    "text",
    [
        json.dumps({**json.loads(PLAN.to_json()), "version": 2}),
        json.dumps({k: v for k, v in json.loads(PLAN.to_json()).items() if k != "version"}),
        json.dumps({k: v for k, v in json.loads(PLAN.to_json()).items() if k != "states"}),
        json.dumps({**json.loads(PLAN.to_json()), "partitions": [{"topic": "orders"}]}),
        '{"version": 1, "flow": ',
        "",
        "[]",
        "null",
    ],
    ids=["wrong-version", "no-version", "no-states", "bad-partition", "truncated", "empty", "list", "null"],
)
def test_malformed_plan_says_to_rerun_the_plan_task(text: str) -> None:
    with pytest.raises(PlanError) as caught:
        Plan.from_json(text, "/state/runs/x/plan.json")

    message = str(caught.value)
    assert message.startswith("/state/runs/x/plan.json: not a valid plan (")
    assert message.endswith("); re-run the plan task")


def test_wrong_plan_version_is_named() -> None:
    text = json.dumps({**json.loads(PLAN.to_json()), "version": 2})

    with pytest.raises(PlanError, match=r"plan version 2, expected 1"):
        Plan.from_json(text, "plan.json")


@pytest.mark.parametrize(
    "text", ["{", "[]", json.dumps({"flow": FLOW, "run_id": RUN})], ids=["truncated", "list", "no-parts"]
)
def test_malformed_copy_result_says_to_rerun_the_copy_task(text: str) -> None:
    with pytest.raises(PlanError) as caught:
        CopyResult.from_json(text, "result.json")

    message = str(caught.value)
    assert message.startswith("result.json: not a valid copy result (")
    assert message.endswith("); re-run the copy task")


def test_check_belongs_to_accepts_its_own_flow_and_run() -> None:
    PLAN.check_belongs_to(FLOW, RUN, "plan.json")


@pytest.mark.parametrize(
    ("flow", "run_id"),
    [("backup->primary", RUN), (FLOW, "manual__2026-01-02T00:00:00+00:00")],
    ids=["other-flow", "other-run"],
)
def test_check_belongs_to_refuses_another_flow_or_run(flow: str, run_id: str) -> None:
    with pytest.raises(PlanError) as caught:
        PLAN.check_belongs_to(flow, run_id, "/s/plan.json")

    assert str(caught.value) == (
        f"/s/plan.json belongs to flow 'primary->backup' run {RUN!r}, not flow {flow!r} run {run_id!r}; "
        "re-run the plan task of this run"
    )


# --- files ---------------------------------------------------------------------------------------


def test_batches_for_builds_one_row_per_planned_partition() -> None:
    assert batches_for(PLAN, RESULT) == [
        Batch(
            topic="orders",
            partition=0,
            remote_topic="primary.orders",
            source_start=10,
            source_end=20,
            target_start=100,
            target_end=108,
            records=8,
            bytes=640,
            sync_points=((10, 100), (13, 102)),
        ),
        Batch(
            topic="orders",
            partition=1,
            remote_topic="primary.orders",
            source_start=0,
            source_end=5,
            target_start=0,
            target_end=5,
            records=5,
            bytes=50,
            sync_points=(),
        ),
    ]


def test_batches_for_a_copy_stopped_at_its_deadline_end_where_it_stopped() -> None:
    """orders-0 stopped at source 15 (5 records, one offset a marker), orders-1 before its first."""
    short = (
        PartitionResult("orders", 0, records=4, skipped=0, bytes=320, target_start=100, source_end=15),
        PartitionResult("orders", 1, records=0, skipped=0, bytes=0, target_start=0, source_end=0),
    )

    assert batches_for(PLAN, CopyResult(FLOW, RUN, short)) == [
        Batch("orders", 0, "primary.orders", 10, 15, 100, 104, 4, 320),
    ]
    report = build_report(PLAN, CopyResult(FLOW, RUN, short))
    assert [(p.partition, p.records, p.lag) for p in report.partitions] == [(0, 4, 10), (1, 0, 5), (2, 0, 0)]


@pytest.mark.parametrize(
    "stopped",
    [
        PartitionResult("orders", 1, records=0, skipped=0, bytes=0, target_start=0, source_end=6),
        # Records counted before the plan's start.
        PartitionResult("orders", 1, records=1, skipped=0, bytes=9, target_start=0, source_end=0),
    ],
    ids=["past-the-plan", "records-before-its-start"],
)
def test_batches_for_refuses_a_stop_outside_the_planned_range(stopped: PartitionResult) -> None:
    with pytest.raises(PlanError, match="copy result does not match the plan for orders-1"):
        batches_for(PLAN, CopyResult(FLOW, RUN, (RESULT.partitions[0], stopped)))


def test_batches_for_an_empty_plan_is_empty() -> None:
    empty = Plan(FLOW, RUN, "now", ())

    assert batches_for(empty, CopyResult(FLOW, RUN, ())) == []


@pytest.mark.parametrize(
    ("flow", "run_id"), [("backup->primary", RUN), (FLOW, "other-run")], ids=["other-flow", "other-run"]
)
def test_batches_for_refuses_a_result_of_another_run(flow: str, run_id: str) -> None:
    with pytest.raises(PlanError) as caught:
        batches_for(PLAN, CopyResult(flow, run_id, RESULT.partitions))

    assert str(caught.value) == (
        f"copy result is for flow {flow!r} run {run_id!r}, the plan for flow 'primary->backup' "
        f"run {RUN!r}; re-run the copy task"
    )


def test_batches_for_refuses_a_result_missing_a_partition() -> None:
    with pytest.raises(PlanError) as caught:
        batches_for(PLAN, CopyResult(FLOW, RUN, RESULT.partitions[:1]))

    assert str(caught.value) == "copy result does not match the plan for orders-1; re-run the copy task"


def test_batches_for_refuses_a_mismatched_target_start() -> None:
    moved = PartitionResult("orders", 0, records=8, skipped=0, bytes=640, target_start=101)

    with pytest.raises(PlanError) as caught:
        batches_for(PLAN, CopyResult(FLOW, RUN, (moved, RESULT.partitions[1])))

    assert str(caught.value) == "copy result does not match the plan for orders-0; re-run the copy task"


def test_batches_for_refuses_extra_partitions() -> None:
    extra = PartitionResult("orders", 2, records=1, skipped=0, bytes=1, target_start=0)

    with pytest.raises(PlanError) as caught:
        batches_for(PLAN, CopyResult(FLOW, RUN, (*RESULT.partitions, extra)))

    assert str(caught.value) == "copy result holds partitions the plan does not; re-run the copy task"
