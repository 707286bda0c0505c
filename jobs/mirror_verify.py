"""Spark entrypoint of a flow's verify task: compare both sides of the run's verify plan, write the result.

    spark-submit --jars <connector jars> jobs/mirror_verify.py --config mm2.properties \
        --flow primary->backup --run-id <run id>

Reads ``verify_plan.json`` from the run's folder (``verify.plan_verification`` writes it), writes
``verify_result.json`` next to it and prints a one-line summary. A difference is a result, not an
error: the job ends successfully and the caller judges the result. Anything that keeps it from
comparing (no plan, records of the plan deleted meanwhile, a cluster unreachable) fails the job.
It reads both clusters and writes to neither, so it needs no lock of the flow.
"""

from __future__ import annotations

from pyspark.sql import SparkSession

from mirrorflow.app.dag_spec import job_arguments
from mirrorflow.app.verify import load_verify_plan, save_verify_result
from mirrorflow.copy.spark_verify import verify_ranges


def main(argv: list[str] | None = None) -> None:
    args = job_arguments(argv, __doc__)
    config, flow = args.config, args.flow
    # Before Spark starts: a missing or foreign plan fails in a second.
    plan = load_verify_plan(config, flow, args.run_id)
    spark = SparkSession.builder.appName(f"verify {flow.name} {args.run_id}").getOrCreate()
    try:
        result = verify_ranges(spark, flow, plan)
    finally:
        spark.stop()
    save_verify_result(config, flow, result)
    print(result.summary())


if __name__ == "__main__":
    main()
