"""The Arrow side of a verification: the schemas Spark's tasks read and write, and the functions
they run over Arrow batches (through ``mapInArrow``).

A task reads records of Spark's Kafka source (``DIGEST_INPUT_SCHEMA``; ``input_batch`` makes the
same from records read elsewhere) and either digests each side of each range of a verify plan
(``digest_partitions``, one ``DIGEST_SCHEMA`` row per side of a range) or, for a range compared
record by record, keys each record by its source offset (``record_keys``, ``KEY_SCHEMA``; a target
record's source offset is where the range's ``OffsetMap`` says the copy read it), which
``compare_records`` pairs and counts (``FOUND_SCHEMA``) for ``core.verdicts``.

Invariant: a digest is of one side of a range, whole and in offset order: the records of a task
are cut into the ranges holding their offsets, and records out of offset order or outside every
range are refused (``PlanError``); a side split over two tasks is refused by ``verdicts``.

A flow with transforms is verified against what its chain makes of the source (the tasks apply the
flow's transforms to the source side): records dropped on purpose, headers removed or values changed
by a transform are no differences; anything else the chain would not produce is. Where schemas
travel, the source side is compared with its schema ids mapped as the plan's map says
(``VerifyPlan.schema_ids``): a target record whose id resolves to another schema is a difference.

No I/O, no pyspark: the functions run inside Spark tasks and in unit tests alike.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mirrorflow.config.transforms import TransformConfig
from mirrorflow.core.digest import DigestRecord, RecordDigest, record_digest
from mirrorflow.core.transforms import Chain, Encodable, Record
from mirrorflow.core.verdicts import (
    DIFFER,
    NOT_COPIED,
    ONLY_ON_SOURCE,
    ONLY_ON_TARGET,
    SAME,
    Found,
)
from mirrorflow.core.verify_plan import SIDES, SOURCE, TARGET, OffsetMap, VerifyPlan, VerifyRange, span
from mirrorflow.errors import PlanError

__all__ = [
    "DIGEST_DDL",
    "DIGEST_INPUT_COLUMNS",
    "DIGEST_INPUT_DDL",
    "DIGEST_SCHEMA",
    "FOUND_DDL",
    "KEY_DDL",
    "arrow_rows",
    "compare_records",
    "digest_partitions",
    "input_batch",
    "record_keys",
]

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
                        f"the verification read {SIDES[side]} records of {topic}-{partition} out of "
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
    chain = Chain(transforms, plan.schema_ids)
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
    chain = Chain(transforms, plan.schema_ids)
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
    """The ``FOUND_SCHEMA`` rows of one task: how many records of each kind (``verdicts.KINDS``) it found in
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
            f"the verification read {SIDES[side]} offset {offset} of {topic}-{partition}, which no "
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
