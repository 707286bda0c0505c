"""A DR window's summary document and its timers."""

from __future__ import annotations

import pytest

from mirrorflow.core.window import StepTimes, Timers, WindowSummary, steps_text
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
    timers = Timers({"checkpoints": 60.0})
    assert timers.due("checkpoints", 100.0)
    timers.ran("checkpoints", 100.0)
    assert not timers.due("checkpoints", 159.9)
    assert timers.due("checkpoints", 160.0)


def test_steps_text_names_the_steps_that_took_long_enough_in_their_order() -> None:
    spent = {"plan": 0.04, "copy": 14.25, "copy tasks": 13.96, "commit": 0.3}

    assert steps_text(spent) == "plan 0.0, copy 14.2, copy tasks 14.0, commit 0.3"
    assert steps_text(spent, at_least=0.05) == "copy 14.2, copy tasks 14.0, commit 0.3"
