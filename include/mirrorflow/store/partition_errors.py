"""Partitions whose last copy failed on their own error (``mirrorflow.on.partition.error =
isolate``), in ``mirror_partition_errors``: one row per partition, written by the commit that left
it uncommitted, deleted by the commit that copies it.

Invariant: a row exists exactly while the partition's newest committed run failed it; the status
page lists them (``status_reads.failed_partitions``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

from sqlalchemy import Connection, delete, insert, select

from mirrorflow.core.report import FailedPartition
from mirrorflow.core.topic_partitions import TP
from mirrorflow.store.tables import partition_errors_table

__all__ = ["record_step"]


def record_step(
    conn: Connection,
    flow: str,
    run_id: str,
    failed: Sequence[FailedPartition],
    committed: Iterable[TP],
    now: datetime,
) -> None:
    """Inside a commit: the ``committed`` partitions have no error any more, the ``failed`` ones
    have this run's. Every commit (a DR window's micro-batches too) reads the flow's few error rows
    and deletes only those it settles, rather than naming every committed partition to the database."""
    e = partition_errors_table
    recorded = {
        (r.topic, r.partition) for r in conn.execute(select(e.c.topic, e.c.partition).where(e.c.flow == flow))
    }
    settled = recorded & {*committed, *((f.topic, f.partition) for f in failed)}
    for topic, partition in settled:
        conn.execute(delete(e).where(e.c.flow == flow, e.c.topic == topic, e.c.partition == partition))
    rows = [
        {
            "flow": flow,
            "topic": f.topic,
            "partition": f.partition,
            "run_id": run_id,
            "error": f.failure.kind,
            "message": f.failure.message,
            "failed_at": now,
        }
        for f in failed
    ]
    if rows:
        conn.execute(insert(e), rows)
