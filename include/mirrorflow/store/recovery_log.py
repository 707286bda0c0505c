"""A flow's recovery point in the offsets database (``core.recovery_point``): ``mirror_recovery`` holds when
the flow was last mirrored as a whole, ``mirror_recovery_history`` the worst recovery point per
minute (read by ``status_reads``).

Invariants: ``mirrored_as_of`` only moves forward (``advance_step`` runs inside the commit that
proves it, or a DR window's empty micro-batch, both under the flow's lock); the history holds one
row per flow and minute, none older than ``HISTORY_RETENTION`` after the newest.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Connection, delete, insert, select, update

from mirrorflow.core.progress import as_utc
from mirrorflow.core.recovery_point import HISTORY_RETENTION, minute_of, worst_seconds
from mirrorflow.store.tables import recovery_history_table, recovery_table

__all__ = ["advance_step"]


def advance_step(conn: Connection, flow: str, run_id: str, as_of: datetime, now: datetime) -> None:
    """Record that ``flow`` was mirrored as a whole as of ``as_of``, proved by ``run_id`` at ``now``:
    moves ``mirrored_as_of`` forward (never back) and raises the minute's worst recovery point."""
    r, h = recovery_table, recovery_history_table
    row = conn.execute(select(r.c.mirrored_as_of).where(r.c.flow == flow)).first()
    previous = None if row is None else as_utc(row.mirrored_as_of)
    if previous is not None and as_of <= previous:
        return
    values = {"mirrored_as_of": as_of, "run_id": run_id, "recorded_at": now}
    if previous is None:
        conn.execute(insert(r).values(flow=flow, **values))
    else:
        conn.execute(update(r).where(r.c.flow == flow).values(**values))
    worst_ms = round(worst_seconds(previous, as_of, now) * 1000)
    minute = minute_of(now)
    step = conn.execute(select(h.c.worst_ms).where(h.c.flow == flow, h.c.minute == minute)).first()
    if step is None:
        conn.execute(insert(h).values(flow=flow, minute=minute, worst_ms=worst_ms, mirrored_as_of=as_of))
        conn.execute(delete(h).where(h.c.flow == flow, h.c.minute < minute - HISTORY_RETENTION))
    else:
        conn.execute(
            update(h)
            .where(h.c.flow == flow, h.c.minute == minute)
            .values(worst_ms=max(int(step.worst_ms), worst_ms), mirrored_as_of=as_of)
        )
