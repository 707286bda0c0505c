"""The offsets table's batch log cases that hold on every backend: a DR window's rows coalescing,
pruning below the source's log start, the recovery point and the metrics history. Not a test module
itself: it runs where offsets_store_cases.py runs, with the same ``db_url`` fixture and expectations.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from offsets_store_cases import FLOW, T0, FakeClock, _anchored, _batch
from sqlalchemy import create_engine, delete, insert

from mirrorflow.core.metrics import Stats
from mirrorflow.core.plan import SourceGap
from mirrorflow.core.progress import Batch, GroupPosition
from mirrorflow.core.recovery_point import RecoveryStep
from mirrorflow.core.report import PartitionReport
from mirrorflow.core.translation import OffsetTranslator, coalesce
from mirrorflow.errors import CommitConflictError
from mirrorflow.store import batch_log
from mirrorflow.store.checkpoint_log import latest_checkpoint_metrics, record_checkpoints
from mirrorflow.store.flow_lock import acquire_lock, release_lock
from mirrorflow.store.offsets_store import OffsetsStore
from mirrorflow.store.status_reads import recovery_history, recovery_point, totals
from mirrorflow.store.tables import gaps_table, pruned_table


def test_a_dr_windows_micro_batches_coalesce_into_a_row_per_stretch(
    store: OffsetsStore, clock: FakeClock
) -> None:
    _anchored(store, "window")
    # orders-0: three contiguous micro-batches; orders-1: one, so nothing to merge there.
    steps = [
        ((10, 20), (100, 108), ((10, 100), (13, 102))),
        ((20, 25), (108, 113), ()),
        ((25, 30), (113, 115), ((28, 113),)),
    ]
    for n, (source, target, points) in enumerate(steps):
        clock.advance(1)
        store.commit(
            FLOW, f"window#{n}", [_batch(source=source, target=target, sync_points=points)], holder="window"
        )
    store.commit(
        FLOW,
        "window#3",
        [_batch(partition=1, source=(0, 5), target=(50, 55), sync_points=())],
        holder="window",
    )

    assert store.coalesce_batches(FLOW, "window", {}) == 2

    merged = store.batches(FLOW, partition=0)
    assert [
        (b.source_start, b.source_end, b.target_start, b.target_end, b.records, b.bytes) for b in merged
    ] == [(10, 30, 100, 115, 15, 3000)]
    # Offset 19 holds no record (the first batch's last run ends at 18): 20 starts a run; the first
    # record at the start is implicit, as in a batch the copy commits.
    assert merged[0].sync_points == ((13, 102), (20, 108), (28, 113))
    assert (merged[0].run_id, merged[0].committed_at) == ("window#2", T0 + timedelta(seconds=3))
    assert [b.run_id for b in store.batches(FLOW, partition=1)] == ["window#3"]
    assert store.coalesce_batches(FLOW, "window", {}) == 0
    # Only the window holding the lock may merge its rows.
    release_lock(store, FLOW, "window")
    with pytest.raises(CommitConflictError, match="cannot coalesce its batch log"):
        store.coalesce_batches(FLOW, "window", {})

    # The next window's rows merge with the row they continue: one row per partition and stretch.
    acquire_lock(store, FLOW, "next", ttl_seconds=600)
    clock.advance(1)
    store.commit(FLOW, "next#0", [_batch(source=(30, 40), target=(115, 125), sync_points=())], holder="next")
    # orders-1 lost source offsets [5, 7): its next row follows a gap, so it stays a row of its own.
    store.commit(
        FLOW,
        "next#1",
        [_batch(partition=1, source=(7, 9), target=(55, 57), sync_points=())],
        gaps=[SourceGap("orders", 1, 5, 7, 55, 55)],
        holder="next",
    )
    assert store.coalesce_batches(FLOW, "next", {}) == 1
    assert [(b.partition, b.source_start, b.source_end, b.run_id) for b in store.batches(FLOW)] == [
        (0, 10, 40, "next#0"),
        (1, 0, 5, "window#3"),
        (1, 7, 9, "next#1"),
    ]
    # 30 -> 115 goes on with the run from 28 -> 113: no new sync point.
    assert store.batches(FLOW, partition=0)[0].sync_points == ((13, 102), (20, 108), (28, 113))
    # The source's log start moved to 35: the merged row is cut there, its sync points below gone.
    assert store.coalesce_batches(FLOW, "next", {("orders", 0): 35}) == 0
    assert [
        (b.source_start, b.target_start, b.records, b.sync_points) for b in store.batches(FLOW, partition=0)
    ] == [(35, 120, 5, ())]
    assert totals(store, FLOW)[("orders", 0)] == (25, 4000)


def test_a_windows_rows_do_not_merge_into_a_row_that_holds_row_points_max_points(
    store: OffsetsStore, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(batch_log, "ROW_POINTS_MAX", 3)
    _anchored(store, "window")
    # Micro-batches as the transactional copy leaves them: each after the last one's commit marker.
    steps = [((10, 20), (100, 108)), ((20, 25), (108, 114)), ((25, 30), (114, 120))]
    for n, (source, target) in enumerate(steps):
        clock.advance(1)
        marker = ((target[0], target[0] + 1),)
        batch = _batch(source=source, target=target, target_gaps=marker, sync_points=()) if n else _batch()
        store.commit(FLOW, f"window#{n}", [batch], holder="window")
    assert store.coalesce_batches(FLOW, "window", {}) == 2
    (first,) = store.batches(FLOW, partition=0)
    # Sync points at 13 and after the first marker, the two markers: past the 3 allowed.
    assert (first.sync_points, first.target_gaps) == (((13, 102), (20, 109)), ((108, 109), (114, 115)))
    exact = OffsetTranslator([first.as_batch()])

    # The next window's row continues it but finds it full: a row of its own.
    release_lock(store, FLOW, "window")
    acquire_lock(store, FLOW, "next", ttl_seconds=600)
    for n, (source, target) in enumerate([((30, 35), (120, 126)), ((35, 40), (126, 132))]):
        clock.advance(1)
        batch = _batch(
            source=source, target=target, target_gaps=((target[0], target[0] + 1),), sync_points=()
        )
        store.commit(FLOW, f"next#{n}", [batch], holder="next")
    assert store.coalesce_batches(FLOW, "next", {}) == 1
    rows = store.batches(FLOW, partition=0)
    assert [(b.source_start, b.source_end, b.run_id) for b in rows] == [
        (10, 30, "window#2"),
        (30, 40, "next#1"),
    ]
    # Translation reads the same from both rows as from one merged row.
    (merged,) = coalesce([b.as_batch() for b in rows])
    both, one = OffsetTranslator([b.as_batch() for b in rows]), OffsetTranslator([merged])
    assert [both.translate(u) for u in range(8, 42)] == [one.translate(u) for u in range(8, 42)]
    assert [exact.translate(u) for u in range(8, 30)] == [one.translate(u) for u in range(8, 30)]


def test_a_commit_prunes_the_older_batch_log_below_the_source_log_start_keeping_the_totals(
    store: OffsetsStore,
) -> None:
    _anchored(store)
    store.commit(
        FLOW, "run-1", [_batch(), _batch(partition=1, source=(0, 5), target=(50, 55), sync_points=())]
    )
    before = totals(store, FLOW)
    release_lock(store, FLOW, "run-1")
    acquire_lock(store, FLOW, "run-2", ttl_seconds=600)
    # orders-1 lost offsets [5, 7) before run-2 read them: a gap, then records from 7.
    store.commit(
        FLOW,
        "run-2",
        [
            _batch(source=(20, 30), target=(108, 118), sync_points=()),
            _batch(partition=1, source=(7, 9), target=(55, 57), sync_points=()),
        ],
        gaps=[SourceGap("orders", 1, 5, 7, 55, 55)],
        log_starts={("orders", 0): 15, ("orders", 1): 6},
    )

    # run-1's rows are cut at the log start (orders-0's first run, 10-11, goes); run-2's own rows
    # and gap stay as it wrote them, for a retried commit to find.
    assert [
        (
            b.run_id,
            b.partition,
            b.source_start,
            b.source_end,
            b.target_start,
            b.records,
            b.bytes,
            b.sync_points,
        )
        for b in store.batches(FLOW)
    ] == [
        ("run-1", 0, 15, 20, 104, 4, 500, ()),
        ("run-2", 0, 20, 30, 108, 10, 1000, ()),
        ("run-2", 1, 7, 9, 55, 2, 1000, ()),
    ]
    assert store.commit(FLOW, "run-2", [_batch(source=(20, 30), target=(108, 118), sync_points=())]) == 0
    assert [(g.source_start, g.source_end) for g in store.gaps(FLOW)] == [(5, 7)]
    assert totals(store, FLOW) == {
        ("orders", 0): (before[("orders", 0)][0] + 10, 2000),
        ("orders", 1): (7, 2000),
    }

    # The next commit cuts the gap too; translation from the log start on is what it was.
    release_lock(store, FLOW, "run-2")
    acquire_lock(store, FLOW, "run-3", ttl_seconds=600)
    store.commit(FLOW, "run-3", [], log_starts={("orders", 1): 8})
    assert store.gaps(FLOW) == []
    translator = OffsetTranslator(b.as_batch() for b in store.batches(FLOW, partition=1))
    assert [translator.translate(u) for u in (7, 8, 9, 10)] == [None, 56, 57, 57]
    assert totals(store, FLOW)[("orders", 1)] == (7, 2000)
    release_lock(store, FLOW, "run-3")
    assert store.forget_topic(FLOW, "orders") == 7  # 2 progress, 3 batch log, 2 pruned rows


def _log(store: OffsetsStore, partition: int) -> list[tuple[int, int]]:
    """The source ranges of a partition's batch log and gaps, in order."""
    rows: list[Batch | SourceGap] = [
        *store.batches(FLOW, partition=partition),
        *store.gaps(FLOW, partition=partition),
    ]
    return sorted((r.source_start, r.source_end) for r in rows)


