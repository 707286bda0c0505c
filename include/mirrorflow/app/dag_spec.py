"""What each flow's DAG is made of, as data, so that the DAG file only wires tasks."""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from mirrorflow.config.model import TASK_RETRY_DELAY_SECONDS, FlowConfig, MirrorConfig, load_config
from mirrorflow.errors import ConfigError

# The Spark release the Kafka connector jars are resolved for (jvm/spark-kafka/pom.xml); it matches
# the pinned pyspark.
SPARK_VERSION = "4.0.0"
# The folder holding spark-kafka-<SPARK_VERSION>/ (Maven's copy of the connector and its dependencies).
ENV_JVM_CACHE = "MIRROR_JVM_CACHE"
# The Spark entrypoints ship as the package ``mirrorflow_jobs`` (the repository's ``jobs/``).
JOBS_PACKAGE = "mirrorflow_jobs"

# Defaults for every job; `mirrorflow.spark.conf.*` in the config overrides any of them.
SPARK_CONF_DEFAULTS: Mapping[str, str] = {
    # A duplicate task attempt would race the real one on the target partition.
    "spark.speculation": "false",
    "spark.ui.showConsoleProgress": "false",
}
# The copy job's JVM decodes nothing (its tasks move batches in Python): with the JIT's first tier
# only it starts about 1 s sooner. verify decodes every record in the JVM and keeps the full JIT.
COPY_CONF_DEFAULTS: Mapping[str, str] = {
    **SPARK_CONF_DEFAULTS,
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1",
}


START_DATE = datetime(2024, 1, 1)


# spark-submit refuses Python applications in cluster deploy mode on a standalone master but runs JVM
# ones there. Spark's PythonRunner, the JVM main class that YARN and Kubernetes run for a Python
# driver, is one: a job in cluster mode is submitted as PythonRunner from the jar that holds it.
PYTHON_RUNNER = "org.apache.spark.deploy.PythonRunner"


@dataclass(frozen=True)
class SparkJobSpec:
    """Keyword arguments of a SparkSubmitOperator (or SparkSubmitHook) running one of ``jobs/``.
    ``java_class`` is None for a Python application."""

    application: str
    application_args: tuple[str, ...]
    conf: Mapping[str, str]
    env_vars: Mapping[str, str]
    name: str
    deploy_mode: str
    java_class: str | None = None


@dataclass(frozen=True)
class FlowDagSpec:
    """A flow's DAG: a batch flow's runs one at a time on its schedule; a DR flow's windows every
    ``mirrorflow.dr.window.seconds``, two at a time, so that the next window is up (its tasks
    started, its Spark application ready) before the running one hands the flow over to it."""

    dag_id: str
    flow: str
    schedule: str | timedelta | None
    max_active_runs: int
    start_date: datetime
    description: str
    copy: SparkJobSpec


def flow_dag_spec(config: MirrorConfig, flow: FlowConfig, run_id_template: str) -> FlowDagSpec:
    return FlowDagSpec(
        dag_id=flow.dag_id,
        flow=flow.name,
        schedule=timedelta(seconds=flow.dr.window_seconds) if flow.dr else flow.settings.schedule,
        max_active_runs=2 if flow.dr else 1,
        start_date=START_DATE,
        description=f"Mirror topics from {flow.source.alias} to {flow.target.alias} (flow {flow.name})",
        # A DR flow's runs are windows of micro-batches, each window one Spark application.
        copy=spark_job_spec(
            config,
            flow,
            "mirror_dr.py" if flow.dr else "mirror_copy.py",
            run_id_template,
            f"mirror {flow.name} DR" if flow.dr else f"mirror {flow.name}",
            COPY_CONF_DEFAULTS,
        ),
    )


