"""The offsets table: committed progress, the batch log, the per-flow lock, the last checkpoint
emitted per consumer group and partition, and the metrics history, in one SQL database.

Works on any SQLAlchemy URL: a SQLite file by default (one machine), PostgreSQL in production.

Invariants:

- A flow has at most one lock holder (``mirror_locks`` has one row per flow, keyed by the flow). A
  run takes the lock before planning and keeps it until it has committed; another run can take it
  only once it has expired. An expired lock still belongs to its run until another run takes it over
  or it is released: the takeover and a commit serialise on the lock row, so whichever comes first
  wins and the other one sees it.
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
- A run's partition metrics (``mirror_partition_metrics``) are committed in the same transaction as
  its batches; every emitted checkpoint is logged with its latency (``mirror_checkpoint_metrics``).

Concurrency: on PostgreSQL (READ COMMITTED) every write transaction first locks the flow's lock row
with ``SELECT ... FOR UPDATE`` and moves progress with ``UPDATE ... WHERE <expected position>``
checking the row count; unique constraints back every insert. On SQLite every write transaction
starts with ``BEGIN IMMEDIATE`` (one writer at a time, across processes) and waits up to a busy
timeout for other writers.

Command line (``--db`` defaults to the configured ``offsets_db_url``)::

    python -m mirrorflow.store show --flow 'primary->backup' [--db URL]
    python -m mirrorflow.store release-lock --flow 'primary->backup' [--db URL]
    python -m mirrorflow.store forget-topic --flow 'primary->backup' --topic orders [--db URL]
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import (
    BigInteger,
    Column,
    Connection,
    DateTime,
    Engine,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    UniqueConstraint,
    and_,
    case,
    create_engine,
    delete,
    event,
    exc,
    func,
    insert,
    or_,
    select,
    text,
    update,
)
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import URL, RowMapping, make_url

from mirrorflow.core.metrics import CheckpointMetrics, Stats
from mirrorflow.core.plan import SourceGap
from mirrorflow.core.progress import (
    Batch,
    CommittedBatch,
    GroupPosition,
    LockInfo,
    PartitionProgress,
    RecordedGap,
    TopicIdentity,
)
from mirrorflow.core.report import PartitionReport
from mirrorflow.errors import (
    CommitConflictError,
    ConfigError,
    CorruptStateError,
    FlowLockedError,
    MirrorError,
    PlanError,
    TransientError,
)

DEFAULT_BUSY_TIMEOUT_SECONDS = 30.0
DEFAULT_CONNECT_TIMEOUT_SECONDS = 10
_SCHEMA_ADVISORY_LOCK = 0x6D6972726F72  # "mirror": serialises concurrent schema creation on PostgreSQL
_WRITE_OPTION = "mirrorflow_write"
# Errors by which a database says it cannot be reached now: worth a retry.
_UNAVAILABLE = (exc.OperationalError, exc.InterfaceError, exc.DisconnectionError)
# SQLSTATE read_only_sql_transaction: a hot standby, or default_transaction_read_only.
_PG_READ_ONLY = "25006"
_INSERT_CHUNK = 500

# --------------------------------------------------------------------------------------------- schema

metadata = MetaData(
    naming_convention={
        "pk": "pk_%(table_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    }
)

_NAME = String(255)
_ID = BigInteger().with_variant(Integer, "sqlite")  # SQLite autoincrements only INTEGER PRIMARY KEY

progress_table = Table(
    "mirror_progress",
    metadata,
    Column("flow", _NAME, nullable=False),
    Column("topic", _NAME, nullable=False),
    Column("partition", Integer, nullable=False),
    Column("next_source_offset", BigInteger, nullable=False),
    Column("next_target_offset", BigInteger, nullable=False),
    Column("run_id", _NAME, nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    PrimaryKeyConstraint("flow", "topic", "partition"),
)

batches_table = Table(
    "mirror_batches",
    metadata,
    Column("id", _ID, primary_key=True, autoincrement=True),
    Column("flow", _NAME, nullable=False),
    Column("run_id", _NAME, nullable=False),
    Column("topic", _NAME, nullable=False),
    Column("partition", Integer, nullable=False),
    Column("remote_topic", _NAME, nullable=False),
    Column("source_start", BigInteger, nullable=False),
    Column("source_end", BigInteger, nullable=False),
    Column("target_start", BigInteger, nullable=False),
    Column("target_end", BigInteger, nullable=False),
    Column("records", BigInteger, nullable=False),
    Column("bytes", BigInteger, nullable=False),
    Column("sync_points", Text, nullable=False),
    Column("committed_at", DateTime(timezone=True), nullable=False),
    UniqueConstraint("flow", "topic", "partition", "source_start"),
)

gaps_table = Table(
    "mirror_gaps",
    metadata,
    Column("id", _ID, primary_key=True, autoincrement=True),
    Column("flow", _NAME, nullable=False),
    Column("run_id", _NAME, nullable=False),
    Column("topic", _NAME, nullable=False),
    Column("partition", Integer, nullable=False),
    Column("source_start", BigInteger, nullable=False),
    Column("source_end", BigInteger, nullable=False),
    Column("target_start", BigInteger, nullable=False),
    Column("target_end", BigInteger, nullable=False),
    Column("recorded_at", DateTime(timezone=True), nullable=False),
    UniqueConstraint("flow", "topic", "partition", "source_start"),
)

topics_table = Table(
    "mirror_topics",
    metadata,
    Column("flow", _NAME, nullable=False),
    Column("topic", _NAME, nullable=False),
    Column("topic_id", _NAME, nullable=False),
    Column("remote_topic", _NAME, nullable=False),
    Column("first_seen_at", DateTime(timezone=True), nullable=False),
    PrimaryKeyConstraint("flow", "topic"),
)

checkpoints_table = Table(
    "mirror_checkpoints",
    metadata,
    Column("flow", _NAME, nullable=False),
    Column("group_id", _NAME, nullable=False),
    Column("topic", _NAME, nullable=False),
    Column("partition", Integer, nullable=False),
    Column("remote_topic", _NAME, nullable=False),
    Column("upstream_offset", BigInteger, nullable=False),
    Column("downstream_offset", BigInteger, nullable=False),
    Column("metadata", Text, nullable=False),
    Column("emitted_at", DateTime(timezone=True), nullable=False),
    PrimaryKeyConstraint("flow", "group_id", "topic", "partition"),
)

_STATS_FIELDS = ("count", "min", "max", "total", "last")


def _stats_columns(name: str) -> list[Column[Any]]:
    return [Column(f"{name}_{f}", BigInteger, nullable=False) for f in _STATS_FIELDS]


partition_metrics_table = Table(
    "mirror_partition_metrics",
    metadata,
    Column("id", _ID, primary_key=True, autoincrement=True),
    Column("flow", _NAME, nullable=False),
    Column("run_id", _NAME, nullable=False),
    Column("topic", _NAME, nullable=False),
    Column("partition", Integer, nullable=False),
    Column("remote_topic", _NAME, nullable=False),
    Column("records", BigInteger, nullable=False),
    Column("skipped", BigInteger, nullable=False),
    Column("bytes", BigInteger, nullable=False),
    Column("lag", BigInteger, nullable=False),
    Column("write_ms", BigInteger, nullable=False),
    *_stats_columns("record_age"),
    *_stats_columns("replication_latency"),
    Column("recorded_at", DateTime(timezone=True), nullable=False),
    UniqueConstraint("flow", "run_id", "topic", "partition"),
)

checkpoint_metrics_table = Table(
    "mirror_checkpoint_metrics",
    metadata,
    Column("id", _ID, primary_key=True, autoincrement=True),
    Column("flow", _NAME, nullable=False),
    Column("group_id", _NAME, nullable=False),
    Column("topic", _NAME, nullable=False),
    Column("partition", Integer, nullable=False),
    Column("remote_topic", _NAME, nullable=False),
    Column("upstream_offset", BigInteger, nullable=False),
    Column("downstream_offset", BigInteger, nullable=False),
    Column("latency_ms", BigInteger, nullable=False),
    Column("emitted_at", DateTime(timezone=True), nullable=False),
)

locks_table = Table(
    "mirror_locks",
    metadata,
    Column("flow", _NAME, primary_key=True),
    Column("run_id", _NAME, nullable=False),
    Column("acquired_at", DateTime(timezone=True), nullable=False),
    Column("expires_at", DateTime(timezone=True), nullable=False),
)

# ----------------------------------------------------------------------------------------- the store


def _utcnow() -> datetime:
    return datetime.now(UTC)


class OffsetsStore:
    """Committed progress, batch log and flow locks of every flow, in the database at ``url``.

    The schema is created on first use. ``clock`` (default: the system clock, UTC) stamps rows and
    decides lock expiry; locks should outlive the clock skew between workers by far.
    """

    def __init__(
        self,
        url: str,
        *,
        busy_timeout_seconds: float = DEFAULT_BUSY_TIMEOUT_SECONDS,
        clock: Callable[[], datetime] = _utcnow,
    ) -> None:
        self._redacted = redact_url(url)
        try:
            parsed = make_url(url)
        except exc.ArgumentError as error:
            raise ConfigError(f"not a valid database URL: {self._redacted}", key="offsets_db_url") from error
        self._clock = clock
        self._schema_ready = False
        self._schema_lock = threading.Lock()
        self._is_sqlite = parsed.get_backend_name() == "sqlite"
        self._is_postgres = parsed.get_backend_name() == "postgresql"
        connect_args: dict[str, Any] = {}
        if self._is_sqlite:
            try:
                _create_sqlite_folder(parsed)
            except OSError as error:
                raise TransientError(
                    f"offsets database {self._redacted} is unavailable: cannot create its folder ({error}); "
                    "create it, writable for this worker, or point mirrorflow.offsets.db.url elsewhere"
                ) from error
            connect_args["timeout"] = busy_timeout_seconds
        elif (
            self._is_postgres
            and parsed.get_driver_name() in ("psycopg2", "psycopg")
            and "connect_timeout" not in parsed.query
        ):
            connect_args["connect_timeout"] = DEFAULT_CONNECT_TIMEOUT_SECONDS
        try:
            self._engine: Engine = create_engine(parsed, pool_pre_ping=True, connect_args=connect_args)
        except (exc.ArgumentError, exc.NoSuchModuleError, ImportError) as error:
            raise ConfigError(
                f"cannot use database URL {self._redacted}: {error}", key="offsets_db_url"
            ) from error
        if self._is_sqlite:
            _use_begin_immediate_for_writes(self._engine)

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

    # ---------------------------------------------------------------------------------------- locks

    def acquire_lock(self, flow: str, run_id: str, ttl_seconds: int) -> None:
        """Take ``flow``'s lock for ``run_id`` until now + ``ttl_seconds``.

        Re-entrant: the run holding the lock (a retried task of the same run) refreshes its expiry.
        A lock of another run is taken over only once expired; otherwise ``FlowLockedError``.
        """
        if ttl_seconds <= 0:
            raise ValueError(f"ttl_seconds must be positive, got {ttl_seconds}")
        locks = locks_table
        for _attempt in range(5):
            now = self._now()
            expires = now + timedelta(seconds=ttl_seconds)
            with self._transaction(write=True) as conn:
                taken = conn.execute(
                    update(locks)
                    .where(
                        locks.c.flow == flow,
                        or_(locks.c.run_id == run_id, locks.c.expires_at <= now),
                    )
                    .values(
                        run_id=run_id,
                        acquired_at=case((locks.c.run_id == run_id, locks.c.acquired_at), else_=now),
                        expires_at=expires,
                    )
                )
                if taken.rowcount == 1:
                    return
                holder = self._lock_row(conn, flow)
                if holder is not None:
                    if holder.run_id != run_id and holder.expires_at > now:
                        raise FlowLockedError(_locked_message(holder, run_id))
                    continue  # released or expired since the UPDATE looked: try again
                try:
                    with conn.begin_nested():
                        conn.execute(
                            insert(locks).values(
                                flow=flow, run_id=run_id, acquired_at=now, expires_at=expires
                            )
                        )
                    return
                except exc.IntegrityError:
                    continue  # another run inserted the lock at the same moment: look again
        raise TransientError(f"flow {flow}: the lock kept changing hands while run {run_id} tried to take it")

    def release_lock(self, flow: str, run_id: str) -> bool:
        """Release ``flow``'s lock if ``run_id`` holds it; ``False`` if it does not."""
        with self._transaction(write=True) as conn:
            result = conn.execute(
                delete(locks_table).where(locks_table.c.flow == flow, locks_table.c.run_id == run_id)
            )
            return result.rowcount == 1

    def force_release_lock(self, flow: str) -> LockInfo | None:
        """Release ``flow``'s lock whoever holds it (an operator's decision that the holder is dead).

        Returns the lock that was released, ``None`` if the flow was not locked.
        """
        with self._transaction(write=True) as conn:
            holder = self._lock_row(conn, flow, for_update=True)
            if holder is None:
                return None
            conn.execute(
                delete(locks_table).where(locks_table.c.flow == flow, locks_table.c.run_id == holder.run_id)
            )
            return holder

    def lock_holder(self, flow: str) -> str | None:
        """The run holding ``flow``'s lock, ``None`` if unlocked.

        An expired lock still has its holder until another run takes it over or it is released.
        """
        info = self.lock_info(flow)
        return None if info is None else info.run_id

    def lock_info(self, flow: str) -> LockInfo | None:
        with self._transaction(write=False) as conn:
            return self._lock_row(conn, flow)

    # ------------------------------------------------------------------------------------- progress

    def progress(self, flow: str) -> dict[tuple[str, int], PartitionProgress]:
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
                raise _corrupt(
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

    def _progress_rows(self, flow: str) -> list[tuple[str, str, str, str, str, str]]:
        """Progress of ``flow`` with its last writer, as text (for ``show``)."""
        p = progress_table
        with self._transaction(write=False) as conn:
            rows = conn.execute(select(p).where(p.c.flow == flow).order_by(p.c.topic, p.c.partition)).all()
        return [
            (
                r.topic,
                str(r.partition),
                str(r.next_source_offset),
                str(r.next_target_offset),
                r.run_id,
                _fmt(_as_utc(r.updated_at)),
            )
            for r in rows
        ]

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
        wanted: dict[tuple[str, int], PartitionProgress] = {}
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
            self._check_lock(conn, flow, run_id, "anchor")
            now = self._now()
            rows = [
                {
                    "flow": flow,
                    "topic": e.topic,
                    "partition": e.partition,
                    "next_source_offset": e.next_source_offset,
                    "next_target_offset": e.next_target_offset,
                    "run_id": run_id,
                    "updated_at": now,
                }
                for e in wanted.values()
            ]
            self._insert_missing(conn, progress_table, rows)
            self._insert_missing(
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
    ) -> int:
        """Commit the run's source ``gaps``, ``batches`` and partition ``metrics`` in one transaction;
        return how many batches were newly committed.

        Requires ``flow``'s lock held by ``run_id``. Each gap, then each batch, moves its partition's
        progress from exactly (``source_start``, ``target_start``) to (``source_end``,
        ``target_end``) and is added to ``mirror_gaps`` or the batch log. One already there with
        identical values, committed by the same run, is skipped (a retried commit). Anything else
        raises ``CommitConflictError`` and commits nothing.
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
            self._check_lock(conn, flow, run_id, "commit")
            now = self._now()
            # Gaps first: a partition's batch of this run starts where its gap ends.
            for gap in gaps:
                row = {"flow": flow, "run_id": run_id, **asdict(gap), "recorded_at": now}
                self._commit_step(conn, _GAP_LOG, row)
            committed = 0
            for batch in batches:
                committed += self._commit_step(conn, _BATCH_LOG, _batch_row(flow, run_id, batch, now))
            self._record_partition_metrics(conn, flow, run_id, metrics, now)
            return committed

    def _commit_step(self, conn: Connection, log: _Log, row: dict[str, Any]) -> bool:
        """Move a partition's progress across one gap or batch (``row`` of ``log``) and log it;
        ``False`` when an earlier attempt of this commit already did."""
        table, stamp = log.table, log.stamp
        flow, run_id, topic, partition = row["flow"], row["run_id"], row["topic"], row["partition"]
        start = (row["source_start"], row["target_start"])
        where = f"flow {flow}: partition {topic}-{partition}"
        existing = conn.execute(
            select(table).where(
                table.c.flow == flow,
                table.c.topic == topic,
                table.c.partition == partition,
                table.c.source_start == start[0],
            )
        ).first()
        if existing is not None:
            logged = existing._mapping
            if all(logged[k] == v for k, v in row.items() if k != stamp):
                return False  # committed by an earlier attempt of this commit
            raise CommitConflictError(
                f"{where}: {log.kind} from source offset {start[0]} was already committed by run "
                f"{logged['run_id']} at {_fmt(_as_utc(logged[stamp]))} as {log.describe(logged)}; run "
                f"{run_id} now commits {log.describe(row)}. Nothing was committed; re-run the flow to "
                "plan from the committed position."
            )
        p = progress_table
        moved = conn.execute(
            update(p)
            .where(
                p.c.flow == flow,
                p.c.topic == topic,
                p.c.partition == partition,
                p.c.next_source_offset == start[0],
                p.c.next_target_offset == start[1],
            )
            .values(
                next_source_offset=row["source_end"],
                next_target_offset=row["target_end"],
                run_id=run_id,
                updated_at=row[stamp],
            )
        )
        if moved.rowcount != 1:
            actual = conn.execute(
                select(p.c.next_source_offset, p.c.next_target_offset, p.c.run_id).where(
                    p.c.flow == flow, p.c.topic == topic, p.c.partition == partition
                )
            ).first()
            expected = f"(source {start[0]}, target {start[1]})"
            if actual is None:
                raise CommitConflictError(
                    f"{where}: run {run_id} expected progress at {expected} but the partition has "
                    "no progress: its starting position must be anchored before copying. Nothing "
                    "was committed; re-run the flow."
                )
            raise CommitConflictError(
                f"{where}: run {run_id} expected progress at {expected} but it is at (source "
                f"{actual.next_source_offset}, target {actual.next_target_offset}), last written "
                f"by run {actual.run_id}. Nothing was committed; re-run the flow to plan from the "
                "committed position."
            )
        try:
            with conn.begin_nested():
                conn.execute(insert(table).values(**row))
        except exc.IntegrityError as error:
            raise CommitConflictError(
                f"{where}: {log.kind} from source offset {start[0]} was committed concurrently. Nothing "
                f"was committed; re-run the flow. ({error.orig})"
            ) from error
        return True

    def _record_partition_metrics(
        self, conn: Connection, flow: str, run_id: str, metrics: Sequence[PartitionReport], now: datetime
    ) -> None:
        m = partition_metrics_table
        if not metrics or conn.execute(select(m.c.id).where(m.c.flow == flow, m.c.run_id == run_id)).first():
            return  # none, or written by an earlier attempt of this commit
        rows = [
            {
                "flow": flow,
                "run_id": run_id,
                "topic": p.topic,
                "partition": p.partition,
                "remote_topic": p.remote_topic,
                "records": p.records,
                "skipped": p.skipped,
                "bytes": p.bytes,
                "lag": p.lag,
                "write_ms": p.write_ms,
                **_stats_row("record_age", p.record_age),
                **_stats_row("replication_latency", p.replication_latency),
                "recorded_at": now,
            }
            for p in metrics
        ]
        for start in range(0, len(rows), _INSERT_CHUNK):
            conn.execute(insert(m), rows[start : start + _INSERT_CHUNK])

    def partition_metrics(self, flow: str, *, run_id: str | None = None) -> list[PartitionReport]:
        """The metrics history of ``flow`` (optionally one run), oldest first."""
        m = partition_metrics_table
        query = select(m).where(m.c.flow == flow)
        if run_id is not None:
            query = query.where(m.c.run_id == run_id)
        with self._transaction(write=False) as conn:
            rows = conn.execute(query.order_by(m.c.id)).all()
        return [_partition_report(r._mapping) for r in rows]

    def latest_writes(self, flow: str) -> dict[tuple[str, int], PartitionReport]:
        """Per partition, the metrics of the last run that wrote records to it."""
        m = partition_metrics_table
        newest = (
            select(func.max(m.c.id))
            .where(m.c.flow == flow, m.c.replication_latency_count > 0)
            .group_by(m.c.topic, m.c.partition)
        )
        with self._transaction(write=False) as conn:
            rows = conn.execute(select(m).where(m.c.id.in_(newest))).all()
        return {(r.topic, r.partition): _partition_report(r._mapping) for r in rows}

    def totals(self, flow: str) -> dict[tuple[str, int], tuple[int, int]]:
        """Records and bytes committed so far per source partition, from the batch log."""
        b = batches_table
        query = (
            select(b.c.topic, b.c.partition, func.sum(b.c.records), func.sum(b.c.bytes))
            .where(b.c.flow == flow)
            .group_by(b.c.topic, b.c.partition)
        )
        with self._transaction(write=False) as conn:
            rows = conn.execute(query).all()
        return {(t, p): (int(r), int(n)) for t, p, r, n in rows}

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
        return [_committed_batch(row._mapping) for row in rows]

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
        return [_recorded_gap(r._mapping) for r in rows]

    def forget_topic(self, flow: str, topic: str) -> int:
        """Delete ``flow``'s state of source ``topic``: progress, batch log, gaps, recorded topic id and
        checkpoints (the metrics history stays). The next run mirrors the topic as a new one, from its
        log start to the end of its remote topic. Refused (``FlowLockedError``) while a run holds the
        flow's lock. Returns how many rows were deleted."""
        with self._transaction(write=True) as conn:
            holder = self._lock_row(conn, flow, for_update=True)
            if holder is not None:
                raise FlowLockedError(
                    f"flow {flow} is locked by run {holder.run_id} since {_fmt(holder.acquired_at)}; its "
                    f"state of topic {topic} was not changed. Wait for the run to finish, or release the "
                    "lock of a dead run first (release-lock)."
                )
            tables = (progress_table, batches_table, gaps_table, topics_table, checkpoints_table)
            return sum(
                conn.execute(delete(t).where(t.c.flow == flow, t.c.topic == topic)).rowcount for t in tables
            )

    def checkpoints(self, flow: str) -> dict[tuple[str, str, int], GroupPosition]:
        """The last emitted checkpoint per (group, source topic, partition) of ``flow``."""
        c = checkpoints_table
        with self._transaction(write=False) as conn:
            rows = conn.execute(select(c).where(c.c.flow == flow)).all()
        return {
            (r.group_id, r.topic, r.partition): GroupPosition(
                r.group_id,
                r.topic,
                r.partition,
                r.remote_topic,
                r.upstream_offset,
                r.downstream_offset,
                r.metadata,
            )
            for r in rows
        }

    def record_checkpoints(self, flow: str, positions: Iterable[GroupPosition], latency_ms: int) -> None:
        """Replace the stored checkpoints of these (group, topic, partition)s and log them with the
        latency they were emitted with, in one transaction."""
        rows = [
            {"flow": flow, **{f: getattr(p, f) for f in GroupPosition.__dataclass_fields__}}
            for p in positions
        ]
        if not rows:
            return
        c = checkpoints_table
        with self._transaction(write=True) as conn:
            now = self._now()
            for row in rows:
                conn.execute(
                    delete(c).where(
                        c.c.flow == flow,
                        c.c.group_id == row["group_id"],
                        c.c.topic == row["topic"],
                        c.c.partition == row["partition"],
                    )
                )
            conn.execute(insert(c), [{**row, "emitted_at": now} for row in rows])
            conn.execute(
                insert(checkpoint_metrics_table),
                [
                    {
                        **{k: v for k, v in row.items() if k != "metadata"},
                        "latency_ms": latency_ms,
                        "emitted_at": now,
                    }
                    for row in rows
                ],
            )

    def latest_checkpoint_metrics(self, flow: str) -> list[CheckpointMetrics]:
        """Per group and partition (in that order), the latency of its newest checkpoint."""
        m = checkpoint_metrics_table
        newest = (
            select(func.max(m.c.id)).where(m.c.flow == flow).group_by(m.c.group_id, m.c.topic, m.c.partition)
        )
        with self._transaction(write=False) as conn:
            rows = conn.execute(
                select(m).where(m.c.id.in_(newest)).order_by(m.c.group_id, m.c.topic, m.c.partition)
            ).all()
        return [CheckpointMetrics(r.group_id, r.remote_topic, r.partition, r.latency_ms) for r in rows]

    # -------------------------------------------------------------------------------------- helpers

    def _now(self) -> datetime:
        return _as_utc(self._clock())

    def read(self) -> AbstractContextManager[Connection]:
        """A read transaction over the tables (``*_table``), for reports this class does not make
        (the status page's aggregates); database outages become ``TransientError``."""
        return self._transaction(write=False)

    @contextmanager
    def _transaction(self, *, write: bool) -> Iterator[Connection]:
        """One transaction; database outages become ``TransientError``."""
        self._ensure_schema()
        with self._outages_transient(), self._engine.connect() as conn:
            conn.execution_options(**{_WRITE_OPTION: write})
            with conn.begin():
                yield conn

    @contextmanager
    def _outages_transient(self) -> Iterator[None]:
        """A database that cannot be reached, or only read (a failover in progress, or a read-only
        file or account), raises ``TransientError`` saying so; other database errors pass unchanged."""
        try:
            yield
        except exc.SQLAlchemyError as error:
            detail = str(getattr(error, "orig", None) or error).strip()
            if _is_read_only(error):
                raise TransientError(
                    f"offsets database {self._redacted} is read-only ({detail}); point "
                    "mirrorflow.offsets.db.url at a writable database (a primary, not a replica) or "
                    "give this worker write access to it"
                ) from error
            if isinstance(error, _UNAVAILABLE):
                raise TransientError(
                    f"offsets database {self._redacted} is unavailable: {detail}; check that it is up "
                    "and reachable from this worker"
                ) from error
            raise

    def _ensure_schema(self) -> None:
        if self._schema_ready:
            return
        with self._schema_lock:
            if self._schema_ready:
                return
            with self._outages_transient():
                self._create_schema()
            self._schema_ready = True

    def _create_schema(self) -> None:
        for attempt in range(2):
            try:
                with self._engine.connect() as conn:
                    conn.execution_options(**{_WRITE_OPTION: True})
                    with conn.begin():
                        if self._is_postgres:
                            conn.execute(
                                text("SELECT pg_advisory_xact_lock(:key)"), {"key": _SCHEMA_ADVISORY_LOCK}
                            )
                        metadata.create_all(conn, checkfirst=True)
                return
            except (exc.ProgrammingError, exc.IntegrityError, exc.OperationalError):
                # Another process created the tables between our check and our CREATE (databases
                # without transactional DDL or advisory locks): the second look finds them.
                if attempt == 1:
                    raise

    def _lock_row(self, conn: Connection, flow: str, for_update: bool = False) -> LockInfo | None:
        query = select(locks_table).where(locks_table.c.flow == flow)
        if for_update:
            query = query.with_for_update()
        row = conn.execute(query).first()
        if row is None:
            return None
        return LockInfo(row.flow, row.run_id, _as_utc(row.acquired_at), _as_utc(row.expires_at))

    def _check_lock(self, conn: Connection, flow: str, run_id: str, action: str) -> None:
        """Lock the flow's lock row for the rest of the transaction; it must belong to ``run_id``."""
        holder = self._lock_row(conn, flow, for_update=True)
        if holder is None or holder.run_id != run_id:
            if holder is None:
                state = "nobody holds it"
            else:
                state = f"run {holder.run_id} holds it since {_fmt(holder.acquired_at)}"
            raise CommitConflictError(
                f"flow {flow}: run {run_id} cannot {action}: it does not hold the flow's lock ({state}); "
                "the lock was released, or expired and was taken over by another run. Nothing was "
                "written. Re-run the flow."
            )

    def _insert_missing(self, conn: Connection, table: Table, rows: list[dict[str, Any]]) -> None:
        """Insert rows of ``table`` whose primary key is absent; leave existing rows untouched."""
        if not rows:
            return
        dialect = conn.dialect.name
        if dialect in ("sqlite", "postgresql"):
            dialect_insert = sqlite_insert if dialect == "sqlite" else postgresql_insert
            for start in range(0, len(rows), _INSERT_CHUNK):
                chunk = rows[start : start + _INSERT_CHUNK]
                conn.execute(dialect_insert(table).values(chunk).on_conflict_do_nothing())
            return
        key = list(table.primary_key.columns)
        for row in rows:
            try:
                with conn.begin_nested():
                    conn.execute(insert(table).values(**row))
            except exc.IntegrityError:
                present = conn.execute(select(*key).where(and_(*(c == row[c.name] for c in key)))).first()
                if present is None:
                    raise


# ---------------------------------------------------------------------------------- module helpers


def redact_url(url: str) -> str:
    """``url`` with its password replaced by ``***``."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return re.sub(r"(://[^:/@]*:)[^@/]*@", r"\1***@", url)


def _is_read_only(error: exc.SQLAlchemyError) -> bool:
    """SQLite's SQLITE_READONLY* (a read-only file, ``mode=ro``); PostgreSQL's read-only transaction."""
    orig = getattr(error, "orig", None)
    sqlite_error = str(getattr(orig, "sqlite_errorname", ""))
    pg_state = getattr(orig, "pgcode", None) or getattr(orig, "sqlstate", None)
    return sqlite_error.startswith("SQLITE_READONLY") or pg_state == _PG_READ_ONLY


def _corrupt(table: Table, flow: str, topic: str, partition: int, problem: str) -> CorruptStateError:
    """The error for a row mirrorflow cannot have written, with the ways to repair it."""
    command = (
        f"python -m mirrorflow.store forget-topic --flow {shlex.quote(flow)} --topic {shlex.quote(topic)}"
    )
    return CorruptStateError(
        f"{table.name}: flow {flow}, partition {topic}-{partition}: {problem}. mirrorflow never writes "
        "such a row: it was edited by hand or the database is damaged. Restore the offsets database "
        f"from a backup, or forget the flow's state of the topic while no run is going ({command}); "
        "the next run then mirrors the topic anew, after what its remote topic already holds."
    )


def _create_sqlite_folder(url: URL) -> None:
    database = url.database
    if not database or database == ":memory:" or database.startswith("file:") or url.query.get("uri"):
        return
    Path(database).parent.mkdir(parents=True, exist_ok=True)


def _use_begin_immediate_for_writes(engine: Engine) -> None:
    """SQLAlchemy emits BEGIN itself: ``BEGIN IMMEDIATE`` for writes (one writer at a time, waiting
    for the busy timeout instead of failing on a lock upgrade), plain ``BEGIN`` for reads."""

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # the sqlite3 module must not emit BEGIN itself

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        write = bool(conn.get_execution_options().get(_WRITE_OPTION, True))
        conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")


def _as_utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _fmt(value: datetime) -> str:
    return value.isoformat(timespec="seconds")


def _locked_message(holder: LockInfo, run_id: str) -> str:
    return (
        f"flow {holder.flow} is locked by run {holder.run_id} since {_fmt(holder.acquired_at)}; "
        f"the lock expires at {_fmt(holder.expires_at)}. Run {run_id} did not start. If run "
        f"{holder.run_id} is still going, wait for it to finish. If it is dead, release its lock with: "
        f"python -m mirrorflow.store release-lock --flow {shlex.quote(holder.flow)}"
    )


def _batch_row(flow: str, run_id: str, batch: Batch, now: datetime) -> dict[str, Any]:
    return {
        "flow": flow,
        "run_id": run_id,
        "topic": batch.topic,
        "partition": batch.partition,
        "remote_topic": batch.remote_topic,
        "source_start": batch.source_start,
        "source_end": batch.source_end,
        "target_start": batch.target_start,
        "target_end": batch.target_end,
        "records": batch.records,
        "bytes": batch.bytes,
        "sync_points": json.dumps([[s, t] for s, t in batch.sync_points], separators=(",", ":")),
        "committed_at": now,
    }


def _describe_batch(row: Mapping[Any, Any]) -> str:
    return (
        f"source [{row['source_start']}, {row['source_end']}) -> {row['remote_topic']} target "
        f"[{row['target_start']}, {row['target_end']}), {row['records']} records, {row['bytes']} bytes, "
        f"{len(json.loads(row['sync_points']))} sync points"
    )


def _describe_gap(row: Mapping[Any, Any]) -> str:
    return (
        f"source [{row['source_start']}, {row['source_end']}) lost, target [{row['target_start']}, "
        f"{row['target_end']}) left by an interrupted attempt"
    )


@dataclass(frozen=True)
class _Log:
    """A table that progress moves across (batch log or gaps), with what its rows are called."""

    table: Table
    stamp: str
    kind: str
    describe: Callable[[Mapping[Any, Any]], str]


_BATCH_LOG = _Log(batches_table, "committed_at", "a batch", _describe_batch)
_GAP_LOG = _Log(gaps_table, "recorded_at", "a gap", _describe_gap)


def _stats_row(name: str, stats: Stats) -> dict[str, int]:
    return {f"{name}_{f}": v for f, v in zip(_STATS_FIELDS, stats.as_list(), strict=True)}


def _partition_report(row: RowMapping) -> PartitionReport:
    return PartitionReport(
        topic=row["topic"],
        partition=row["partition"],
        remote_topic=row["remote_topic"],
        records=row["records"],
        skipped=row["skipped"],
        bytes=row["bytes"],
        lag=row["lag"],
        record_age=Stats.from_list([row[f"record_age_{f}"] for f in _STATS_FIELDS]),
        replication_latency=Stats.from_list([row[f"replication_latency_{f}"] for f in _STATS_FIELDS]),
        write_ms=row["write_ms"],
    )


def _recorded_gap(row: RowMapping) -> RecordedGap:
    try:
        return RecordedGap(
            row["topic"],
            row["partition"],
            row["source_start"],
            row["source_end"],
            row["target_start"],
            row["target_end"],
            run_id=row["run_id"],
            recorded_at=_as_utc(row["recorded_at"]),
        )
    except PlanError as error:  # offset translation builds on the row, as on the batch log
        raise _corrupt(
            gaps_table,
            row["flow"],
            row["topic"],
            row["partition"],
            f"the gap from source offset {row['source_start']} is not valid ({error})",
        ) from error


def _committed_batch(row: RowMapping) -> CommittedBatch:
    try:
        batch = CommittedBatch(
            topic=row["topic"],
            partition=row["partition"],
            remote_topic=row["remote_topic"],
            source_start=row["source_start"],
            source_end=row["source_end"],
            target_start=row["target_start"],
            target_end=row["target_end"],
            records=row["records"],
            bytes=row["bytes"],
            sync_points=tuple((int(s), int(t)) for s, t in json.loads(row["sync_points"])),
            flow=row["flow"],
            run_id=row["run_id"],
            committed_at=_as_utc(row["committed_at"]),
        )
        # Offset translation and retried commits build on the row: it must be one commit could write.
        batch.validate()
    except (ValueError, TypeError, PlanError) as error:
        raise _corrupt(
            batches_table,
            row["flow"],
            row["topic"],
            row["partition"],
            f"the batch from source offset {row['source_start']} is not valid ({error})",
        ) from error
    return batch


# ----------------------------------------------------------------------------------------------- CLI


def _default_db_url() -> str:
    from mirrorflow.config.model import load_config

    return str(load_config().offsets_db_url)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m mirrorflow.store", description="Inspect and repair the offsets table."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    show = commands.add_parser("show", help="print a flow's lock and committed progress")
    release = commands.add_parser(
        "release-lock", help="release a flow's lock whoever holds it (only when that run is dead)"
    )
    forget = commands.add_parser(
        "forget-topic",
        help="delete a flow's progress, batch log, gaps, topic id and checkpoints of one source topic "
        "(e.g. after the topic was recreated): the next run mirrors it as a new topic",
    )
    forget.add_argument("--topic", required=True, help="the source topic")
    for sub in (show, release, forget):
        sub.add_argument("--flow", required=True, help="the flow, e.g. 'primary->backup'")
        sub.add_argument("--db", help="database URL (default: offsets_db_url of the configuration)")
    args = parser.parse_args(argv)
    try:
        with OffsetsStore(args.db or _default_db_url()) as store:
            if args.command == "release-lock":
                released = store.force_release_lock(args.flow)
                if released is None:
                    print(f"flow {args.flow} is not locked")
                else:
                    print(
                        f"released the lock of flow {args.flow} held by run {released.run_id} "
                        f"since {_fmt(released.acquired_at)} (expiring {_fmt(released.expires_at)})"
                    )
                return 0
            if args.command == "forget-topic":
                deleted = store.forget_topic(args.flow, args.topic)
                print(f"flow {args.flow}: forgot topic {args.topic} ({deleted} rows deleted)")
                return 0
            _show(store, args.flow)
            return 0
    except MirrorError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1


def _show(store: OffsetsStore, flow: str) -> None:
    lock = store.lock_info(flow)
    if lock is None:
        print(f"flow {flow}: not locked")
    else:
        print(
            f"flow {flow}: locked by run {lock.run_id} since {_fmt(lock.acquired_at)}, "
            f"expires {_fmt(lock.expires_at)}"
        )
    rows = store._progress_rows(flow)
    if not rows:
        print("no progress")
        return
    _print_table(
        ("topic", "partition", "next_source_offset", "next_target_offset", "last_run", "updated_at"), rows
    )
    gaps = store.gaps(flow)
    if gaps:
        print("source records lost before they were mirrored (skipped):")
        _print_table(
            ("partition", "source range", "target range", "run", "recorded_at"),
            [
                (
                    f"{g.topic}-{g.partition}",
                    f"[{g.source_start}, {g.source_end})",
                    f"[{g.target_start}, {g.target_end})",
                    g.run_id,
                    _fmt(g.recorded_at),
                )
                for g in gaps
            ],
        )


def _print_table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> None:
    table = [header, *rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    for line in table:
        print("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip())


if __name__ == "__main__":
    raise SystemExit(main())
