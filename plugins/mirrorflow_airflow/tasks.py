"""Airflow-side wrappers of the run steps: context in, classified errors out.

A ``TransientError`` propagates as it is, so Airflow retries the task. Any other ``MirrorError``
(misconfiguration, data loss, a target in an unexpected state) becomes ``AirflowFailException``:
retrying cannot fix it, so the task fails at once with the actionable message.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, ParamSpec, TypeVar

from airflow.sdk import BaseSensorOperator, Connection, Context, get_current_context
from airflow.sdk.exceptions import AirflowFailException, AirflowNotFoundException, AirflowSkipException
from airflow.sdk.types import RuntimeTaskInstanceProtocol

from mirrorflow.app import batch_run, dr_window
from mirrorflow.app.freshness import staleness
from mirrorflow.config.model import load_config
from mirrorflow.config.run_options import LOCK_WAIT_TIMEOUT_MAX, RunOptions, run_options
from mirrorflow.core.turn import EarlierRun, ready
from mirrorflow.errors import MirrorError, StaleMirrorError, TransientError

log = logging.getLogger(__name__)

# Runs that copy up to their data interval's end; any other (manual, asset-triggered) copies up to
# the source's offsets at plan time.
_INTERVAL_RUN_TYPES = frozenset({"scheduled", "backfill"})
# The states of a run that has not finished: a run waits for earlier ones in these.
_UNFINISHED_RUN_STATES = ("running", "queued")

# How often a run waiting for its turn looks again. Each look is a short task attempt of its own (the
# sensor reschedules itself, holding no worker slot in between). Short, so that a backfill's runs
# follow each other closely, but well past the time the scheduler may take to hear that a look ended
# (5-7 s on a busy host): a look rescheduled before that is taken for a task that died, and costs a
# retry (apache/airflow#71172).
TURN_POKE_SECONDS = 15
# Airflow's own timeout of the sensor, only a backstop: past the longest wait the trigger param
# allows, so the param's limit always fails the task first, naming what it waits for.
TURN_SENSOR_TIMEOUT_SECONDS = LOCK_WAIT_TIMEOUT_MAX + 2 * TURN_POKE_SECONDS

P = ParamSpec("P")
R = TypeVar("R")


def classified(fn: Callable[P, R]) -> Callable[P, R]:
    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except TransientError:
            raise
        except MirrorError as exc:
            raise AirflowFailException(f"{type(exc).__name__}: {exc}") from exc

    return wrapper


def _run_id() -> str:
    return str(get_current_context()["run_id"])


def _value(member: object) -> str:
    """A str enum's value (a run's type or state): str() of it is e.g. "DagRunType.BACKFILL", and its
    hash is not its value's."""
    return str(getattr(member, "value", member))


def _options() -> RunOptions:
    """The run's trigger params and, for a scheduled or backfill run, its data interval end."""
    context = get_current_context()
    interval_run = _value(context["dag_run"].run_type) in _INTERVAL_RUN_TYPES
    return run_options(context["params"], context.get("data_interval_end") if interval_run else None)


def _earlier_run(ti: RuntimeTaskInstanceProtocol) -> EarlierRun | None:
    """The latest run of this DAG with an earlier logical date that is still running or queued."""
    found = [
        EarlierRun(run.run_id, _value(run.state), run.logical_date)
        for state in _UNFINISHED_RUN_STATES
        if (run := ti.get_previous_dagrun(state=state)) is not None and run.logical_date is not None
    ]
    return max(found, key=lambda run: run.logical_date, default=None)


def _require_spark_connection(conn_id: str) -> None:
    """Without its connection, SparkSubmitOperator silently submits to YARN: refuse before planning."""
    try:
        Connection.get(conn_id)
    except AirflowNotFoundException as exc:
        raise AirflowFailException(
            f"the Airflow connection {conn_id!r} (mirrorflow.spark.conn.id) is not defined, so the copy "
            f"task has no Spark master. Define it with the master as host, e.g. AIRFLOW_CONN_"
            f'{conn_id.upper()}=\'{{"conn_type": "spark", "host": "local[*]"}}\' or in the UI.'
        ) from exc


