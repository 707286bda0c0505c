"""The values progress is made of: where a flow stands per partition, the batch log's rows, the source
gaps it skipped, the last checkpoint per consumer group, the flow's lock.

Pure values, no I/O: the planner, offset translation, checkpoint rules and verification work on
them; ``mirrorflow.store`` keeps them in the offsets database.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from datetime import UTC, datetime

from mirrorflow.core.plan import SourceGap, offsets_in
from mirrorflow.errors import PlanError


@dataclass(frozen=True)
class PartitionProgress:
    """Where the next run of a flow resumes one partition: the next source offset to copy and the
    target offset its record will land at."""

    topic: str
    partition: int
    next_source_offset: int
    next_target_offset: int


@dataclass(frozen=True)
class TopicIdentity:
    """A source topic as a flow first saw it: its id (``describe_topics``), and its remote topic."""

    topic: str
    topic_id: str
    remote_topic: str


@dataclass(frozen=True)
class Batch:
    """One partition's committed copy: source offsets ``[source_start, source_end)`` became target
    offsets ``[target_start, target_end)`` of ``remote_topic``.

    ``records`` counts the records written; the source range can hold fewer records than offsets
    (compaction, transaction markers, aborted records), and so can the target range: ``target_gaps``
    lists its stretches ``[start, end)`` that hold none of the batch's records (the markers of the
    copy's transactions, records of its aborted attempts), each followed by a record of the batch.
    ``sync_points`` lists (source offset, target offset) for each record whose source offset is not
    the previous one plus one (the first record counts against ``source_start``): between sync
    points and target gaps the mapping is arithmetic (``core.translation.runs``).
    """

    topic: str
    partition: int
    remote_topic: str
    source_start: int
    source_end: int
    target_start: int
    target_end: int
    records: int
    bytes: int
    sync_points: tuple[tuple[int, int], ...] = ()
    target_gaps: tuple[tuple[int, int], ...] = ()

    @property
    def gapped(self) -> int:
        """How many offsets of the target range hold none of the batch's records."""
        return offsets_in(self.target_gaps)

    def validate(self) -> None:
        """Raise ``PlanError`` unless the batch is internally consistent."""
        where = f"batch {self.topic}-{self.partition} [{self.source_start}, {self.source_end})"
        if self.source_start < 0 or self.target_start < 0:
            raise PlanError(
                f"{where}: negative start (source {self.source_start}, target {self.target_start})"
            )
        if self.source_end <= self.source_start:
            raise PlanError(f"{where}: empty or negative source range; an empty batch must not be committed")
        if self.target_end < self.target_start:
            raise PlanError(f"{where}: target range [{self.target_start}, {self.target_end}) is negative")
        self._validate_target_gaps(where)
        if self.records != self.target_end - self.target_start - self.gapped:
            raise PlanError(
                f"{where}: records={self.records} but the target range [{self.target_start}, "
                f"{self.target_end}) holds {self.target_end - self.target_start - self.gapped} outside "
                "its gaps"
            )
        if self.records > self.source_end - self.source_start:
            raise PlanError(
                f"{where}: records={self.records} exceeds the {self.source_end - self.source_start} "
                "offsets of the source range"
            )
        if self.bytes < 0:
            raise PlanError(f"{where}: negative bytes {self.bytes}")
        previous: tuple[int, int] | None = None
        for point in self.sync_points:
            if len(point) != 2:
                raise PlanError(f"{where}: sync point {point!r} is not a (source, target) pair")
            src, tgt = point
            if not (
                self.source_start <= src < self.source_end and self.target_start <= tgt < self.target_end
            ):
                raise PlanError(
                    f"{where}: sync point ({src}, {tgt}) lies outside the source range or the target "
                    f"range [{self.target_start}, {self.target_end})"
                )
            if previous is not None and not (src > previous[0] and tgt > previous[1]):
                raise PlanError(f"{where}: sync points are not strictly increasing at ({src}, {tgt})")
            if any(start <= tgt < end for start, end in self.target_gaps):
                raise PlanError(f"{where}: sync point ({src}, {tgt}) lies in a target gap")
            previous = (src, tgt)

    def _validate_target_gaps(self, where: str) -> None:
        after = self.target_start - 1
        for gap in self.target_gaps:
            if len(gap) != 2 or not after < gap[0] < gap[1] < self.target_end:
                raise PlanError(
                    f"{where}: target gap {gap!r} is not a stretch [start, end) of the target range "
                    f"[{self.target_start}, {self.target_end}) after the previous gap and before a record"
                )
            after = gap[1]


