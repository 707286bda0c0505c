"""Spark entrypoint of a DR flow's window task: micro-batches back to back in one Spark application.

    spark-submit jobs/mirror_dr.py --config mm2.properties \
        --flow primary->backup --run-id <run id>

The window's run must hold the flow's lock (its start task took it); the job plans, copies and
commits micro-batches for ``mirrorflow.dr.window.seconds`` and writes the window's summary, which
the report task turns into the run's counts or its error. The job ends itself before the lock
expires (``copy_guard``).
"""

from __future__ import annotations

import logging

from pyspark import SparkConf, SparkContext

from mirrorflow.app.copy_guard import exit_at, lock_deadline
from mirrorflow.app.dag_spec import job_arguments
from mirrorflow.app.dr_window import run_window
from mirrorflow.copy.spark_copy import copy_plan


def main(argv: list[str] | None = None) -> None:
    # The window's progress lines reach the task's log through spark-submit's output.
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)  # a line per gateway connection otherwise
    args = job_arguments(argv, __doc__)
    config, flow = args.config, args.flow
    exit_at(
        lock_deadline(config.offsets_db_url, flow.name, args.run_id),
        f"DR window of {flow.name} {args.run_id}",
    )
    # One SparkContext for the whole window: each micro-batch is one Spark job of about one task per
    # core, with the Python workers reused between jobs.
    sc = SparkContext.getOrCreate(SparkConf().setAppName(f"mirror {flow.name} DR {args.run_id}"))
    try:
        summary = run_window(
            config,
            flow.name,
            args.run_id,
            lambda plan: copy_plan(sc, flow, plan),
        )
    finally:
        sc.stop()
    print(summary.as_dict())


if __name__ == "__main__":
    main()
