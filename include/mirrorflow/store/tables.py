"""The offsets database's tables: one ``MetaData`` with every table the store keeps.

``mirror_progress`` (committed progress per partition), ``mirror_batches`` (the batch log),
``mirror_gaps`` (source ranges lost before they were mirrored), ``mirror_pruned`` (what the batch log
held below the source's log start, pruned), ``mirror_topics`` (the id of each
source topic a flow mirrors), ``mirror_checkpoints`` (the last checkpoint emitted per consumer group
and partition), ``mirror_partition_metrics`` and ``mirror_checkpoint_metrics`` (the metrics history),
``mirror_recovery`` (when each flow was last mirrored as a whole) with its per-minute history
``mirror_recovery_history``,
``mirror_run_documents`` (what a run's steps hand each other: plan, copy result, window summary),
``mirror_partition_errors`` (partitions whose last copy failed on their own error, until one commits),
``mirror_locks`` (one lock row per flow) and ``mirror_successors`` (the DR window ready to take a
flow's lock over from the one holding it). ``OffsetsStore`` creates them on first use; what it
guarantees about their rows is in ``mirrorflow.store.offsets_store``.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    BigInteger,
    Column,
    DateTime,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    UniqueConstraint,
)

__all__ = [
    "STATS_FIELDS",
    "batches_table",
    "checkpoint_metrics_table",
    "checkpoints_table",
    "gaps_table",
    "locks_table",
    "metadata",
    "partition_errors_table",
    "partition_metrics_table",
    "progress_table",
    "pruned_table",
    "recovery_history_table",
    "recovery_table",
    "run_documents_table",
    "successors_table",
    "topics_table",
]

metadata = MetaData(
    naming_convention={
        "pk": "pk_%(table_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    }
)

_NAME = String(255)
_ID = BigInteger().with_variant(Integer, "sqlite")  # SQLite autoincrements only INTEGER PRIMARY KEY

# The columns of a ``Stats`` (``core.metrics``), in ``Stats.as_list`` order: ``<name>_<field>``.
STATS_FIELDS = ("count", "min", "max", "total", "last")


def _stats_columns(name: str) -> list[Column[Any]]:
    return [Column(f"{name}_{f}", BigInteger, nullable=False) for f in STATS_FIELDS]


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
    # Added after the table's first release: ``database.create_tables`` adds it to older databases.
    Column("target_gaps", Text, nullable=False, server_default="[]"),
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

pruned_table = Table(
    "mirror_pruned",
    metadata,
    Column("flow", _NAME, nullable=False),
    Column("topic", _NAME, nullable=False),
    Column("partition", Integer, nullable=False),
    # Where the partition's batch log and gaps began before they were first pruned; the records and
    # bytes of the rows pruned since.
    Column("source_start", BigInteger, nullable=False),
    Column("records", BigInteger, nullable=False),
    Column("bytes", BigInteger, nullable=False),
    Column("pruned_at", DateTime(timezone=True), nullable=False),
    PrimaryKeyConstraint("flow", "topic", "partition"),
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

recovery_table = Table(
    "mirror_recovery",
    metadata,
    Column("flow", _NAME, primary_key=True),
    Column("mirrored_as_of", DateTime(timezone=True), nullable=False),
    Column("run_id", _NAME, nullable=False),
    Column("recorded_at", DateTime(timezone=True), nullable=False),
)

recovery_history_table = Table(
    "mirror_recovery_history",
    metadata,
    Column("flow", _NAME, nullable=False),
    Column("minute", DateTime(timezone=True), nullable=False),
    Column("worst_ms", BigInteger, nullable=False),
    Column("mirrored_as_of", DateTime(timezone=True), nullable=False),
    PrimaryKeyConstraint("flow", "minute"),
)


run_documents_table = Table(
    "mirror_run_documents",
    metadata,
    Column("flow", _NAME, nullable=False),
    Column("run_id", _NAME, nullable=False),
    Column("name", _NAME, nullable=False),
    Column("body", Text, nullable=False),
    Column("written_at", DateTime(timezone=True), nullable=False),
    PrimaryKeyConstraint("flow", "run_id", "name"),
)

partition_errors_table = Table(
    "mirror_partition_errors",
    metadata,
    Column("flow", _NAME, nullable=False),
    Column("topic", _NAME, nullable=False),
    Column("partition", Integer, nullable=False),
    Column("run_id", _NAME, nullable=False),
    Column("error", _NAME, nullable=False),
    Column("message", Text, nullable=False),
    Column("failed_at", DateTime(timezone=True), nullable=False),
    PrimaryKeyConstraint("flow", "topic", "partition"),
)

locks_table = Table(
    "mirror_locks",
    metadata,
    Column("flow", _NAME, primary_key=True),
    Column("run_id", _NAME, nullable=False),
    Column("acquired_at", DateTime(timezone=True), nullable=False),
    Column("expires_at", DateTime(timezone=True), nullable=False),
)

successors_table = Table(
    "mirror_successors",
    metadata,
    Column("flow", _NAME, primary_key=True),
    Column("run_id", _NAME, nullable=False),
    Column("offered_at", DateTime(timezone=True), nullable=False),
    Column("seen_at", DateTime(timezone=True), nullable=False),
)
