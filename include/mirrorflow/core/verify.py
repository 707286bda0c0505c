"""Verification's pure parts: the ranges to compare, the record digest, the verdicts.

``verify_plan`` turns a flow's batch log into ranges, per mirrored partition, that must hold the same
records on both clusters if the mirror is exact; ``mirrorflow.copy.spark_verify.verify_ranges`` reads
both sides of every range with Spark and digests them in its tasks (``digest_partitions``); each
``PartitionVerdict`` compares the record count and the digest. ``mirrorflow.app.verify`` plans a
verification from the offsets database and both clusters, and keeps the plan and the result in the
run's folder.

The digest (``RecordDigest``) is BLAKE2b over the records in offset order, each encoded without
ambiguity (every field length-prefixed, a null distinct from an empty byte string): timestamp (ms),
key, value, and the headers, names and values in their order. It is sensitive to the order of the
records and of the headers. Offsets are never hashed: the remote partition numbers the records
differently. Neither are the timestamp type, compression, producer ids or leader epochs: a mirror
does not keep them either.

Compacted topics (the source's or the remote topic's ``cleanup.policy`` includes ``compact``): each
cluster compacts on its own, so a range need not hold the same records on both. Such a range is
compared record by record instead (``record_keys``, ``compare_records``), keyed by source offset: a
target record's source offset is where the batch log's offset map (``VerifyRange.runs``) says the
copy read it. A record on both clusters must be the same (its ``record_digest``). A record on the
target only was compacted away on the source after it was copied; one on the source only, at an
offset the copy wrote a record from, was compacted away on the target: an append-only log loses
records from its middle only by compaction (and deletions before a log start are planned around),
so neither is a difference; both are counted and the first few named. A source record at an offset
the copy wrote nothing from is a difference (never copied), as is a record that differs.

Remote topics stamped with ``LogAppendTime``: their broker writes its own append time into each
batch's header, and their consumers see it; the records keep the timestamps the copy wrote (the
time the source's consumers see) in the batch. The target side of such a range is therefore read
from its record batches with each record's carried timestamp (``VerifyRange.log_append_time``), and
compared record by record with the source as its consumers see it, so that a difference is named by
offset (a record on one side only is a difference there).

A flow with transforms is verified against what its chain makes of the source (``digest_partitions``
applies the flow's transforms to the source side): records dropped on purpose, headers removed or
values changed by a transform are no differences; anything else the chain would not produce is.

What a verification cannot see: records outside the committed ranges (a record written to the remote
topic by anyone else after the last mirrored one, records an interrupted attempt left in a gap's
target range, records not mirrored yet or committed after the plan was made: lag), records the source
no longer holds (before its log start), records compacted away on both clusters, and a difference
that only the timestamp type, the offsets or the compression make. It reports a difference where
the two sides legitimately differ only for records deleted from the target but not the source
(target retention: pass ``target_log_starts`` to ``verify_plan`` to start after them).

Pure values and algorithms, no I/O, no pyspark: planning runs where pyspark is not installed, and
the digest runs inside Spark tasks (``mapInArrow``) and in unit tests alike.
"""

from __future__ import annotations

import bisect
import hashlib
import itertools
import struct
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mirrorflow.config.transforms import TransformConfig
from mirrorflow.core import documents
from mirrorflow.core.progress import Batch
from mirrorflow.core.transforms import Chain, Encodable, Record
from mirrorflow.core.translation import OffsetTranslator, coalesce, runs
from mirrorflow.errors import PlanError

__all__ = [
    "DIGEST_DDL",
    "DIGEST_INPUT_COLUMNS",
    "DIGEST_SCHEMA",
    "DIGEST_SCHEME",
    "SOURCE",
    "TARGET",
    "DigestRecord",
    "PartitionVerdict",
    "RecordDigest",
    "SideDigest",
    "VerifyPlan",
    "VerifyRange",
    "VerifyResult",
    "digest_partitions",
    "digest_records",
    "span",
    "verdicts",
    "verify_plan",
]

# 2: ranges carry whether they are compacted (with their offset map) and LogAppendTime.
VERIFY_PLAN_VERSION = 2
# Names the record encoding below; part of the hash (BLAKE2b personalisation), so digests of two
# encodings never compare equal by accident. Change it with the encoding.
DIGEST_SCHEME = "mirrorflow-v1"

TP = tuple[str, int]
# (source offset, target offset) of the first record of a run of consecutive source offsets.
Run = tuple[int, int]
Header = tuple[str, bytes | None]
# (key, value, headers, timestamp in ms): what a mirror must keep of a record.
DigestRecord = tuple[bytes | None, bytes | None, Sequence[Header], int]


# ------------------------------------------------------------------------------------------- plan