@dataclass(frozen=True)
class CommittedBatch(Batch):
    """A row of the batch log: a ``Batch`` plus who committed it and when."""

    flow: str = field(kw_only=True)
    run_id: str = field(kw_only=True)
    committed_at: datetime = field(kw_only=True)

    def as_batch(self) -> Batch:
        return Batch(
            topic=self.topic,
            partition=self.partition,
            remote_topic=self.remote_topic,
            source_start=self.source_start,
            source_end=self.source_end,
            target_start=self.target_start,
            target_end=self.target_end,
            records=self.records,
            bytes=self.bytes,
            sync_points=self.sync_points,
            target_gaps=self.target_gaps,
        )


@dataclass(frozen=True)
class RecordedGap(SourceGap):
    """A row of ``mirror_gaps``: a ``SourceGap`` plus the run that skipped it and when."""

    run_id: str = field(kw_only=True)
    recorded_at: datetime = field(kw_only=True)


@dataclass(frozen=True)
class GroupPosition:
    """The last checkpoint emitted for a consumer group on one source partition: its committed
    ``upstream_offset`` on the source and where that resumes on ``remote_topic``."""

    group_id: str
    topic: str
    partition: int
    remote_topic: str
    upstream_offset: int
    downstream_offset: int
    metadata: str = ""


def format_time(value: datetime) -> str:
    """A time as messages and the command line show it: ISO 8601 to the second."""
    return value.isoformat(timespec="seconds")


def as_utc(value: datetime) -> datetime:
    """``value`` in UTC; a naive one (SQLite keeps no zone, nor do older documents) is taken to be
    UTC already."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


# How a DR window's attempt holds its flow's lock (``attempt_holder``): an Airflow retry of a window,
# started beside its first attempt still alive, is another holder, and waits its turn.
_ATTEMPT = " attempt "


def attempt_holder(run_id: str, attempt: str) -> str:
    """The lock holder that attempt ``attempt`` of run ``run_id`` is."""
    return f"{run_id}{_ATTEMPT}{attempt}"


def is_holder_of(holder: str, run_id: str) -> bool:
    """Whether lock holder ``holder`` is run ``run_id`` or one of its attempts."""
    return holder == run_id or holder.startswith(f"{run_id}{_ATTEMPT}")


def run_of(holder: str) -> str:
    """The run whose attempt lock holder ``holder`` is (a batch run holds the lock as itself)."""
    return holder.rpartition(_ATTEMPT)[0] or holder


@dataclass(frozen=True)
class LockInfo:
    """A flow's lock: held by run ``run_id`` since ``acquired_at``. Another run may take it over once
    ``expires_at`` has come (``expired``); until then, or until it is released, it is ``run_id``'s."""

    flow: str
    run_id: str
    acquired_at: datetime
    expires_at: datetime

    def expired(self, now: datetime) -> bool:
        return self.expires_at <= now

    def free_for(self, run_id: str, now: datetime) -> bool:
        """Whether run ``run_id`` may take the lock at ``now``: it holds it already (a retried task
        of its run refreshes it), or the lock has expired and may be taken over."""
        return self.run_id == run_id or self.expired(now)

    def held(self) -> str:
        """The lock, in words."""
        return (
            f"flow {self.flow} is locked by run {self.run_id} since {format_time(self.acquired_at)}; "
            f"the lock expires at {format_time(self.expires_at)}."
        )

    def release_hint(self) -> str:
        """What to do about the lock: wait for its run, or release the lock of a dead one."""
        return (
            f"If run {self.run_id} is still going, wait for it to finish. If it is dead, release its lock "
            f"with: python -m mirrorflow.store release-lock --flow {shlex.quote(self.flow)}"
        )

    def refusal(self, run_id: str) -> str:
        """Why run ``run_id``, which found the lock held, did not start."""
        return f"{self.held()} Run {run_id} did not start. {self.release_hint()}"


# How long a DR window's offer to take its flow over stands without being renewed: it renews it about
# every second while it waits, so a stale offer is one of a window that died waiting.
SUCCESSOR_FRESH_SECONDS = 5.0


@dataclass(frozen=True)
class Successor:
    """A DR window ready to take its flow's lock over from the window holding it: ``run_id`` offered
    itself at ``offered_at`` and was last seen waiting at ``seen_at``."""

    flow: str
    run_id: str
    offered_at: datetime
    seen_at: datetime

    def fresh(self, now: datetime) -> bool:
        """Whether it is still waiting (a window that died waiting must not be handed the lock)."""
        return (now - self.seen_at).total_seconds() <= SUCCESSOR_FRESH_SECONDS
