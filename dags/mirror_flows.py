"""One DAG per enabled flow of the MirrorMaker 2 config named by MIRROR_CONFIG.

A flow in batch mode: wait_for_turn (a sensor) -> plan (setup) -> copy (Spark) -> commit ->
checkpoint -> freshness -> release (teardown). A flow in DR mode (``mirrorflow.mode = dr``), a window
every ``mirrorflow.dr.window.seconds``, two runs at a time: start (setup) -> window (one Spark
application: once up, it takes the flow over from the window before it at that one's next
micro-batch boundary, then runs micro-batches back to back, with heartbeats and checkpoints at MM2's
intervals, until the next window takes over) -> report -> freshness -> release (teardown).
Reading the config (and importing the flow's alert notifier, if any) is the only work done at parse
time; an invalid config shows up as this file's import error, naming the bad key.

A manual batch run copies what the source holds when it plans; a scheduled or backfill batch run
copies the records before its data interval's end (resolved per partition by timestamp), so a
backfill copies history one interval per run, and re-running an interval already copied copies
nothing. A batch run first waits its turn, without holding a worker slot: until no earlier run of the
flow is running or queued, so runs copy in logical-date order, and the flow's lock is free; it fails
naming what it waits for after the trigger param lock_wait_timeout_seconds. The trigger form narrows
a batch run (topics, records per partition), plans without writing (dry run), chooses where
partitions never mirrored start and bounds the wait. A DR window always mirrors up to now.
"""

from __future__ import annotations

from datetime import timedelta

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import DAG, chain, task

from mirrorflow.app.dag_spec import flow_dag_spec, task_defaults
from mirrorflow.app.freshness import resolve_notifier
from mirrorflow.config.model import flows_for_dags, load_config
from mirrorflow.config.run_options import TRIGGER_PARAMS
from mirrorflow_airflow import tasks
from mirrorflow_airflow.params import trigger_form

CONFIG = load_config()

for _flow in flows_for_dags(CONFIG):
    _spec = flow_dag_spec(CONFIG, _flow, run_id_template="{{ run_id }}")
    with DAG(
        dag_id=_spec.dag_id,
        description=_spec.description,
        schedule=_spec.schedule,
        start_date=_spec.start_date,
        catchup=False,
        # A batch flow's scheduled and manual runs one at a time: a run that outlasts its interval is
        # followed by one run up to the newest interval's end, not by a queue of runs waiting their
        # turn (a backfill's runs count apart, its own --max-active-runs, and wait in wait_for_turn).
        # A DR flow's: the window running and the next one, up and waiting to take over.
        max_active_runs=_spec.max_active_runs,
        tags=["mirror", _flow.source.alias, _flow.target.alias, *(["dr"] if _flow.dr else [])],
        default_args=task_defaults(_flow),
        params={} if _flow.dr else trigger_form(TRIGGER_PARAMS),
        doc_md=__doc__,
    ) as _dag:
        if _flow.dr:
            _setup = task(task_id="start")(tasks.start_window)(_flow.name)
        else:
            _setup = task.short_circuit(task_id="plan", ignore_downstream_trigger_rules=False)(tasks.plan)(
                _flow.name
            )
        _copy = SparkSubmitOperator(
            task_id="window" if _flow.dr else "copy",
            conn_id=_flow.settings.spark_conn_id,
            application=_spec.copy.application,
            application_args=list(_spec.copy.application_args),
            conf=dict(_spec.copy.conf),
            env_vars=dict(_spec.copy.env_vars),
            name=_spec.copy.name,
            deploy_mode=_spec.copy.deploy_mode,
            java_class=_spec.copy.java_class,
            # On timeout Airflow calls on_kill, which kills the spark-submit process; nothing of the
            # attempt is committed (commit only runs after a successful copy; a window commits each
            # micro-batch only once its copy succeeded).
            execution_timeout=timedelta(seconds=_flow.copy_task_timeout_seconds),
        )
        if _flow.dr:
            _report = "report"
            _steps = [_setup, _copy, task(task_id=_report)(tasks.window_report)(_flow.name)]
        else:
            _report = "commit"
            _steps = [
                tasks.TurnSensor(task_id="wait_for_turn", flow=_flow.name),
                _setup,
                _copy,
                task(task_id=_report, trigger_rule="none_failed")(tasks.commit)(_flow.name),
                task(task_id="checkpoint")(tasks.checkpoint)(_flow.name),
            ]
        _freshness = task(task_id="freshness", on_failure_callback=resolve_notifier(_flow.settings))(
            tasks.freshness
        )(_flow.name, _report)
        _release = task(task_id="release")(tasks.release)(_flow.name)
        chain(*_steps, _freshness, _release.as_teardown(setups=_setup))  # type: ignore[arg-type]
    globals()[_spec.dag_id] = _dag
