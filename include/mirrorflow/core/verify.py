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

A flow with transforms is verified against what its chain makes of the source (``digest_partitions``
applies the flow's transforms to the source side): records dropped on purpose, headers removed or
values changed by a transform are no differences; anything else the chain would not produce is.

What a verification cannot see: records outside the committed ranges (a record written to the remote
topic by anyone else after the last mirrored one, records an interrupted attempt left in a gap's
target range, records not mirrored yet or committed after the plan was made: lag), records the source
no longer holds (before its log start), and a difference that only the timestamp type, the offsets or
the compression make. It reports a difference where the two sides legitimately differ:
compacted topics (each cluster compacts on its own), remote topics stamped with ``LogAppendTime``
(the broker replaces the mirrored timestamp), and records deleted from the target but not the source
(target retention: pass ``target_log_starts`` to ``verify_plan`` to start after them).

Pure values and algorithms, no I/O, no pyspark: planning runs where pyspark is not installed, and
the digest runs inside Spark tasks (``mapInArrow``) and in unit tests alike.
"""

from __future__ import annotations

import bisect
import hashlib
import itertools
import struct
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mirrorflow.config.transforms import TransformConfig
from mirrorflow.core import documents
from mirrorflow.core.progress import Batch
from mirrorflow.core.transforms import Chain, Record
from mirrorflow.core.translation import OffsetTranslator, runs
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

VERIFY_PLAN_VERSION = 1
# Names the record encoding below; part of the hash (BLAKE2b personalisation), so digests of two
# encodings never compare equal by accident. Change it with the encoding.
DIGEST_SCHEME = "mirrorflow-v1"

TP = tuple[str, int]
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
    """

    topic: str
    partition: int
    remote_topic: str
    source_start: int
    source_end: int
    target_start: int
    target_end: int

    def __post_init__(self) -> None:
        if not 0 <= self.source_start < self.source_end or not 0 <= self.target_start <= self.target_end:
            raise PlanError(f"{self}: a range to verify must be non-empty on the source, and not negative")
        if self.records > self.source_end - self.source_start:
            raise PlanError(f"{self}: more target records than source offsets")

    @property
    def records(self) -> int:
        """The records the mirror committed for the range."""
        return self.target_end - self.target_start

    def __str__(self) -> str:
        return (
            f"{self.topic}-{self.partition} [{self.source_start}, {self.source_end}) -> "
            f"{self.remote_topic}-{self.partition} [{self.target_start}, {self.target_end})"
        )


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
            lambda raw: cls(raw["flow"], raw["run_id"], tuple(VerifyRange(**r) for r in raw["ranges"])),
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


def verify_plan(
    flow_name: str,
    run_id: str,
    batches: Iterable[Batch],
    log_starts: Mapping[TP, int],
    topics: frozenset[str] = frozenset(),
    *,
    target_log_starts: Mapping[TP, int] | None = None,
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
                ranges.append(found)
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
    target_start = OffsetTranslator(stretch).translate(source_start)
    assert target_start is not None  # source_start is at or after the stretch's first offset
    if target_log_starts is not None:
        kept = target_log_starts.get((first.remote_topic, first.partition), 0)
        if kept > target_start:
            if kept >= last.target_end:
                return None  # every mirrored record of the stretch is gone from the target
            # The source offset of the record at target offset ``kept``: the target range is dense.
            source_start, target_start = _source_of(stretch, kept), kept
    return VerifyRange(
        first.topic,
        first.partition,
        first.remote_topic,
        source_start,
        last.source_end,
        target_start,
        last.target_end,
    )


def _source_of(stretch: list[Batch], target: int) -> int:
    """The source offset of the mirrored record at ``target`` (within the stretch's target range)."""
    for b in stretch:
        if b.target_start <= target < b.target_end:
            points = runs(b)
            k = bisect.bisect_right([t for _, t in points], target) - 1
            src, tgt = points[k]
            return src + (target - tgt)
    raise PlanError(f"target offset {target} lies outside the batches of {stretch[0].topic}")


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

    def update_arrow(self, batch: pa.RecordBatch) -> None:
        """The records of a batch of Spark's Kafka source (``key``, ``value``, ``headers``,
        ``timestamp`` columns), in row order; the same digest as ``update`` for each row."""
        rows = arrow_rows(batch)
        self._hash.update(b"".join(_encode(key, value, headers, ms) for key, value, headers, ms in rows))
        self.records += len(rows)

    def update_transformed(self, batch: pa.RecordBatch, chain: Chain, topic: str, partition: int) -> None:
        """What ``chain`` makes of a batch of source records of ``topic``-``partition`` (the
        ``offset`` column too): the digest of what a flow with transforms writes."""
        offsets = batch.column("offset").to_pylist()
        records = [
            Record(topic, partition, offset, ms, key, value, tuple(headers))
            for offset, (key, value, headers, ms) in zip(offsets, arrow_rows(batch), strict=True)
        ]
        for r in chain.apply(records):
            self.update(r.key, r.value, r.headers, r.timestamp)

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


def digest_records(records: Iterable[DigestRecord]) -> SideDigest:
    """The digest of ``records`` (key, value, headers, timestamp in ms), in the order given."""
    digest = RecordDigest()
    for key, value, headers, timestamp_ms in records:
        digest.update(key, value, headers, timestamp_ms)
    return digest.result()


# ----------------------------------------------------------------------------------------- result


@dataclass(frozen=True)
class PartitionVerdict:
    """One range as each cluster holds it."""

    range: VerifyRange
    source: SideDigest
    target: SideDigest

    @property
    def matches(self) -> bool:
        return self.source == self.target

    def describe(self) -> str:
        verdict = "match" if self.matches else "DIFFER"
        return (
            f"{self.range}: {verdict} (source {self.source.records} records {self.source.digest[:16]}, "
            f"target {self.target.records} records {self.target.digest[:16]})"
        )


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
        """One line: how many ranges and records were compared, and which ranges differ."""
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
        return line

    def to_json(self) -> str:
        return documents.dump(("digest_scheme", DIGEST_SCHEME), asdict(self))

    @classmethod
    def from_json(cls, text: str, source: str = "verify result") -> VerifyResult:
        return documents.load(
            text,
            ("digest_scheme", DIGEST_SCHEME),
            lambda raw: cls(
                raw["flow"],
                raw["run_id"],
                tuple(
                    PartitionVerdict(
                        VerifyRange(**v["range"]), SideDigest(**v["source"]), SideDigest(**v["target"])
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
DIGEST_SCHEMA = pa.schema(
    [
        ("side", pa.int32()),
        ("range", pa.int32()),
        ("records", pa.int64()),
        ("digest", pa.string()),
    ]
)
DIGEST_DDL = "side int, range int, records bigint, digest string"


@dataclass
class _Side:
    """The running digest of one side of one range inside a task."""

    range: int
    start: int
    end: int
    digest: RecordDigest = field(default_factory=RecordDigest)
    last_offset: int = -1


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


def digest_partitions(
    batches: Iterator[pa.RecordBatch], plan: VerifyPlan, transforms: Sequence[TransformConfig] = ()
) -> Iterator[pa.RecordBatch]:
    """Digest the records one Spark task reads (``DIGEST_INPUT_COLUMNS``); yield one
    ``DIGEST_SCHEMA`` row per side of each range seen. With ``transforms`` (the flow's), the source
    side is digested as the flow's chain makes it: records dropped on purpose are not differences.

    Relies on each range's records reaching one task, in offset order, and checks it: within a range
    offsets must rise strictly (else ``PlanError``), and the caller refuses a range whose records
    reached two tasks. Ranges of several partitions may share a task, one after another or even
    interleaved; each record counts for the range holding its offset.
    """
    bounds = _bounds(plan)
    chain = Chain(transforms)
    seen: dict[tuple[int, int], _Side] = {}
    for batch in batches:
        for run in _runs(batch):
            side = int(run.column("side")[0].as_py())
            topic, partition = run.column("topic")[0].as_py(), int(run.column("partition")[0].as_py())
            while run.num_rows:
                offsets = run.column("offset").to_numpy()
                state = _state(seen, bounds, side, topic, partition, int(offsets[0]))
                # The leading records inside the range (a batch may run on into the next range).
                outside = np.flatnonzero((offsets < state.start) | (offsets >= state.end))
                inside = int(outside[0]) if outside.size else run.num_rows
                piece, run = run.slice(0, inside), run.slice(inside)
                offsets = offsets[:inside]
                if offsets[0] <= state.last_offset or not bool(np.all(offsets[1:] > offsets[:-1])):
                    raise PlanError(
                        f"the verification read {_SIDES[side]} records of {topic}-{partition} out of "
                        f"offset order (offsets {offsets[0]}..{offsets[-1]} after {state.last_offset}): "
                        "the digest would not be of the range in order"
                    )
                state.last_offset = int(offsets[-1])
                if chain and side == SOURCE:
                    state.digest.update_transformed(piece, chain, topic, partition)
                else:
                    state.digest.update_arrow(piece)
    rows = [
        {
            "side": side,
            "range": s.range,
            "records": s.digest.records,
            "digest": s.digest.result().digest,
        }
        for (side, _), s in seen.items()
    ]
    if rows:
        yield pa.RecordBatch.from_pylist(rows, schema=DIGEST_SCHEMA)


def _state(
    seen: dict[tuple[int, int], _Side], bounds: _Bounds, side: int, topic: str, partition: int, offset: int
) -> _Side:
    """The running digest of the range of ``side``'s ``topic``-``partition`` holding ``offset``."""
    starts, spans = bounds.get((side, topic, partition), ([], []))
    k = bisect.bisect_right(starts, offset) - 1
    if k < 0 or offset >= spans[k][1]:
        raise PlanError(
            f"the verification read {_SIDES[side]} offset {offset} of {topic}-{partition}, which no "
            "range of the plan holds"
        )
    start, end, index = spans[k]
    return seen.setdefault((side, index), _Side(index, start, end))


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


def verdicts(plan: VerifyPlan, rows: Iterable[Mapping[str, object]]) -> VerifyResult:
    """The result from the tasks' ``DIGEST_SCHEMA`` rows. A side of a range without a row held no
    record (the digest of nothing); a side of a range with two rows was split over two tasks, whose
    digests cannot be joined: ``PlanError``."""
    found: dict[tuple[int, int], SideDigest] = {}
    for row in rows:
        key = (int(str(row["side"])), int(str(row["range"])))
        if key in found:
            raise PlanError(
                f"the {_SIDES[key[0]]} records of {plan.ranges[key[1]]} reached two Spark tasks: the "
                "reader split the partition (minPartitions / maxRecordsPerPartition?), so no digest of the "
                "range in order exists"
            )
        found[key] = SideDigest(int(str(row["records"])), str(row["digest"]))
    nothing = RecordDigest().result()
    return VerifyResult(
        plan.flow,
        plan.run_id,
        tuple(
            PartitionVerdict(r, found.get((SOURCE, i), nothing), found.get((TARGET, i), nothing))
            for i, r in enumerate(plan.ranges)
        ),
    )