def _translator(store: OffsetsStore, partition: int) -> OffsetTranslator:
    """The partition's translator over its batch log and gaps (refused unless they tile)."""
    return OffsetTranslator(
        [b.as_batch() for b in store.batches(FLOW, partition=partition)],
        store.gaps(FLOW, partition=partition),
    )


def test_a_dr_merge_that_prunes_a_gap_after_a_partitions_newest_batch_leaves_no_hole(
    store: OffsetsStore,
) -> None:
    _anchored(store, "window")
    store.commit(FLOW, "window#0", [_batch()], holder="window")
    # Source offsets [20, 30) expired before the window read them: skipped, up to the log start.
    store.commit(FLOW, "window#1", [], gaps=[SourceGap("orders", 0, 20, 30, 108, 108)], holder="window")
    store.coalesce_batches(FLOW, "window", {("orders", 0): 30})
    store.commit(
        FLOW, "window#2", [_batch(source=(30, 40), target=(108, 118), sync_points=())], holder="window"
    )

    # A dormant group still positioned in the batch below the log start, or at its end, translates
    # before the next merge, exactly.
    translator = _translator(store, 0)
    assert [translator.translate(u) for u in (10, 15, 19, 20, 29, 30, 39, 40)] == [
        100, 104, 108, 108, 108, 108, 117, 118,
    ]  # fmt: skip
    # Once a newer batch is logged, the merge cuts the batch below the log start and the gap.
    store.coalesce_batches(FLOW, "window", {("orders", 0): 30})
    assert _log(store, 0) == [(30, 40)]
    assert store.pruned_from(FLOW) == {("orders", 0): 10}