@dataclass(frozen=True)
class VerifyRange:
    """Source offsets ``[source_start, source_end)`` of ``topic``-``partition`` were mirrored to target
    offsets ``[target_start, target_end)`` of ``remote_topic``-``partition`` (one committed, contiguous
    stretch of the batch log). If the mirror is exact, the two ranges hold the same records in the
    same order; the target range holds exactly ``records`` of them (the writer leaves no gaps).

    ``compacted``: the source or the remote topic compacts, so either cluster may since have removed
    records of the range. ``log_append_time``: the remote topic stamps its broker's append time.
    Either makes the range one compared record by record (``by_record``), through ``runs``: the
    batch log's offset map of the range, (source offset, target offset) of the first record of each
    run of consecutive source offsets the copy wrote, from ``target_start`` on.
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
        return self.target_end - self.target_start

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
        """The range from its JSON object (``asdict``): the runs as pairs again."""
        runs = tuple((int(s), int(t)) for s, t in raw.get("runs", ()))
        return cls(**{**raw, "runs": runs})


def _runs_fit(r: VerifyRange) -> bool:
    """Whether ``r.runs`` tiles the target range with runs that each map into the source range after
    the one before: the first starts at ``target_start``, and run k's source offsets
    ``[s_k, s_k + length_k)`` end at or before the next run's start, the last at ``source_end``."""
    if not r.runs:
        return True
    ends = [t for _, t in r.runs[1:]] + [r.target_end]
    spans = [(s, s + end - t) for (s, t), end in zip(r.runs, ends, strict=True)]
    return (
        r.runs[0][1] == r.target_start
        and all(t < end for (_, t), end in zip(r.runs, ends, strict=True))
        and spans[0][0] >= r.source_start
        and all(a[1] <= b[0] for a, b in itertools.pairwise(spans))
        and spans[-1][1] <= r.source_end
    )


class OffsetMap:
    """Where the copy wrote each record of a range: its runs of consecutive source offsets, each
    copied to consecutive target offsets (``VerifyRange.runs``)."""

    def __init__(self, runs: Sequence[Run], target_end: int) -> None:
        self._sources = np.array([s for s, _ in runs], dtype=np.int64)
        self._targets = np.array([t for _, t in runs], dtype=np.int64)
        self._lengths = np.diff(np.append(self._targets, target_end))

    @classmethod
    def of(cls, r: VerifyRange) -> OffsetMap:
        return cls(r.runs, r.target_end)

    def sources(self, targets: np.ndarray) -> np.ndarray:
        """The source offset of the record copied to each of ``targets`` (offsets of the target range)."""
        k = np.searchsorted(self._targets, targets, side="right") - 1
        if np.any(k < 0):
            raise PlanError(f"target offsets {targets[k < 0].tolist()} precede the offset map")
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
_SIDES = {SOURCE: "source", TARGET: "target"}


def span(r: VerifyRange, side: int) -> tuple[str, int, int, int]:
    """(topic, partition, start, end) of the range on one side: the offsets to read there."""
    if side == SOURCE:
        return (r.topic, r.partition, r.source_start, r.source_end)
    return (r.remote_topic, r.partition, r.target_start, r.target_end)


@dataclass(frozen=True)
class VerifyPlan:
    """What one verification compares: ``ranges`` in partition order, never overlapping on either
    cluster (a partition has more than one range only where its batch log has a gap)."""

    flow: str
    run_id: str
    ranges: tuple[VerifyRange, ...]

    def __post_init__(self) -> None:
        for side in (SOURCE, TARGET):
            spans = sorted(span(r, side) for r in self.ranges)
            for a, b in itertools.pairwise(spans):
                if a[:2] == b[:2] and b[2] < a[3]:
                    raise PlanError(
                        f"{self.flow}: {_SIDES[side]} ranges of {a[0]}-{a[1]} overlap at offset {b[2]}: "
                        "a verify plan must compare every record once"
                    )

    @property
    def records(self) -> int:
        return sum(r.records for r in self.ranges)

    def to_json(self) -> str:
        return documents.dump(("version", VERIFY_PLAN_VERSION), asdict(self))

    @classmethod
    def from_json(cls, text: str, source: str = "verify plan") -> VerifyPlan:
        return documents.load(
            text,
            ("version", VERIFY_PLAN_VERSION),
            lambda raw: cls(
                raw["flow"], raw["run_id"], tuple(VerifyRange.from_dict(r) for r in raw["ranges"])
            ),
            what="verify plan",
            source=source,
            remedy="plan the verification again",
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
            found = _stretch_range(stretch, log_starts[(topic, partition)], target_log_starts)
            if found is not None:
                ranges.append(_with_kind(found, stretch, compacted, log_append_time))
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
    stretch: list[Batch], log_start: int, target_log_starts: Mapping[TP, int] | None
) -> VerifyRange | None:
    first, last = stretch[0], stretch[-1]
    source_start = max(first.source_start, log_start)
    if source_start >= last.source_end:
        return None  # every record of the stretch is gone from the source
    translator = OffsetTranslator(stretch)
    target_start = translator.translate(source_start)
    assert target_start is not None  # source_start is at or after the stretch's first offset
    if target_log_starts is not None:
        kept = target_log_starts.get((first.remote_topic, first.partition), 0)
        if kept > target_start:
            if kept >= last.target_end:
                return None  # every mirrored record of the stretch is gone from the target
            # The source offset of the record at target offset ``kept``: the target range is dense.
            source_start, target_start = _source_of(translator, kept), kept
    return VerifyRange(
        first.topic,
        first.partition,
        first.remote_topic,
        source_start,
        last.source_end,
        target_start,
        last.target_end,
    )


