"""Rows of the offsets database to values and back (``mirrorflow.store.tables`` has the tables), and
the store's wording of a damaged row (``CorruptStateError`` with the repair).

A row that becomes a value offset translation or a retried commit builds on (a batch, a gap) is
checked on the way out: one mirrorflow cannot have written raises ``CorruptStateError``.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Table
from sqlalchemy.engine import RowMapping

from mirrorflow.core.metrics import Stats
from mirrorflow.core.progress import (
    Batch,
    CommittedBatch,
    GroupPosition,
    PartitionProgress,
    RecordedGap,
    as_utc,
)
from mirrorflow.core.report import PartitionReport
from mirrorflow.errors import CorruptStateError, PlanError
from mirrorflow.store.read_model import EmittedCheckpoint, ProgressRecord
from mirrorflow.store.tables import STATS_FIELDS, batches_table, gaps_table

# ------------------------------------------------------------------------------------------- times


# ---------------------------------------------------------------------------------------- messages


def corrupt(table: Table, flow: str, topic: str, partition: int, problem: str) -> CorruptStateError:
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


# ---------------------------------------------------------------------------- batch log and gaps


def batch_row(flow: str, run_id: str, batch: Batch, now: datetime) -> dict[str, Any]:
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
        "sync_points": _pairs(batch.sync_points),
        "committed_at": now,
        "target_gaps": _pairs(batch.target_gaps),
    }


def describe_batch(row: Mapping[Any, Any]) -> str:
    return (
        f"source [{row['source_start']}, {row['source_end']}) -> {row['remote_topic']} target "
        f"[{row['target_start']}, {row['target_end']}), {row['records']} records, {row['bytes']} bytes, "
        f"{len(json.loads(row['sync_points']))} sync points{_target_gaps(row)}"
    )


def _target_gaps(row: Mapping[Any, Any]) -> str:
    gaps = len(json.loads(row["target_gaps"]))
    return f", {gaps} target gaps" if gaps else ""


def _pairs(pairs: tuple[tuple[int, int], ...]) -> str:
    return json.dumps([[a, b] for a, b in pairs], separators=(",", ":"))


def _read_pairs(text: str) -> tuple[tuple[int, int], ...]:
    return tuple((int(a), int(b)) for a, b in json.loads(text))


def describe_gap(row: Mapping[Any, Any]) -> str:
    return (
        f"source [{row['source_start']}, {row['source_end']}) lost, target [{row['target_start']}, "
        f"{row['target_end']}) left by an interrupted attempt"
    )


@dataclass(frozen=True)
class Log:
    """A table that progress moves across (batch log or gaps), with what its rows are called."""

    table: Table
    stamp: str
    kind: str
    describe: Callable[[Mapping[Any, Any]], str]


BATCH_LOG = Log(batches_table, "committed_at", "a batch", describe_batch)
GAP_LOG = Log(gaps_table, "recorded_at", "a gap", describe_gap)


def committed_batch(row: RowMapping) -> CommittedBatch:
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
            sync_points=_read_pairs(row["sync_points"]),
            target_gaps=_read_pairs(row["target_gaps"]),
            flow=row["flow"],
            run_id=row["run_id"],
            committed_at=as_utc(row["committed_at"]),
        )
        # Offset translation and retried commits build on the row: it must be one commit could write.
        batch.validate()
    except (ValueError, TypeError, PlanError) as error:
        raise corrupt(
            batches_table,
            row["flow"],
            row["topic"],
            row["partition"],
            f"the batch from source offset {row['source_start']} is not valid ({error})",
        ) from error
    return batch


def recorded_gap(row: RowMapping) -> RecordedGap:
    try:
        return RecordedGap(
            row["topic"],
            row["partition"],
            row["source_start"],
            row["source_end"],
            row["target_start"],
            row["target_end"],
            run_id=row["run_id"],
            recorded_at=as_utc(row["recorded_at"]),
        )
    except PlanError as error:  # offset translation builds on the row, as on the batch log
        raise corrupt(
            gaps_table,
            row["flow"],
            row["topic"],
            row["partition"],
            f"the gap from source offset {row['source_start']} is not valid ({error})",
        ) from error


# ----------------------------------------------------------------------------- progress, checkpoints


def progress_row(flow: str, run_id: str, entry: PartitionProgress, now: datetime) -> dict[str, Any]:
    return {
        "flow": flow,
        "topic": entry.topic,
        "partition": entry.partition,
        "next_source_offset": entry.next_source_offset,
        "next_target_offset": entry.next_target_offset,
        "run_id": run_id,
        "updated_at": now,
    }


def progress_record(row: RowMapping) -> ProgressRecord:
    return ProgressRecord(
        row["topic"],
        row["partition"],
        row["next_source_offset"],
        row["next_target_offset"],
        row["run_id"],
        as_utc(row["updated_at"]),
    )


def emitted_checkpoint(row: RowMapping) -> EmittedCheckpoint:
    position = GroupPosition(
        row["group_id"],
        row["topic"],
        row["partition"],
        row["remote_topic"],
        row["upstream_offset"],
        row["downstream_offset"],
        row["metadata"],
    )
    return EmittedCheckpoint(position, as_utc(row["emitted_at"]))


# ------------------------------------------------------------------------------------------ metrics


def partition_metrics_row(flow: str, run_id: str, report: PartitionReport, now: datetime) -> dict[str, Any]:
    return {
        "flow": flow,
        "run_id": run_id,
        "topic": report.topic,
        "partition": report.partition,
        "remote_topic": report.remote_topic,
        "records": report.records,
        "skipped": report.skipped,
        "bytes": report.bytes,
        "lag": report.lag,
        "write_ms": report.write_ms,
        **_stats_row("record_age", report.record_age),
        **_stats_row("replication_latency", report.replication_latency),
        "recorded_at": now,
    }


def _stats_row(name: str, stats: Stats) -> dict[str, int]:
    return {f"{name}_{f}": v for f, v in zip(STATS_FIELDS, stats.as_list(), strict=True)}


def partition_report(row: RowMapping) -> PartitionReport:
    return PartitionReport(
        topic=row["topic"],
        partition=row["partition"],
        remote_topic=row["remote_topic"],
        records=row["records"],
        skipped=row["skipped"],
        bytes=row["bytes"],
        lag=row["lag"],
        record_age=Stats.from_list([row[f"record_age_{f}"] for f in STATS_FIELDS]),
        replication_latency=Stats.from_list([row[f"replication_latency_{f}"] for f in STATS_FIELDS]),
        write_ms=row["write_ms"],
    )
