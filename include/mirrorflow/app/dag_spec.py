"""What each flow's DAG is made of, as data, so that the DAG file only wires tasks."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from mirrorflow.config.model import FlowConfig, MirrorConfig, load_config
from mirrorflow.paths import REPO_ROOT, spark_kafka_jars

# Defaults for the copy job; `mirrorflow.spark.conf.*` in the config overrides any of them.
SPARK_CONF_DEFAULTS: Mapping[str, str] = {
    # A duplicate task attempt would race the real one on the target partition.
    "spark.speculation": "false",
    "spark.ui.showConsoleProgress": "false",
}


START_DATE = datetime(2024, 1, 1)


@dataclass(frozen=True)
class SparkJobSpec:
    """Keyword arguments of a SparkSubmitOperator (or SparkSubmitHook) running one of ``jobs/``."""

    application: str
    application_args: tuple[str, ...]
    conf: Mapping[str, str]
    env_vars: Mapping[str, str]
    name: str


@dataclass(frozen=True)
class FlowDagSpec:
    dag_id: str
    flow: str
    schedule: str | None
    start_date: datetime
    description: str
    copy: SparkJobSpec


def flow_dag_spec(config: MirrorConfig, flow: FlowConfig, run_id_template: str) -> FlowDagSpec:
    return FlowDagSpec(
        dag_id=flow.dag_id,
        flow=flow.name,
        schedule=flow.settings.schedule,
        start_date=START_DATE,
        description=f"Mirror topics from {flow.source.alias} to {flow.target.alias} (flow {flow.name})",
        copy=spark_job_spec(config, flow, "mirror_copy.py", run_id_template, f"mirror {flow.name}"),
    )


def spark_job_spec(
    config: MirrorConfig, flow: FlowConfig, script: str, run_id: str, name: str
) -> SparkJobSpec:
    """spark-submit arguments of one of ``jobs/`` for a run of the flow: the flow's Spark settings,
    and this Python (with mirrorflow installed) for the driver and the workers."""
    python = sys.executable
    return SparkJobSpec(
        application=str(REPO_ROOT / "jobs" / script),
        application_args=("--config", str(config.path), "--flow", flow.name, "--run-id", run_id),
        conf={**SPARK_CONF_DEFAULTS, **flow.settings.spark_conf},
        env_vars={
            "PYSPARK_PYTHON": python,
            "PYSPARK_DRIVER_PYTHON": python,
            # spark-submit is found on PATH: the one installed with pyspark next to this Python.
            "PATH": os.pathsep.join([str(Path(python).parent), os.environ.get("PATH", "")]),
        },
        name=name,
    )


@dataclass(frozen=True)
class JobArguments:
    config: MirrorConfig
    flow: FlowConfig
    run_id: str


def job_arguments(argv: list[str] | None, description: str | None) -> JobArguments:
    """What ``spark_job_spec`` hands one of ``jobs/``: the config loaded, its flow, the run id."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--config", required=True)
    parser.add_argument("--flow", required=True)
    parser.add_argument("--run-id", required=True)
    args = parser.parse_args(argv)
    config = load_config(args.config)
    return JobArguments(config, config.flow(args.flow), args.run_id)


def spark_jars() -> str:
    """Comma-separated connector jars, looked up when the copy task runs (not when DAGs are parsed)."""
    return ",".join(str(j) for j in spark_kafka_jars())