def _source_of(translator: OffsetTranslator, target: int) -> int:
    """The source offset of the mirrored record at ``target`` (within the stretch's target range)."""
    source = translator.reverse(target)
    assert source is not None  # the stretch's batch log covers its target range
    return source


def _stretch_runs(stretch: list[Batch]) -> list[Run]:
    """The runs of a stretch's records (contiguous batches: one merged batch)."""
    (merged,) = coalesce(stretch)
    return runs(merged)


def _with_kind(
    r: VerifyRange, stretch: list[Batch], compacted: Collection[str], log_append_time: Collection[str]
) -> VerifyRange:
    """The range marked compacted and LogAppendTime as its topics are; compared record by record,
    with the runs of its target range (the stretch's runs from its first record on)."""
    is_compacted, stamped = r.topic in compacted, r.remote_topic in log_append_time
    points: list[Run] = []
    if (is_compacted or stamped) and r.records:
        first = (_source_of(OffsetTranslator(stretch), r.target_start), r.target_start)
        points = [first, *(p for p in _stretch_runs(stretch) if r.target_start < p[1] < r.target_end)]
    return replace(r, compacted=is_compacted, log_append_time=stamped, runs=tuple(points))


# ----------------------------------------------------------------------------------------- digest

_I32 = struct.Struct(">i").pack
_I64 = struct.Struct(">q").pack
_NULL = _I32(-1)


def _field(data: bytes | None) -> bytes:
    return _NULL if data is None else _I32(len(data)) + data


def _encode(key: bytes | None, value: bytes | None, headers: Sequence[Header], timestamp_ms: int) -> bytes:
    """One record, prefix-free: a stream of encoded records decodes back to exactly one sequence of
    records, so two sequences share a digest only if BLAKE2b collides."""
    parts = [_I64(timestamp_ms), _field(key), _field(value), _I32(len(headers))]
    for name, header_value in headers:
        parts.append(_field(name.encode()))
        parts.append(_field(header_value))
    return b"".join(parts)


@dataclass(frozen=True)
class SideDigest:
    """What one cluster holds in a range: how many records, and their digest (hex)."""

    records: int
    digest: str


class RecordDigest:
    """The running digest of one side of a range, fed records in offset order."""

    def __init__(self) -> None:
        self._hash = hashlib.blake2b(digest_size=32, person=DIGEST_SCHEME.encode())
        self.records = 0

    def update(
        self, key: bytes | None, value: bytes | None, headers: Sequence[Header], timestamp_ms: int
    ) -> None:
        self._hash.update(_encode(key, value, headers, timestamp_ms))
        self.records += 1

    def update_many(self, records: Iterable[DigestRecord]) -> None:
        """``records`` in the order given: the same digest as ``update`` for each, in one call to the
        hash (far cheaper for the many records of a Spark task)."""
        encoded = [_encode(*record) for record in records]
        self._hash.update(b"".join(encoded))
        self.records += len(encoded)

    def result(self) -> SideDigest:
        return SideDigest(self.records, self._hash.hexdigest())


def arrow_rows(batch: pa.RecordBatch) -> list[DigestRecord]:
    """Key, value, headers and timestamp (ms) of each row of a batch of Spark's Kafka source."""
    keys = batch.column("key").to_pylist()
    values = batch.column("value").to_pylist()
    # Spark hands Kafka's millisecond timestamps as microseconds: an exact multiple of 1000.
    millis = pc.divide(batch.column("timestamp").cast(pa.int64()), 1000).to_pylist()
    # Headers as one flat list of pairs, sliced per record: far cheaper than a list of structs
    # per record.
    header_col = batch.column("headers")
    flat = header_col.flatten()
    pairs = list(zip(flat.field("key").to_pylist(), flat.field("value").to_pylist(), strict=True))
    ends = itertools.accumulate(header_col.value_lengths().fill_null(0).to_pylist())
    rows: list[DigestRecord] = []
    start = 0
    for key, value, ms, end in zip(keys, values, millis, ends, strict=True):
        rows.append((key, value, pairs[start:end], ms))
        start = end
    return rows


