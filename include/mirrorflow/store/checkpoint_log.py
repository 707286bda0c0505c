"""The checkpoint log of the offsets database: the last checkpoint emitted per consumer group and
source partition of each flow (``mirror_checkpoints``), which is how "forward" is judged, and every
emitted checkpoint's latency (``mirror_checkpoint_metrics``), MM2's checkpoint latency metric.

Invariant: a checkpoint replaces its (group, topic, partition)'s last one and is logged with its
latency in one transaction; the latency history is pruned with the rest of the metrics history
(``OffsetsStore.prune_history``). A checkpoint pass reads only the batch-log rows its groups'
positions need (``batches_from``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime

from sqlalchemy import delete, func, insert, select

from mirrorflow.core.metrics import CheckpointMetrics
from mirrorflow.core.progress import CommittedBatch, GroupPosition, as_utc
from mirrorflow.core.topic_partitions import TP
from mirrorflow.store.offsets_store import OffsetsStore
from mirrorflow.store.read_model import EmittedCheckpoint
from mirrorflow.store.rows import committed_batch, emitted_checkpoint
from mirrorflow.store.tables import batches_table, checkpoint_metrics_table, checkpoints_table

__all__ = [
    "checkpoints",
    "emitted_checkpoints",
    "last_emitted_at",
    "latest_checkpoint_metrics",
    "record_checkpoints",
]


def checkpoints(store: OffsetsStore, flow: str) -> dict[tuple[str, str, int], GroupPosition]:
    """The last emitted checkpoint per (group, source topic, partition) of ``flow``."""
    return {
        (p.group_id, p.topic, p.partition): p for p in (c.position for c in emitted_checkpoints(store, flow))
    }


def emitted_checkpoints(store: OffsetsStore, flow: str) -> list[EmittedCheckpoint]:
    """The last emitted checkpoint per group and source partition of ``flow``, with when it was
    emitted, by group, topic and partition."""
    c = checkpoints_table
    with store.read() as conn:
        rows = conn.execute(
            select(c).where(c.c.flow == flow).order_by(c.c.group_id, c.c.topic, c.c.partition)
        ).all()
    return [emitted_checkpoint(r._mapping) for r in rows]


def last_emitted_at(store: OffsetsStore, flow: str) -> datetime | None:
    """When ``flow`` last emitted a checkpoint, None if it never did."""
    c = checkpoints_table
    with store.read() as conn:
        newest = conn.execute(select(func.max(c.c.emitted_at)).where(c.c.flow == flow)).scalar()
    return None if newest is None else as_utc(newest)


def record_checkpoints(
    store: OffsetsStore, flow: str, positions: Iterable[GroupPosition], latency_ms: int
) -> None:
    """Replace the stored checkpoints of these (group, topic, partition)s and log them with the
    latency they were emitted with, in one transaction."""
    rows = [
        {"flow": flow, **{f: getattr(p, f) for f in GroupPosition.__dataclass_fields__}} for p in positions
    ]
    if not rows:
        return
    c = checkpoints_table
    with store.write() as conn:
        now = store.now()
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


def latest_checkpoint_metrics(store: OffsetsStore, flow: str) -> list[CheckpointMetrics]:
    """Per group and partition (in that order), the latency of its newest checkpoint."""
    m = checkpoint_metrics_table
    newest = select(func.max(m.c.id)).where(m.c.flow == flow).group_by(m.c.group_id, m.c.topic, m.c.partition)
    with store.read() as conn:
        rows = conn.execute(
            select(m).where(m.c.id.in_(newest)).order_by(m.c.group_id, m.c.topic, m.c.partition)
        ).all()
    return [CheckpointMetrics(r.group_id, r.remote_topic, r.partition, r.latency_ms) for r in rows]


def batches_from(
    store: OffsetsStore, flow: str, lowest: Mapping[TP, int], *, on_target: bool = False
) -> list[CommittedBatch]:
    """Per partition of ``lowest``, the rows of ``flow``'s batch log that end past its offset there,
    or its last row when none does: all that translating an offset at or past it reads (a checkpoint
    pass translates its groups' positions, whose lowest are usually near the end, not the whole log).
    Partitions are source partitions, or with ``on_target`` remote partitions (by remote topic) and
    the offsets target offsets. One indexed query per partition, two for one with no row past it."""
    b = batches_table
    topic, end = (b.c.remote_topic, b.c.target_end) if on_target else (b.c.topic, b.c.source_end)
    found: list[CommittedBatch] = []
    with store.read() as conn:
        for (name, partition), offset in sorted(lowest.items()):
            where = (b.c.flow == flow, topic == name, b.c.partition == partition)
            rows = conn.execute(select(b).where(*where, end > offset).order_by(b.c.source_start)).all()
            if not rows:
                last = select(b).where(*where).order_by(b.c.source_start.desc()).limit(1)
                rows = conn.execute(last).all()
            found += [committed_batch(row._mapping) for row in rows]
    return found