class TurnSensor(BaseSensorOperator):
    """A batch run's first task: waits, in reschedule mode, until ``wait_for_turn`` finds it is the
    run's turn to plan."""

    def __init__(self, *, flow: str, **kwargs: Any) -> None:
        super().__init__(
            mode="reschedule", poke_interval=TURN_POKE_SECONDS, timeout=TURN_SENSOR_TIMEOUT_SECONDS, **kwargs
        )
        self.flow = flow

    def poke(self, context: Context) -> bool:
        return wait_for_turn(self.flow)


@classified
def wait_for_turn(flow: str) -> bool:
    """One look of ``TurnSensor``: True once no earlier run of the flow is running or queued and the
    flow's lock is free for this run (``core.turn``). Fails, without a retry, naming what it waits
    for once it has waited the run's ``lock_wait_timeout_seconds``, counted from its first look. A
    dry run takes no lock: it does not wait."""
    options = _options()
    if options.dry_run:
        return True
    context = get_current_context()
    ti = context["ti"]
    current = batch_run.run_turn(load_config(), flow, _run_id(), _earlier_run(ti))
    first_look = ti.get_first_reschedule_date(context)
    waited = 0.0 if first_look is None else (datetime.now(UTC) - first_look).total_seconds()
    if not current.due:
        log.info(
            "waited %.0f s of %d s for %s", waited, options.lock_wait_timeout_seconds, current.waiting_for()
        )
    return ready(current, waited, options.lock_wait_timeout_seconds)


@classified
def plan(flow: str) -> bool:
    """Returns whether Spark has anything to copy (False skips the copy task; heartbeats alone are
    copied here, in process). A dry run logs and
    returns (as the ``dry_run`` XCom) what the run would copy and change, and writes nothing."""
    config = load_config()
    options = _options()
    if options.dry_run:
        shown = batch_run.dry_run(config, flow, _run_id(), options)
        log.info("%s", shown.table())
        get_current_context()["ti"].xcom_push(key="dry_run", value=shown.as_dict())
        return False
    _require_spark_connection(config.flow(flow).settings.spark_conn_id)
    if options.until_timestamp_ms is not None:
        log.info(
            "copying records before this run's data interval end, %s",
            get_current_context()["data_interval_end"],
        )
    planned = batch_run.plan_run(config, flow, _run_id(), options)
    return bool(planned.partitions) and not planned.in_process


def _skip_dry_run() -> None:
    if _options().dry_run:
        raise AirflowSkipException("dry run: nothing was copied, so nothing is committed")


@classified
def commit(flow: str) -> dict[str, Any]:
    """The run's report, with how stale the flow is by its alert thresholds (None: fresh)."""
    _skip_dry_run()
    config = load_config()
    committed = batch_run.commit_run(config, flow, _run_id())
    lags = {(p.topic, p.partition): p.lag for p in committed.report.partitions}
    stale = staleness(flow, config.flow(flow).settings, lags, committed.heartbeat_age_s)
    return {**committed.report.as_dict(), "heartbeat_age_s": committed.heartbeat_age_s, "stale": stale}


@classified
def start_window(flow: str) -> None:
    """A DR window's start: its flow is in DR mode and has its Spark connection (the window task's
    Spark job then waits for the flow's lock, handed over by the window before)."""
    config = load_config()
    _require_spark_connection(config.flow(flow).settings.spark_conn_id)
    dr_window.check_window(config, flow)


@classified
def window_report(flow: str) -> dict[str, Any]:
    """The DR window's counts, with how stale it left the flow (None: fresh); fails with the error
    that ended the window early."""
    return dr_window.window_report(load_config(), flow, _run_id())


@classified
def freshness(flow: str, report_task: str) -> None:
    """Fails the run when ``report_task`` (commit, or a DR window's report) found the flow staler
    than its alert thresholds; Airflow then calls the flow's notifier. Backfill runs catch up on
    purpose: they are not checked."""
    context = get_current_context()
    if _value(context["dag_run"].run_type) == "backfill":
        raise AirflowSkipException("backfill runs lag by design: freshness is not checked")
    stale = context["ti"].xcom_pull(task_ids=report_task)["stale"]
    if stale:
        raise StaleMirrorError(stale)


@classified
def checkpoint(flow: str) -> dict[str, int]:
    report = batch_run.checkpoint_run(load_config(), flow, _run_id())
    return {
        "groups": report.groups,
        "emitted": len(report.emitted),
        "untranslated": report.untranslated,
        "groups_synced": len(report.synced),
        "groups_active": len(report.active),
    }


@classified
def release(flow: str) -> bool:
    return batch_run.release_run(load_config(), flow, _run_id())