def chained(batch: pa.RecordBatch, chain: Chain, topic: str, partition: int) -> list[Record]:
    """What ``chain`` makes of a batch of source records of ``topic``-``partition`` (the ``offset``
    column too), each record with its source offset."""
    offsets = batch.column("offset").to_pylist()
    return chain.apply(
        [
            Record(topic, partition, offset, ms, key, value, tuple(headers))
            for offset, (key, value, headers, ms) in zip(offsets, arrow_rows(batch), strict=True)
        ]
    )


def record_digest(record: DigestRecord) -> bytes:
    """One record's own digest (16 bytes, the same encoding as the range digest): what a record by
    record comparison compares."""
    return hashlib.blake2b(_encode(*record), digest_size=16, person=DIGEST_SCHEME.encode()).digest()


def digest_records(records: Iterable[DigestRecord]) -> SideDigest:
    """The digest of ``records`` (key, value, headers, timestamp in ms), in the order given."""
    digest = RecordDigest()
    for key, value, headers, timestamp_ms in records:
        digest.update(key, value, headers, timestamp_ms)
    return digest.result()


# ----------------------------------------------------------------------------------------- result

# How many offsets of each kind of record a comparison names (the first ones, by source offset).
FIRST_OFFSETS = 5
# What a record by record comparison finds at a source offset: the record on both clusters, the
# same or not; on the source only, where the copy wrote none or where it wrote one the target no
# longer holds; on the target only (the source no longer holds it).
SAME, DIFFER, NOT_COPIED, ONLY_ON_SOURCE, ONLY_ON_TARGET = (
    "same",
    "differ",
    "not_copied",
    "only_on_source",
    "only_on_target",
)
KINDS = (SAME, DIFFER, NOT_COPIED, ONLY_ON_SOURCE, ONLY_ON_TARGET)
# The source offset, and the target offset where the copy wrote the record (None: it wrote none).
Place = tuple[int, int | None]


@dataclass(frozen=True)
class Found:
    """How many records of one kind a range holds, and where the first few of them are."""

    records: int = 0
    first: tuple[Place, ...] = ()

    def __add__(self, other: Found) -> Found:
        return Found(self.records + other.records, tuple(sorted({*self.first, *other.first}))[:FIRST_OFFSETS])

    def describe(self) -> str:
        """``source offset 7 (target offset 7), ...``; ``and N more`` past the first few."""
        shown = ", ".join(
            f"source offset {s}" + (f" (target offset {t})" if t is not None else "") for s, t in self.first
        )
        more = self.records - len(self.first)
        return shown + (f" and {more} more" if more else "")


@dataclass(frozen=True)
class RecordComparison:
    """A range compared record by record, keyed by source offset: each of ``KINDS`` found.

    A record on one side only is a difference, but in a compacted range (``compacted``), where it is
    a record that side compacted away after the copy read it: not a difference, counted apart."""

    same: Found = Found()
    differ: Found = Found()
    not_copied: Found = Found()
    only_on_source: Found = Found()
    only_on_target: Found = Found()

    def differences(self, compacted: bool) -> tuple[str, ...]:
        """The kinds found that are differences."""
        kinds = (DIFFER, NOT_COPIED) if compacted else (DIFFER, NOT_COPIED, ONLY_ON_SOURCE, ONLY_ON_TARGET)
        return tuple(k for k in kinds if self.found(k).records)

    def found(self, kind: str) -> Found:
        return {
            SAME: self.same,
            DIFFER: self.differ,
            NOT_COPIED: self.not_copied,
            ONLY_ON_SOURCE: self.only_on_source,
            ONLY_ON_TARGET: self.only_on_target,
        }[kind]

    @property
    def source_records(self) -> int:
        return sum(self.found(k).records for k in (SAME, DIFFER, NOT_COPIED, ONLY_ON_SOURCE))

    @property
    def target_records(self) -> int:
        return sum(self.found(k).records for k in (SAME, DIFFER, ONLY_ON_TARGET))

    def describe(self, compacted: bool) -> str:
        """How many records of each kind, and where the first few are (the same ones: how many)."""
        wording = {
            DIFFER: "differ",
            NOT_COPIED: "on the source were never copied",
            ONLY_ON_SOURCE: "compacted away on the target" if compacted else "missing on the target",
            ONLY_ON_TARGET: (
                "compacted away on the source after they were copied"
                if compacted
                else "missing on the source"
            ),
        }
        parts = [f"{self.same.records} the same on both"]
        for kind, words in wording.items():
            found = self.found(kind)
            if found.records:
                parts.append(f"{found.records} {words}: {found.describe()}")
        return "; ".join(parts)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> RecordComparison:
        return cls(
            **{
                kind: Found(
                    f["records"], tuple((int(s), None if t is None else int(t)) for s, t in f["first"])
                )
                for kind, f in raw.items()
            }
        )


