"""A DR window's summary document and its timers."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from mirrorflow.core.report import PartitionReport, RunReport
from mirrorflow.core.window import Periodic, Scheduler, StepTimes, WindowCounts, WindowSummary, steps_text
from mirrorflow.errors import PlanError

SUMMARY = WindowSummary(
    flow="primary->backup",
    run_id="manual__1",
    started_at="2026-01-01T00:00:00+00:00",
    ended_at="2026-01-01T00:10:00+00:00",
    micro_batches=600,
    spark_copies=40,
    records=12_000,
    bytes=12_000_000,
    checkpoints=9,
    lags=(("orders", 0, 0), ("orders", 1, 7)),
    heartbeat_age_s=0.8,
    step_seconds=(("plan", 120.5), ("copy", 300.25), ("idle", 100.0)),
)


def test_a_summary_reads_back_whole() -> None:
    assert WindowSummary.from_json(SUMMARY.to_json()) == SUMMARY
    failed = WindowSummary("f", "r", "a", "b", error=("TransientError", "broker away"))
    assert WindowSummary.from_json(failed.to_json()) == failed


def test_a_summary_gives_airflow_its_counts_and_lag() -> None:
    assert SUMMARY.as_dict() == {
        "micro_batches": 600,
        "spark_copies": 40,
        "records": 12_000,
        "bytes": 12_000_000,
        "checkpoints": 9,
        "lag": 7,
        "heartbeat_age_s": 0.8,
        "step_seconds": {"plan": 120.5, "copy": 300.25, "idle": 100.0},
        "started_at": "2026-01-01T00:00:00+00:00",
        "ended_at": "2026-01-01T00:10:00+00:00",
    }
    assert SUMMARY.lag_by_partition == {("orders", 0): 0, ("orders", 1): 7}


def test_a_foreign_document_is_refused_naming_the_file() -> None:
    with pytest.raises(PlanError, match=r"window\.json: not a valid DR window summary"):
        WindowSummary.from_json('{"version": 3}', "window.json")


def test_step_times_add_up_per_step() -> None:
    now = [0.0]
    steps = StepTimes(lambda: now[0])
    with steps.timed("plan"):
        now[0] += 0.5
    earlier = dict(steps.totals)
    for _ in range(2):
        with steps.timed("copy"):
            now[0] += 2.0
    with pytest.raises(RuntimeError), steps.timed("plan"):  # a failed step's time counts too
        now[0] += 0.25
        raise RuntimeError
    assert steps.as_tuple() == (("plan", 0.75), ("copy", 4.0))
    assert steps.since(earlier) == {"plan": 0.25, "copy": 4.0}


def test_a_step_is_due_first_then_once_per_interval() -> None:
    scheduler = Scheduler({Periodic.CHECKPOINTS: 60.0}, StepTimes(lambda: 0.0))
    assert scheduler.due(Periodic.CHECKPOINTS, 100.0)
    scheduler.ran(Periodic.CHECKPOINTS, 100.0)
    assert not scheduler.due(Periodic.CHECKPOINTS, 159.9)
    assert scheduler.due(Periodic.CHECKPOINTS, 160.0)


def test_the_scheduler_runs_the_due_tasks_asked_for_in_order_timed_under_their_names() -> None:
    now = [0.0]
    ran: list[str] = []

    def task(name: str, takes: float) -> Callable[[], None]:
        def run() -> None:
            ran.append(name)
            now[0] += takes

        return run

    times = StepTimes(lambda: now[0])
    scheduler = Scheduler({Periodic.HEARTBEATS: 1.0, Periodic.TOPICS: 10.0, Periodic.ACLS: 5.0}, times)
    scheduler.every(Periodic.TOPICS, task("topics", 0.5))
    scheduler.every(Periodic.HEARTBEATS, task("heartbeats", 0.25))
    # ACLS has no task (the flow syncs none): asked for, it runs nothing.
    scheduler.run_due((Periodic.HEARTBEATS, Periodic.TOPICS, Periodic.ACLS), 0.0)
    assert ran == ["heartbeats", "topics"]
    assert dict(times.totals) == {"heartbeats": 0.25, "topics": 0.5}
    assert all(type(step) is str for step in times.totals)
    # Only what is due, and only among the steps asked for; each counted from when it was due.
    scheduler.run_due((Periodic.TOPICS, Periodic.HEARTBEATS), 1.0)
    assert ran == ["heartbeats", "topics", "heartbeats"]
    scheduler.run_due((Periodic.TOPICS,), 10.0)
    assert ran == ["heartbeats", "topics", "heartbeats", "topics"]
    assert not scheduler.due(Periodic.TOPICS, 19.9)


def _partition(partition: int, records: int, lag: int, size: int = 10) -> PartitionReport:
    return PartitionReport("t", partition, "a.t", records=records, bytes=size * records, lag=lag)


def test_window_counts_add_up_what_micro_batches_committed() -> None:
    first = RunReport("f", "w#0", (_partition(0, 3, 2), _partition(1, 0, 0)))
    second = RunReport("f", "w#1", (_partition(0, 2, 0), _partition(1, 4, 1)))
    counts = WindowCounts().planned().copied_in_spark().committed(first, {("t", 0): 5})
    counts = counts.lagging(first).planned().committed(second, {("t", 1): 7}).lagging(second)
    counts = counts.checkpointed(3)
    assert (counts.micro_batches, counts.spark_copies, counts.records, counts.bytes) == (2, 1, 9, 90)
    assert counts.checkpoints == 3
    assert counts.lags == {("t", 0): 0, ("t", 1): 1}
    assert counts.log_starts == {("t", 0): 5, ("t", 1): 7}
    assert counts.last_batch_id == "w#1"
    # One history entry per partition that copied, summed, with the newest lag.
    recorded = {(p.partition, p.records, p.lag) for p in counts.to_record()}
    assert recorded == {(0, 5, 0), (1, 4, 1)}
    assert counts.recorded().to_record() == []
    assert (
        counts.progress_text(WindowCounts(micro_batches=1, records=3)) == "1 micro-batches, 6 records, lag 1"
    )


def test_a_partition_without_records_since_keeps_its_newest_lag_in_the_history() -> None:
    busy = RunReport("f", "w#0", (_partition(0, 3, 2),))
    idle = RunReport("f", "w#1", (_partition(0, 0, 9),))
    counts = WindowCounts().committed(busy, {}).lagging(busy).committed(idle, {}).lagging(idle)
    [entry] = counts.to_record()
    assert (entry.records, entry.lag) == (3, 9)
    assert counts.last_batch_id == "w#1"


def test_steps_text_names_the_steps_that_took_long_enough_in_their_order() -> None:
    spent = {"plan": 0.04, "copy": 14.25, "copy tasks": 13.96, "commit": 0.3}

    assert steps_text(spent) == "plan 0.0, copy 14.2, copy tasks 14.0, commit 0.3"
    assert steps_text(spent, at_least=0.05) == "copy 14.2, copy tasks 14.0, commit 0.3"
