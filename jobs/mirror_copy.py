"""Spark entrypoint of a flow's copy task: execute the run's plan, write the run's result.

    spark-submit jobs/mirror_copy.py --config mm2.properties \
        --flow primary->backup --run-id <run id>

An error a retry would meet again (planned source records deleted before they were read, someone
else's records on the target, a login refused) ends the job successfully with a note instead of a
result, and the commit task fails the run with it (for lost records: the exact lost ranges), which
Airflow does not retry; transient errors fail the job, and Airflow retries it. The job runs only while
its run holds the flow's lock and ends itself before the lock expires (``copy_guard``).
"""

from __future__ import annotations

from pyspark import SparkConf, SparkContext

from mirrorflow.app.batch_run import execute_copy, load_plan
from mirrorflow.app.copy_guard import exit_at, lock_deadline
from mirrorflow.app.dag_spec import job_arguments
from mirrorflow.copy.spark_copy import copy_plan


def main(argv: list[str] | None = None) -> None:
    args = job_arguments(argv, __doc__)
    config, flow = args.config, args.flow
    plan = load_plan(config, flow, args.run_id)
    exit_at(
        lock_deadline(config.offsets_db_url, flow.name, args.run_id), f"copy of {flow.name} {args.run_id}"
    )
    # A SparkContext, not a SparkSession: the copy schedules plain tasks and never touches Spark SQL,
    # whose start-up costs seconds.
    sc = SparkContext.getOrCreate(SparkConf().setAppName(f"mirror {flow.name} {args.run_id}"))
    try:
        print(execute_copy(config, flow, plan, lambda: copy_plan(sc, flow, plan)))
    finally:
        sc.stop()


if __name__ == "__main__":
    main()
