"""The run report: per partition and topic, records written, skipped, bytes, times and lag left."""

from __future__ import annotations

from mirrorflow.core.metrics import Stats
from mirrorflow.core.plan import CopyResult, PartitionPlan, PartitionResult, PartitionState, Plan
from mirrorflow.core.report import PartitionReport, RunReport, TopicReport, build_report

FLOW = "primary->backup"
RUN = "scheduled__2026-01-01T00:00:00+00:00"

PLAN = Plan(
    flow=FLOW,
    run_id=RUN,
    created_at="2026-01-01T00:00:05+00:00",
    partitions=(
        PartitionPlan("orders", 0, 40, 100, "primary.orders", 1000),
        # Capped: 300 offsets are left for the next run.
        PartitionPlan("orders", 1, 0, 200, "primary.orders", 0),
    ),
    states=(
        PartitionState("audit", 0, "primary.audit", 0, 0, 0),
        PartitionState("orders", 0, "primary.orders", 0, 100, 40),
        PartitionState("orders", 1, "primary.orders", 0, 500, 0),
        PartitionState("orders", 2, "primary.orders", 3, 7, 7),
        # Not in the plan: its lag is what it was at plan time.
        PartitionState("payments", 0, "primary.payments", 0, 50, 45),
    ),
)
RESULT = CopyResult(
    flow=FLOW,
    run_id=RUN,
    partitions=(
        PartitionResult(
            "orders",
            0,
            records=60,
            skipped=10,
            bytes=6000,
            target_start=1000,
            record_age=Stats(50, 100, 900, 20000, 100),
            replication_latency=Stats(50, 150, 1000, 25000, 150),
            write_ms=500,
        ),
        # Compaction: fewer records than offsets.
        PartitionResult("orders", 1, records=150, skipped=0, bytes=1500, target_start=0),
    ),
)


def test_build_report_lists_every_partition_and_sums_per_topic() -> None:
    report = build_report(PLAN, RESULT)

    assert report.partitions == (
        PartitionReport("audit", 0, "primary.audit"),
        PartitionReport(
            "orders", 0, "primary.orders", records=60, skipped=10, bytes=6000, lag=0,
            record_age=Stats(50, 100, 900, 20000, 100), replication_latency=Stats(50, 150, 1000, 25000, 150),
            write_ms=500,
        ),
        PartitionReport("orders", 1, "primary.orders", records=150, bytes=1500, lag=300),
        PartitionReport("orders", 2, "primary.orders"),
        PartitionReport("payments", 0, "primary.payments", lag=5),
    )  # fmt: skip
    assert report.topics == (
        TopicReport("audit", "primary.audit", partitions=1, records=0, skipped=0, bytes=0, lag=0),
        TopicReport("orders", "primary.orders", partitions=3, records=210, skipped=10, bytes=7500, lag=300),
        TopicReport("payments", "primary.payments", partitions=1, records=0, skipped=0, bytes=0, lag=5),
    )
    assert report.records == 210
    # 50 records written in 0.5 s; their bytes are the written share of all 6000.
    assert (report.partitions[1].record_rate, report.partitions[1].byte_rate) == (100.0, 10000.0)


def test_as_dict_holds_the_totals_and_every_topic() -> None:
    assert build_report(PLAN, RESULT).as_dict() == {
        "flow": FLOW,
        "run_id": RUN,
        "records": 210,
        "bytes": 7500,
        "lag": 305,
        "replication_latency_ms_max": 1000,
        "record_age_ms_max": 900,
        "gaps": [],
        "failed_partitions": [],
        "topics": [
            {
                "topic": "audit",
                "remote_topic": "primary.audit",
                "partitions": 1,
                "records": 0,
                "skipped": 0,
                "bytes": 0,
                "lag": 0,
            },
            {
                "topic": "orders",
                "remote_topic": "primary.orders",
                "partitions": 3,
                "records": 210,
                "skipped": 10,
                "bytes": 7500,
                "lag": 300,
            },
            {
                "topic": "payments",
                "remote_topic": "primary.payments",
                "partitions": 1,
                "records": 0,
                "skipped": 0,
                "bytes": 0,
                "lag": 5,
            },
        ],
    }


def test_empty_plan_reports_lag_of_every_partition_and_no_records() -> None:
    plan = Plan(FLOW, RUN, "now", (), (PartitionState("orders", 0, "primary.orders", 0, 9, 9),))

    report = build_report(plan, CopyResult(FLOW, RUN, ()))

    assert report.partitions == (PartitionReport("orders", 0, "primary.orders"),)
    assert report.records == 0
    assert report.as_dict()["replication_latency_ms_max"] is None


def test_table_has_a_row_per_busy_partition_and_the_total() -> None:
    assert build_report(PLAN, RESULT).table().split("\n") == [
        "topic     partition  records  skipped  bytes  rec/s  lat avg ms  lat max ms  age max ms  lag left",
        "orders    0          60       10       6000   100    500         1000        900         0",
        "orders    1          150      0        1500                                              300",
        "payments  0          0        0        0                                                 5",
        "total                210      10       7500          500         1000        900         305",
    ]


def test_table_of_a_run_without_partitions_is_the_header_and_a_zero_total() -> None:
    assert RunReport("a->b", "r", ()).table().split("\n") == [
        "topic  partition  records  skipped  bytes  rec/s  lat avg ms  lat max ms  age max ms  lag left",
        "total             0        0        0                                                 0",
    ]


def test_a_partitions_figures_add_up_across_micro_batches() -> None:
    first = PartitionReport("t", 0, "a.t", 10, 2, 1000, 5, Stats(8, 1, 9, 40, 9), Stats(8, 2, 3, 20, 2), 100)
    second = PartitionReport("t", 0, "a.t", 4, 0, 400, 0, Stats(4, 2, 5, 12, 2), Stats(4, 1, 9, 16, 9), 30)
    assert first.then(second) == PartitionReport(
        "t", 0, "a.t", 14, 2, 1400, 0, Stats(12, 1, 9, 52, 2), Stats(12, 1, 9, 36, 9), 130
    )
