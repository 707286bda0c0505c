"""Source gaps (records deleted from the source before they were mirrored, skipped) and recorded topic
ids, outside the planner: the setting, the plan file, the run report, the offsets table and offset
translation across a gap."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from config_texts import ONE_FLOW
from sqlalchemy import create_engine, update

from mirrorflow.config.model import parse_config
from mirrorflow.core.plan import CopyResult, PartitionPlan, PartitionResult, PartitionState, Plan, SourceGap
from mirrorflow.core.progress import Batch, GroupPosition, PartitionProgress, RecordedGap, TopicIdentity
from mirrorflow.core.report import build_report
from mirrorflow.core.translation import OffsetTranslator
from mirrorflow.errors import CommitConflictError, ConfigError, CorruptStateError, FlowLockedError, PlanError
from mirrorflow.store.checkpoint_log import checkpoints, record_checkpoints
from mirrorflow.store.cli import main
from mirrorflow.store.flow_lock import acquire_lock, release_lock
from mirrorflow.store.offsets_store import OffsetsStore
from mirrorflow.store.tables import gaps_table

FLOW = "primary->backup"
RUN = "run-1"
T0 = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)

# orders-0: committed (100, 40); offsets [100, 150) lost, an interrupted attempt had copied 18 of them
# to target [40, 58); the run copies [150, 200) to target [58, 100).
GAP = SourceGap("orders", 0, 100, 150, 40, 58)
PART = PartitionPlan("orders", 0, 150, 200, "primary.orders", 58)
PLAN = Plan(
    FLOW,
    RUN,
    "2030-01-02T03:04:05+00:00",
    (PART,),
    (PartitionState("orders", 0, "primary.orders", 150, 230, 150),),
    (GAP,),
)
BATCH = Batch("orders", 0, "primary.orders", 150, 200, 58, 100, 42, 4200, ((160, 68),))


def store_at(tmp_path: Path) -> OffsetsStore:
    return OffsetsStore(f"sqlite:///{tmp_path / 'offsets.db'}", clock=lambda: T0)


def anchored(tmp_path: Path) -> OffsetsStore:
    store = store_at(tmp_path)
    acquire_lock(store, FLOW, RUN, 60)
    store.anchor(FLOW, RUN, [PartitionProgress("orders", 0, 100, 40)])
    return store


# --- the setting --------------------------------------------------------------------------------


def test_on_source_data_loss_is_fail_by_default_and_may_be_set_per_flow() -> None:
    (default,) = parse_config(ONE_FLOW, env={}).flows
    (skipping,) = parse_config(
        ONE_FLOW
        + "mirrorflow.on.source.data.loss = fail\nprimary->backup.mirrorflow.on.source.data.loss = Skip\n",
        env={},
    ).flows

    assert default.settings.on_source_data_loss == "fail"
    assert skipping.settings.on_source_data_loss == "skip"


def test_an_unknown_on_source_data_loss_names_the_key_and_the_choices() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(ONE_FLOW + "primary->backup.mirrorflow.on.source.data.loss = ignore\n", env={})

    assert str(caught.value) == (
        "primary->backup.mirrorflow.on.source.data.loss: expected fail or skip, got 'ignore'"
    )


# --- the plan file and the report ---------------------------------------------------------------


def test_a_plan_carries_its_gaps_through_its_file() -> None:
    assert Plan.from_json(PLAN.to_json()) == PLAN
    # Plans written before gaps were recorded have none.
    old = {k: v for k, v in json.loads(PLAN.to_json()).items() if k != "gaps"}
    assert Plan.from_json(json.dumps(old)).gaps == ()


def test_a_partition_planned_from_elsewhere_than_the_end_of_its_gap_is_refused() -> None:
    with pytest.raises(PlanError, match=r"orders-0 is planned from \(source 150, target 40\)"):
        Plan(FLOW, RUN, "now", (PartitionPlan("orders", 0, 150, 200, "primary.orders", 40),), (), (GAP,))
    with pytest.raises(PlanError, match="empty or negative"):
        SourceGap("orders", 0, 100, 100, 40, 40)


def test_the_report_lists_the_gaps_in_its_summary_and_its_table() -> None:
    result = CopyResult(FLOW, RUN, (PartitionResult("orders", 0, 42, 0, 4200, 58),))
    report = build_report(PLAN, result)

    assert report.as_dict()["gaps"] == [
        {
            "topic": "orders",
            "partition": 0,
            "source_start": 100,
            "source_end": 150,
            "target_start": 40,
            "target_end": 58,
        }
    ]
    assert report.partitions[0].lag == 30
    assert report.table().split("\n")[-2:] == [
        "source records lost before they were mirrored, skipped:",
        "  orders-0 [100, 150) (50 offsets)",
    ]


# --- the offsets table ----------------------------------------------------------------------------


def test_a_gap_is_committed_with_the_batches_once_however_often_the_commit_is_retried(
    tmp_path: Path,
) -> None:
    store = anchored(tmp_path)

    assert store.commit(FLOW, RUN, [BATCH], gaps=[GAP]) == 1
    assert store.commit(FLOW, RUN, [BATCH], gaps=[GAP]) == 0  # a retried commit

    assert store.gaps(FLOW) == [RecordedGap(*vars(GAP).values(), run_id=RUN, recorded_at=T0)]
    assert store.gaps(FLOW, "orders", 1) == []
    assert store.progress(FLOW) == {("orders", 0): PartitionProgress("orders", 0, 200, 100)}
    assert [(b.source_start, b.target_start) for b in store.batches(FLOW)] == [(150, 58)]


def test_a_gap_moves_progress_only_from_where_it_starts(tmp_path: Path) -> None:
    store = anchored(tmp_path)

    with pytest.raises(CommitConflictError, match=r"expected progress at \(source 90, target 40\)"):
        store.commit(FLOW, RUN, [], gaps=[SourceGap("orders", 0, 90, 150, 40, 40)])
    # A batch that does not start at the end of the gap fails the whole commit, the gap with it.
    with pytest.raises(
        CommitConflictError, match=r"at \(source 150, target 58\) but it is at \(source 150, target 40\)"
    ):
        store.commit(FLOW, RUN, [BATCH], gaps=[SourceGap("orders", 0, 100, 150, 40, 40)])

    assert store.gaps(FLOW) == []
    assert store.progress(FLOW) == {("orders", 0): PartitionProgress("orders", 0, 100, 40)}


def test_a_gap_committed_by_another_run_is_a_conflict(tmp_path: Path) -> None:
    store = anchored(tmp_path)
    store.commit(FLOW, RUN, [], gaps=[GAP])
    release_lock(store, FLOW, RUN)
    acquire_lock(store, FLOW, "run-2", 60)

    with pytest.raises(CommitConflictError) as caught:
        store.commit(FLOW, "run-2", [], gaps=[GAP])

    assert str(caught.value) == (
        "flow primary->backup: partition orders-0: a gap from source offset 100 was already committed by "
        "run run-1 at 2030-01-02T03:04:05+00:00 as source [100, 150) lost, target [40, 58) left by an "
        "interrupted attempt; run run-2 now commits source [100, 150) lost, target [40, 58) left by an "
        "interrupted attempt. Nothing was committed; re-run the flow to plan from the committed position."
    )


def test_topic_ids_are_recorded_with_the_anchors_and_never_overwritten(tmp_path: Path) -> None:
    store = store_at(tmp_path)
    acquire_lock(store, FLOW, RUN, 60)
    store.anchor(FLOW, RUN, [], [TopicIdentity("orders", "id-1", "primary.orders")])
    store.anchor(FLOW, RUN, [], [TopicIdentity("orders", "id-2", "primary.orders")])

    assert store.topic_ids(FLOW) == {"orders": "id-1"}
    assert store.topic_ids("backup->primary") == {}


def test_forget_topic_removes_the_flows_state_of_that_topic_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = anchored(tmp_path)
    store.anchor(
        FLOW,
        RUN,
        [PartitionProgress("payments", 0, 0, 0)],
        [
            TopicIdentity("orders", "id-1", "primary.orders"),
            TopicIdentity("payments", "id-2", "primary.payments"),
        ],
    )
    store.commit(FLOW, RUN, [BATCH], gaps=[GAP])
    record_checkpoints(store, FLOW, [GroupPosition("g", "orders", 0, "primary.orders", 170, 78)], 5)

    with pytest.raises(FlowLockedError, match="locked by run run-1"):
        store.forget_topic(FLOW, "orders")
    release_lock(store, FLOW, RUN)
    db = f"sqlite:///{tmp_path / 'offsets.db'}"
    assert main(["forget-topic", "--flow", FLOW, "--topic", "orders", "--db", db]) == 0

    assert capsys.readouterr().out == "flow primary->backup: forgot topic orders (5 rows deleted)\n"
    assert store.progress(FLOW) == {("payments", 0): PartitionProgress("payments", 0, 0, 0)}
    assert store.topic_ids(FLOW) == {"payments": "id-2"}
    assert (store.batches(FLOW), store.gaps(FLOW)) == ([], [])
    assert checkpoints(store, FLOW) == {}


def test_show_lists_the_gaps(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = anchored(tmp_path)
    store.commit(FLOW, RUN, [BATCH], gaps=[GAP])

    assert main(["show", "--flow", FLOW, "--db", f"sqlite:///{tmp_path / 'offsets.db'}"]) == 0

    assert capsys.readouterr().out.split("\n")[-4:] == [
        "source records lost before they were mirrored (skipped):",
        "partition  source range  target range  run    recorded_at",
        "orders-0   [100, 150)    [40, 58)      run-1  2030-01-02T03:04:05+00:00",
        "",
    ]


def test_a_gap_row_no_commit_can_write_is_reported_as_corrupt(tmp_path: Path) -> None:
    store = anchored(tmp_path)
    store.commit(FLOW, RUN, [], gaps=[GAP])
    engine = create_engine(f"sqlite:///{tmp_path / 'offsets.db'}")
    with engine.begin() as conn:
        conn.execute(update(gaps_table).values(source_end=90))
    engine.dispose()

    with pytest.raises(CorruptStateError, match=r"mirror_gaps: flow primary->backup, partition orders-0: "):
        store.gaps(FLOW)


# --- offset translation across a gap -------------------------------------------------------------


def test_a_position_inside_a_gap_maps_to_the_first_record_after_it() -> None:
    before = Batch("orders", 0, "primary.orders", 90, 100, 30, 40, 10, 0)
    t = OffsetTranslator([BATCH, before], [GAP])

    # BATCH: source 150-159 -> target 58-67, then (sync point) 160-191 -> 68-99, then nothing.
    assert [t.translate(u) for u in (89, 90, 99, 100, 149, 150, 159, 160, 191, 192, 199, 250)] == [
        None, 30, 39, 58, 58, 58, 67, 68, 99, 100, 100, 100,
    ]  # fmt: skip


def test_a_gap_with_nothing_after_it_yet_maps_to_where_the_next_record_will_land() -> None:
    before = Batch("orders", 0, "primary.orders", 90, 100, 30, 40, 10, 0)
    t = OffsetTranslator([before], [GAP])

    assert [t.translate(u) for u in (95, 100, 120, 150, 400)] == [35, 58, 58, 58, 58]


def test_a_gap_that_does_not_tile_with_the_batches_is_refused() -> None:
    with pytest.raises(PlanError, match="not contiguous at source offset 150"):
        OffsetTranslator([BATCH], [SourceGap("orders", 0, 100, 150, 40, 50)])
