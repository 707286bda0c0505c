"""The verdicts: ranges compared by digest and record by record, what the tasks found added up, the
result's summary, and the result document."""

from __future__ import annotations

import dataclasses
import json

import pytest
from verify_cases import FLOW, KEYED, TWO, A, B, digest, rows, spark_batch

from mirrorflow.core.digest import DIGEST_SCHEME, SideDigest
from mirrorflow.core.verdicts import Found, PartitionVerdict, RecordComparison, VerifyResult, verdicts
from mirrorflow.core.verify_plan import VerifyRange
from mirrorflow.errors import PlanError


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


def test_only_in_a_compacted_range_is_a_record_on_one_side_no_difference() -> None:
    compacted = RecordComparison(same=Found(3), only_on_target=Found(1, ((5, 5),)))
    stamped = VerifyRange("orders", 0, "primary.orders", 0, 6, 0, 4, runs=((0, 0, 4),), log_append_time=True)
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


def test_a_result_survives_json() -> None:
    result = VerifyResult(
        FLOW,
        "r1",
        (
            PartitionVerdict(TWO.ranges[0], digest(A), digest(A)),
            PartitionVerdict(TWO.ranges[1], digest(A), SideDigest(0, digest().digest)),
        ),
    )

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
    assert VerifyResult.from_json(keyed.to_json()) == keyed


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