@dataclass(frozen=True)
class PartitionVerdict:
    """One range as each cluster holds it. A range compared record by record has ``records``, and
    its sides' digests are empty (a compacted range's sides need not hold the same records)."""

    range: VerifyRange
    source: SideDigest
    target: SideDigest
    records: RecordComparison | None = None

    @property
    def matches(self) -> bool:
        if self.records is not None:
            return not self.records.differences(self.range.compacted)
        return self.source == self.target

    def describe(self) -> str:
        verdict = "match" if self.matches else "DIFFER"
        if self.records is not None:
            return f"{self.range}: {verdict} record by record ({self.records.describe(self.range.compacted)})"
        return (
            f"{self.range}: {verdict} (source {self.source.records} records {self.source.digest[:16]}, "
            f"target {self.target.records} records {self.target.digest[:16]})"
        )

    def compacted_away(self, kind: str) -> Found:
        """The records of a compacted range only one side holds (``ONLY_ON_SOURCE`` or
        ``ONLY_ON_TARGET``): the other compacted them away after they were copied."""
        return self.records.found(kind) if self.records is not None and self.range.compacted else Found()


@dataclass(frozen=True)
class VerifyResult:
    """A verdict for every range of the plan, in plan order."""

    flow: str
    run_id: str
    partitions: tuple[PartitionVerdict, ...]

    @property
    def mismatches(self) -> tuple[PartitionVerdict, ...]:
        return tuple(v for v in self.partitions if not v.matches)

    def summary(self) -> str:
        """One line: how many ranges and records were compared, which ranges differ (compared record
        by record: where), and how many records each cluster compacted away on its own."""
        differ = self.mismatches
        line = (
            f"verified flow {self.flow} run {self.run_id}: {len(self.partitions)} ranges, "
            f"{sum(v.source.records for v in self.partitions)} source records, "
            f"{sum(v.target.records for v in self.partitions)} target records, "
            f"{len(self.partitions) - len(differ)} match, {len(differ)} differ"
        )
        if differ:
            shown = "; ".join(v.describe() for v in differ[:3])
            line += f": {shown}" + (f"; and {len(differ) - 3} more" if len(differ) > 3 else "")
        for kind, where in ((ONLY_ON_TARGET, "source"), (ONLY_ON_SOURCE, "target")):
            compacted = [
                (v.range, v.compacted_away(kind)) for v in self.partitions if v.compacted_away(kind).records
            ]
            if compacted:
                total = sum(f.records for _, f in compacted)
                shown = "; ".join(f"{r.topic}-{r.partition} {f.describe()}" for r, f in compacted[:3])
                line += f"; {total} records compacted away on the {where} after they were copied ({shown})"
        return line

    def to_json(self) -> str:
        return documents.dump(("digest_scheme", DIGEST_SCHEME), asdict(self))

    @classmethod
    def from_json(cls, text: str, source: str = "verify result") -> VerifyResult:
        """Reads results written before compacted ranges were compared record by record too: their
        verdicts have no ``records``."""
        return documents.load(
            text,
            ("digest_scheme", DIGEST_SCHEME),
            lambda raw: cls(
                raw["flow"],
                raw["run_id"],
                tuple(
                    PartitionVerdict(
                        VerifyRange.from_dict(v["range"]),
                        SideDigest(**v["source"]),
                        SideDigest(**v["target"]),
                        None if v.get("records") is None else RecordComparison.from_dict(v["records"]),
                    )
                    for v in raw["partitions"]
                ),
            ),
            what="verify result",
            source=source,
            remedy="run the verification again",
        )


# ----------------------------------------------------------------------------------- Spark tasks