# orders-0: a batch [10, 20), then offsets [20, 25) and [25, 30) lost (gaps of two micro-batches; an
# interrupted attempt had copied two records of the first); orders-1: nothing but offsets lost, [0, 10)
# and [10, 25) (two copies too).
@pytest.mark.parametrize(
    ("log_start", "kept_0", "kept_1"),
    [
        # The newest rows lie past the log start: the rows below it go, the ones spanning it are cut.
        (15, [(15, 20), (20, 25), (25, 30)], [(15, 25)]),
        # A gap spans the log start after orders-0's newest batch: that batch stays, with every row
        # after it, whole.
        (22, [(10, 20), (20, 25), (25, 30)], [(22, 25)]),
        # The newest gap ends at or before the log start: it stays, and so does orders-0's newest
        # batch, the gaps after it merged into one.
        (30, [(10, 20), (20, 30)], [(10, 25)]),
        (40, [(10, 20), (20, 30)], [(10, 25)]),
    ],
)
def test_pruning_keeps_each_partitions_log_contiguous_from_what_it_keeps_to_its_end(
    store: OffsetsStore, log_start: int, kept_0: list[tuple[int, int]], kept_1: list[tuple[int, int]]
) -> None:
    _anchored(store, "window")
    store.commit(FLOW, "window#0", [_batch()], gaps=[SourceGap("orders", 1, 0, 10, 50, 50)], holder="window")
    store.commit(
        FLOW,
        "window#1",
        [],
        gaps=[SourceGap("orders", 0, 20, 25, 108, 110), SourceGap("orders", 1, 10, 25, 50, 52)],
        holder="window",
    )
    store.commit(FLOW, "window#2", [], gaps=[SourceGap("orders", 0, 25, 30, 110, 110)], holder="window")
    before = [_translator(store, p) for p in (0, 1)]
    log_starts = {("orders", 0): log_start, ("orders", 1): log_start}

    store.coalesce_batches(FLOW, "window", log_starts)

    assert [_log(store, 0), _log(store, 1)] == [kept_0, kept_1]
    # Translation from the log start on reads as it did.
    for p in (0, 1):
        after = _translator(store, p)
        assert [after.translate(u) for u in range(log_start, 42)] == [
            before[p].translate(u) for u in range(log_start, 42)
        ]

    # A newer batch supersedes what lies below the log start: the next merge cuts it all there.
    store.commit(
        FLOW,
        "window#3",
        [
            _batch(source=(30, 40), target=(110, 120), sync_points=()),
            _batch(partition=1, source=(25, 30), target=(52, 57), sync_points=()),
        ],
        holder="window",
    )
    store.coalesce_batches(FLOW, "window", log_starts)
    assert [_log(store, 0)[0][0], _log(store, 1)[0][0]] == [min(log_start, 30), min(log_start, 25)]
    for p in (0, 1):
        _translator(store, p)  # the rows kept tile, on both clusters


