"""A manual migration cutover DAG per enabled flow of the config named by MIRROR_CONFIG.

preflight -> drain (runs of the flow until no selected partition lags) -> verify (a Spark job compares
both sides' records per partition: counts and an order-sensitive digest) -> groups (consumer-group
positions translated and committed on the target) -> report (Markdown and JSON in the run's folder,
written whatever happened, shown on the Mirror status page). Stop the producers to the source first.
A dry run does everything but commit the groups' offsets.
"""

from __future__ import annotations

from airflow.sdk import DAG, task

from mirrorflow.app.cutover import CUTOVER_PARAMS
from mirrorflow.app.dag_spec import START_DATE, task_defaults
from mirrorflow.config.model import flows_for_dags, load_config
from mirrorflow_airflow import cutover_tasks
from mirrorflow_airflow.params import trigger_form

CONFIG = load_config()

for _flow in flows_for_dags(CONFIG):
    with DAG(
        dag_id=_flow.cutover_dag_id,
        description=f"Migration cutover of flow {_flow.name}: drain, verify, move consumer groups",
        schedule=None,
        start_date=START_DATE,
        catchup=False,
        max_active_runs=1,
        tags=["mirror", "cutover", _flow.source.alias, _flow.target.alias],
        default_args=task_defaults(_flow),
        params=trigger_form(CUTOVER_PARAMS),
        doc_md=__doc__,
    ) as _dag:
        # No retries: a cutover is watched by a person, and every failure must show at once.
        _steps = [
            task(task_id=name, retries=0)(getattr(cutover_tasks, name))(_flow.name)
            for name in ("preflight", "drain", "verify", "groups")
        ]
        _report = task(task_id="report", retries=0, trigger_rule="all_done")(cutover_tasks.report)(_flow.name)
        _steps[0] >> _steps[1] >> _steps[2] >> _steps[3] >> _report  # type: ignore[operator]
    globals()[_dag.dag_id] = _dag
