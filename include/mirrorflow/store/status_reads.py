"""The status page's aggregates: over a flow's metrics history (``mirror_partition_metrics``), the
newest lag per partition and what each recent run committed; its recovery point and that point's
history; what each partition's batch log counted. ``mirrorflow.app.status`` reads them with
``OffsetsStore``'s own reads (progress, gaps, lock, checkpoints); each is one read transaction and
returns plain values (``mirrorflow.store.read_model``).
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import func, select, union_all

from mirrorflow.core.progress import as_utc
from mirrorflow.core.recovery_point import RecoveryStep
from mirrorflow.core.topic_partitions import TP
from mirrorflow.store.offsets_store import OffsetsStore
from mirrorflow.store.read_model import PartitionErrorRecord, PartitionLag, RunTotals
from mirrorflow.store.tables import (
    batches_table,
    partition_errors_table,
    partition_metrics_table,
    pruned_table,
    recovery_history_table,
    recovery_table,
)

__all__ = ["failed_partitions", "newest_lags", "recovery_history", "recovery_point", "run_totals", "totals"]


def newest_lags(store: OffsetsStore, flow: str) -> dict[TP, PartitionLag]:
    """Per partition of ``flow``, the lag of its newest metrics row and the run that measured it."""
    m = partition_metrics_table
    newest = select(func.max(m.c.id)).where(m.c.flow == flow).group_by(m.c.topic, m.c.partition)
    with store.read() as conn:
        rows = conn.execute(
            select(m.c.topic, m.c.partition, m.c.lag, m.c.run_id).where(m.c.id.in_(newest))
        ).all()
    return {(r.topic, r.partition): PartitionLag(int(r.lag), str(r.run_id)) for r in rows}


def run_totals(store: OffsetsStore, flow: str, limit: int) -> dict[str, RunTotals]:
    """The ``limit`` newest runs of ``flow`` that committed metrics, each summed over its rows in the
    database, by run id."""
    m = partition_metrics_table
    query = (
        select(
            m.c.run_id,
            func.sum(m.c.records).label("records"),
            func.sum(m.c.bytes).label("bytes"),
            func.sum(m.c.skipped).label("skipped"),
            func.max(m.c.write_ms).label("write_ms"),
            func.sum(m.c.lag).label("lag"),
            func.min(m.c.recorded_at).label("committed_at"),
        )
        .where(m.c.flow == flow)
        .group_by(m.c.run_id)
        .order_by(func.max(m.c.id).desc())
        .limit(limit)
    )
    with store.read() as conn:
        rows = conn.execute(query).all()
    return {
        r.run_id: RunTotals(
            run_id=r.run_id,
            records=int(r.records),
            bytes=int(r.bytes),
            skipped=int(r.skipped),
            write_ms=int(r.write_ms),
            lag=int(r.lag),
            committed_at=as_utc(r.committed_at),
        )
        for r in rows
    }


def recovery_point(store: OffsetsStore, flow: str) -> datetime | None:
    """When ``flow`` was last mirrored as a whole; ``None`` if never."""
    r = recovery_table
    with store.read() as conn:
        row = conn.execute(select(r.c.mirrored_as_of).where(r.c.flow == flow)).first()
    return None if row is None else as_utc(row.mirrored_as_of)


def recovery_history(store: OffsetsStore, flow: str, limit: int) -> list[RecoveryStep]:
    """The ``limit`` newest minutes of ``flow``'s recovery point history, oldest first."""
    h = recovery_history_table
    query = select(h).where(h.c.flow == flow).order_by(h.c.minute.desc()).limit(limit)
    with store.read() as conn:
        rows = conn.execute(query).all()
    return [
        RecoveryStep(as_utc(row.minute), int(row.worst_ms) / 1000, as_utc(row.mirrored_as_of))
        for row in reversed(rows)
    ]


def failed_partitions(store: OffsetsStore, flow: str) -> list[PartitionErrorRecord]:
    """The partitions of ``flow`` whose newest run failed them on their own error
    (``store.partition_errors``), by topic and partition."""
    e = partition_errors_table
    with store.read() as conn:
        rows = conn.execute(select(e).where(e.c.flow == flow).order_by(e.c.topic, e.c.partition)).all()
    return [
        PartitionErrorRecord(r.topic, int(r.partition), r.run_id, r.error, r.message, as_utc(r.failed_at))
        for r in rows
    ]


def totals(store: OffsetsStore, flow: str) -> dict[TP, tuple[int, int]]:
    """Records and bytes committed so far per source partition, from the batch log and what its
    pruned rows counted."""
    b, p = batches_table, pruned_table
    logged = select(b.c.topic, b.c.partition, b.c.records, b.c.bytes).where(b.c.flow == flow)
    both = union_all(logged, select(p.c.topic, p.c.partition, p.c.records, p.c.bytes).where(p.c.flow == flow))
    rows = both.subquery()
    query = select(rows.c.topic, rows.c.partition, func.sum(rows.c.records), func.sum(rows.c.bytes))
    with store.read() as conn:
        found = conn.execute(query.group_by(rows.c.topic, rows.c.partition)).all()
    return {(t, n): (int(r), int(size)) for t, n, r, size in found}
