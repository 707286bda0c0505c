"""How far back the metrics history goes: rows older than ``HISTORY_RETENTION`` go, except what the
status page and the metrics files still read (each partition's newest row and newest row with
writes, each group partition's newest checkpoint latency). Runs inside a transaction the store holds.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Connection, delete, func, select

from mirrorflow.store.tables import checkpoint_metrics_table, partition_metrics_table

__all__ = ["prune_history_step"]


def prune_history_step(conn: Connection, flow: str, cutoff: datetime) -> int:
    """Delete ``flow``'s metrics history recorded before ``cutoff`` but the newest rows still read;
    returns how many rows went."""
    m, c = partition_metrics_table, checkpoint_metrics_table
    newest = select(func.max(m.c.id)).where(m.c.flow == flow).group_by(m.c.topic, m.c.partition)
    newest_writes = (
        select(func.max(m.c.id))
        .where(m.c.flow == flow, m.c.replication_latency_count > 0)
        .group_by(m.c.topic, m.c.partition)
    )
    partitions = conn.execute(
        delete(m).where(
            m.c.flow == flow,
            m.c.recorded_at < cutoff,
            m.c.id.not_in(newest),
            m.c.id.not_in(newest_writes),
        )
    ).rowcount
    newest_checkpoints = (
        select(func.max(c.c.id)).where(c.c.flow == flow).group_by(c.c.group_id, c.c.topic, c.c.partition)
    )
    checkpoints = conn.execute(
        delete(c).where(c.c.flow == flow, c.c.emitted_at < cutoff, c.c.id.not_in(newest_checkpoints))
    ).rowcount
    return int(partitions) + int(checkpoints)
