"""Airflow tasks of a flow's cutover DAG: preflight -> drain -> verify -> groups -> report.

Each step records its outcome (status, seconds, result or error) as the XCom ``outcome`` before it
returns or fails, so the report task (which runs whatever happened) can say what every step did.
Spark jobs (the drain's copies, the verification) run through Airflow's SparkSubmitHook with the
flow's Spark connection and settings, as the flow DAG's copy task does.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.sdk import get_current_context
from airflow.sdk.exceptions import AirflowFailException

from mirrorflow.app import cutover
from mirrorflow.app.dag_spec import spark_jars, spark_job_spec
from mirrorflow.app.verify import load_verify_result, plan_verification
from mirrorflow.config.model import FlowConfig, MirrorConfig, load_config
from mirrorflow.core.plan import Plan
from mirrorflow.errors import VerificationError
from mirrorflow_airflow.tasks import classified

log = logging.getLogger(__name__)

Step = Callable[[MirrorConfig, str, str, cutover.CutoverOptions], dict[str, Any]]


def step(name: str) -> Callable[[Step], Callable[[str], dict[str, Any]]]:
    """The Airflow task of cutover step ``name``: runs it with the run's options and records its
    outcome for the report, failed or not."""

    def wrap(fn: Step) -> Callable[[str], dict[str, Any]]:
        # Not functools.wraps: Airflow reads the task's signature, which is (flow), not fn's.
        @classified
        def run(flow: str) -> dict[str, Any]:
            context = get_current_context()
            started = time.monotonic()
            try:
                result = fn(
                    load_config(), flow, str(context["run_id"]), cutover.cutover_options(context["params"])
                )
            except Exception as exc:
                context["ti"].xcom_push(
                    key="outcome",
                    value={
                        "status": "failed",
                        "seconds": _since(started),
                        "error": f"{type(exc).__name__}: {exc}",
                    },
                )
                raise
            context["ti"].xcom_push(
                key="outcome", value={"status": "success", "seconds": _since(started), "result": result}
            )
            return result

        run.__name__, run.__doc__ = name, fn.__doc__
        return run

    return wrap


def _since(started: float) -> float:
    return round(time.monotonic() - started, 1)


@step("preflight")
def preflight(
    config: MirrorConfig, flow: str, run_id: str, options: cutover.CutoverOptions
) -> dict[str, Any]:
    found = cutover.preflight(config, flow, options)
    log.info("cutover of %s starts from: %s", flow, found)
    return found


@step("drain")
def drain(config: MirrorConfig, flow: str, run_id: str, options: cutover.CutoverOptions) -> dict[str, Any]:
    flow_config = config.flow(flow)

    def copy(plan: Plan) -> None:
        # An error a retry would meet again is noted by the job, and raised by the commit.
        _submit(config, flow_config, "mirror_copy.py", plan.run_id)

    return cutover.drain(config, flow, run_id, options, copy)


@step("verify")
def verify(config: MirrorConfig, flow: str, run_id: str, options: cutover.CutoverOptions) -> dict[str, Any]:
    flow_config = config.flow(flow)
    plan_verification(config, flow, run_id, options.topics)
    _submit(config, flow_config, "mirror_verify.py", run_id)
    result = load_verify_result(config, flow_config, run_id)
    log.info("%s", result.summary())
    if result.mismatches:
        raise VerificationError(result.summary())
    return cutover.verify_summary(result)


@step("groups")
def groups(config: MirrorConfig, flow: str, run_id: str, options: cutover.CutoverOptions) -> dict[str, Any]:
    return cutover.translate_groups(config, flow, options)


def report(flow: str) -> dict[str, str]:
    """Writes the cutover report (Markdown and JSON, in the run's folder) from every step's outcome,
    and fails when any step failed or did not run, so that the run shows as failed."""
    context = get_current_context()
    config = load_config()
    run_id = str(context["run_id"])
    options = cutover.cutover_options(context["params"])
    outcomes = {s: context["ti"].xcom_pull(task_ids=s, key="outcome") for s in cutover.STEPS}
    written = cutover.cutover_report(flow, run_id, options.dry_run, outcomes)
    as_json, as_md = cutover.write_report(config, flow, run_id, written)
    log.info("cutover report: %s and %s\n%s", as_md, as_json, cutover.markdown(written))
    if written["outcome"] == "failed":
        raise AirflowFailException(
            f"cutover of {flow} did not complete: failed {', '.join(written['failed_steps']) or 'nothing'}, "
            f"see {as_md}"
        )
    return {"markdown": as_md, "json": as_json}


def _submit(config: MirrorConfig, flow: FlowConfig, script: str, run_id: str) -> None:
    spec = spark_job_spec(config, flow, script, run_id, f"{script.removesuffix('.py')} {flow.name}")
    SparkSubmitHook(
        conf=dict(spec.conf),
        conn_id=flow.settings.spark_conn_id,
        jars=spark_jars(),
        name=spec.name,
        application_args=list(spec.application_args),
        env_vars=dict(spec.env_vars),
        deploy_mode=spec.deploy_mode,
        java_class=spec.java_class,
    ).submit(spec.application)
