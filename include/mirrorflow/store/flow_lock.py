"""A flow's lock, all its SQL: taken by a run (``mirror_locks``), released, renewed by the lease a DR
window holds it by, and passed from one window to the next (``mirror_successors``).

A batch run takes the lock before it plans and releases it once it has committed. A DR window that is
up (its Spark application and connections ready) offers itself as the flow's successor and renews its
offer while it waits; the window holding the lock, at a micro-batch boundary once its time is up,
hands the lock to that successor in one transaction, and stops. A window holds the lock by a lease it
renews while it lives, so a killed window's lock is free to take over once the lease runs out.

Invariants:
- A flow has at most one lock holder (one row per flow). Another run takes an expired lock over only
  by a write that serialises with the holder's commits on the lock row (``check_lock``): whichever
  comes first wins and the other one sees it. An expired lock still belongs to its run until then.
- Expiry is judged by the store's clock (``OffsetsStore.now``: the database's), never a host's.
- The lock passes only from the run holding it, only to a run seen waiting within
  ``SUCCESSOR_FRESH_SECONDS`` (never to one that died waiting), and only with the successor's offer
  withdrawn in the same transaction; at most one offer stands per flow, and a fresh offer is never
  replaced by another run's. A lease is renewed only by the run holding the lock.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from sqlalchemy import Connection, case, delete, exc, insert, or_, select, update

from mirrorflow.core.progress import LockInfo, Successor, as_utc, format_time, is_holder_of
from mirrorflow.errors import CommitConflictError, FlowLockedError, TransientError
from mirrorflow.store.tables import locks_table, successors_table

if TYPE_CHECKING:
    from mirrorflow.store.offsets_store import OffsetsStore

__all__ = [
    "LOCK_POLL_SECONDS",
    "acquire_lock",
    "force_release_lock",
    "hand_over",
    "lock_holder",
    "lock_info",
    "offer_successor",
    "release_lock",
    "renew_lock",
    "require_lock",
    "successor_of",
    "withdraw_offer",
]

# How often a run waiting for its flow's lock looks again.
LOCK_POLL_SECONDS = 1.0


def acquire_lock(
    store: OffsetsStore,
    flow: str,
    run_id: str,
    ttl_seconds: int,
    wait_seconds: float = 0.0,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Take ``flow``'s lock for ``run_id`` until now + ``ttl_seconds``.

    Re-entrant: the run holding the lock (a retried task of the same run) refreshes its expiry. A lock
    of another run is taken over only once expired; while it is held, this looks again every
    ``LOCK_POLL_SECONDS`` for up to ``wait_seconds`` (by the store's clock), then raises
    ``FlowLockedError``.
    """
    if ttl_seconds <= 0:
        raise ValueError(f"ttl_seconds must be positive, got {ttl_seconds}")
    deadline = store.now() + timedelta(seconds=wait_seconds)
    while True:
        try:
            return _take_lock(store, flow, run_id, ttl_seconds)
        except FlowLockedError:
            left = (deadline - store.now()).total_seconds()
            if left <= 0:
                raise
        sleep(min(LOCK_POLL_SECONDS, left))


def _take_lock(store: OffsetsStore, flow: str, run_id: str, ttl_seconds: int) -> None:
    """One attempt of ``acquire_lock``."""
    locks = locks_table
    for _attempt in range(5):
        now = store.now()
        expires = now + timedelta(seconds=ttl_seconds)
        with store.write() as conn:
            taken = conn.execute(
                update(locks)
                .where(locks.c.flow == flow, or_(locks.c.run_id == run_id, locks.c.expires_at <= now))
                .values(
                    run_id=run_id,
                    acquired_at=case((locks.c.run_id == run_id, locks.c.acquired_at), else_=now),
                    expires_at=expires,
                )
            )
            if taken.rowcount == 1:
                return
            holder = lock_row(conn, flow)
            if holder is not None:
                if not holder.free_for(run_id, now):
                    raise FlowLockedError(holder.refusal(run_id))
                continue  # released or expired since the UPDATE looked: try again
            try:
                with conn.begin_nested():
                    conn.execute(
                        insert(locks).values(flow=flow, run_id=run_id, acquired_at=now, expires_at=expires)
                    )
                return
            except exc.IntegrityError:
                continue  # another run inserted the lock at the same moment: look again
    raise TransientError(f"flow {flow}: the lock kept changing hands while run {run_id} tried to take it")


