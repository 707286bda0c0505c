"""One manual failover DAG per enabled flow of the MirrorMaker 2 config named by MIRROR_CONFIG.

`mirror_<source>_to_<target>_failover` sets the consumer groups on the target from the newest MM2
checkpoints already on the target (`<source>.checkpoints.internal`), without contacting the source:
for when the source cluster is lost. Active groups are left alone, no group is moved backwards,
checkpoints of remote partitions that no longer exist are listed; the report (task log, XCom,
`failover.md` and `failover.json` in the run's folder) lists all of it. Trigger params: `groups`
(empty: every group the flow checkpoints) and `dry_run` (commit nothing). Reading the config is the
only work done at parse time.
"""

from __future__ import annotations

from airflow.sdk import DAG, task

from mirrorflow.app.dag_spec import START_DATE, task_defaults
from mirrorflow.app.failover import FAILOVER_PARAMS
from mirrorflow.config.model import flows_for_dags, load_config
from mirrorflow_airflow import failover_tasks
from mirrorflow_airflow.params import trigger_form

CONFIG = load_config()

for _flow in flows_for_dags(CONFIG):
    _dag_id = _flow.failover_dag_id
    with DAG(
        dag_id=_dag_id,
        description=(
            f"Fail over the consumer groups of flow {_flow.name} to {_flow.target.alias} from the newest "
            "checkpoints there; manual only"
        ),
        schedule=None,
        start_date=START_DATE,
        catchup=False,
        max_active_runs=1,
        tags=["mirror", "failover", _flow.source.alias, _flow.target.alias],
        default_args=task_defaults(_flow),
        params=trigger_form(FAILOVER_PARAMS),
        doc_md=__doc__,
    ) as _dag:
        task(task_id="failover")(failover_tasks.failover)(_flow.name)
    globals()[_dag_id] = _dag
