"""The run report: per-topic records written, skipped, bytes and lag left, and its table."""

from __future__ import annotations

from mirrorflow.plan import CopyResult, PartitionPlan, PartitionResult, PartitionState, Plan
from mirrorflow.report import RunReport, TopicReport, build_report

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
        PartitionResult("orders", 0, records=60, skipped=10, bytes=6000, target_start=1000),
        # Compaction: fewer records than offsets.
        PartitionResult("orders", 1, records=150, skipped=0, bytes=1500, target_start=0),
    ),
)


def test_build_report_sums_per_topic_in_topic_order() -> None:
    report = build_report(PLAN, RESULT)

    assert report == RunReport(
        flow=FLOW,
        run_id=RUN,
        topics=(
            TopicReport("audit", "primary.audit", partitions=1, records=0, skipped=0, bytes=0, lag=0),
            TopicReport(
                "orders", "primary.orders", partitions=3, records=210, skipped=10, bytes=7500, lag=300
            ),
            TopicReport("payments", "primary.payments", partitions=1, records=0, skipped=0, bytes=0, lag=5),
        ),
    )
    assert report.records == 210


def test_as_dict_holds_every_topic_and_the_total() -> None:
    assert build_report(PLAN, RESULT).as_dict() == {
        "flow": FLOW,
        "run_id": RUN,
        "records": 210,
        "topics": (
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
        ),
    }


def test_empty_plan_reports_lag_of_every_partition_and_no_records() -> None:
    plan = Plan(FLOW, RUN, "now", (), (PartitionState("orders", 0, "primary.orders", 0, 9, 9),))

    report = build_report(plan, CopyResult(FLOW, RUN, ()))

    assert report.topics == (TopicReport("orders", "primary.orders", 1, 0, 0, 0, 0),)
    assert report.records == 0


def test_table_has_an_aligned_header_and_one_row_per_topic() -> None:
    report = RunReport(
        "a->b",
        "r",
        (
            TopicReport("orders", "a.orders", 3, 1200, 5, 64000, 17),
            TopicReport("pay", "a.pay", 1, 0, 0, 0, 0),
        ),
    )

    assert report.table().split("\n") == [
        "topic   remote topic  partitions  records  skipped  bytes  lag left",
        "orders  a.orders      3           1200     5        64000  17",
        "pay     a.pay         1           0        0        0      0",
    ]


def test_table_of_a_run_without_topics_is_the_header() -> None:
    assert RunReport("a->b", "r", ()).table() == (
        "topic  remote topic  partitions  records  skipped  bytes  lag left"
    )