# What a digesting task needs of Spark's Kafka source, plus the side each read was of.
DIGEST_INPUT_COLUMNS = ("side", "topic", "partition", "offset", "key", "value", "timestamp", "headers")
DIGEST_INPUT_SCHEMA = pa.schema(
    [
        ("side", pa.int32()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("key", pa.binary()),
        ("value", pa.binary()),
        # Spark's timestamps: microseconds, UTC.
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
    ]
)
DIGEST_INPUT_DDL = (
    "side int, topic string, partition int, offset bigint, key binary, value binary, timestamp timestamp, "
    "headers array<struct<key: string, value: binary>>"
)
DIGEST_SCHEMA = pa.schema(
    [
        ("side", pa.int32()),
        ("range", pa.int32()),
        ("records", pa.int64()),
        ("digest", pa.string()),
    ]
)
DIGEST_DDL = "side int, range int, records bigint, digest string"
# One record of a range compared record by record: its source offset, where the copy wrote it, its
# digest.
KEY_SCHEMA = pa.schema(
    [
        ("range", pa.int32()),
        ("side", pa.int32()),
        ("source_offset", pa.int64()),
        ("target_offset", pa.int64()),
        ("digest", pa.binary()),
    ]
)
KEY_DDL = "range int, side int, source_offset bigint, target_offset bigint, digest binary"
# What one task found of one kind in one range compared record by record (summed over tasks).
FOUND_SCHEMA = pa.schema(
    [
        ("range", pa.int32()),
        ("kind", pa.string()),
        ("records", pa.int64()),
        ("first_source", pa.list_(pa.int64())),
        ("first_target", pa.list_(pa.int64())),
    ]
)
FOUND_DDL = "range int, kind string, records bigint, first_source array<bigint>, first_target array<bigint>"


def input_batch(side: int, topic: str, partition: int, records: Sequence[Encodable]) -> pa.RecordBatch:
    """``records`` of ``topic``-``partition`` as the digesting tasks read Spark's Kafka source
    (``DIGEST_INPUT_SCHEMA``): a reader of record batches feeds the same tasks."""
    return pa.RecordBatch.from_pylist(
        [
            {
                "side": side,
                "topic": topic,
                "partition": partition,
                "offset": r.offset,
                "key": r.key,
                "value": r.value,
                "timestamp": r.timestamp * 1000,
                "headers": [{"key": k, "value": v} for k, v in r.headers],
            }
            for r in records
        ],
        schema=DIGEST_INPUT_SCHEMA,
    )


_Bounds = dict[tuple[int, str, int], tuple[list[int], list[tuple[int, int, int]]]]


def _bounds(plan: VerifyPlan) -> _Bounds:
    """Per (side, topic, partition): the starts of its ranges, and (start, end, range index) of each,
    by start."""
    found: dict[tuple[int, str, int], list[tuple[int, int, int]]] = {}
    for i, r in enumerate(plan.ranges):
        for side in (SOURCE, TARGET):
            topic, partition, start, end = span(r, side)
            found.setdefault((side, topic, partition), []).append((start, end, i))
    return {k: ([s for s, _, _ in sorted(v)], sorted(v)) for k, v in found.items()}


def _pieces(batches: Iterator[pa.RecordBatch], plan: VerifyPlan) -> Iterator[tuple[int, int, pa.RecordBatch]]:
    """The records one task reads (``DIGEST_INPUT_COLUMNS``) as (side, range index, records): each
    piece the records of one side of one range, in the order read.

    Checks that within a range offsets rise strictly (else ``PlanError``): a digest is of the range
    in offset order. Ranges of several partitions may share a task, one after another or even
    interleaved; each record counts for the range holding its offset.
    """
    bounds = _bounds(plan)
    last: dict[tuple[int, int], int] = {}
    for batch in batches:
        for run in _runs(batch):
            side = int(run.column("side")[0].as_py())
            topic, partition = run.column("topic")[0].as_py(), int(run.column("partition")[0].as_py())
            while run.num_rows:
                offsets = run.column("offset").to_numpy()
                start, end, index = _range_of(bounds, side, topic, partition, int(offsets[0]))
                # The leading records inside the range (a batch may run on into the next range).
                outside = np.flatnonzero((offsets < start) | (offsets >= end))
                inside = int(outside[0]) if outside.size else run.num_rows
                piece, run = run.slice(0, inside), run.slice(inside)
                offsets = offsets[:inside]
                before = last.get((side, index), -1)
                if offsets[0] <= before or not bool(np.all(offsets[1:] > offsets[:-1])):
                    raise PlanError(
                        f"the verification read {_SIDES[side]} records of {topic}-{partition} out of "
                        f"offset order (offsets {offsets[0]}..{offsets[-1]} after {before}): "
                        "the digest would not be of the range in order"
                    )
                last[(side, index)] = int(offsets[-1])
                yield side, index, piece


def digest_partitions(
    batches: Iterator[pa.RecordBatch], plan: VerifyPlan, transforms: Sequence[TransformConfig] = ()
) -> Iterator[pa.RecordBatch]:
    """Digest the records one Spark task reads (``DIGEST_INPUT_COLUMNS``, in order: ``_pieces``);
    yield one ``DIGEST_SCHEMA`` row per side of each range seen. With ``transforms`` (the flow's),
    the source side is digested as the flow's chain makes it: records dropped on purpose are not
    differences.

    Relies on each range's records reaching one task, in offset order: ``_pieces`` checks the order,
    and the caller refuses a range whose records reached two tasks.
    """
    chain = Chain(transforms)
    seen: dict[tuple[int, int], RecordDigest] = {}
    for side, index, piece in _pieces(batches, plan):
        _, records = _compared(piece, side, plan.ranges[index], chain)
        seen.setdefault((side, index), RecordDigest()).update_many(records)
    rows = [
        {"side": side, "range": index, "records": d.records, "digest": d.result().digest}
        for (side, index), d in seen.items()
    ]
    if rows:
        yield pa.RecordBatch.from_pylist(rows, schema=DIGEST_SCHEMA)


def record_keys(
    batches: Iterator[pa.RecordBatch], plan: VerifyPlan, transforms: Sequence[TransformConfig] = ()
) -> Iterator[pa.RecordBatch]:
    """One ``KEY_SCHEMA`` row per record one Spark task reads of ranges compared record by record: its
    side, its source offset (a target record's through the range's ``OffsetMap``), the target offset
    the copy wrote it to (a source record's through the map; null where the copy wrote none) and
    its ``record_digest``. With ``transforms``, source records are keyed as the flow's chain makes
    them (a record it drops was never copied, and is not keyed). The rows of a range may come from
    any number of tasks: ``compare_records`` pairs them by source offset."""
    chain = Chain(transforms)
    maps: dict[int, OffsetMap] = {}
    for side, index, piece in _pieces(batches, plan):
        r = plan.ranges[index]
        offset_map = maps.setdefault(index, OffsetMap.of(r))
        offsets, records = _compared(piece, side, r, chain)
        if side == SOURCE:
            sources, targets = offsets, offset_map.targets(offsets)
        else:
            sources, targets = offset_map.sources(offsets), offsets
        yield pa.RecordBatch.from_arrays(
            [
                pa.array(np.full(len(offsets), index, dtype=np.int32)),
                pa.array(np.full(len(offsets), side, dtype=np.int32)),
                pa.array(sources),
                pa.array(targets, mask=targets < 0),
                pa.array([record_digest(rec) for rec in records], pa.binary()),
            ],
            schema=KEY_SCHEMA,
        )


def _compared(
    piece: pa.RecordBatch, side: int, r: VerifyRange, chain: Chain
) -> tuple[np.ndarray, list[DigestRecord]]:
    """The offsets and records of a piece of one side of ``r`` as they are compared: the source as
    the flow's ``chain`` makes it (a record it drops is not there), the target as read."""
    if chain and side == SOURCE:
        kept = chained(piece, chain, r.topic, r.partition)
        records: list[DigestRecord] = [(k.key, k.value, k.headers, k.timestamp) for k in kept]
        return np.array([k.offset for k in kept], dtype=np.int64), records
    return piece.column("offset").to_numpy().astype(np.int64), arrow_rows(piece)


def compare_records(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The ``FOUND_SCHEMA`` rows of one task: how many records of each kind (``KINDS``) it found in
    each range, with the first few of each but the same ones. Takes ``KEY_SCHEMA`` rows sorted by
    (range, source offset, side), every row of a source offset in the same task (Spark: partitioned
    by range and source offset, sorted within partitions).

    A source offset held by both sides compares the two records' digests. One held by one side only
    is found as such (whether that is a difference, the range says: ``RecordComparison``), but for a
    source record where the copy wrote none: ``NOT_COPIED``.
    """
    counts: dict[tuple[int, str], Found] = {}
    for (index, source_offset), rows in itertools.groupby(_key_rows(batches), key=lambda r: r[:2]):
        kind, target_offset = _kind(list(rows))
        first = ((source_offset, target_offset),) if kind != SAME else ()
        counts[(index, kind)] = counts.get((index, kind), Found()) + Found(1, first)
    out = [
        {
            "range": index,
            "kind": kind,
            "records": f.records,
            "first_source": [s for s, _ in f.first],
            "first_target": [t for _, t in f.first],
        }
        for (index, kind), f in counts.items()
    ]
    if out:
        yield pa.RecordBatch.from_pylist(out, schema=FOUND_SCHEMA)


_KeyRow = tuple[int, int, int, int | None, bytes]


def _key_rows(batches: Iterator[pa.RecordBatch]) -> Iterator[_KeyRow]:
    """(range, source offset, side, target offset, digest) of each ``KEY_SCHEMA`` row."""
    for batch in batches:
        names = ("range", "source_offset", "side", "target_offset", "digest")
        yield from zip(*(batch.column(name).to_pylist() for name in names), strict=True)


def _kind(rows: list[_KeyRow]) -> tuple[str, int | None]:
    """The kind of a source offset's rows (sorted by side), and the target offset the copy wrote it to."""
    sides = [side for _, _, side, _, _ in rows]
    if sides == [SOURCE, TARGET]:
        (_, _, _, _, source_digest), (_, _, _, target_offset, target_digest) = rows
        return (SAME if source_digest == target_digest else DIFFER), target_offset
    if sides == [TARGET]:
        return ONLY_ON_TARGET, rows[0][3]
    if sides == [SOURCE]:
        target_offset = rows[0][3]
        return (NOT_COPIED if target_offset is None else ONLY_ON_SOURCE), target_offset
    raise PlanError(
        f"the verification read source offset {rows[0][1]} of {sides.count(SOURCE)} source and "
        f"{sides.count(TARGET)} target records: an offset map must pair at most one of each"
    )


def _range_of(bounds: _Bounds, side: int, topic: str, partition: int, offset: int) -> tuple[int, int, int]:
    """(start, end, index) of the range of ``side``'s ``topic``-``partition`` holding ``offset``."""
    starts, spans = bounds.get((side, topic, partition), ([], []))
    k = bisect.bisect_right(starts, offset) - 1
    if k < 0 or offset >= spans[k][1]:
        raise PlanError(
            f"the verification read {_SIDES[side]} offset {offset} of {topic}-{partition}, which no "
            "range of the plan holds"
        )
    return spans[k]


def _runs(batch: pa.RecordBatch) -> list[pa.RecordBatch]:
    """The batch cut where the side or the partition changes."""
    n = batch.num_rows
    if n == 0:
        return []
    changed = np.zeros(n - 1, dtype=bool)
    for name in ("side", "topic", "partition"):
        col = batch.column(name)
        changed |= pc.not_equal(col.slice(1), col.slice(0, n - 1)).to_numpy(zero_copy_only=False)
    cuts = [0, *(int(i) + 1 for i in np.flatnonzero(changed)), n]
    return [batch.slice(a, b - a) for a, b in itertools.pairwise(cuts)]


def verdicts(
    plan: VerifyPlan, rows: Iterable[Mapping[str, object]], found: Iterable[Mapping[str, Any]] = ()
) -> VerifyResult:
    """The result from the tasks' ``DIGEST_SCHEMA`` rows (ranges compared by digest) and
    ``FOUND_SCHEMA`` rows (ranges compared record by record). A side of a range without a
    row held no record (the digest of nothing); a side of a range with two digest rows was split
    over two tasks, whose digests cannot be joined: ``PlanError``."""
    digests: dict[tuple[int, int], SideDigest] = {}
    for row in rows:
        key = (int(str(row["side"])), int(str(row["range"])))
        if key in digests:
            raise PlanError(
                f"the {_SIDES[key[0]]} records of {plan.ranges[key[1]]} reached two Spark tasks: the "
                "reader split the partition (minPartitions / maxRecordsPerPartition?), so no digest of the "
                "range in order exists"
            )
        digests[key] = SideDigest(int(str(row["records"])), str(row["digest"]))
    compared = _comparisons(plan, found)
    nothing = RecordDigest().result()
    return VerifyResult(
        plan.flow,
        plan.run_id,
        tuple(
            _compared_verdict(r, compared[i])
            if r.by_record
            else PartitionVerdict(r, digests.get((SOURCE, i), nothing), digests.get((TARGET, i), nothing))
            for i, r in enumerate(plan.ranges)
        ),
    )


def _comparisons(plan: VerifyPlan, found: Iterable[Mapping[str, Any]]) -> dict[int, RecordComparison]:
    """Each by-record range's comparison, from the tasks' partial ``FOUND_SCHEMA`` rows."""
    kinds: dict[int, dict[str, Found]] = {i: {} for i, r in enumerate(plan.ranges) if r.by_record}
    for row in found:
        index, kind = int(row["range"]), str(row["kind"])
        if index not in kinds or kind not in KINDS:
            raise PlanError(
                f"the verification found {kind!r} records in range {index}, which it never compares"
            )
        first = tuple(zip(row["first_source"], row["first_target"], strict=True))
        kinds[index][kind] = kinds[index].get(kind, Found()) + Found(int(row["records"]), first)
    return {i: RecordComparison(**k) for i, k in kinds.items()}


def _compared_verdict(r: VerifyRange, compared: RecordComparison) -> PartitionVerdict:
    """A by-record range's verdict: the records each side holds, no digests."""
    return PartitionVerdict(
        r, SideDigest(compared.source_records, ""), SideDigest(compared.target_records, ""), compared
    )
