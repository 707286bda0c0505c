"""Each flow's ``Writer`` (``core.plan``) in the offsets database: the producer id every copy of the
flow writes as, valid on the target cluster it was given by (``mirror_writers``).

Invariant: a flow has one writer per target cluster; it changes only when the flow's target is
another cluster (one rebuilt under the same address has another id), and only under the flow's lock.
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import delete, insert, select

from mirrorflow.core.plan import Writer
from mirrorflow.store.offsets_store import OffsetsStore
from mirrorflow.store.schema import writers_table

__all__ = ["record_writer", "writer_of"]


def writer_of(store: OffsetsStore, flow: str, cluster_id: str) -> Writer | None:
    """``flow``'s writer on the cluster ``cluster_id``; ``None`` if it has none there."""
    w = writers_table
    with store.read() as conn:
        row = conn.execute(select(w).where(w.c.flow == flow)).first()
    if row is None or row.cluster_id != cluster_id:
        return None
    return Writer(int(row.producer_id), int(row.producer_epoch))


def record_writer(store: OffsetsStore, flow: str, cluster_id: str, writer: Writer, *, holder: str) -> None:
    """Make ``writer`` ``flow``'s on cluster ``cluster_id``, while ``holder`` holds the flow's lock."""
    w = writers_table
    with store.locked(flow, holder, "record its writer") as conn:
        conn.execute(delete(w).where(w.c.flow == flow))
        conn.execute(
            insert(w).values(
                flow=flow,
                cluster_id=cluster_id,
                producer_id=writer.producer_id,
                producer_epoch=writer.producer_epoch,
                created_at=datetime.now(UTC),
            )
        )
