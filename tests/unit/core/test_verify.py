"""The verify step without clusters: the record digest, the verify plan from a batch log, the digesting
Spark task body on hand-made Arrow batches, the verdicts, and the files they travel in."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import struct
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from mirrorflow.app.verify import (
    load_verify_plan,
    load_verify_result,
    save_verify_result,
    write_verify_plan,
)
from mirrorflow.config.model import MirrorConfig, load_config
from mirrorflow.config.transforms import PredicateConfig, TransformConfig
from mirrorflow.core.progress import Batch
from mirrorflow.core.verify import (
    DIGEST_SCHEME,
    DigestRecord,
    Found,
    OffsetMap,
    PartitionVerdict,
    RecordComparison,
    RecordDigest,
    SideDigest,
    VerifyPlan,
    VerifyRange,
    VerifyResult,
    arrow_rows,
    compacts,
    compare_records,
    digest_partitions,
    digest_records,
    record_keys,
    stamps_append_time,
    verdicts,
    verify_plan,
)
from mirrorflow.errors import PlanError
from mirrorflow.store.offsets_store import OffsetsStore
from mirrorflow.store.run_documents import find_document, save_document

FLOW = "primary->backup"
T = 1_000_000_000_000
A: DigestRecord = (b"k1", b"v1", [("h", b"1")], T)
B: DigestRecord = (b"k2", b"v2", [], T + 1)


def digest(*records: DigestRecord) -> SideDigest:
    return digest_records(records)


# ------------------------------------------------------------------------------------------ digest


def test_the_digest_is_blake2b_over_the_documented_encoding() -> None:
    encoded = (
        struct.pack(">q", T)
        + struct.pack(">i", 2) + b"k1"
        + struct.pack(">i", -1)  # value None
        + struct.pack(">i", 2)  # headers
        + struct.pack(">i", 1) + b"h" + struct.pack(">i", 1) + b"1"
        + struct.pack(">i", 1) + b"n" + struct.pack(">i", -1)
    )  # fmt: skip
    expected = hashlib.blake2b(encoded, digest_size=32, person=DIGEST_SCHEME.encode()).hexdigest()

    assert digest((b"k1", None, [("h", b"1"), ("n", None)], T)) == SideDigest(1, expected)
    assert digest() == SideDigest(0, hashlib.blake2b(digest_size=32, person=b"mirrorflow-v1").hexdigest())


def test_the_digest_is_deterministic_and_counts_records() -> None:
    assert digest(A, B) == digest(A, B)
    assert digest(A, B).records == 2
    assert len(digest(A).digest) == 64


def test_the_digest_depends_on_record_order() -> None:
    assert digest(A, B) != digest(B, A)
    assert digest(A, B).records == digest(B, A).records


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ((None, b"v", [], T), (b"", b"v", [], T)),  # null key vs empty key
        ((b"k", None, [], T), (b"k", b"", [], T)),  # tombstone vs empty value
        ((b"k", b"v", [("h", None)], T), (b"k", b"v", [("h", b"")], T)),  # null vs empty header value
        ((b"ab", b"c", [], T), (b"a", b"bc", [], T)),  # the key/value boundary moved
        ((b"k", b"v", [("ab", b"c")], T), (b"k", b"v", [("a", b"bc")], T)),  # header name/value boundary
        ((b"k", b"v", [], T), (b"k", b"v", [("h", b"")], T)),  # no header vs one empty header
        ((b"k", b"v", [], T), (b"k", b"v", [], T + 1)),  # timestamp, one millisecond apart
    ],
)
def test_records_that_differ_in_anything_kept_digest_differently(
    one: DigestRecord, other: DigestRecord
) -> None:
    assert digest(one) != digest(other)


def test_header_order_and_repeats_count() -> None:
    headers = [("trace", b"a"), ("source", b"demo"), ("trace", b"b")]

    assert digest((b"k", b"v", headers, T)) != digest((b"k", b"v", headers[::-1], T))
    assert digest((b"k", b"v", headers, T)) != digest((b"k", b"v", headers[:2], T))


def test_record_boundaries_count() -> None:
    # One record with two headers is not two records, nor one record and a header split off.
    assert digest((b"k", b"v", [("a", b"1"), ("b", b"2")], T)) != digest(
        (b"k", b"v", [("a", b"1")], T), (b"k", b"v", [("b", b"2")], T)
    )


def spark_batch(
    records: Sequence[DigestRecord],
    offsets: Sequence[int] | None = None,
    side: int = 0,
    topic: str = "orders",
    partition: int = 0,
    null_headers: bool = True,
) -> pa.RecordBatch:
    """Records as Spark's Kafka source hands them to ``mapInArrow``: timestamps in microseconds, a
    record without headers with a null list (or an empty one)."""
    n = len(records)
    header_type = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    headers = [
        [{"key": k, "value": v} for k, v in r[2]] if r[2] or not null_headers else None for r in records
    ]
    return pa.RecordBatch.from_arrays(
        [
            pa.array([side] * n, pa.int32()),
            pa.array([topic] * n, pa.string()),
            pa.array([partition] * n, pa.int32()),
            pa.array(list(offsets) if offsets is not None else range(n), pa.int64()),
            pa.array([r[0] for r in records], pa.binary()),
            pa.array([r[1] for r in records], pa.binary()),
            pa.array([r[3] * 1000 for r in records], pa.timestamp("us", tz="UTC")),
            pa.array(headers, header_type),
        ],
        names=["side", "topic", "partition", "offset", "key", "value", "timestamp", "headers"],
    )


RECORDS: list[DigestRecord] = [
    (None, b"v0", [("trace", b"\x00\xff"), ("source", b"demo"), ("trace", None)], T),
    (b"k1", None, [], T + 1),
    (b"", b"", [("e", b"")], T - 5),
    (b"k3", b"\x00" * 10, [], -1),  # no timestamp (magic v0)
    (b"k4", b"v4", [("x", b"y")], T + 4),
]


@pytest.mark.parametrize("null_headers", [True, False])
def test_the_arrow_path_digests_as_the_record_path(null_headers: bool) -> None:
    whole, split = RecordDigest(), RecordDigest()
    batch = spark_batch(RECORDS, null_headers=null_headers)
    whole.update_many(arrow_rows(batch))
    split.update_many(arrow_rows(batch.slice(0, 2)))
    split.update_many(arrow_rows(batch.slice(2, 0)))
    split.update_many(arrow_rows(batch.slice(2)))

    assert whole.result() == split.result() == digest(*RECORDS)


# --------------------------------------------------------------------------------------- the plan


def batch(
    source: tuple[int, int],
    target: tuple[int, int],
    *sync_points: tuple[int, int],
    topic: str = "orders",
    partition: int = 0,
    remote: str | None = None,
) -> Batch:
    remote_topic = remote or f"primary.{topic}"
    b = Batch(topic, partition, remote_topic, *source, *target, target[1] - target[0], 0, sync_points)
    b.validate()
    return b


def vrange(
    source: tuple[int, int], target: tuple[int, int], topic: str = "orders", partition: int = 0
) -> VerifyRange:
    return VerifyRange(topic, partition, f"primary.{topic}", *source, *target)


def test_a_gapless_log_is_one_range_per_partition_from_the_first_batch() -> None:
    log = [batch((0, 10), (5, 15)), batch((10, 25), (15, 30)), batch((0, 4), (0, 4), partition=1)]

    plan = verify_plan(FLOW, "r1", log[::-1], {("orders", 0): 0, ("orders", 1): 0})

    assert plan == VerifyPlan(FLOW, "r1", (vrange((0, 25), (5, 30)), vrange((0, 4), (0, 4), partition=1)))
    assert plan.records == 29


def test_a_moved_log_start_starts_at_the_target_copy_of_the_first_record_left() -> None:
    # Batch 2: records 10-14, commit marker 15, records 16-19 -> target 15-24.
    log = [batch((0, 10), (0, 10)), batch((10, 20), (10, 19), (16, 15))]

    def start(log_start: int) -> tuple[int, int] | None:
        plan = verify_plan(FLOW, "r1", log, {("orders", 0): log_start})
        return (plan.ranges[0].source_start, plan.ranges[0].target_start) if plan.ranges else None

    assert [start(s) for s in (0, 7, 10, 14, 15, 16, 19)] == [
        (0, 0), (7, 7), (10, 10), (14, 14), (15, 15), (16, 15), (19, 18),
    ]  # fmt: skip
    # The marker's offset has no record: from 15 or 16, the source range starts with record 16.
    assert verify_plan(FLOW, "r1", log, {("orders", 0): 15}).ranges[0] == vrange((15, 20), (15, 19))
    assert verify_plan(FLOW, "r1", log, {("orders", 0): 20}).ranges == ()  # everything deleted
    assert verify_plan(FLOW, "r1", log, {("orders", 0): 99}).ranges == ()


def test_a_log_start_before_the_first_batch_starts_at_the_first_batch() -> None:
    log = [batch((100, 110), (0, 10))]

    assert verify_plan(FLOW, "r1", log, {("orders", 0): 3}).ranges == (vrange((100, 110), (0, 10)),)


def test_only_the_chosen_topics_are_planned() -> None:
    log = [batch((0, 5), (0, 5)), batch((0, 3), (0, 3), topic="payments")]
    # A topic left out needs no log start (e.g. deleted from the source).
    plan = verify_plan(FLOW, "r1", log, {("payments", 0): 1}, frozenset({"payments"}))

    assert plan.ranges == (vrange((1, 3), (1, 3), topic="payments"),)
    with pytest.raises(PlanError, match="no log start offset given for orders-0"):
        verify_plan(FLOW, "r1", log, {("payments", 0): 1})


def test_a_gap_splits_the_history_and_neither_side_of_it_is_compared() -> None:
    # Records 10-19 were deleted before they were mirrored; an interrupted attempt had left 3 of
    # them on the target (10-12), which the source no longer has.
    log = [batch((0, 10), (0, 10)), batch((20, 30), (13, 23))]

    stale = verify_plan(FLOW, "r1", log, {("orders", 0): 4})
    assert stale.ranges == (vrange((4, 10), (4, 10)), vrange((20, 30), (13, 23)))
    # The log start is past the gap whenever the gap was found: one range, after the gap.
    now = verify_plan(FLOW, "r1", log, {("orders", 0): 20})
    assert now.ranges == (vrange((20, 30), (13, 23)),)
    assert verify_plan(FLOW, "r1", log, {("orders", 0): 25}).ranges == (vrange((25, 30), (18, 23)),)


def test_a_new_remote_topic_starts_a_new_range() -> None:
    log = [batch((0, 10), (0, 10)), batch((10, 20), (10, 20), remote="other.orders")]

    plan = verify_plan(FLOW, "r1", log, {("orders", 0): 0})

    assert plan.ranges == (
        vrange((0, 10), (0, 10)),
        VerifyRange("orders", 0, "other.orders", 10, 20, 10, 20),
    )


def test_target_log_starts_start_at_the_first_record_the_target_still_holds() -> None:
    # Source 0-9 -> target 0-9; records 10-14, marker 15, 16-19 -> target 10-18.
    log = [batch((0, 10), (0, 10)), batch((10, 20), (10, 19), (16, 15))]

    def plan(target_start: int, source_start: int = 0) -> tuple[VerifyRange, ...]:
        starts = {("primary.orders", 0): target_start}
        return verify_plan(FLOW, "r1", log, {("orders", 0): source_start}, target_log_starts=starts).ranges

    assert plan(0) == (vrange((0, 20), (0, 19)),)
    assert plan(12) == (vrange((12, 20), (12, 19)),)
    assert plan(15) == (vrange((16, 20), (15, 19)),)  # target 15 holds source record 16
    assert plan(15, source_start=17) == (vrange((17, 20), (16, 19)),)  # the source is the later
    assert plan(19) == ()


def test_verify_ranges_refuse_what_no_mirror_commits() -> None:
    with pytest.raises(PlanError, match="non-empty on the source"):
        vrange((5, 5), (0, 0))
    with pytest.raises(PlanError, match="more target records than source offsets"):
        vrange((0, 2), (0, 3))
    with pytest.raises(PlanError, match=r"target ranges of primary\.orders-0 overlap at offset 4"):
        VerifyPlan(FLOW, "r1", (vrange((0, 5), (0, 5)), vrange((10, 15), (4, 9))))
    with pytest.raises(PlanError, match="source ranges of orders-0 overlap at offset 4"):
        VerifyPlan(FLOW, "r1", (vrange((0, 5), (0, 5)), vrange((4, 15), (5, 9))))
    assert vrange((0, 5), (3, 3)).records == 0  # only markers / aborted records: nothing to compare


# ----------------------------------------------------------------------------- the Spark task body


def rows(plan: VerifyPlan, *batches: pa.RecordBatch) -> list[dict[str, object]]:
    return [r for out in digest_partitions(iter(batches), plan) for r in out.to_pylist()]


TWO = VerifyPlan(
    FLOW, "r1", (vrange((0, 3), (10, 12)), vrange((5, 8), (12, 15)), vrange((0, 2), (0, 2), partition=1))
)


def test_a_task_digests_each_range_on_each_side_in_offset_order() -> None:
    # Source 0-0: records 0, 2 (a marker at 1); target 10-11.
    found = rows(
        TWO,
        spark_batch([A, B], offsets=[0, 2]),
        spark_batch([B, A], side=1, topic="primary.orders", offsets=[10, 11]),
        spark_batch([A], partition=1),
    )

    assert found == [
        {"side": 0, "range": 0, "records": 2, "digest": digest(A, B).digest},
        {"side": 1, "range": 0, "records": 2, "digest": digest(B, A).digest},
        {"side": 0, "range": 2, "records": 1, "digest": digest(A).digest},
    ]


def test_a_batch_running_from_one_range_into_the_next_counts_each_record_for_its_own() -> None:
    # Both gap-split ranges of orders-0, and an interleaved partition, in one task's batches.
    found = rows(
        TWO,
        spark_batch([A, B, A, B], offsets=[1, 2, 5, 6]),
        spark_batch([B], partition=1),
        spark_batch([A], offsets=[7]),
    )

    assert {(r["side"], r["range"]): (r["records"], r["digest"]) for r in found} == {
        (0, 0): (2, digest(A, B).digest),
        (0, 1): (3, digest(A, B, A).digest),
        (0, 2): (1, digest(B).digest),
    }


@pytest.mark.parametrize(
    ("batches", "message"),
    [
        ([spark_batch([A, B], offsets=[2, 1])], "out of offset order"),
        ([spark_batch([A], offsets=[1]), spark_batch([B], offsets=[1])], "out of offset order"),
        ([spark_batch([A], offsets=[3])], "offset 3 of orders-0, which no range of the plan holds"),
        ([spark_batch([A], topic="primary.orders")], "source offset 0 of primary.orders-0, which no range"),
    ],
)
def test_a_task_refuses_records_out_of_order_or_outside_the_plan(
    batches: list[pa.RecordBatch], message: str
) -> None:
    with pytest.raises(PlanError, match=message):
        rows(TWO, *batches)


def test_verdicts_compare_each_range_and_a_side_without_records_digests_nothing() -> None:
    found = rows(
        TWO,
        spark_batch([A, B], offsets=[0, 2]),
        spark_batch([A, B], side=1, topic="primary.orders", offsets=[10, 11]),
        spark_batch([A], offsets=[5]),
        spark_batch([A, B], side=1, topic="primary.orders", offsets=[12, 13]),
    )

    result = verdicts(TWO, found)

    nothing = digest()
    assert result == VerifyResult(
        FLOW,
        "r1",
        (
            PartitionVerdict(TWO.ranges[0], digest(A, B), digest(A, B)),
            PartitionVerdict(TWO.ranges[1], digest(A), digest(A, B)),
            PartitionVerdict(TWO.ranges[2], nothing, nothing),
        ),
    )
    assert [v.matches for v in result.partitions] == [True, False, True]
    assert result.mismatches == (result.partitions[1],)
    assert result.summary() == (
        f"verified flow {FLOW} run r1: 3 ranges, 3 source records, 4 target records, 2 match, 1 differ: "
        f"orders-0 [5, 8) -> primary.orders-0 [12, 15): DIFFER (source 1 records {digest(A).digest[:16]}, "
        f"target 2 records {digest(A, B).digest[:16]})"
    )


def test_a_range_split_over_two_tasks_is_refused() -> None:
    first = rows(TWO, spark_batch([A], offsets=[0]))
    second = rows(TWO, spark_batch([B], offsets=[2]))

    with pytest.raises(PlanError, match=r"source records of orders-0 \[0, 3\) .* reached two Spark tasks"):
        verdicts(TWO, first + second)


# ---------------------------------------------------------------------- compared record by record


def test_compacted_and_logappendtime_ranges_carry_their_offset_map_from_their_first_record() -> None:
    # orders-0: source 5, 9, 14 and 19 held no record (compacted before the copy, markers).
    log = [
        batch((0, 10), (0, 8), (6, 5)),
        batch((10, 20), (8, 16), (15, 12)),
        batch((0, 4), (0, 4), topic="plain"),
    ]
    starts = {("orders", 0): 3, ("plain", 0): 0}

    plan = verify_plan(FLOW, "r1", log, starts, compacted={"orders"}, log_append_time={"primary.plain"})

    assert plan.ranges == (
        VerifyRange("orders", 0, "primary.orders", 3, 20, 3, 16, True, ((3, 3), (6, 5), (10, 8), (15, 12))),
        VerifyRange("plain", 0, "primary.plain", 0, 4, 0, 4, runs=((0, 0),), log_append_time=True),
    )
    assert [r.by_record for r in plan.ranges] == [True, True]
    # The target no longer holds offsets 3-5: the map starts at source offset 7, target offset 6.
    kept = verify_plan(
        FLOW, "r1", log, starts, compacted={"orders"}, target_log_starts={("primary.orders", 0): 6}
    )
    assert kept.ranges[0].runs == ((7, 6), (10, 8), (15, 12))
    assert (kept.ranges[1].runs, kept.ranges[1].by_record) == ((), False)


def test_an_offset_map_maps_target_offsets_to_source_ones_and_back() -> None:
    offsets = OffsetMap(((3, 3), (6, 5), (10, 8)), 10)

    assert offsets.sources(np.array([3, 4, 5, 7, 8, 9])).tolist() == [3, 4, 6, 8, 10, 11]
    # -1: no record was copied from there.
    assert offsets.targets(np.array([2, 3, 4, 5, 6, 8, 9, 11, 12])).tolist() == [
        -1,
        3,
        4,
        -1,
        5,
        7,
        -1,
        9,
        -1,
    ]


@pytest.mark.parametrize(
    "fields",
    [
        {"compacted": True},  # records, but no map
        {"runs": ((0, 0),)},  # a map for a range compared by digest
        {"compacted": True, "runs": ((0, 1),)},  # not from the target start
        {"compacted": True, "runs": ((0, 0), (2, 3))},  # the first run (0-2) overlaps the second
        {"compacted": True, "runs": ((8, 0),)},  # source offsets 8-12, past the range's end
    ],
)
def test_a_range_refuses_an_offset_map_that_does_not_fit(fields: dict[str, object]) -> None:
    with pytest.raises(PlanError, match="offset map"):
        VerifyRange("orders", 0, "primary.orders", 0, 10, 0, 5, **fields)  # type: ignore[arg-type]


def test_which_topic_configs_compact_and_stamp_the_append_time() -> None:
    policies = ("compact", "delete", "compact,delete", "delete, compact")
    assert [compacts({"cleanup.policy": p}) for p in policies] == [True, False, True, True]
    assert stamps_append_time({"message.timestamp.type": "LogAppendTime"})
    assert not stamps_append_time({"message.timestamp.type": "CreateTime"})


# orders-0: source 0, 1 copied to target 0, 1 and 3, 4 to 2, 3 (2 and 5 held no record then).
KEYED = VerifyPlan(
    FLOW, "r1", (VerifyRange("orders", 0, "primary.orders", 0, 6, 0, 4, True, ((0, 0), (3, 2))),)
)


def keyed_rows(
    *batches: pa.RecordBatch, transforms: Sequence[TransformConfig] = ()
) -> list[dict[str, object]]:
    """What the tasks find in ``KEYED``: its records keyed, paired by source offset, compared."""
    keys = [r for out in record_keys(iter(batches), KEYED, transforms) for r in out.to_pylist()]
    ordered = sorted(keys, key=lambda r: (r["range"], r["source_offset"], r["side"]))
    return [
        r for out in compare_records(iter([pa.RecordBatch.from_pylist(ordered)])) for r in out.to_pylist()
    ]


def test_records_are_keyed_by_source_offset_and_each_offset_is_found_as_one_kind() -> None:
    # The source holds 1, 2 (never copied) and 4; the target holds the copies of 0, 3 and 4.
    source = spark_batch([A, B, A], offsets=[1, 2, 4])
    target = spark_batch([A, B, B], side=1, topic="primary.orders", offsets=[0, 2, 3])

    keyed = [r for out in record_keys(iter([source, target]), KEYED) for r in out.to_pylist()]
    assert [(r["side"], r["source_offset"], r["target_offset"]) for r in keyed] == [
        (0, 1, 1),
        (0, 2, None),
        (0, 4, 3),
        (1, 0, 0),
        (1, 3, 2),
        (1, 4, 3),
    ]
    result = verdicts(KEYED, [], keyed_rows(source, target))

    (verdict,) = result.partitions
    assert verdict == PartitionVerdict(
        KEYED.ranges[0],
        SideDigest(3, ""),
        SideDigest(3, ""),
        RecordComparison(
            differ=Found(1, ((4, 3),)),
            not_copied=Found(1, ((2, None),)),
            only_on_source=Found(1, ((1, 1),)),
            only_on_target=Found(2, ((0, 0), (3, 2))),
        ),
    )
    assert verdict.describe() == (
        "orders-0 [0, 6) -> primary.orders-0 [0, 4): DIFFER record by record (0 the same on both; 1 differ: "
        "source offset 4 (target offset 3); 1 on the source were never copied: source offset 2; 1 compacted "
        "away on the target: source offset 1 (target offset 1); 2 compacted away on the source after they "
        "were copied: source offset 0 (target offset 0), source offset 3 (target offset 2))"
    )


def test_with_transforms_source_records_are_keyed_as_the_chain_makes_them() -> None:
    chain = (
        TransformConfig("drop", "Filter", (), PredicateConfig("dead", "RecordIsTombstone")),
        TransformConfig("tag", "InsertHeader", (("header", "by"), ("value.literal", "mirror"))),
    )
    tagged: DigestRecord = (A[0], A[1], [*A[2], ("by", b"mirror")], A[3])
    # Source 0 and 3 copied (tagged) to target 0 and 2; the tombstone at 1 dropped on purpose.
    source = spark_batch([A, (b"k", None, [], T), A], offsets=[0, 1, 3])
    target = spark_batch([tagged, tagged], side=1, topic="primary.orders", offsets=[0, 2])

    keys = [r for out in record_keys(iter([source, target]), KEYED, chain) for r in out.to_pylist()]
    found = keyed_rows(source, target, transforms=chain)

    assert [(r["side"], r["source_offset"]) for r in keys] == [(0, 0), (0, 3), (1, 0), (1, 3)]
    assert verdicts(KEYED, [], found).partitions[0].records == RecordComparison(same=Found(2))


def test_only_in_a_compacted_range_is_a_record_on_one_side_no_difference() -> None:
    compacted = RecordComparison(same=Found(3), only_on_target=Found(1, ((5, 5),)))
    stamped = VerifyRange("orders", 0, "primary.orders", 0, 6, 0, 4, runs=((0, 0),), log_append_time=True)
    as_compacted = dataclasses.replace(stamped, compacted=True)

    assert PartitionVerdict(as_compacted, SideDigest(3, ""), SideDigest(4, ""), compacted).matches
    missing = PartitionVerdict(stamped, SideDigest(3, ""), SideDigest(4, ""), compacted)
    assert not missing.matches
    assert missing.describe().endswith(
        "(3 the same on both; 1 missing on the source: source offset 5 (target offset 5))"
    )


def test_what_tasks_found_adds_up_and_names_the_first_offsets() -> None:
    def row(records: int, first: list[int]) -> dict[str, object]:
        return {
            "range": 0,
            "kind": "only_on_target",
            "records": records,
            "first_source": first,
            "first_target": first,
        }

    result = verdicts(KEYED, [], [row(4, [10, 12, 14, 16]), row(3, [11, 13, 15])])

    assert result.partitions[0].records == RecordComparison(
        only_on_target=Found(7, tuple((i, i) for i in range(10, 15)))
    )
    assert Found(7, ((1, 1),)).describe() == "source offset 1 (target offset 1) and 6 more"
    with pytest.raises(PlanError, match="found 'gone' records in range 0"):
        verdicts(KEYED, [], [{**row(1, [1]), "kind": "gone"}])


# ------------------------------------------------------------------------------------------- files


def test_plan_and_result_survive_json() -> None:
    result = VerifyResult(
        FLOW,
        "r1",
        (
            PartitionVerdict(TWO.ranges[0], digest(A), digest(A)),
            PartitionVerdict(TWO.ranges[1], digest(A), SideDigest(0, digest().digest)),
        ),
    )

    assert VerifyPlan.from_json(TWO.to_json()) == TWO
    assert VerifyResult.from_json(result.to_json()) == result
    keyed = VerifyResult(
        FLOW,
        "r1",
        (
            PartitionVerdict(
                KEYED.ranges[0],
                SideDigest(2, ""),
                SideDigest(1, ""),
                RecordComparison(not_copied=Found(1, ((2, None),)), same=Found(1)),
            ),
        ),
    )
    assert VerifyPlan.from_json(KEYED.to_json()) == KEYED
    assert VerifyResult.from_json(keyed.to_json()) == keyed
    assert VerifyPlan.from_json(VerifyPlan(FLOW, "r2", ()).to_json()) == VerifyPlan(FLOW, "r2", ())


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "not a valid verify plan"),
        (
            json.dumps({"version": 9, "flow": FLOW, "run_id": "r", "ranges": []}),
            "verify plan version 9, expected 2",
        ),
        # A plan of before compacted ranges were marked: it would compare them by digest.
        (
            json.dumps({"version": 1, "flow": FLOW, "run_id": "r", "ranges": []}),
            "verify plan version 1, expected 2",
        ),
        (json.dumps({"version": 2, "flow": FLOW, "run_id": "r"}), "not a valid verify plan"),
        (
            json.dumps({"version": 2, "flow": FLOW, "run_id": "r", "ranges": [{"topic": "t"}]}),
            "not a valid verify plan",
        ),
    ],
)
def test_a_damaged_plan_is_a_plan_error(text: str, message: str) -> None:
    with pytest.raises(PlanError, match=message):
        VerifyPlan.from_json(text)


def test_a_result_written_before_ranges_were_compared_record_by_record_reads_back() -> None:
    new_fields = ("compacted", "runs", "log_append_time")
    old_range = {k: v for k, v in dataclasses.asdict(TWO.ranges[0]).items() if k not in new_fields}
    side = {"records": 1, "digest": digest(A).digest}
    old = {"flow": FLOW, "run_id": "r1", "partitions": [{"range": old_range, "source": side, "target": side}]}

    assert VerifyResult.from_json(json.dumps({"digest_scheme": DIGEST_SCHEME, **old})) == VerifyResult(
        FLOW, "r1", (PartitionVerdict(TWO.ranges[0], digest(A), digest(A)),)
    )


def test_a_result_of_another_digest_scheme_is_refused() -> None:
    text = VerifyResult(FLOW, "r1", ()).to_json().replace(DIGEST_SCHEME, "mirrorflow-v0")

    with pytest.raises(PlanError, match="digest scheme 'mirrorflow-v0', expected 'mirrorflow-v1'"):
        VerifyResult.from_json(text)


def _config(folder: Path) -> MirrorConfig:
    path = folder / "mm2.properties"
    path.write_text(
        "clusters = primary, backup\nprimary.bootstrap.servers = 127.0.0.1:1\n"
        f"backup.bootstrap.servers = 127.0.0.1:2\n{FLOW}.enabled = true\n"
        f"mirrorflow.state.dir = {folder / 'state'}\n"
    )
    return load_config(path, env={})


def test_plan_and_result_are_saved_in_the_offsets_database(tmp_path: Path) -> None:
    config = _config(tmp_path)
    flow = config.flow(FLOW)
    result = VerifyResult(FLOW, "r1", tuple(PartitionVerdict(r, digest(A), digest(A)) for r in TWO.ranges))

    with pytest.raises(PlanError) as missing:
        load_verify_plan(config, flow, "r1")
    assert str(missing.value) == (
        "the verify plan of run r1 of flow primary->backup in the offsets database does not exist; re-run "
        "the task that writes it"
    )
    write_verify_plan(config, flow, TWO)
    save_verify_result(config, flow, result)

    assert load_verify_plan(config, flow, "r1") == TWO
    assert load_verify_result(config, flow, "r1") == result
    # A new plan drops the result of the old one.
    write_verify_plan(config, flow, dataclasses.replace(TWO, ranges=TWO.ranges[:1]))
    with OffsetsStore(config.offsets_db_url) as store:
        assert find_document(store, FLOW, "r1", "verify_result") is None


def test_documents_of_another_run_or_plan_are_refused(tmp_path: Path) -> None:
    config = _config(tmp_path)
    flow = config.flow(FLOW)
    with OffsetsStore(config.offsets_db_url) as store:
        save_document(store, FLOW, "r1", "verify_plan", dataclasses.replace(TWO, run_id="r0").to_json())

    with pytest.raises(PlanError, match="belongs to flow 'primary->backup' run 'r0', not flow"):
        load_verify_plan(config, flow, "r1")
    write_verify_plan(config, flow, TWO)
    stale = VerifyResult(FLOW, "r1", (PartitionVerdict(TWO.ranges[0], digest(A), digest(A)),))
    save_verify_result(config, flow, stale)
    with pytest.raises(PlanError, match="is not the result of"):
        load_verify_result(config, flow, "r1")


def test_planning_and_digesting_do_not_import_pyspark() -> None:
    # The plan task runs on Airflow workers, which need not have pyspark.
    check = "import sys, mirrorflow.app.verify, mirrorflow.core.verify; sys.exit('pyspark' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", check], check=False).returncode == 0
