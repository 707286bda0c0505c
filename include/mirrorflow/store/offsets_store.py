"""The offsets table: committed progress, the batch log, the last checkpoint emitted per consumer
group and partition, and the metrics history, in one SQL database (a flow's lock: ``store.flow_lock``).

Works on any SQLAlchemy URL: a SQLite file by default (one machine), PostgreSQL in production.

Invariants:

- A run writes only while it holds its flow's lock (``store.flow_lock``, all the lock's SQL): every
  write of a run locks the lock row first (``check_lock``), so a takeover and a commit serialise on
  it, and whichever comes first wins and the other one sees it.
- Progress moves only in ``commit``, only forward, and only from the exact position the plan started
  from (compare-and-set on both the source and the target offset). ``anchor`` only inserts the
  starting position of a partition that has none yet; it never moves existing progress.
- A commit is one transaction: every batch of it is committed, or none is.
- Every committed batch is in ``mirror_batches``, at most once per (flow, topic, partition,
  source_start); with the source gaps a flow skipped (``mirror_gaps``, source records deleted before
  they were mirrored) they tile the mirrored source ranges without overlap. A gap is committed in
  the same transaction as the batches of its run, moving progress across it by compare-and-set, so
  it is recorded exactly once however often the commit is retried.
- The id of each source topic a flow mirrors is recorded (``mirror_topics``) when the flow first
  sees the topic, with the anchors of its partitions; it is never overwritten (``forget_topic``
  removes it with the rest of the flow's state of the topic).
- A run's partition metrics (``mirror_partition_metrics``) and the recovery point it proves
  (``mirror_recovery``, ``store.recovery_log``) are committed in the same transaction as its batches;
  every emitted checkpoint is logged with its latency (``mirror_checkpoint_metrics``). The history
  goes back ``HISTORY_RETENTION`` (a week), besides the newest rows still read (``prune_history``).

Concurrency: on PostgreSQL (READ COMMITTED) every write transaction first locks the flow's lock row
with ``SELECT ... FOR UPDATE`` and moves progress with ``UPDATE ... WHERE <expected position>``
checking the row count; unique constraints back every insert. On SQLite every write transaction
starts with ``BEGIN IMMEDIATE`` (one writer at a time, across processes) and waits up to a busy
timeout for other writers.

Beside this module in ``mirrorflow.store``: the tables (``tables``), their rows as values and back
(``rows``), the batch and gap logs' row steps (``batch_log``), the checkpoints emitted and their
latencies (``checkpoint_log``), the engine, table creation and outage handling (``database``), the
values reads return besides core's (``read_model``), the status page's aggregates
(``status_reads``) and the command line ``python -m mirrorflow.store`` (``cli``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import asdict
from datetime import datetime

from sqlalchemy import Connection, Engine, delete, func, insert, select

from mirrorflow.core.plan import SourceGap
from mirrorflow.core.progress import (
    Batch,
    CommittedBatch,
    PartitionProgress,
    RecordedGap,
    TopicIdentity,
    as_utc,
    format_time,
)
from mirrorflow.core.recovery_point import HISTORY_RETENTION
from mirrorflow.core.report import FailedPartition, PartitionReport
from mirrorflow.core.topic_partitions import TP
from mirrorflow.errors import FlowLockedError, PlanError
from mirrorflow.store.batch_log import ROW_POINTS_MAX, coalesce_window, commit_step, prune_step
from mirrorflow.store.database import (
    DEFAULT_BUSY_TIMEOUT_SECONDS,
    INSERT_CHUNK,
    WRITE_OPTION,
    DatabaseClock,
    absent_sqlite_file,
    create_store_engine,
    create_tables,
    insert_missing,
    outages_transient,
    redact_url,
)
from mirrorflow.store.flow_lock import check_lock, lock_row
from mirrorflow.store.partition_errors import record_step
from mirrorflow.store.read_model import ProgressRecord
from mirrorflow.store.recovery_log import advance_step
from mirrorflow.store.retention import prune_history_step
from mirrorflow.store.rows import (
    BATCH_LOG,
    GAP_LOG,
    batch_row,
    committed_batch,
    corrupt,
    partition_metrics_row,
    partition_report,
    progress_record,
    progress_row,
    recorded_gap,
)
from mirrorflow.store.tables import (
    batches_table,
    checkpoints_table,
    gaps_table,
    partition_errors_table,
    partition_metrics_table,
    progress_table,
    pruned_table,
    topics_table,
)

__all__ = ["DEFAULT_BUSY_TIMEOUT_SECONDS", "ROW_POINTS_MAX", "OffsetsStore"]


class OffsetsStore:
    """Committed progress and the batch log of every flow, in the database at ``url``.

    The tables are created on first use. ``clock`` (default: the database's, ``DatabaseClock``) stamps
    rows and decides when a lock expires, so hosts whose clocks disagree agree on a lease.
    """

    def __init__(
        self,
        url: str,
        *,
        busy_timeout_seconds: float = DEFAULT_BUSY_TIMEOUT_SECONDS,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self._redacted = redact_url(url)
        self._engine: Engine = create_store_engine(url, self._redacted, busy_timeout_seconds)
        self._clock = clock or DatabaseClock(self._engine, self._redacted)
        self._tables_ready = False
        self._tables_lock = threading.Lock()

    @staticmethod
    def absent(url: str) -> bool:
        """Whether the database at ``url`` is a SQLite file that does not exist yet: opening a store
        on it would create it (``store.database.absent_sqlite_file``)."""
        return absent_sqlite_file(url)

    @property
    def url(self) -> str:
        """The database URL with the password hidden."""
        return self._redacted

    def close(self) -> None:
        self._engine.dispose()

    def __enter__(self) -> OffsetsStore:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # ------------------------------------------------------------------------------------- progress

    def progress(self, flow: str) -> dict[TP, PartitionProgress]:
        """Committed (and anchored) progress of every partition of ``flow``."""
        p = progress_table
        with self._transaction(write=False) as conn:
            rows = conn.execute(
                select(p.c.topic, p.c.partition, p.c.next_source_offset, p.c.next_target_offset)
                .where(p.c.flow == flow)
                .order_by(p.c.topic, p.c.partition)
            ).all()
        for row in rows:
            if row.next_source_offset < 0 or row.next_target_offset < 0:
                raise corrupt(
                    progress_table,
                    flow,
                    row.topic,
                    row.partition,
                    f"negative next source offset {row.next_source_offset} or next target offset "
                    f"{row.next_target_offset}",
                )
        return {
            (row.topic, row.partition): PartitionProgress(
                row.topic, row.partition, row.next_source_offset, row.next_target_offset
            )
            for row in rows
        }

    def progress_records(self, flow: str) -> list[ProgressRecord]:
        """The progress rows of ``flow`` as stored, with their last writer, by topic and partition
        (what ``python -m mirrorflow.store show`` prints); unchecked, unlike ``progress``."""
        p = progress_table
        with self._transaction(write=False) as conn:
            rows = conn.execute(select(p).where(p.c.flow == flow).order_by(p.c.topic, p.c.partition)).all()
        return [progress_record(r._mapping) for r in rows]

    def anchor(
        self,
        flow: str,
        run_id: str,
        entries: Iterable[PartitionProgress],
        topics: Iterable[TopicIdentity] = (),
    ) -> None:
        """Record where brand-new partitions start, before anything is copied for them, and the ids of
        source topics seen for the first time, in one transaction.

        Inserts a progress row for each entry whose partition has none, and a topic row for each
        topic that has none; an existing row is never overwritten. Requires ``flow``'s lock held by
        ``run_id`` (else ``CommitConflictError``).
        """
        wanted: dict[TP, PartitionProgress] = {}
        for entry in entries:
            if entry.next_source_offset < 0 or entry.next_target_offset < 0:
                raise PlanError(f"anchor {entry.topic}-{entry.partition}: negative offset in {entry}")
            key = (entry.topic, entry.partition)
            if key in wanted and wanted[key] != entry:
                raise PlanError(
                    f"anchor {entry.topic}-{entry.partition}: two different positions {wanted[key]} "
                    f"and {entry}"
                )
            wanted[key] = entry
        with self._transaction(write=True) as conn:
            check_lock(conn, flow, run_id, "anchor")
            now = self.now()
            rows = [progress_row(flow, run_id, e, now) for e in wanted.values()]
            insert_missing(conn, progress_table, rows)
            insert_missing(
                conn,
                topics_table,
                [{"flow": flow, **asdict(t), "first_seen_at": now} for t in topics],
            )

    def topic_ids(self, flow: str) -> dict[str, str]:
        """The id of each source topic of ``flow`` as recorded when the flow first saw it."""
        t = topics_table
        with self._transaction(write=False) as conn:
            rows = conn.execute(select(t.c.topic, t.c.topic_id).where(t.c.flow == flow)).all()
        return {row.topic: row.topic_id for row in rows}

    def commit(
        self,
        flow: str,
        run_id: str,
        batches: Sequence[Batch],
        metrics: Sequence[PartitionReport] = (),
        gaps: Sequence[SourceGap] = (),
        *,
        holder: str | None = None,
        mirrored_as_of: datetime | None = None,
        failed: Sequence[FailedPartition] = (),
        log_starts: Mapping[TP, int] | None = None,
    ) -> int:
        """Commit the run's source ``gaps``, ``batches`` and partition ``metrics`` in one transaction,
        with the recovery point they prove (``mirrored_as_of``, see ``core.recovery_point``), and prune the
        older batch log below the source's ``log_starts`` (``batch_log.prune_step``); return how many
        batches were newly committed.

        Requires ``flow``'s lock held by ``holder`` (default ``run_id``: a DR window's micro-batches
        commit under ids of their own while the window's run holds the lock). Each gap, then each
        batch, moves its partition's progress from exactly (``source_start``, ``target_start``) to
        (``source_end``, ``target_end``) and is added to ``mirror_gaps`` or the batch log. One already
        there with identical values, committed by the same run, is skipped (a retried commit).
        Anything else raises ``CommitConflictError`` and commits nothing. The ``failed`` partitions'
        errors replace their earlier ones; the batches' partitions have none any more
        (``store.partition_errors``).
        """
        seen: set[tuple[str, int, int]] = set()
        for batch in batches:
            batch.validate()
            key = (batch.topic, batch.partition, batch.source_start)
            if key in seen:
                raise PlanError(
                    f"batch {batch.topic}-{batch.partition} from source offset {batch.source_start} "
                    "appears twice in one commit"
                )
            seen.add(key)
        with self._transaction(write=True) as conn:
            check_lock(conn, flow, holder or run_id, "commit")
            now = self.now()
            # Gaps first: a partition's batch of this run starts where its gap ends.
            for gap in gaps:
                row = {"flow": flow, "run_id": run_id, **asdict(gap), "recorded_at": now}
                commit_step(conn, GAP_LOG, row)
            committed = 0
            for batch in batches:
                committed += commit_step(conn, BATCH_LOG, batch_row(flow, run_id, batch, now))
            self._record_partition_metrics(conn, flow, run_id, metrics, now)
            record_step(conn, flow, run_id, failed, [(b.topic, b.partition) for b in batches], now)
            if mirrored_as_of is not None:
                advance_step(conn, flow, run_id, mirrored_as_of, now)
            prune_step(conn, flow, log_starts or {}, run_id, now)
            return committed

    def advance_recovery_point(
        self, flow: str, run_id: str, mirrored_as_of: datetime, *, holder: str
    ) -> None:
        """Record the recovery point a micro-batch with nothing to copy proves (``run_id`` planned
        the whole flow and found it caught up) while ``holder`` holds the flow's lock."""
        with self.locked(flow, holder, "record its recovery point") as conn:
            advance_step(conn, flow, run_id, mirrored_as_of, self.now())

    def coalesce_batches(self, flow: str, holder: str, log_starts: Mapping[TP, int]) -> int:
        """Merge the batch-log rows the DR window ``holder`` committed (micro-batch run ids
        ``<holder>#<n>``) into one row per unbroken stretch of each partition
        (``batch_log.coalesce_window``), then prune the log below the source's ``log_starts``
        (``batch_log.prune_step``); requires the lock held by ``holder``. Returns how many rows
        went."""
        with self.locked(flow, holder, "coalesce its batch log") as conn:
            return coalesce_window(conn, flow, holder) + prune_step(conn, flow, log_starts, None, self.now())

    def record_partition_metrics(
        self, flow: str, run_id: str, metrics: Sequence[PartitionReport], *, holder: str
    ) -> None:
        """Add ``metrics`` to the flow's history under ``run_id`` (a DR window records its
        micro-batches' figures summed up, a minute at a time) while ``holder`` holds the lock."""
        with self.locked(flow, holder, "record metrics") as conn:
            self._record_partition_metrics(conn, flow, run_id, metrics, self.now())

    def _record_partition_metrics(
        self, conn: Connection, flow: str, run_id: str, metrics: Sequence[PartitionReport], now: datetime
    ) -> None:
        m = partition_metrics_table
        if not metrics or conn.execute(select(m.c.id).where(m.c.flow == flow, m.c.run_id == run_id)).first():
            return  # none, or written by an earlier attempt of this commit
        rows = [partition_metrics_row(flow, run_id, p, now) for p in metrics]
        for start in range(0, len(rows), INSERT_CHUNK):
            conn.execute(insert(m), rows[start : start + INSERT_CHUNK])

    def prune_history(self, flow: str) -> int:
        """Delete ``flow``'s metrics history older than ``HISTORY_RETENTION`` but the newest rows the
        status page and the metrics files read (``store.retention``); returns how many rows went.
        Deletes nothing a run could still need, so it takes no lock."""
        with self._transaction(write=True) as conn:
            return prune_history_step(conn, flow, self.now() - HISTORY_RETENTION)

    def partition_metrics(self, flow: str, *, run_id: str | None = None) -> list[PartitionReport]:
        """The metrics history of ``flow`` (optionally one run), oldest first."""
        m = partition_metrics_table
        query = select(m).where(m.c.flow == flow)
        if run_id is not None:
            query = query.where(m.c.run_id == run_id)
        with self._transaction(write=False) as conn:
            rows = conn.execute(query.order_by(m.c.id)).all()
        return [partition_report(r._mapping) for r in rows]

    def latest_writes(self, flow: str) -> dict[TP, PartitionReport]:
        """Per partition, the metrics of the last run that wrote records to it."""
        m = partition_metrics_table
        newest = (
            select(func.max(m.c.id))
            .where(m.c.flow == flow, m.c.replication_latency_count > 0)
            .group_by(m.c.topic, m.c.partition)
        )
        with self._transaction(write=False) as conn:
            rows = conn.execute(select(m).where(m.c.id.in_(newest))).all()
        return {(r.topic, r.partition): partition_report(r._mapping) for r in rows}

    def batches(
        self, flow: str, topic: str | None = None, partition: int | None = None
    ) -> list[CommittedBatch]:
        """The batch log of ``flow`` (optionally one topic / partition), by topic, partition, offset."""
        b = batches_table
        query = select(b).where(b.c.flow == flow)
        if topic is not None:
            query = query.where(b.c.topic == topic)
        if partition is not None:
            query = query.where(b.c.partition == partition)
        query = query.order_by(b.c.topic, b.c.partition, b.c.source_start)
        with self._transaction(write=False) as conn:
            rows = conn.execute(query).all()
        return [committed_batch(row._mapping) for row in rows]

    def pruned_from(self, flow: str) -> dict[TP, int]:
        """Per partition whose batch log was pruned (``batch_log.prune_step``), where it began."""
        p = pruned_table
        with self._transaction(write=False) as conn:
            rows = conn.execute(
                select(p.c.topic, p.c.partition, p.c.source_start).where(p.c.flow == flow)
            ).all()
        return {(t, n): int(start) for t, n, start in rows}

    def gaps(self, flow: str, topic: str | None = None, partition: int | None = None) -> list[RecordedGap]:
        """The source gaps ``flow`` skipped (optionally one topic / partition), by topic, partition,
        offset: records deleted from the source before they were mirrored."""
        g = gaps_table
        query = select(g).where(g.c.flow == flow)
        if topic is not None:
            query = query.where(g.c.topic == topic)
        if partition is not None:
            query = query.where(g.c.partition == partition)
        with self._transaction(write=False) as conn:
            rows = conn.execute(query.order_by(g.c.topic, g.c.partition, g.c.source_start)).all()
        return [recorded_gap(r._mapping) for r in rows]

    def forget_topic(self, flow: str, topic: str) -> int:
        """Delete ``flow``'s state of source ``topic``: progress, batch log, gaps, recorded topic id and
        checkpoints (the metrics history stays). The next run mirrors the topic as a new one, from its
        log start to the end of its remote topic. Refused (``FlowLockedError``) while a run holds the
        flow's lock. Returns how many rows were deleted."""
        with self._transaction(write=True) as conn:
            holder = lock_row(conn, flow, for_update=True)
            if holder is not None:
                raise FlowLockedError(
                    f"flow {flow} is locked by run {holder.run_id} since "
                    f"{format_time(holder.acquired_at)}; its state of topic {topic} was not changed. Wait "
                    "for the run to finish, or release the lock of a dead run first (release-lock)."
                )
            tables = (
                progress_table,
                batches_table,
                gaps_table,
                pruned_table,
                topics_table,
                checkpoints_table,
                partition_errors_table,
            )
            return sum(
                conn.execute(delete(t).where(t.c.flow == flow, t.c.topic == topic)).rowcount for t in tables
            )

    # -------------------------------------------------------------------------------------- helpers

    def now(self) -> datetime:
        """The store's clock, in UTC: what it stamps rows with."""
        return as_utc(self._clock())

    @contextmanager
    def locked(self, flow: str, holder: str, action: str) -> Iterator[Connection]:
        """A write transaction holding ``flow``'s lock row, which ``holder`` must hold (else
        ``CommitConflictError`` saying it cannot ``action``); for the store's own modules, as
        ``read``."""
        with self._transaction(write=True) as conn:
            check_lock(conn, flow, holder, action)
            yield conn

    def write(self) -> AbstractContextManager[Connection]:
        """A write transaction that takes no lock, for the store's own modules: only for rows of one
        run that no other run writes (``mirrorflow.store.run_documents``)."""
        return self._transaction(write=True)

    def read(self) -> AbstractContextManager[Connection]:
        """A read transaction over the tables (``mirrorflow.store.tables``) for the store's own
        reports made outside this class (``mirrorflow.store.status_reads``); database outages become
        ``TransientError``. Only for modules of ``mirrorflow.store``: the rest of mirrorflow reads
        plain values through the store's public reads."""
        return self._transaction(write=False)

    @contextmanager
    def _transaction(self, *, write: bool) -> Iterator[Connection]:
        """One transaction; database outages become ``TransientError``."""
        self._ensure_tables()
        with outages_transient(self._redacted), self._engine.connect() as conn:
            conn.execution_options(**{WRITE_OPTION: write})
            with conn.begin():
                yield conn

    def _ensure_tables(self) -> None:
        if self._tables_ready:
            return
        with self._tables_lock:
            if self._tables_ready:
                return
            with outages_transient(self._redacted):
                create_tables(self._engine)
            self._tables_ready = True
