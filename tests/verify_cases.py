"""Records, ranges, plans and Spark-shaped Arrow batches shared by the unit tests of verification
(``core.digest``, ``core.verify_plan``, ``core.verify_arrow``, ``core.verdicts``, ``app.verify``)."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from mirrorflow.core.digest import DigestRecord, SideDigest, digest_records
from mirrorflow.core.verify_arrow import digest_partitions
from mirrorflow.core.verify_plan import VerifyPlan, VerifyRange

FLOW = "primary->backup"
T = 1_000_000_000_000
A: DigestRecord = (b"k1", b"v1", [("h", b"1")], T)
B: DigestRecord = (b"k2", b"v2", [], T + 1)


def digest(*records: DigestRecord) -> SideDigest:
    return digest_records(records)


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


def vrange(
    source: tuple[int, int], target: tuple[int, int], topic: str = "orders", partition: int = 0
) -> VerifyRange:
    return VerifyRange(topic, partition, f"primary.{topic}", *source, *target)


def rows(plan: VerifyPlan, *batches: pa.RecordBatch) -> list[dict[str, object]]:
    return [r for out in digest_partitions(iter(batches), plan) for r in out.to_pylist()]


TWO = VerifyPlan(
    FLOW, "r1", (vrange((0, 3), (10, 12)), vrange((5, 8), (12, 15)), vrange((0, 2), (0, 2), partition=1))
)

# orders-0: source 0, 1 copied to target 0, 1 and 3, 4 to 2, 3 (2 and 5 held no record then).
KEYED = VerifyPlan(
    FLOW, "r1", (VerifyRange("orders", 0, "primary.orders", 0, 6, 0, 4, True, ((0, 0, 2), (3, 2, 2))),)
)
