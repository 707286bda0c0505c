"""The Spark task bodies on hand-made Arrow batches: each side of each range digested in offset
order, records keyed by source offset and compared, the source as a flow's transforms make it; and
none of verification's pure modules imports pyspark."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence

import pyarrow as pa
import pytest
from verify_cases import KEYED, TWO, A, B, T, digest, rows, spark_batch

from mirrorflow.config.transforms import PredicateConfig, TransformConfig
from mirrorflow.core.digest import DigestRecord, RecordDigest, SideDigest
from mirrorflow.core.verdicts import Found, PartitionVerdict, RecordComparison, verdicts
from mirrorflow.core.verify_arrow import arrow_rows, compare_records, digest_partitions, record_keys
from mirrorflow.errors import PlanError

# Drops tombstones, and tags every record it keeps with a header.
CHAIN = (
    TransformConfig("drop", "Filter", (), PredicateConfig("dead", "RecordIsTombstone")),
    TransformConfig("tag", "InsertHeader", (("header", "by"), ("value.literal", "mirror"))),
)
TAGGED: DigestRecord = (A[0], A[1], [*A[2], ("by", b"mirror")], A[3])


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


def test_with_transforms_the_source_side_is_digested_as_the_chain_makes_it() -> None:
    # Source 0 and 2 copied (tagged) to target 10 and 11; the tombstone at 1 dropped on purpose.
    source = spark_batch([A, (b"k", None, [], T), B], offsets=[0, 1, 2])
    target = spark_batch([TAGGED, TAGGED], side=1, topic="primary.orders", offsets=[10, 11])
    tagged_b: DigestRecord = (B[0], B[1], [("by", b"mirror")], B[3])

    found = [r for out in digest_partitions(iter([source, target]), TWO, CHAIN) for r in out.to_pylist()]

    assert {(r["side"], r["range"]): (r["records"], r["digest"]) for r in found} == {
        (0, 0): (2, digest(TAGGED, tagged_b).digest),
        (1, 0): (2, digest(TAGGED, TAGGED).digest),
    }
    assert rows(TWO, source)[0]["digest"] == digest(A, (b"k", None, [], T), B).digest


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
    # Source 0 and 3 copied (tagged) to target 0 and 2; the tombstone at 1 dropped on purpose.
    source = spark_batch([A, (b"k", None, [], T), A], offsets=[0, 1, 3])
    target = spark_batch([TAGGED, TAGGED], side=1, topic="primary.orders", offsets=[0, 2])

    keys = [r for out in record_keys(iter([source, target]), KEYED, CHAIN) for r in out.to_pylist()]
    found = keyed_rows(source, target, transforms=CHAIN)

    assert [(r["side"], r["source_offset"]) for r in keys] == [(0, 0), (0, 3), (1, 0), (1, 3)]
    assert verdicts(KEYED, [], found).partitions[0].records == RecordComparison(same=Found(2))


def test_planning_and_digesting_do_not_import_pyspark() -> None:
    # The plan task runs on Airflow workers, which need not have pyspark.
    modules = "mirrorflow.app.verify, mirrorflow.core.verify_plan, mirrorflow.core.verify_arrow"
    check = f"import sys, {modules}; sys.exit('pyspark' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", check], check=False).returncode == 0