def test_a_hole_pruning_left_after_a_partitions_newest_batch_goes_at_the_next_prune(
    store: OffsetsStore, db_url: str
) -> None:
    _anchored(store, "window")
    store.commit(FLOW, "window#0", [_batch()], holder="window")
    store.commit(FLOW, "window#1", [], gaps=[SourceGap("orders", 0, 20, 30, 108, 108)], holder="window")
    store.commit(
        FLOW, "window#2", [_batch(source=(30, 40), target=(108, 118), sync_points=())], holder="window"
    )
    # What a merge at log start 30 left before the batch past the gap came, when pruning kept a
    # partition's newest batch however far below the log start it lay: the batch, without the gap.
    engine = create_engine(db_url)
    try:
        with engine.begin() as conn:
            conn.execute(delete(gaps_table))
            conn.execute(
                insert(pruned_table).values(
                    flow=FLOW, topic="orders", partition=0, source_start=20, records=0, bytes=0, pruned_at=T0
                )
            )
    finally:
        engine.dispose()

    store.coalesce_batches(FLOW, "window", {("orders", 0): 30})

    assert _log(store, 0) == [(30, 40)]
    # The pruned range now begins where the cut batch did: a group positioned there translates.
    assert store.pruned_from(FLOW) == {("orders", 0): 10}
    assert totals(store, FLOW)[("orders", 0)] == (18, 2000)


