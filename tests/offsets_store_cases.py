"""The offsets table's cases that hold on every backend: locks, anchors, commits, the batch log, racing
and crashing processes, the CLI. Not a test module itself: tests/unit/store/test_offsets_store.py runs
them on SQLite files, tests/integration/test_offsets_store_postgres.py on a real PostgreSQL server (one
per session, a schema per test), each module giving the ``db_url`` fixture, with the same expectations.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, delete, event, insert, inspect, select, text

from mirrorflow.core.metrics import CheckpointMetrics, Stats
from mirrorflow.core.plan import PartitionFailure, SourceGap
from mirrorflow.core.progress import Batch, CommittedBatch, GroupPosition, LockInfo, PartitionProgress
from mirrorflow.core.recovery import RecoveryStep
from mirrorflow.core.report import FailedPartition, PartitionReport
from mirrorflow.core.translation import OffsetTranslator, coalesce
from mirrorflow.errors import CommitConflictError, FlowLockedError, PlanError
from mirrorflow.store import batch_log
from mirrorflow.store.checkpoint_log import checkpoints, latest_checkpoint_metrics, record_checkpoints
from mirrorflow.store.offsets_store import OffsetsStore
from mirrorflow.store.read_model import PartitionErrorRecord
from mirrorflow.store.run_documents import (
    find_document,
    prune_documents,
    read_document,
    recent_documents,
    save_document,
)
from mirrorflow.store.schema import gaps_table, metadata, pruned_table
from mirrorflow.store.status_reads import failed_partitions, recovery_history, recovery_point, totals

FLOW = "primary->backup"
T0 = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
LATER = T0 + timedelta(hours=1)  # the clock of processes that commit
TABLES = set(metadata.tables)  # every table the store declares


class FakeClock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: int) -> None:
        self.now += timedelta(seconds=seconds)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


@pytest.fixture
def store(db_url: str, clock: FakeClock) -> Any:
    with OffsetsStore(db_url, clock=clock) as s:
        yield s


def _rows(db_url: str, table: str) -> list[tuple[Any, ...]]:
    """Every row of ``table`` as stored, ordered by its first four columns, read past the store.

    Timestamps come back as UTC datetimes: SQLite returns the stored text without a zone, PostgreSQL
    the instant in the session's zone.
    """
    t = metadata.tables[table]
    engine = create_engine(db_url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(select(t).order_by(*list(t.c)[:4])).all()
    finally:
        engine.dispose()
    return [tuple(_utc(value) for value in row) for row in rows]


def _utc(value: Any) -> Any:
    if not isinstance(value, datetime):
        return value
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _batch(
    topic: str = "orders",
    partition: int = 0,
    source: tuple[int, int] = (10, 20),
    target: tuple[int, int] = (100, 108),
    sync_points: tuple[tuple[int, int], ...] = ((10, 100), (13, 102)),
    target_gaps: tuple[tuple[int, int], ...] = (),
) -> Batch:
    return Batch(
        topic=topic,
        partition=partition,
        remote_topic=f"primary.{topic}",
        source_start=source[0],
        source_end=source[1],
        target_start=target[0],
        target_end=target[1],
        records=target[1] - target[0] - sum(end - start for start, end in target_gaps),
        bytes=1000,
        sync_points=sync_points,
        target_gaps=target_gaps,
    )


# ---------------------------------------------------------------------------------------------- schema


def _tables(db_url: str) -> set[str]:
    engine = create_engine(db_url)
    try:
        return set(inspect(engine).get_table_names())
    finally:
        engine.dispose()


def test_schema_created_on_first_use(db_url: str) -> None:
    with OffsetsStore(db_url) as store:
        assert store.progress(FLOW) == {}
    assert _tables(db_url) == TABLES
    # A second store on the same database finds the schema and does not fail.
    with OffsetsStore(db_url) as again:
        assert again.batches(FLOW) == []
        assert again.lock_holder(FLOW) is None


def test_an_older_database_gets_the_columns_added_since(db_url: str) -> None:
    # A batch log written before target gaps existed: its rows read as batches without any.
    with OffsetsStore(db_url) as store:
        _anchored(store)
        store.commit(FLOW, "run-1", [_batch()])
    engine = create_engine(db_url)
    with engine.begin() as conn:
        conn.execute(text("ALTER TABLE mirror_batches DROP COLUMN target_gaps"))
    engine.dispose()

    with OffsetsStore(db_url) as again:
        assert [b.as_batch() for b in again.batches(FLOW)] == [_batch()]
        gapped = _batch(partition=1, source=(0, 5), target=(50, 56), sync_points=(), target_gaps=((50, 51),))
        again.commit(FLOW, "run-1", [gapped])
        assert [b.as_batch() for b in again.batches(FLOW, partition=1)] == [gapped]


# ----------------------------------------------------------------------------------------------- locks


def test_lock_acquire_reentrant_and_refused(store: OffsetsStore, clock: FakeClock) -> None:
    store.acquire_lock(FLOW, "run-1", ttl_seconds=600)
    assert store.lock_holder(FLOW) == "run-1"
    info = store.lock_info(FLOW)
    assert info is not None
    assert (info.acquired_at, info.expires_at) == (T0, T0 + timedelta(seconds=600))

    # Re-entrant: a retried task of the same run refreshes the expiry, keeps acquired_at.
    clock.advance(60)
    store.acquire_lock(FLOW, "run-1", ttl_seconds=600)
    info = store.lock_info(FLOW)
    assert info is not None
    assert (info.run_id, info.acquired_at, info.expires_at) == ("run-1", T0, T0 + timedelta(seconds=660))

    with pytest.raises(FlowLockedError) as refused:
        store.acquire_lock(FLOW, "run-2", ttl_seconds=600)
    assert str(refused.value) == (
        "flow primary->backup is locked by run run-1 since 2030-01-02T03:04:05+00:00; the lock expires at "
        "2030-01-02T03:15:05+00:00. Run run-2 did not start. If run run-1 is still going, wait for it to "
        "finish. If it is dead, release its lock with: python -m mirrorflow.store release-lock "
        "--flow 'primary->backup'"
    )
    assert store.lock_holder(FLOW) == "run-1"
    # Other flows are independent.
    store.acquire_lock("other->backup", "run-2", ttl_seconds=600)
    assert store.lock_holder("other->backup") == "run-2"


def test_expired_lock_is_taken_over(store: OffsetsStore, clock: FakeClock, db_url: str) -> None:
    store.acquire_lock(FLOW, "run-1", ttl_seconds=100)
    clock.advance(99)
    with pytest.raises(FlowLockedError):
        store.acquire_lock(FLOW, "run-2", ttl_seconds=100)
    clock.advance(1)  # expires_at reached
    store.acquire_lock(FLOW, "run-2", ttl_seconds=100)
    assert store.lock_holder(FLOW) == "run-2"
    assert _rows(db_url, "mirror_locks") == [
        (FLOW, "run-2", T0 + timedelta(seconds=100), T0 + timedelta(seconds=200))
    ]
    # The run that lost its lock can neither release nor retake it while the new holder is live.
    assert store.release_lock(FLOW, "run-1") is False
    with pytest.raises(FlowLockedError):
        store.acquire_lock(FLOW, "run-1", ttl_seconds=100)


def test_a_run_waits_for_a_held_lock_up_to_its_bound(store: OffsetsStore, clock: FakeClock) -> None:
    store.acquire_lock(FLOW, "run-1", ttl_seconds=3600)
    naps: list[float] = []

    def nap(seconds: float) -> None:
        naps.append(seconds)
        clock.advance(int(seconds))

    with pytest.raises(FlowLockedError, match="locked by run run-1"):
        store.acquire_lock(FLOW, "run-2", ttl_seconds=100, wait_seconds=3, sleep=nap)
    assert naps == [1.0, 1.0, 1.0]  # looked again every second, for 3 s
    assert store.lock_holder(FLOW) == "run-1"

    def release_on_second_nap(seconds: float) -> None:
        nap(seconds)
        if len(naps) == 5:
            store.release_lock(FLOW, "run-1")

    store.acquire_lock(FLOW, "run-2", ttl_seconds=100, wait_seconds=60, sleep=release_on_second_nap)
    assert naps == [1.0] * 5
    assert store.lock_holder(FLOW) == "run-2"


def test_release_only_by_holder(store: OffsetsStore) -> None:
    assert store.release_lock(FLOW, "run-1") is False
    store.acquire_lock(FLOW, "run-1", ttl_seconds=600)
    assert store.release_lock(FLOW, "run-2") is False
    assert store.lock_holder(FLOW) == "run-1"
    assert store.release_lock(FLOW, "run-1") is True
    assert store.lock_holder(FLOW) is None
    assert store.release_lock(FLOW, "run-1") is False
    store.acquire_lock(FLOW, "run-2", ttl_seconds=600)
    assert store.lock_holder(FLOW) == "run-2"


def test_ttl_must_be_positive(store: OffsetsStore) -> None:
    with pytest.raises(ValueError, match="ttl_seconds must be positive, got 0"):
        store.acquire_lock(FLOW, "run-1", ttl_seconds=0)


def _at_once(worker: Callable[..., str], meet_before: str, *calls: tuple[Any, ...]) -> list[str]:
    """Run ``worker(*call, barrier)`` for each call in a process of its own (spawned: it inherits no
    connection) and return each call's outcome, in order.

    Workers wait on the barrier right before the step they race on, so they reach the database at
    the same moment. Inside that step, each waits (up to a second) at its first statement starting
    with ``meet_before`` for the others to get there too: where the database lets them in together,
    they overlap there for sure; where it keeps the others out until the first one's transaction
    ends, the wait times out and each goes on alone.
    """
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(len(calls))
    results = ctx.Queue()
    procs = [
        ctx.Process(target=_report, args=(index, worker, call, barrier, meet_before, results), daemon=True)
        for index, call in enumerate(calls)
    ]
    for proc in procs:
        proc.start()
    outcomes = dict(results.get(timeout=120) for _ in procs)
    for proc in procs:
        proc.join(timeout=60)
        assert proc.exitcode == 0
    return [outcomes[index] for index in range(len(calls))]


def _report(
    index: int,
    worker: Callable[..., str],
    call: tuple[Any, ...],
    barrier: Any,
    meet_before: str,
    results: Any,
) -> None:
    met = False

    def meet(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        nonlocal met
        if not met and statement.startswith(meet_before):
            met = True
            with contextlib.suppress(threading.BrokenBarrierError):
                barrier.wait(timeout=1)

    event.listen(Engine, "before_cursor_execute", meet)
    try:
        outcome = worker(*call, barrier)
    except BaseException as error:  # reported to the parent, which fails the test
        outcome = f"error:{type(error).__name__}:{error}"
    results.put((index, outcome))


def _acquire(db_url: str, run_id: str, barrier: Any) -> str:
    with OffsetsStore(db_url) as store:
        barrier.wait(timeout=60)
        try:
            store.acquire_lock(FLOW, run_id, ttl_seconds=600)
        except FlowLockedError as error:
            return f"locked:{error}"
        return "won"


def _commit(db_url: str, run_id: str, batches: list[Batch], barrier: Any) -> str:
    with OffsetsStore(db_url, clock=FakeClock(LATER)) as store:
        barrier.wait(timeout=60)
        try:
            return f"committed:{store.commit(FLOW, run_id, batches)}"
        except CommitConflictError as error:
            return f"conflict:{error}"


@pytest.mark.parametrize("schema_exists", [False, True])
def test_two_processes_race_for_the_lock_exactly_one_wins(db_url: str, schema_exists: bool) -> None:
    if schema_exists:
        OffsetsStore(db_url).progress(FLOW)
    # On PostgreSQL both find no lock row and meet at inserting one: the primary key decides. SQLite
    # lets one writer in at a time.
    first, second = _at_once(_acquire, "INSERT INTO mirror_locks", (db_url, "run-1"), (db_url, "run-2"))
    outcomes = {"run-1": first, "run-2": second}
    winners = [run for run, outcome in outcomes.items() if outcome == "won"]
    assert len(winners) == 1, outcomes
    (loser,) = set(outcomes) - set(winners)
    assert outcomes[loser].startswith(f"locked:flow primary->backup is locked by run {winners[0]} since ")
    assert OffsetsStore(db_url).lock_holder(FLOW) == winners[0]


# ---------------------------------------------------------------------------------------------- anchor


def test_anchor_inserts_new_partitions_and_never_overwrites(store: OffsetsStore, db_url: str) -> None:
    store.acquire_lock(FLOW, "run-1", ttl_seconds=600)
    store.anchor(
        FLOW, "run-1", [PartitionProgress("orders", 0, 10, 100), PartitionProgress("orders", 1, 0, 0)]
    )
    store.anchor(
        FLOW,
        "run-1",
        [PartitionProgress("orders", 0, 55, 555), PartitionProgress("payments", 0, 7, 3)],
    )
    assert store.progress(FLOW) == {
        ("orders", 0): PartitionProgress("orders", 0, 10, 100),
        ("orders", 1): PartitionProgress("orders", 1, 0, 0),
        ("payments", 0): PartitionProgress("payments", 0, 7, 3),
    }
    assert store.progress("other->backup") == {}
    assert _rows(db_url, "mirror_progress") == [
        (FLOW, "orders", 0, 10, 100, "run-1", T0),
        (FLOW, "orders", 1, 0, 0, "run-1", T0),
        (FLOW, "payments", 0, 7, 3, "run-1", T0),
    ]


def test_anchor_requires_the_lock(store: OffsetsStore) -> None:
    with pytest.raises(
        CommitConflictError, match="run run-1 cannot anchor: it does not hold the flow's lock"
    ):
        store.anchor(FLOW, "run-1", [PartitionProgress("orders", 0, 10, 100)])
    assert store.progress(FLOW) == {}


# ---------------------------------------------------------------------------------------------- commit


def _anchored(store: OffsetsStore, run_id: str = "run-1") -> None:
    store.acquire_lock(FLOW, run_id, ttl_seconds=600)
    store.anchor(
        FLOW, run_id, [PartitionProgress("orders", 0, 10, 100), PartitionProgress("orders", 1, 0, 50)]
    )


def test_a_commit_records_failed_partitions_and_a_later_commit_of_one_clears_it(
    store: OffsetsStore, clock: FakeClock
) -> None:
    _anchored(store)
    failure = PartitionFailure("TransformError", "transform parse failed on orders-0 offset 12")
    one, other = (FailedPartition("orders", p, "primary.orders", failure) for p in (0, 1))

    store.commit(FLOW, "run-1", [], failed=[one, other])
    clock.advance(30)
    # The next run copies partition 0; partition 1 fails again, with that run's error.
    store.commit(FLOW, "run-1", [_batch()], failed=[other])

    assert failed_partitions(store, FLOW) == [
        PartitionErrorRecord(
            "orders", 1, "run-1", "TransformError", failure.message, T0 + timedelta(seconds=30)
        )
    ]


def test_commit_moves_progress_and_logs_batches(store: OffsetsStore, clock: FakeClock, db_url: str) -> None:
    _anchored(store)
    clock.advance(30)
    b0 = _batch()
    # Partition 1's first record lands past a marker of the copy's transaction: a target gap.
    b1 = _batch(partition=1, source=(0, 5), target=(50, 56), sync_points=(), target_gaps=((50, 51),))
    assert store.commit(FLOW, "run-1", [b0, b1]) == 2
    assert store.progress(FLOW) == {
        ("orders", 0): PartitionProgress("orders", 0, 20, 108),
        ("orders", 1): PartitionProgress("orders", 1, 5, 56),
    }
    committed_at = T0 + timedelta(seconds=30)
    assert store.batches(FLOW) == [
        CommittedBatch(
            topic="orders",
            partition=0,
            remote_topic="primary.orders",
            source_start=10,
            source_end=20,
            target_start=100,
            target_end=108,
            records=8,
            bytes=1000,
            sync_points=((10, 100), (13, 102)),
            flow=FLOW,
            run_id="run-1",
            committed_at=committed_at,
        ),
        CommittedBatch(
            topic="orders",
            partition=1,
            remote_topic="primary.orders",
            source_start=0,
            source_end=5,
            target_start=50,
            target_end=56,
            records=5,
            bytes=1000,
            sync_points=(),
            target_gaps=((50, 51),),
            flow=FLOW,
            run_id="run-1",
            committed_at=committed_at,
        ),
    ]
    assert store.batches(FLOW)[0].as_batch() == b0
    assert [c.as_batch() for c in store.batches(FLOW, topic="orders", partition=1)] == [b1]
    assert store.batches(FLOW, topic="payments") == []
    assert [row[1:] for row in _rows(db_url, "mirror_batches")] == [
        (FLOW, "run-1", "orders", 0, "primary.orders", 10, 20, 100, 108, 8, 1000, "[[10,100],[13,102]]",
         committed_at, "[]"),
        (FLOW, "run-1", "orders", 1, "primary.orders", 0, 5, 50, 56, 5, 1000, "[]", committed_at,
         "[[50,51]]"),
    ]  # fmt: skip

    # The next run resumes from there; the log keeps both batches of partition 0 in offset order.
    store.release_lock(FLOW, "run-1")
    store.acquire_lock(FLOW, "run-2", ttl_seconds=600)
    b2 = _batch(source=(20, 30), target=(108, 118), sync_points=())
    assert store.commit(FLOW, "run-2", [b2]) == 1
    assert store.progress(FLOW)[("orders", 0)] == PartitionProgress("orders", 0, 30, 118)
    assert [(c.run_id, c.source_start, c.source_end) for c in store.batches(FLOW, "orders", 0)] == [
        ("run-1", 10, 20),
        ("run-2", 20, 30),
    ]


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
    store.release_lock(FLOW, "window")
    with pytest.raises(CommitConflictError, match="cannot coalesce its batch log"):
        store.coalesce_batches(FLOW, "window", {})

    # The next window's rows merge with the row they continue: one row per partition and stretch.
    store.acquire_lock(FLOW, "next", ttl_seconds=600)
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
    store.release_lock(FLOW, "window")
    store.acquire_lock(FLOW, "next", ttl_seconds=600)
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
    store.release_lock(FLOW, "run-1")
    store.acquire_lock(FLOW, "run-2", ttl_seconds=600)
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
    store.release_lock(FLOW, "run-2")
    store.acquire_lock(FLOW, "run-3", ttl_seconds=600)
    store.commit(FLOW, "run-3", [], log_starts={("orders", 1): 8})
    assert store.gaps(FLOW) == []
    translator = OffsetTranslator(b.as_batch() for b in store.batches(FLOW, partition=1))
    assert [translator.translate(u) for u in (7, 8, 9, 10)] == [None, 56, 57, 57]
    assert totals(store, FLOW)[("orders", 1)] == (7, 2000)
    store.release_lock(FLOW, "run-3")
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


def test_commit_is_idempotent_on_retry(store: OffsetsStore, clock: FakeClock, db_url: str) -> None:
    _anchored(store)
    b0 = _batch()
    assert store.commit(FLOW, "run-1", [b0]) == 1
    before = (_rows(db_url, "mirror_progress"), _rows(db_url, "mirror_batches"))
    clock.advance(5)
    # A retried commit task: the first batch was committed, the second is new.
    b1 = _batch(partition=1, source=(0, 5), target=(50, 55), sync_points=())
    assert store.commit(FLOW, "run-1", [b0, b1]) == 1
    assert store.commit(FLOW, "run-1", [b0, b1]) == 0
    assert _rows(db_url, "mirror_progress")[0] == before[0][0]
    assert _rows(db_url, "mirror_batches")[0] == before[1][0]
    assert store.progress(FLOW) == {
        ("orders", 0): PartitionProgress("orders", 0, 20, 108),
        ("orders", 1): PartitionProgress("orders", 1, 5, 55),
    }
    assert len(store.batches(FLOW)) == 2


def test_run_metrics_are_committed_with_the_batches_once(store: OffsetsStore, db_url: str) -> None:
    _anchored(store)
    wrote = PartitionReport(
        "orders", 0, "primary.orders", records=8, skipped=2, bytes=1000, lag=4,
        record_age=Stats(6, 100, 900, 2400, 100), replication_latency=Stats(6, 150, 990, 3000, 150),
        write_ms=40,
    )  # fmt: skip
    resumed = PartitionReport("orders", 1, "primary.orders", records=5, skipped=5, bytes=1000, lag=0)
    b1 = _batch(partition=1, source=(0, 5), target=(50, 55), sync_points=())

    store.commit(FLOW, "run-1", [_batch(), b1], [wrote, resumed])
    store.commit(FLOW, "run-1", [_batch(), b1], [wrote, resumed])  # a retried commit adds nothing

    assert store.partition_metrics(FLOW) == [wrote, resumed]
    # Only partition 0 had records written (and so measured) by this run.
    assert store.latest_writes(FLOW) == {("orders", 0): wrote}
    assert totals(store, FLOW) == {("orders", 0): (8, 1000), ("orders", 1): (5, 1000)}

    store.release_lock(FLOW, "run-1")
    store.acquire_lock(FLOW, "run-2", ttl_seconds=600)
    later = PartitionReport(
        "orders", 0, "primary.orders", records=10, bytes=500, lag=0,
        record_age=Stats(10, 5, 50, 250, 5), replication_latency=Stats(10, 9, 60, 300, 9), write_ms=20,
    )  # fmt: skip
    store.commit(FLOW, "run-2", [_batch(source=(20, 30), target=(108, 118), sync_points=())], [later])

    assert store.partition_metrics(FLOW, run_id="run-2") == [later]
    assert store.latest_writes(FLOW) == {("orders", 0): later}
    assert totals(store, FLOW) == {("orders", 0): (18, 2000), ("orders", 1): (5, 1000)}
    assert totals(store, "backup->primary") == {}


def test_same_start_with_other_values_or_run_conflicts(store: OffsetsStore, db_url: str) -> None:
    _anchored(store)
    store.commit(FLOW, "run-1", [_batch()])
    before = (_rows(db_url, "mirror_progress"), _rows(db_url, "mirror_batches"))
    other = _batch(source=(10, 21), target=(100, 109))
    with pytest.raises(CommitConflictError) as info:
        store.commit(FLOW, "run-1", [other])
    assert str(info.value).startswith(
        "flow primary->backup: partition orders-0: a batch from source offset 10 was already committed by "
        "run run-1 at 2030-01-02T03:04:05+00:00 as source [10, 20) -> primary.orders target [100, 108), "
        "8 records, 1000 bytes, 2 sync points; run run-1 now commits source [10, 21)"
    )
    # Identical values but another run: not a retry of the same commit.
    store.release_lock(FLOW, "run-1")
    store.acquire_lock(FLOW, "run-2", ttl_seconds=600)
    with pytest.raises(CommitConflictError, match="already committed by run run-1"):
        store.commit(FLOW, "run-2", [_batch()])
    assert (_rows(db_url, "mirror_progress"), _rows(db_url, "mirror_batches")) == before


def test_stale_start_rolls_back_the_whole_commit(store: OffsetsStore, db_url: str) -> None:
    _anchored(store)
    store.commit(FLOW, "run-1", [_batch(partition=1, source=(0, 5), target=(50, 55), sync_points=())])
    before = {t: _rows(db_url, t) for t in ("mirror_progress", "mirror_batches", "mirror_locks")}
    good = _batch()  # partition 0 at (10, 100): matches
    stale = _batch(partition=1, source=(3, 7), target=(53, 57), sync_points=())  # progress is (5, 55)
    with pytest.raises(CommitConflictError) as info:
        store.commit(FLOW, "run-1", [good, stale])
    assert str(info.value) == (
        "flow primary->backup: partition orders-1: run run-1 expected progress at (source 3, target 53) "
        "but it is at (source 5, target 55), last written by run run-1. Nothing was committed; re-run "
        "the flow to plan from the committed position."
    )
    assert {t: _rows(db_url, t) for t in before} == before
    assert store.progress(FLOW)[("orders", 0)] == PartitionProgress("orders", 0, 10, 100)


def test_target_position_is_compared_too(store: OffsetsStore, db_url: str) -> None:
    _anchored(store)
    with pytest.raises(
        CommitConflictError, match=r"expected progress at \(source 10, target 99\) but it is at "
    ):
        store.commit(FLOW, "run-1", [_batch(target=(99, 107), sync_points=())])
    assert _rows(db_url, "mirror_batches") == []


def test_commit_without_anchor_conflicts(store: OffsetsStore, db_url: str) -> None:
    store.acquire_lock(FLOW, "run-1", ttl_seconds=600)
    with pytest.raises(CommitConflictError, match=r"orders-0: .* has no progress: its starting"):
        store.commit(FLOW, "run-1", [_batch()])
    assert _rows(db_url, "mirror_batches") == []


def test_commit_without_the_lock_raises(store: OffsetsStore, clock: FakeClock, db_url: str) -> None:
    _anchored(store)
    store.release_lock(FLOW, "run-1")
    with pytest.raises(CommitConflictError) as info:
        store.commit(FLOW, "run-1", [_batch()])
    assert str(info.value) == (
        "flow primary->backup: run run-1 cannot commit: it does not hold the flow's lock (nobody holds "
        "it); the lock was released, or expired and was taken over by another run. Nothing was written. "
        "Re-run the flow."
    )
    # Lock expired and taken over by another run: the old run's commit is refused.
    store.acquire_lock(FLOW, "run-1", ttl_seconds=10)
    clock.advance(10)
    store.acquire_lock(FLOW, "run-2", ttl_seconds=600)
    with pytest.raises(CommitConflictError, match=r"\(run run-2 holds it since 2030-01-02T03:04:15\+00:00\)"):
        store.commit(FLOW, "run-1", [_batch()])
    assert _rows(db_url, "mirror_batches") == []
    assert store.progress(FLOW)[("orders", 0)] == PartitionProgress("orders", 0, 10, 100)


def test_expired_but_not_taken_over_lock_still_commits(store: OffsetsStore, clock: FakeClock) -> None:
    store.acquire_lock(FLOW, "run-1", ttl_seconds=10)
    store.anchor(FLOW, "run-1", [PartitionProgress("orders", 0, 10, 100)])
    clock.advance(3600)
    assert store.commit(FLOW, "run-1", [_batch()]) == 1


# ------------------------------------------------------------------------ racing and crashing processes


@pytest.mark.parametrize("replanned", [False, True], ids=["same-batches", "other-batches"])
def test_two_attempts_of_a_run_commit_at_once_each_batch_is_logged_once(
    store: OffsetsStore, db_url: str, replanned: bool
) -> None:
    # A retried commit task of run-1 while its first attempt is still going (a zombie worker).
    _anchored(store)
    b1 = _batch(partition=1, source=(0, 5), target=(50, 55), sync_points=())
    attempts = [[_batch(), b1], [_batch(source=(10, 21), target=(100, 109)) if replanned else _batch(), b1]]

    # They would meet past the lock check, at the look-up of already committed batches: the lock row
    # keeps the second out until the first has committed.
    outcomes = _at_once(_commit, "SELECT mirror_batches.", *((db_url, "run-1", b) for b in attempts))

    assert "committed:2" in outcomes, outcomes
    winner = outcomes.index("committed:2")
    loser = outcomes[1 - winner]
    if replanned:
        assert loser.startswith(
            "conflict:flow primary->backup: partition orders-0: a batch from source offset 10 was already "
            "committed by run run-1 at 2030-01-02T04:04:05+00:00 as "
        ), outcomes
    else:
        assert loser == "committed:0", outcomes  # it found its batches committed: nothing to do
    won = attempts[winner]
    assert store.batches(FLOW) == [
        CommittedBatch(**b.__dict__, flow=FLOW, run_id="run-1", committed_at=LATER) for b in won
    ]
    assert _rows(db_url, "mirror_progress") == [
        (FLOW, "orders", 0, won[0].source_end, won[0].target_end, "run-1", LATER),
        (FLOW, "orders", 1, 5, 55, "run-1", LATER),
    ]


def test_after_a_takeover_only_the_new_holder_commits(
    store: OffsetsStore, clock: FakeClock, db_url: str
) -> None:
    _anchored(store, "run-1")
    clock.advance(600)
    store.acquire_lock(FLOW, "run-2", ttl_seconds=600)  # run-1's lock expired: run-2 takes over
    # Both planned the same batch from the same position and commit it at the same moment.
    outcomes = _at_once(
        _commit, "SELECT mirror_batches.", (db_url, "run-1", [_batch()]), (db_url, "run-2", [_batch()])
    )

    assert outcomes == [
        "conflict:flow primary->backup: run run-1 cannot commit: it does not hold the flow's lock (run "
        "run-2 holds it since 2030-01-02T03:14:05+00:00); the lock was released, or expired and was taken "
        "over by another run. Nothing was written. Re-run the flow.",
        "committed:1",
    ]
    assert store.batches(FLOW) == [
        CommittedBatch(**_batch().__dict__, flow=FLOW, run_id="run-2", committed_at=LATER)
    ]
    assert _rows(db_url, "mirror_progress") == [
        (FLOW, "orders", 0, 20, 108, "run-2", LATER),
        (FLOW, "orders", 1, 0, 50, "run-1", T0),
    ]


def test_require_lock_names_the_run_that_lost_it(store: OffsetsStore, clock: FakeClock) -> None:
    store.acquire_lock(FLOW, "run-1", ttl_seconds=600)
    store.require_lock(FLOW, "run-1", "plan")
    clock.advance(600)
    store.acquire_lock(FLOW, "run-2", ttl_seconds=600)

    with pytest.raises(CommitConflictError, match=r"run run-1 cannot plan: .*\(run run-2 holds it since"):
        store.require_lock(FLOW, "run-1", "plan")
    store.release_lock(FLOW, "run-2")
    with pytest.raises(CommitConflictError, match=r"run run-2 cannot plan: .*\(nobody holds it\)"):
        store.require_lock(FLOW, "run-2", "plan")


def _crash_in_commit(db_url: str, inside: Any) -> None:
    """Run-1 takes the lock, anchors and commits; its commit stops for good once it has moved
    progress and is about to log the batch, and waits there to be killed."""

    def stop_before_the_batch_log(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if statement.startswith("INSERT INTO mirror_batches"):
            inside.set()
            time.sleep(600)

    event.listen(Engine, "before_cursor_execute", stop_before_the_batch_log)
    store = OffsetsStore(db_url, clock=FakeClock(T0))
    _anchored(store, "run-1")
    store.commit(FLOW, "run-1", [_batch()])


def test_holder_killed_in_its_commit_writes_nothing_and_its_lock_expires(
    store: OffsetsStore, clock: FakeClock, db_url: str
) -> None:
    ctx = multiprocessing.get_context("spawn")
    inside = ctx.Event()
    holder = ctx.Process(target=_crash_in_commit, args=(db_url, inside), daemon=True)
    holder.start()
    try:
        assert inside.wait(timeout=60), f"run-1 never reached its batch insert (exit code {holder.exitcode})"
    finally:
        holder.kill()
        holder.join(timeout=60)
    assert holder.exitcode == -9

    # Its open transaction died with it: progress is where run-1 anchored it, nothing is logged.
    anchored_rows = [(FLOW, "orders", 0, 10, 100, "run-1", T0), (FLOW, "orders", 1, 0, 50, "run-1", T0)]
    assert _rows(db_url, "mirror_progress") == anchored_rows
    assert _rows(db_url, "mirror_batches") == []
    # Its lock stays until it expires; then another run takes it over and commits the same range.
    assert store.lock_info(FLOW) == LockInfo(FLOW, "run-1", T0, T0 + timedelta(seconds=600))
    clock.advance(599)
    with pytest.raises(FlowLockedError, match="locked by run run-1 since 2030-01-02T03:04:05"):
        store.acquire_lock(FLOW, "run-2", ttl_seconds=600)
    clock.advance(1)
    store.acquire_lock(FLOW, "run-2", ttl_seconds=600)
    assert store.commit(FLOW, "run-2", [_batch()]) == 1

    takeover = T0 + timedelta(seconds=600)
    assert _rows(db_url, "mirror_locks") == [(FLOW, "run-2", takeover, takeover + timedelta(seconds=600))]
    assert [row[1:] for row in _rows(db_url, "mirror_batches")] == [
        (FLOW, "run-2", "orders", 0, "primary.orders", 10, 20, 100, 108, 8, 1000, "[[10,100],[13,102]]",
         takeover, "[]"),
    ]  # fmt: skip
    assert _rows(db_url, "mirror_progress") == [
        (FLOW, "orders", 0, 20, 108, "run-2", takeover),
        anchored_rows[1],
    ]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"source_end": 10, "records": 0, "target_end": 100, "sync_points": ()},
            "empty or negative source range",
        ),
        ({"target_end": 99, "records": -1}, r"target range \[100, 99\) is negative"),
        ({"records": 7}, r"records=7 but the target range \[100, 108\) holds 8"),
        ({"target_end": 111, "records": 11}, "records=11 exceeds the 10 offsets of the source range"),
        ({"sync_points": ((20, 100),)}, r"sync point \(20, 100\) lies outside"),
        ({"sync_points": ((13, 102), (12, 103))}, r"not strictly increasing at \(12, 103\)"),
        ({"bytes": -1}, "negative bytes -1"),
        ({"target_gaps": ((105, 108),), "records": 5}, r"target gap \(105, 108\) is not a stretch"),
        ({"target_gaps": ((103, 105), (104, 106)), "records": 5}, r"target gap \(104, 106\) is not"),
        ({"target_gaps": ((102, 103),), "records": 7}, r"sync point \(13, 102\) lies in a target gap"),
    ],
)
def test_insane_batches_are_refused(
    store: OffsetsStore, db_url: str, changes: dict[str, Any], message: str
) -> None:
    _anchored(store)
    bad = Batch(**{**_batch().__dict__, **changes})
    with pytest.raises(PlanError, match=message):
        store.commit(
            FLOW, "run-1", [_batch(partition=1, source=(0, 5), target=(50, 55), sync_points=()), bad]
        )
    assert _rows(db_url, "mirror_batches") == []


def test_same_batch_twice_in_one_commit_is_refused(store: OffsetsStore) -> None:
    _anchored(store)
    with pytest.raises(PlanError, match="appears twice in one commit"):
        store.commit(FLOW, "run-1", [_batch(), _batch()])


# ------------------------------------------------------------------------------------------------- CLI


def store_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mirrorflow.store", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_cli_show_and_release_lock(db_url: str, clock: FakeClock) -> None:
    with OffsetsStore(db_url, clock=clock) as store:
        _anchored(store, "run-7")
        store.commit(FLOW, "run-7", [_batch()])

    shown = store_cli("show", "--flow", FLOW, "--db", db_url)
    assert (shown.returncode, shown.stderr) == (0, "")
    assert shown.stdout == (
        "flow primary->backup: locked by run run-7 since 2030-01-02T03:04:05+00:00, "
        "expires 2030-01-02T03:14:05+00:00\n"
        "topic   partition  next_source_offset  next_target_offset  last_run  updated_at\n"
        "orders  0          20                  108                 run-7     2030-01-02T03:04:05+00:00\n"
        "orders  1          0                   50                  run-7     2030-01-02T03:04:05+00:00\n"
    )

    released = store_cli("release-lock", "--flow", FLOW, "--db", db_url)
    assert (released.returncode, released.stderr) == (0, "")
    assert released.stdout == (
        "released the lock of flow primary->backup held by run run-7 since 2030-01-02T03:04:05+00:00 "
        "(expiring 2030-01-02T03:14:05+00:00)\n"
    )
    assert OffsetsStore(db_url).lock_holder(FLOW) is None

    again = store_cli("release-lock", "--flow", FLOW, "--db", db_url)
    assert (again.returncode, again.stdout) == (0, "flow primary->backup is not locked\n")
    empty = store_cli("show", "--flow", "other->backup", "--db", db_url)
    assert (empty.returncode, empty.stdout) == (0, "flow other->backup: not locked\nno progress\n")


def test_recorded_checkpoints_replace_the_previous_per_group_and_partition(
    store: OffsetsStore, db_url: str
) -> None:
    first = GroupPosition("billing", "orders", 0, "primary.orders", 10, 8, "m")
    other = GroupPosition("billing", "orders", 1, "primary.orders", 3, 3)
    record_checkpoints(store, FLOW, [first, other], 40)
    moved = GroupPosition("billing", "orders", 0, "primary.orders", 15, 13, "m2")

    record_checkpoints(store, FLOW, [moved], 25)
    record_checkpoints(store, FLOW, [], 0)

    assert checkpoints(store, FLOW) == {("billing", "orders", 0): moved, ("billing", "orders", 1): other}
    assert checkpoints(store, "backup->primary") == {}
    # Replaced, not appended: one row per (flow, group, topic, partition).
    assert [(r[1], r[3], r[5]) for r in _rows(db_url, "mirror_checkpoints")] == [
        ("billing", 0, 15),
        ("billing", 1, 3),
    ]
    # Every emission is logged with its latency; the metrics show each partition's newest.
    assert [(r[2], r[4], r[6], r[7], r[8]) for r in _rows(db_url, "mirror_checkpoint_metrics")] == [
        ("billing", 0, 10, 8, 40),
        ("billing", 1, 3, 3, 40),
        ("billing", 0, 15, 13, 25),
    ]
    assert latest_checkpoint_metrics(store, FLOW) == [
        CheckpointMetrics("billing", "primary.orders", 0, 25),
        CheckpointMetrics("billing", "primary.orders", 1, 40),
    ]


def test_a_runs_documents_are_replaced_whole_with_those_they_supersede(store: OffsetsStore) -> None:
    save_document(store, FLOW, "run-1", "plan", "plan v1")
    save_document(store, FLOW, "run-1", "copy_failed", "failed")
    save_document(store, "other->flow", "run-1", "result", "other flow's result")

    save_document(store, FLOW, "run-1", "result", "result v1", supersedes=["copy_failed"])
    save_document(store, FLOW, "run-1", "plan", "plan v2")

    assert find_document(store, FLOW, "run-1", "plan") == "plan v2"
    assert find_document(store, FLOW, "run-1", "result") == "result v1"
    assert find_document(store, FLOW, "run-1", "copy_failed") is None
    assert find_document(store, FLOW, "run-2", "plan") is None
    assert find_document(store, "other->flow", "run-1", "result") == "other flow's result"
    with pytest.raises(PlanError) as missing:
        read_document(store, FLOW, "run-2", "plan", "plan")
    assert str(missing.value) == (
        "the plan of run run-2 of flow primary->backup in the offsets database does not exist; re-run the "
        "task that writes it"
    )


def test_a_flow_keeps_the_documents_of_its_newest_runs_and_of_the_run_releasing(
    store: OffsetsStore, clock: FakeClock
) -> None:
    for n in range(6):
        save_document(store, FLOW, f"run-{n}", "plan", f"plan {n}")
        clock.advance(1)
    save_document(store, FLOW, "run-0", "result", "run-0 wrote last")  # run-0 is now the newest
    save_document(store, "other->flow", "run-9", "plan", "kept")

    assert prune_documents(store, FLOW, spare="run-1", keep=3) == 2  # run-2 and run-3

    assert [r for r, _, _ in recent_documents(store, FLOW, "plan", 10)] == [
        "run-5",
        "run-4",
        "run-1",
        "run-0",
    ]
    assert [(r, at, body) for r, at, body in recent_documents(store, FLOW, "plan", 1)] == [
        ("run-5", T0 + timedelta(seconds=5), "plan 5")
    ]
    assert find_document(store, FLOW, "run-0", "result") == "run-0 wrote last"
    assert prune_documents(store, FLOW, spare="run-5", keep=3) == 1  # run-1, no longer spared
    assert find_document(store, "other->flow", "run-9", "plan") == "kept"