def spark_job_spec(
    config: MirrorConfig,
    flow: FlowConfig,
    script: str,
    run_id: str,
    name: str,
    defaults: Mapping[str, str] = SPARK_CONF_DEFAULTS,
) -> SparkJobSpec:
    """spark-submit arguments of one of ``jobs/`` for a run of the flow: the flow's Spark settings,
    and this Python (with mirrorflow installed) for the driver and the workers.

    In cluster deploy mode the driver runs on a cluster node, which needs this Python, pyspark and
    mirrorflow at the same paths (one image for Airflow and Spark) and the config file at the same
    path; everything a run's steps hand each other travels through the offsets database."""
    python = sys.executable
    job_args = ("--config", str(config.path), "--flow", flow.name, "--run-id", run_id)
    conf = {**defaults, **flow.settings.spark_conf}
    if flow.settings.spark_deploy_mode == "cluster":
        return SparkJobSpec(
            application=str(_python_runner_jar()),
            # PythonRunner's arguments: the Python file, its extra Python files (none), the job's own.
            application_args=(job_path(script), "", *job_args),
            conf={
                "spark.pyspark.python": python,
                "spark.pyspark.driver.python": python,
                # Airflow follows a standalone cluster's driver through the master's REST server.
                "spark.master.rest.enabled": "true",
                **conf,
            },
            # A standalone master takes no environment for a driver: the Python is set by conf.
            env_vars={},
            name=name,
            deploy_mode="cluster",
            java_class=PYTHON_RUNNER,
        )
    return SparkJobSpec(
        application=job_path(script),
        application_args=job_args,
        conf=conf,
        env_vars={
            "PYSPARK_PYTHON": python,
            "PYSPARK_DRIVER_PYTHON": python,
            # spark-submit is found on PATH: the one installed with pyspark next to this Python.
            "PATH": os.pathsep.join([str(Path(python).parent), os.environ.get("PATH", "")]),
        },
        name=name,
        deploy_mode="client",
    )


def _python_runner_jar() -> Path:
    """Spark's core jar in the pyspark installed here (looked up without importing pyspark)."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError("pyspark is not installed; cluster deploy mode submits with its spark-submit")
    jars = Path(next(iter(spec.submodule_search_locations))) / "jars"
    found = sorted(jars.glob("spark-core_*.jar"))
    if len(found) != 1:
        raise ConfigError(f"expected one spark-core jar in {jars}, found {len(found)}; reinstall pyspark")
    return found[0]


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


def job_path(script: str) -> str:
    """The file of one of the Spark entrypoints, where the package is installed (or the checkout's
    ``jobs/`` in an editable install): spark-submit needs a path, not a module."""
    spec = importlib.util.find_spec(JOBS_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(f"the Spark jobs package {JOBS_PACKAGE} is not installed; reinstall mirrorflow")
    path = Path(next(iter(spec.submodule_search_locations))) / script
    if not path.is_file():
        raise ConfigError(
            f"Spark job {path} is missing from the installed {JOBS_PACKAGE}; reinstall mirrorflow"
        )
    return str(path)


def spark_kafka_folder(jvm_cache: Path) -> Path:
    return jvm_cache / f"spark-kafka-{SPARK_VERSION}"


def spark_jars(env: Mapping[str, str] = os.environ) -> str:
    """Comma-separated connector jars for the verify job (Spark's Kafka source reads both sides), looked
    up when the task runs, not when DAGs are parsed. The copy job needs none."""
    if not env.get(ENV_JVM_CACHE):
        raise ConfigError(
            f"env {ENV_JVM_CACHE} is not set: set it to the folder holding spark-kafka-{SPARK_VERSION}/ "
            "(Spark's Kafka connector jars, resolved by Maven from jvm/spark-kafka/pom.xml)"
        )
    folder = spark_kafka_folder(Path(env[ENV_JVM_CACHE]))
    jars = sorted(folder.glob("*.jar"))
    if not jars:
        raise ConfigError(
            f"no jars in {folder} (env {ENV_JVM_CACHE}): resolve Spark's Kafka connector there with "
            "Maven from jvm/spark-kafka/pom.xml (make setup does)"
        )
    return ",".join(str(j) for j in jars)


def task_defaults(flow: FlowConfig) -> dict[str, object]:
    """``default_args`` of every DAG of ``flow``: its tasks' retries, and the Airflow queue and pool
    it names (``mirrorflow.airflow.queue``/``.pool``; Airflow's own defaults where it names none)."""
    defaults: dict[str, object] = {
        "retries": flow.settings.task_retries,
        "retry_delay": timedelta(seconds=TASK_RETRY_DELAY_SECONDS),
    }
    if flow.settings.airflow_queue:
        defaults["queue"] = flow.settings.airflow_queue
    if flow.settings.airflow_pool:
        defaults["pool"] = flow.settings.airflow_pool
    return defaults
