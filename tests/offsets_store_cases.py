"""The offsets table's cases that hold on every backend: the schema, anchors, commits, checkpoints, run
documents, the CLI (the lock's in flow_lock_cases.py, the batch log's in batch_log_cases.py). Not a test
module itself: tests/unit/store/test_offsets_store.py runs them on SQLite files,
tests/integration/test_offsets_store_postgres.py on a real PostgreSQL server (one per session, a
schema per test), each module giving the ``db_url`` fixture, with the same expectations.
"""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import create_engine, inspect, select, text

from mirrorflow.core.metrics import CheckpointMetrics, Stats
from mirrorflow.core.plan import PartitionFailure
from mirrorflow.core.progress import Batch, CommittedBatch, GroupPosition, PartitionProgress
from mirrorflow.core.report import FailedPartition, PartitionReport
from mirrorflow.errors import CommitConflictError, PlanError
from mirrorflow.store.checkpoint_log import checkpoints, latest_checkpoint_metrics, record_checkpoints
from mirrorflow.store.flow_lock import acquire_lock, lock_holder, release_lock
from mirrorflow.store.offsets_store import OffsetsStore
from mirrorflow.store.read_model import PartitionErrorRecord
from mirrorflow.store.run_documents import (
    find_document,
    prune_documents,
    read_document,
    recent_documents,
    save_document,
)
from mirrorflow.store.status_reads import failed_partitions, totals
from mirrorflow.store.tables import metadata

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
        assert lock_holder(again, FLOW) is None


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


# ---------------------------------------------------------------------------------------------- anchor


def test_anchor_inserts_new_partitions_and_never_overwrites(store: OffsetsStore, db_url: str) -> None:
    acquire_lock(store, FLOW, "run-1", ttl_seconds=600)
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
    acquire_lock(store, FLOW, run_id, ttl_seconds=600)
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
    release_lock(store, FLOW, "run-1")
    acquire_lock(store, FLOW, "run-2", ttl_seconds=600)
    b2 = _batch(source=(20, 30), target=(108, 118), sync_points=())
    assert store.commit(FLOW, "run-2", [b2]) == 1
    assert store.progress(FLOW)[("orders", 0)] == PartitionProgress("orders", 0, 30, 118)
    assert [(c.run_id, c.source_start, c.source_end) for c in store.batches(FLOW, "orders", 0)] == [
        ("run-1", 10, 20),
        ("run-2", 20, 30),
    ]


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

    release_lock(store, FLOW, "run-1")
    acquire_lock(store, FLOW, "run-2", ttl_seconds=600)
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
    release_lock(store, FLOW, "run-1")
    acquire_lock(store, FLOW, "run-2", ttl_seconds=600)
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
    acquire_lock(store, FLOW, "run-1", ttl_seconds=600)
    with pytest.raises(CommitConflictError, match=r"orders-0: .* has no progress: its starting"):
        store.commit(FLOW, "run-1", [_batch()])
    assert _rows(db_url, "mirror_batches") == []


def test_commit_without_the_lock_raises(store: OffsetsStore, clock: FakeClock, db_url: str) -> None:
    _anchored(store)
    release_lock(store, FLOW, "run-1")
    with pytest.raises(CommitConflictError) as info:
        store.commit(FLOW, "run-1", [_batch()])
    assert str(info.value) == (
        "flow primary->backup: run run-1 cannot commit: it does not hold the flow's lock (nobody holds "
        "it); the lock was released, or expired and was taken over by another run. Nothing was written. "
        "Re-run the flow."
    )
    # Lock expired and taken over by another run: the old run's commit is refused.
    acquire_lock(store, FLOW, "run-1", ttl_seconds=10)
    clock.advance(10)
    acquire_lock(store, FLOW, "run-2", ttl_seconds=600)
    with pytest.raises(CommitConflictError, match=r"\(run run-2 holds it since 2030-01-02T03:04:15\+00:00\)"):
        store.commit(FLOW, "run-1", [_batch()])
    assert _rows(db_url, "mirror_batches") == []
    assert store.progress(FLOW)[("orders", 0)] == PartitionProgress("orders", 0, 10, 100)


def test_expired_but_not_taken_over_lock_still_commits(store: OffsetsStore, clock: FakeClock) -> None:
    acquire_lock(store, FLOW, "run-1", ttl_seconds=10)
    store.anchor(FLOW, "run-1", [PartitionProgress("orders", 0, 10, 100)])
    clock.advance(3600)
    assert store.commit(FLOW, "run-1", [_batch()]) == 1


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
    assert lock_holder(OffsetsStore(db_url), FLOW) is None

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
