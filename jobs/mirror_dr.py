"""Spark entrypoint of a DR flow's window task: micro-batches back to back in one Spark application.

    spark-submit jobs/mirror_dr.py --config mm2.properties \
        --flow primary->backup --run-id <run id>

Once its Spark application is up, the window waits its turn: it takes the flow's lock when it is free,
or when the window before hands it over at a micro-batch boundary; it then plans, copies and commits
micro-batches for ``mirrorflow.dr.window.seconds`` and until the next window takes over, and writes
the window's summary, which the report task turns into the run's counts or its error. The job ends
itself as soon as it may no longer write, or the spark-submit that started it is gone
(``app.window_lease``).
"""

from __future__ import annotations

import logging

from pyspark import SparkConf, SparkContext

from mirrorflow.app.copy_guard import stop_process
from mirrorflow.app.dag_spec import job_arguments
from mirrorflow.app.dr_window import run_window
from mirrorflow.app.window_lease import watch_parent
from mirrorflow.copy.spark_copy import StandingCopy


def main(argv: list[str] | None = None) -> None:
    # From its very start, whether its Spark application comes up or its window waits its turn.
    watch_parent(stop_process)
    # The window's progress lines reach the task's log through spark-submit's output.
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)  # a line per gateway connection otherwise
    args = job_arguments(argv, __doc__)
    config, flow = args.config, args.flow
    # One SparkContext for the whole window, and one Spark job in it whose tasks (one per core) copy
    # every micro-batch, all up and connected before the window offers to take over.
    sc = SparkContext.getOrCreate(SparkConf().setAppName(f"mirror {flow.name} DR {args.run_id}"))
    copy = StandingCopy(sc, flow)
    try:
        copy.await_tasks()
        summary = run_window(config, flow.name, args.run_id, copy)
    finally:
        copy.close()
        sc.stop()
    print(summary.as_dict())


if __name__ == "__main__":
    main()