def test_the_recovery_point_moves_forward_only_with_a_minute_of_history_each(
    store: OffsetsStore, clock: FakeClock
) -> None:
    _anchored(store, "window")
    assert recovery_point(store, FLOW) is None
    # A micro-batch planned at T0+1 commits at T0+2: the flow's first recovery point.
    clock.advance(2)
    store.commit(FLOW, "window#0", [_batch()], holder="window", mirrored_as_of=T0 + timedelta(seconds=1))
    # Empty micro-batches prove newer points; an older one (a slow attempt) never moves it back.
    clock.advance(5)
    store.advance_recovery_point(FLOW, "window#1", T0 + timedelta(seconds=6), holder="window")
    store.advance_recovery_point(FLOW, "window#2", T0 + timedelta(seconds=3), holder="window")
    assert recovery_point(store, FLOW) == T0 + timedelta(seconds=6)
    # A minute later, a commit ends a recovery point of 60 s: the next minute's worst.
    clock.advance(60)
    store.commit(
        FLOW,
        "window#3",
        [_batch(source=(20, 30), target=(108, 118), sync_points=())],
        holder="window",
        mirrored_as_of=T0 + timedelta(seconds=66),
    )
    minute = T0.replace(second=0)
    assert recovery_history(store, FLOW, 10) == [
        # T0 is 03:04:05: minute 03:04 saw 1 s (T0+2 - T0+1), then 6 s (T0+7 - T0+1); 03:05 saw 61 s.
        RecoveryStep(minute, 6.0, T0 + timedelta(seconds=6)),
        RecoveryStep(minute + timedelta(minutes=1), 61.0, T0 + timedelta(seconds=66)),
    ]
    assert recovery_history(store, FLOW, 1) == recovery_history(store, FLOW, 10)[1:]
    # A week later the first minutes are pruned as a new one is written.
    clock.advance(7 * 86400)
    store.advance_recovery_point(FLOW, "window#4", clock.now, holder="window")
    assert [step.minute for step in recovery_history(store, FLOW, 10)] == [
        minute + timedelta(minutes=1), clock.now.replace(second=0)
    ]  # fmt: skip
    # Only the lock's holder records a recovery point.
    with pytest.raises(CommitConflictError, match="cannot record its recovery point"):
        store.advance_recovery_point(FLOW, "other#0", clock.now, holder="other")


def test_history_older_than_a_week_goes_but_the_newest_rows_read(
    store: OffsetsStore, clock: FakeClock
) -> None:
    _anchored(store, "window")
    written = PartitionReport(
        "orders", 0, "primary.orders", records=5, replication_latency=Stats(5, 1, 2, 8, 2)
    )
    idle = PartitionReport("orders", 0, "primary.orders", lag=3)
    other = PartitionReport(
        "orders", 1, "primary.orders", records=2, replication_latency=Stats(2, 1, 1, 2, 1)
    )
    position = GroupPosition("billing", "orders", 0, "primary.orders", 5, 5)
    # Day 0: two minutes with writes, one idle, and a checkpoint; orders-1 only then.
    store.record_partition_metrics(FLOW, "window#1", [written, other], holder="window")
    store.record_partition_metrics(FLOW, "window#2", [written], holder="window")
    record_checkpoints(store, FLOW, [position], 10)
    record_checkpoints(store, FLOW, [position], 11)
    clock.advance(60)
    store.record_partition_metrics(FLOW, "window#3", [idle], holder="window")
    assert store.prune_history(FLOW) == 0  # nothing older than a week

    clock.advance(7 * 86400)
    store.record_partition_metrics(FLOW, "window#4", [idle], holder="window")
    # window#1's orders-0 row and the first checkpoint go; window#2 (orders-0's newest write),
    # window#1's orders-1 row (its newest), window#3 and window#4 stay.
    assert store.prune_history(FLOW) == 2
    assert [(m.partition, m.records, m.lag) for m in store.partition_metrics(FLOW)] == [
        (1, 2, 0), (0, 5, 0), (0, 0, 3), (0, 0, 3)
    ]  # fmt: skip
    assert store.latest_writes(FLOW)[("orders", 0)].records == 5
    assert [c.latency_ms for c in latest_checkpoint_metrics(store, FLOW)] == [11]
    clock.advance(1)
    assert store.prune_history(FLOW) == 1  # window#3: orders-0's newest is now window#4