def release_lock(store: OffsetsStore, flow: str, run_id: str) -> bool:
    """Release ``flow``'s lock if ``run_id`` (or an attempt of it: ``core.progress.attempt_holder``)
    holds it; ``False`` if it does not."""
    with store.write() as conn:
        holder = lock_row(conn, flow, for_update=True)
        if holder is None or not is_holder_of(holder.run_id, run_id):
            return False
        return _delete_lock(conn, holder)


def force_release_lock(store: OffsetsStore, flow: str) -> LockInfo | None:
    """Release ``flow``'s lock whoever holds it (an operator's decision that the holder is dead).

    Returns the lock that was released, ``None`` if the flow was not locked.
    """
    with store.write() as conn:
        holder = lock_row(conn, flow, for_update=True)
        if holder is None:
            return None
        _delete_lock(conn, holder)
        return holder


def lock_holder(store: OffsetsStore, flow: str) -> str | None:
    """The run holding ``flow``'s lock, ``None`` if unlocked.

    An expired lock still has its holder until another run takes it over or it is released.
    """
    info = lock_info(store, flow)
    return None if info is None else info.run_id


def lock_info(store: OffsetsStore, flow: str) -> LockInfo | None:
    with store.read() as conn:
        return lock_row(conn, flow)


def require_lock(store: OffsetsStore, flow: str, holder: str, action: str) -> None:
    """Raise ``CommitConflictError`` saying ``holder`` cannot ``action`` unless it holds ``flow``'s
    lock."""
    with store.read() as conn:
        check_lock(conn, flow, holder, action)


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


def lock_row(conn: Connection, flow: str, for_update: bool = False) -> LockInfo | None:
    """``flow``'s lock as the transaction sees it (``for_update``: locked for the rest of it)."""
    query = select(locks_table).where(locks_table.c.flow == flow)
    if for_update:
        query = query.with_for_update()
    row = conn.execute(query).first()
    if row is None:
        return None
    return LockInfo(row.flow, row.run_id, as_utc(row.acquired_at), as_utc(row.expires_at))


def check_lock(conn: Connection, flow: str, run_id: str, action: str) -> None:
    """Lock the flow's lock row for the rest of the transaction; it must belong to ``run_id`` (else
    ``CommitConflictError`` saying it cannot ``action``)."""
    holder = lock_row(conn, flow, for_update=True)
    if holder is None or holder.run_id != run_id:
        if holder is None:
            state = "nobody holds it"
        else:
            state = f"run {holder.run_id} holds it since {format_time(holder.acquired_at)}"
        raise CommitConflictError(
            f"flow {flow}: run {run_id} cannot {action}: it does not hold the flow's lock ({state}); "
            "the lock was released, or expired and was taken over by another run. Nothing was "
            "written. Re-run the flow."
        )


def _delete_lock(conn: Connection, holder: LockInfo) -> bool:
    lock = locks_table
    return (
        conn.execute(delete(lock).where(lock.c.flow == holder.flow, lock.c.run_id == holder.run_id)).rowcount
        == 1
    )


def _successor(conn: Connection, flow: str) -> Successor | None:
    row = conn.execute(select(successors_table).where(successors_table.c.flow == flow)).first()
    if row is None:
        return None
    return Successor(row.flow, row.run_id, as_utc(row.offered_at), as_utc(row.seen_at))
