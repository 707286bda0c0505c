"""The verify plan: the ranges of a flow's mirrored history to compare, and the plan document.

``verify_plan`` turns a flow's batch log into ranges, per mirrored partition, that must hold the same
records on both clusters if the mirror is exact; ``mirrorflow.copy.spark_verify.verify_ranges`` reads
both sides of every range with Spark and compares them in its tasks (``core.verify_arrow``), and
``core.verdicts`` judges each range. ``mirrorflow.app.verify`` plans a verification from the offsets
database and both clusters, and keeps the plan and the result in the run's documents.

Invariant: a plan compares every record once: its ranges never overlap on either cluster, and a
range compared record by record carries an offset map that tiles its target range.

Compacted topics (the source's or the remote topic's ``cleanup.policy`` includes ``compact``): each
cluster compacts on its own, so a range need not hold the same records on both. Such a range is
compared record by record instead, keyed by source offset: a target record's source offset is where
the batch log's offset map (``VerifyRange.runs``, ``OffsetMap``) says the copy read it.

Remote topics stamped with ``LogAppendTime``: their broker writes its own append time into each
batch's header, and their consumers see it; the records keep the timestamps the copy wrote (the
time the source's consumers see) in the batch. The target side of such a range is therefore read
from its record batches with each record's carried timestamp (``VerifyRange.log_append_time``), and
compared record by record with the source as its consumers see it, so that a difference is named by
offset.

What a verification cannot see: records outside the committed ranges (a record written to the remote
topic by anyone else after the last mirrored one, records an interrupted attempt left in a gap's
target range, records not mirrored yet or committed after the plan was made: lag), records the source
no longer holds (before its log start), records compacted away on both clusters, and a difference
that only the timestamp type, the offsets or the compression make. It reports a difference where
the two sides legitimately differ only for records deleted from the target but not the source
(target retention: pass ``target_log_starts`` to ``verify_plan`` to start after them).

Pure values and algorithms, no I/O, no pyspark: planning runs where pyspark is not installed.
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from mirrorflow.core.documents import Document
from mirrorflow.core.plan import offsets_in
from mirrorflow.core.progress import Batch
from mirrorflow.core.schema_ids import NO_SCHEMA_IDS, SchemaIdMap
from mirrorflow.core.topic_partitions import TP
from mirrorflow.core.translation import OffsetTranslator, Run, coalesce, runs, runs_from
from mirrorflow.errors import PlanError

__all__ = [
    "CLEANUP_POLICY",
    "SIDES",
    "SOURCE",
    "TARGET",
    "TIMESTAMP_TYPE",
    "OffsetMap",
    "VerifyPlan",
    "VerifyRange",
    "compacts",
    "span",
    "stamps_append_time",
    "verify_plan",
]

# 2: ranges carry whether they are compacted (with their offset map) and LogAppendTime.
# 3: runs carry their lengths, ranges their target gaps.
VERIFY_PLAN_VERSION = 3


@dataclass(frozen=True)
class VerifyRange:
    """Source offsets ``[source_start, source_end)`` of ``topic``-``partition`` were mirrored to target
    offsets ``[target_start, target_end)`` of ``remote_topic``-``partition`` (one committed, contiguous
    stretch of the batch log). If the mirror is exact, the two ranges hold the same records in the
    same order; the target range holds exactly ``records`` of them, outside ``target_gaps`` (the
    markers of the copy's transactions, records of its aborted attempts: none a committed read sees).

    ``compacted``: the source or the remote topic compacts, so either cluster may since have removed
    records of the range. ``log_append_time``: the remote topic stamps its broker's append time.
    Either makes the range one compared record by record (``by_record``), through ``runs``: the
    batch log's offset map of the range, the runs of records the copy wrote (``translation.Run``).
    """

    topic: str
    partition: int
    remote_topic: str
    source_start: int
    source_end: int
    target_start: int
    target_end: int
    compacted: bool = False
    runs: tuple[Run, ...] = ()
    log_append_time: bool = False
    target_gaps: tuple[tuple[int, int], ...] = ()

    def __post_init__(self) -> None:
        if not 0 <= self.source_start < self.source_end or not 0 <= self.target_start <= self.target_end:
            raise PlanError(f"{self}: a range to verify must be non-empty on the source, and not negative")
        if self.records > self.source_end - self.source_start:
            raise PlanError(f"{self}: more target records than source offsets")
        if bool(self.runs) != (self.by_record and self.records > 0) or not _runs_fit(self):
            raise PlanError(
                f"{self}: the offset map {list(self.runs)} does not map the target range into the source "
                "range run by run (a range compared record by record needs one if it has records, any "
                "other range none)"
            )

    @property
    def records(self) -> int:
        """The records the mirror committed for the range."""
        return self.target_end - self.target_start - offsets_in(self.target_gaps)

    @property
    def by_record(self) -> bool:
        """Whether the range is compared record by record (keyed by source offset) rather than by
        digest: a compacted range, whose clusters compact on their own; a LogAppendTime one, whose
        target side is read record by record anyway, so that each difference is named by offset."""
        return self.compacted or self.log_append_time

    def __str__(self) -> str:
        return (
            f"{self.topic}-{self.partition} [{self.source_start}, {self.source_end}) -> "
            f"{self.remote_topic}-{self.partition} [{self.target_start}, {self.target_end})"
        )

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> VerifyRange:
        """The range from its JSON object (``asdict``): the runs and target gaps as tuples again."""
        runs = tuple((int(s), int(t), int(n)) for s, t, n in raw.get("runs", ()))
        gaps = tuple((int(a), int(b)) for a, b in raw.get("target_gaps", ()))
        return cls(**{**raw, "runs": runs, "target_gaps": gaps})


def _runs_fit(r: VerifyRange) -> bool:
    """Whether ``r.runs`` are the records of the range: in order on both clusters, inside the source
    range, leaving exactly ``r.target_gaps`` of the target range and ending at its end."""
    if not r.runs:
        return True
    next_source, next_target, gaps = r.source_start, r.target_start, []
    for s, t, n in r.runs:
        if n <= 0 or s < next_source or t < next_target:
            return False
        if t > next_target:
            gaps.append((next_target, t))
        next_source, next_target = s + n, t + n
    return next_source <= r.source_end and next_target == r.target_end and tuple(gaps) == r.target_gaps


class OffsetMap:
    """Where the copy wrote each record of a range: its runs, each of consecutive source offsets
    copied to consecutive target offsets (``VerifyRange.runs``)."""

    def __init__(self, runs: Sequence[Run]) -> None:
        self._sources = np.array([s for s, _, _ in runs], dtype=np.int64)
        self._targets = np.array([t for _, t, _ in runs], dtype=np.int64)
        self._lengths = np.array([n for _, _, n in runs], dtype=np.int64)

    @classmethod
    def of(cls, r: VerifyRange) -> OffsetMap:
        return cls(r.runs)

    def sources(self, targets: np.ndarray) -> np.ndarray:
        """The source offset of the record copied to each of ``targets`` (offsets of the target range)."""
        k = np.searchsorted(self._targets, targets, side="right") - 1
        outside = (k < 0) | (targets - self._targets[np.maximum(k, 0)] >= self._lengths[np.maximum(k, 0)])
        if np.any(outside):
            raise PlanError(f"target offsets {targets[outside].tolist()} hold no record of the offset map")
        return self._sources[k] + (targets - self._targets[k])

    def targets(self, sources: np.ndarray) -> np.ndarray:
        """The target offset each of ``sources`` was copied to; -1 for an offset the copy wrote no
        record from (a gap between runs, or outside them)."""
        if not self._sources.size:
            return np.full(len(sources), -1, dtype=np.int64)
        k = np.maximum(np.searchsorted(self._sources, sources, side="right") - 1, 0)
        within = sources - self._sources[k]
        copied = (within >= 0) & (within < self._lengths[k])
        return np.where(copied, self._targets[k] + within, -1)


SOURCE, TARGET = 0, 1
SIDES = {SOURCE: "source", TARGET: "target"}


def span(r: VerifyRange, side: int) -> tuple[str, int, int, int]:
    """(topic, partition, start, end) of the range on one side: the offsets to read there."""
    if side == SOURCE:
        return (r.topic, r.partition, r.source_start, r.source_end)
    return (r.remote_topic, r.partition, r.target_start, r.target_end)


@dataclass(frozen=True)
class VerifyPlan(Document):
    """What one verification compares: ``ranges`` in partition order, never overlapping on either
    cluster (a partition has more than one range only where its batch log has a gap)."""

    marker = ("version", VERIFY_PLAN_VERSION)
    what = default_source = "verify plan"
    remedy = "plan the verification again"

    flow: str
    run_id: str
    ranges: tuple[VerifyRange, ...]
    # The schema ids the copy mapped (``core.schema_ids``): source records are compared as mapped.
    schema_ids: SchemaIdMap = NO_SCHEMA_IDS

    def __post_init__(self) -> None:
        for side in (SOURCE, TARGET):
            spans = sorted(span(r, side) for r in self.ranges)
            for a, b in itertools.pairwise(spans):
                if a[:2] == b[:2] and b[2] < a[3]:
                    raise PlanError(
                        f"{self.flow}: {SIDES[side]} ranges of {a[0]}-{a[1]} overlap at offset {b[2]}: "
                        "a verify plan must compare every record once"
                    )

    @property
    def records(self) -> int:
        return sum(r.records for r in self.ranges)

    @classmethod
    def _build(cls, raw: dict[str, Any]) -> VerifyPlan:
        return cls(
            raw["flow"],
            raw["run_id"],
            tuple(VerifyRange.from_dict(r) for r in raw["ranges"]),
            # Absent from plans written before schemas travelled: those map none.
            SchemaIdMap.of(raw["schema_ids"]) if "schema_ids" in raw else NO_SCHEMA_IDS,
        )

    def check_belongs_to(self, flow: str, run_id: str, source: str) -> None:
        if (self.flow, self.run_id) != (flow, run_id):
            raise PlanError(
                f"{source} belongs to flow {self.flow!r} run {self.run_id!r}, not flow {flow!r} run "
                f"{run_id!r}; plan the verification of this run again"
            )


CLEANUP_POLICY, TIMESTAMP_TYPE = "cleanup.policy", "message.timestamp.type"


def compacts(configs: Mapping[str, str]) -> bool:
    """Whether a topic with these configs compacts (its ``cleanup.policy`` includes ``compact``)."""
    return "compact" in (p.strip() for p in configs[CLEANUP_POLICY].split(","))


def stamps_append_time(configs: Mapping[str, str]) -> bool:
    """Whether a topic with these configs stamps its broker's append time on what it stores."""
    return configs[TIMESTAMP_TYPE] == "LogAppendTime"


def verify_plan(
    flow_name: str,
    run_id: str,
    batches: Iterable[Batch],
    log_starts: Mapping[TP, int],
    topics: frozenset[str] = frozenset(),
    *,
    target_log_starts: Mapping[TP, int] | None = None,
    compacted: Collection[str] = (),
    log_append_time: Collection[str] = (),
) -> VerifyPlan:
    """The committed mirrored history of every partition in ``batches`` (only of ``topics`` if
    given) that the source still holds: per partition, from the later of its first batch's
    ``source_start`` and its log start now (``log_starts``, by source topic and partition) to its
    last batch's ``source_end``; on the target, from where the first record at or after that start
    landed (``OffsetTranslator``) to its last batch's ``target_end``.

    Invariant: if the mirror is exact, each range holds the same records, in the same order, on both
    clusters (``VerifyRange``). Offsets of the source range without a record (compaction, transaction
    markers, aborted records) were never copied and are not read (the reader reads committed records).

    Gaps: batches of a partition are contiguous (each starts where the previous one ended, on both
    clusters) except across a source gap, records deleted from the source before they were mirrored
    (``mirror_gaps``). A gap's target range may hold records an interrupted attempt copied before
    the deletion, which the source no longer has; so each contiguous stretch of batches becomes a
    range of its own, and what lies between stretches is compared on neither cluster. (The log start
    of a partition has moved past its gaps when they were found, so a plan made with current log
    starts has at most one range per partition.) A change of remote topic also starts a new stretch.

    ``target_log_starts`` (by remote topic and partition): when given, a range also starts no earlier
    than the first mirrored record the target still holds (target retention deletes other records
    than the source's). Partitions with nothing left to compare (every mirrored record deleted)
    have no range. A partition without a log start is an error: pass ``topics`` to leave it out.

    ``compacted`` (source topics): the ranges of these topics are compared record by record and
    carry their offset map (``VerifyRange.runs``); ``log_append_time`` (remote topics): the ranges
    copied to these are read on the target with the timestamps their records carry.
    """
    by_tp: dict[TP, list[Batch]] = {}
    for b in batches:
        if not topics or b.topic in topics:
            by_tp.setdefault((b.topic, b.partition), []).append(b)
    ranges: list[VerifyRange] = []
    for (topic, partition), logged in sorted(by_tp.items()):
        if (topic, partition) not in log_starts:
            raise PlanError(
                f"flow {flow_name}: no log start offset given for {topic}-{partition}, which the flow "
                "mirrored (deleted from the source?); leave its topic out of the verification"
            )
        for stretch in _stretches(sorted(logged, key=lambda b: b.source_start)):
            (merged,) = coalesce(stretch)  # translates as the stretch's batches do
            found = _stretch_range(merged, log_starts[(topic, partition)], target_log_starts)
            if found is not None:
                ranges.append(_with_kind(found, merged, compacted, log_append_time))
    return VerifyPlan(flow_name, run_id, tuple(ranges))


def _stretches(ordered: list[Batch]) -> list[list[Batch]]:
    """The batches cut where one does not start where the previous one ended, on either cluster."""
    stretches: list[list[Batch]] = []
    for b in ordered:
        last = stretches[-1][-1] if stretches else None
        if last is not None and (last.remote_topic, last.source_end, last.target_end) == (
            b.remote_topic,
            b.source_start,
            b.target_start,
        ):
            stretches[-1].append(b)
        else:
            stretches.append([b])
    return stretches


def _stretch_range(
    merged: Batch, log_start: int, target_log_starts: Mapping[TP, int] | None
) -> VerifyRange | None:
    """The range of a stretch, ``merged`` into one batch, that both clusters still hold."""
    source_start = max(merged.source_start, log_start)
    if source_start >= merged.source_end:
        return None  # every record of the stretch is gone from the source
    translator = OffsetTranslator([merged])
    target_start = translator.translate(source_start)
    assert target_start is not None  # source_start is at or after the stretch's first offset
    if target_log_starts is not None:
        kept = target_log_starts.get((merged.remote_topic, merged.partition), 0)
        if kept > target_start:
            if kept >= merged.target_end:
                return None  # every mirrored record of the stretch is gone from the target
            # The source offset of the first mirrored record at or after target offset ``kept``.
            source_start, target_start = _source_of(translator, kept), kept
    return VerifyRange(
        merged.topic,
        merged.partition,
        merged.remote_topic,
        source_start,
        merged.source_end,
        target_start,
        merged.target_end,
        target_gaps=tuple((max(a, target_start), b) for a, b in merged.target_gaps if b > target_start),
    )


def _source_of(translator: OffsetTranslator, target: int) -> int:
    """The source offset of the first mirrored record at or after ``target`` (within the stretch's
    target range)."""
    source = translator.reverse(target)
    assert source is not None  # the stretch's batch log covers its target range
    return source


def _with_kind(
    r: VerifyRange, merged: Batch, compacted: Collection[str], log_append_time: Collection[str]
) -> VerifyRange:
    """The range marked compacted and LogAppendTime as its topics are; compared record by record,
    with the runs of its target range (the stretch's, ``merged`` into one batch, from its first
    record on)."""
    is_compacted, stamped = r.topic in compacted, r.remote_topic in log_append_time
    kept: list[Run] = []
    if (is_compacted or stamped) and r.records:
        kept = runs_from(runs(merged), target=r.target_start)
    return replace(r, compacted=is_compacted, log_append_time=stamped, runs=tuple(kept))
