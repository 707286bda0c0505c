"""Spark entrypoint of a flow's copy task: execute the run's plan, write the run's result.

    spark-submit --jars <connector jars> jobs/mirror_copy.py --config mm2.properties \
        --flow primary->backup --run-id <run id>
"""

from __future__ import annotations

import argparse

from pyspark.sql import SparkSession

from mirrorflow.config import load_config
from mirrorflow.plan import write_atomically
from mirrorflow.runner import load_plan, run_files
from mirrorflow.spark_copy import copy_plan


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--config", required=True)
    parser.add_argument("--flow", required=True)
    parser.add_argument("--run-id", required=True)
    args = parser.parse_args(argv)

    config = load_config(args.config)
    flow = config.flow(args.flow)
    plan = load_plan(config, flow, args.run_id)
    spark = SparkSession.builder.appName(f"mirror {flow.name} {args.run_id}").getOrCreate()
    try:
        result = copy_plan(spark, plan, flow.source.consumer, flow.target.producer)
    finally:
        spark.stop()
    write_atomically(run_files(config, flow, args.run_id).result, result.to_json())
    print(f"copied {sum(r.records - r.skipped for r in result.partitions)} records for {flow.name}")


if __name__ == "__main__":
    main()
