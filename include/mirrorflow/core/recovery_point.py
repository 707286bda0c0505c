"""A flow's recovery point: how much of the source a failover now would leave behind, as time.

A plan's ``created_at`` is taken before it reads the source's end offsets, so a commit that leaves
every partition of the flow at those ends proves that everything the source held at ``created_at``
is on the target: the flow is *mirrored as of* ``created_at``. Invariants:

- The recovery point never claims more than a commit proved: ``mirrored_as_of`` comes only from a
  plan that measured every partition of the flow (not a run narrowed to some topics) and a commit
  that left none of them lagging, and the offsets table keeps it only moving forward. The oldest
  source record not yet on the target is therefore at most ``now - mirrored_as_of`` old.
- It is 0 only when the source was read live and holds nothing past committed progress.
- History keeps, per minute, the worst recovery point a commit ended (the age of the previous
  ``mirrored_as_of`` at that commit: the top of each sawtooth).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from mirrorflow.core.plan import Plan
from mirrorflow.core.report import RunReport

__all__ = [
    "HISTORY_RETENTION",
    "RecoveryPoint",
    "RecoveryStep",
    "minute_of",
    "mirrored_as_of",
    "worst_seconds",
]

# How far back the per-minute history goes: a week of minutes is 10,080 rows per flow at most.
HISTORY_RETENTION = timedelta(days=7)


def mirrored_as_of(plan: Plan, report: RunReport) -> datetime | None:
    """When the flow was last known whole on the target after committing ``report`` of ``plan``:
    the plan's creation time if it measured the whole flow and left no partition lagging, else
    ``None`` (the commit proves no recovery point)."""
    if plan.narrowed or any(p.lag for p in report.partitions):
        return None
    return datetime.fromisoformat(plan.created_at)


def minute_of(moment: datetime) -> datetime:
    """The start of the minute holding ``moment``: the key of its history row."""
    return moment.replace(second=0, microsecond=0)


@dataclass(frozen=True)
class RecoveryStep:
    """One minute of a flow's recovery point history: the worst recovery point a commit in it
    ended (seconds) and the newest ``mirrored_as_of`` recorded in it."""

    minute: datetime
    worst_seconds: float
    mirrored_as_of: datetime


@dataclass(frozen=True)
class RecoveryPoint:
    """The recovery point shown for a flow. ``state``: ``caught up`` (the source, read live, holds
    nothing past committed progress: 0), ``behind`` (at most ``seconds``: the age of
    ``mirrored_as_of``), ``none yet`` (no commit ever left the whole flow caught up) or
    ``unknown``; ``live`` says why the source could not be read live, when it could not."""

    state: str
    seconds: float | None = None
    mirrored_as_of: datetime | None = None
    live: str = ""

    @classmethod
    def of(
        cls, as_of: datetime | None, now: datetime, caught_up: bool | None, live: str = ""
    ) -> RecoveryPoint:
        """From the stored ``mirrored_as_of`` and the live check: ``caught_up`` True/False, or
        ``None`` when it could not be made (``live`` says why)."""
        if caught_up:
            return cls("caught up", 0.0, as_of, live)
        if as_of is None:
            return cls("none yet", None, None, live)
        return cls("behind", max(0.0, (now - as_of).total_seconds()), as_of, live)

    @property
    def text(self) -> str:
        if self.state == "caught up":
            return "0 s (caught up)"
        if self.state == "behind" and self.seconds is not None:
            return f"at most {_duration(self.seconds)}"
        if self.state == "none yet":
            return "none yet (no run has caught up with the source)"
        return "unknown"


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f} s"
    return str(timedelta(seconds=round(seconds)))


def worst_seconds(previous: datetime | None, as_of: datetime, now: datetime) -> float:
    """The recovery point a commit at ``now`` ends: the age of the previous ``mirrored_as_of``
    (of this one, for a flow's first)."""
    return max(0.0, (now - (previous or as_of)).total_seconds())
