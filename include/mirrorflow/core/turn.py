"""A run's turn: when a run of a flow may plan, and when it stops waiting for that.

A run waits for earlier runs of its flow (by logical date) to finish, so that a backfill's intervals,
or runs started together, are copied in logical-date order; and for the flow's lock, so that it
starts once the run holding it is done instead of failing at once. Invariants:

- The lock is free for a run when nobody holds it, when the run itself holds it (a retried or
  cleared task of that run), or when it has expired: ``store.flow_lock.acquire_lock`` takes an expired
  lock over, so waiting longer for one gains nothing.
- A run gives up only once it has waited its limit or longer, and then names every run it was still
  waiting for and what to do about each.
- Looking is read-only: the plan takes the lock, with a short wait of its own for another run that
  took it between the look and the plan.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from mirrorflow.config.run_options import LOCK_WAIT_TIMEOUT
from mirrorflow.core.progress import LockInfo, format_time
from mirrorflow.errors import TurnTimeoutError


@dataclass(frozen=True)
class EarlierRun:
    """A run of the same flow with an earlier logical date that has not finished (``state``: as the
    scheduler shows it, e.g. queued or running)."""

    run_id: str
    state: str
    logical_date: datetime

    def described(self) -> str:
        return f"run {self.run_id} (logical date {format_time(self.logical_date)}, {self.state})"


@dataclass(frozen=True)
class Turn:
    """What run ``run_id`` of ``flow`` still waits for: an earlier run that has not finished, and
    the flow's lock held by another run (``None`` each when it does not). Neither: its turn has come."""

    flow: str
    run_id: str
    earlier: EarlierRun | None = None
    holder: LockInfo | None = None

    @property
    def due(self) -> bool:
        return self.earlier is None and self.holder is None

    def waiting_for(self) -> str:
        """What the run waits for, in words (empty when its turn has come)."""
        reasons = []
        if self.earlier is not None:
            reasons.append(f"{self.earlier.described()} to finish")
        if self.holder is not None:
            reasons.append(
                f"the flow's lock, held by run {self.holder.run_id} until it is released or expires "
                f"at {format_time(self.holder.expires_at)}"
            )
        return " and ".join(reasons)


def lock_free_for(lock: LockInfo | None, run_id: str, now: datetime) -> bool:
    """Whether ``run_id`` can take the flow's lock ``lock`` (``None``: unlocked) at ``now``."""
    return lock is None or lock.free_for(run_id, now)


def turn(flow: str, run_id: str, earlier: EarlierRun | None, lock: LockInfo | None, now: datetime) -> Turn:
    """Run ``run_id``'s turn, given the latest earlier unfinished run and the flow's lock at ``now``."""
    return Turn(flow, run_id, earlier, None if lock_free_for(lock, run_id, now) else lock)


def ready(current: Turn, waited_seconds: float, limit_seconds: int) -> bool:
    """Whether ``current``'s run may plan now; ``False`` while it may wait on. Raises
    ``TurnTimeoutError`` naming what it waits for once it has waited ``limit_seconds`` or longer
    without its turn coming (a limit of 0: at the first look)."""
    if current.due:
        return True
    if waited_seconds < limit_seconds:
        return False
    advice = []
    if current.earlier is not None:
        advice.append(
            f"The earlier {current.earlier.described()} has not finished, and a flow's runs copy in "
            "logical-date order. Wait for it to finish; if it never will (a run of a paused backfill), "
            "cancel its backfill or mark it failed."
        )
    if current.holder is not None:
        advice.append(f"{current.holder.held()} {current.holder.release_hint()}")
    raise TurnTimeoutError(
        f"flow {current.flow}: run {current.run_id} waited {waited_seconds:.0f} s for its turn (trigger "
        f"param {LOCK_WAIT_TIMEOUT}: {limit_seconds}) and did not start; nothing was written. Clear it "
        f"once what it waited for is done, or trigger a new run with a longer {LOCK_WAIT_TIMEOUT}. "
        + " ".join(advice)
    )
