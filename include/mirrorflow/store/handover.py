"""A DR flow's lock passing from one window to the next (``mirror_successors``), and the lease a
window holds it by.

A window that is up (its Spark application and connections ready) offers itself as the flow's
successor and renews its offer while it waits; the window holding the lock, at a micro-batch boundary
once its time is up, hands the lock to that successor in one transaction, and stops. A window holds
the lock by a lease it renews while it lives, so a killed window's lock is free to take over once the
lease runs out.

Invariants: the lock passes only from the run holding it, only to a run seen waiting within
``SUCCESSOR_FRESH_SECONDS`` (never to one that died waiting), and only with the successor's offer
withdrawn in the same transaction; at most one offer stands per flow, and a fresh offer is never
replaced by another run's. A lease is renewed only by the run holding the lock.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import Connection, delete, insert, select, update

from mirrorflow.core.progress import Successor, as_utc
from mirrorflow.store.offsets_store import OffsetsStore
from mirrorflow.store.tables import locks_table, successors_table

__all__ = ["hand_over", "offer_successor", "renew_lock", "successor_of", "withdraw_offer"]


def offer_successor(store: OffsetsStore, flow: str, run_id: str) -> bool:
    """Offer ``run_id`` as ``flow``'s successor, or renew its offer; ``False`` while another run's
    fresh offer stands (this one waits its turn)."""
    s = successors_table
    with store.write() as conn:
        now = store.now()
        standing = _successor(conn, flow)
        if standing is not None and standing.run_id != run_id and standing.fresh(now):
            return False
        if standing is not None and standing.run_id == run_id:
            conn.execute(update(s).where(s.c.flow == flow).values(seen_at=now))
        else:
            conn.execute(delete(s).where(s.c.flow == flow))
            conn.execute(insert(s).values(flow=flow, run_id=run_id, offered_at=now, seen_at=now))
        return True


def withdraw_offer(store: OffsetsStore, flow: str, run_id: str) -> None:
    """Withdraw ``run_id``'s offer, if it stands."""
    s = successors_table
    with store.write() as conn:
        conn.execute(delete(s).where(s.c.flow == flow, s.c.run_id == run_id))


def successor_of(store: OffsetsStore, flow: str) -> Successor | None:
    """The standing offer to take ``flow`` over, fresh or not."""
    with store.read() as conn:
        return _successor(conn, flow)


def hand_over(store: OffsetsStore, flow: str, holder: str, ttl_seconds: int) -> str | None:
    """Pass ``flow``'s lock from ``holder`` (which must hold it) to its fresh successor, with a lease of
    ``ttl_seconds``; returns the successor's run id, or ``None`` (no fresh successor: ``holder`` keeps
    the lock)."""
    with store.locked(flow, holder, "hand the flow over") as conn:
        now = store.now()
        successor = _successor(conn, flow)
        if successor is None or successor.run_id == holder or not successor.fresh(now):
            return None
        lock = locks_table
        conn.execute(
            update(lock)
            .where(lock.c.flow == flow, lock.c.run_id == holder)
            .values(run_id=successor.run_id, acquired_at=now, expires_at=now + timedelta(seconds=ttl_seconds))
        )
        conn.execute(delete(successors_table).where(successors_table.c.flow == flow))
        return successor.run_id


def renew_lock(store: OffsetsStore, flow: str, holder: str, ttl_seconds: int) -> datetime:
    """Extend ``holder``'s lease on ``flow``'s lock to now + ``ttl_seconds``; returns the new expiry.
    ``CommitConflictError`` if ``holder`` no longer holds the lock."""
    with store.locked(flow, holder, "renew its lease on the flow's lock") as conn:
        expires = store.now() + timedelta(seconds=ttl_seconds)
        lock = locks_table
        conn.execute(
            update(lock).where(lock.c.flow == flow, lock.c.run_id == holder).values(expires_at=expires)
        )
        return expires


def _successor(conn: Connection, flow: str) -> Successor | None:
    row = conn.execute(select(successors_table).where(successors_table.c.flow == flow)).first()
    if row is None:
        return None
    return Successor(row.flow, row.run_id, as_utc(row.offered_at), as_utc(row.seen_at))
