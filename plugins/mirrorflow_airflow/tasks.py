"""Airflow-side wrappers of the run steps: context in, classified errors out.

A ``TransientError`` propagates as it is, so Airflow retries the task. Any other ``MirrorError``
(misconfiguration, data loss, a target in an unexpected state) becomes ``AirflowFailException``:
retrying cannot fix it, so the task fails at once with the actionable message.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

from airflow.sdk import Connection, get_current_context
from airflow.sdk.exceptions import AirflowFailException, AirflowNotFoundException, AirflowSkipException

from mirrorflow.app import dr_window, runner
from mirrorflow.app.checkpoints import emit_checkpoints
from mirrorflow.app.freshness import staleness
from mirrorflow.config.model import load_config
from mirrorflow.config.run_options import RunOptions, run_options
from mirrorflow.errors import MirrorError, StaleMirrorError, TransientError

log = logging.getLogger(__name__)

# Runs that copy up to their data interval's end; any other (manual, asset-triggered) copies up to
# the source's offsets at plan time.
_INTERVAL_RUN_TYPES = frozenset({"scheduled", "backfill"})

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


def _options() -> RunOptions:
    """The run's trigger params and, for a scheduled or backfill run, its data interval end."""
    context = get_current_context()
    run_type = context["dag_run"].run_type
    # A str enum: str() of it is "DagRunType.BACKFILL" and its hash is not its value's.
    interval_run = getattr(run_type, "value", run_type) in _INTERVAL_RUN_TYPES
    return run_options(context["params"], context.get("data_interval_end") if interval_run else None)


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


@classified
def plan(flow: str) -> bool:
    """Returns whether Spark has anything to copy (False skips the copy task; heartbeats alone are
    copied here, in process). A dry run logs and
    returns (as the ``dry_run`` XCom) what the run would copy and change, and writes nothing."""
    config = load_config()
    options = _options()
    if options.dry_run:
        shown = runner.dry_run(config, flow, _run_id(), options)
        log.info("%s", shown.table())
        get_current_context()["ti"].xcom_push(key="dry_run", value=shown.as_dict())
        return False
    _require_spark_connection(config.flow(flow).settings.spark_conn_id)
    if options.until_timestamp_ms is not None:
        log.info(
            "copying records before this run's data interval end, %s",
            get_current_context()["data_interval_end"],
        )
    planned = runner.plan_run(config, flow, _run_id(), options)
    return bool(planned.partitions) and not planned.in_process


def _skip_dry_run() -> None:
    if _options().dry_run:
        raise AirflowSkipException("dry run: nothing was copied, so nothing is committed")


@classified
def commit(flow: str) -> dict[str, Any]:
    """The run's report, with how stale the flow is by its alert thresholds (None: fresh)."""
    _skip_dry_run()
    config = load_config()
    committed = runner.commit_run(config, flow, _run_id())
    lags = {(p.topic, p.partition): p.lag for p in committed.report.partitions}
    stale = staleness(flow, config.flow(flow).settings, lags, committed.heartbeat_age_s)
    return {**committed.report.as_dict(), "heartbeat_age_s": committed.heartbeat_age_s, "stale": stale}


@classified
def start_window(flow: str) -> None:
    """A DR window's start: its run takes the flow's lock (the window task's Spark job needs it)."""
    config = load_config()
    _require_spark_connection(config.flow(flow).settings.spark_conn_id)
    dr_window.take_lock(config, flow, _run_id())


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
    run_type = context["dag_run"].run_type
    if getattr(run_type, "value", run_type) == "backfill":
        raise AirflowSkipException("backfill runs lag by design: freshness is not checked")
    stale = context["ti"].xcom_pull(task_ids=report_task)["stale"]
    if stale:
        raise StaleMirrorError(stale)


@classified
def checkpoint(flow: str) -> dict[str, int]:
    report = emit_checkpoints(load_config(), flow)
    return {
        "groups": report.groups,
        "emitted": len(report.emitted),
        "untranslated": report.untranslated,
        "groups_synced": len(report.synced),
        "groups_active": len(report.active),
    }


@classified
def release(flow: str) -> bool:
    return runner.release_run(load_config(), flow, _run_id())
