"""Where a flow's Spark job and its connector jars are found: from the installed package and from
MIRROR_JVM_CACHE, with errors that say what to set."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from config_texts import ONE_FLOW

from mirrorflow.app.dag_spec import SPARK_VERSION, flow_dag_spec, job_path, spark_jars, spark_job_spec
from mirrorflow.config.model import parse_config
from mirrorflow.errors import ConfigError


def test_the_spark_jobs_are_found_in_the_installed_jobs_package() -> None:
    path = Path(job_path("mirror_copy.py"))
    assert path.is_file()
    assert path.parent.joinpath("mirror_verify.py").is_file()
    assert path.parent.joinpath("mirror_dr.py").is_file()


def test_a_dr_flow_runs_the_window_job() -> None:
    config = parse_config(ONE_FLOW + "mirrorflow.mode = dr\n", env={})
    (flow,) = config.flows
    window = flow_dag_spec(config, flow, "run-1").copy
    assert Path(window.application).name == "mirror_dr.py"
    assert window.name == "mirror primary->backup DR"
    assert window.application_args[-2:] == ("--run-id", "run-1")


def test_in_client_mode_the_driver_is_the_job_itself_with_this_python() -> None:
    config = parse_config(ONE_FLOW, env={})
    (flow,) = config.flows
    copy = flow_dag_spec(config, flow, "run-1").copy
    assert (copy.deploy_mode, copy.java_class) == ("client", None)
    assert copy.application == job_path("mirror_copy.py")
    assert copy.application_args == ("--config", str(config.path), "--flow", flow.name, "--run-id", "run-1")
    assert (copy.env_vars["PYSPARK_PYTHON"], copy.env_vars["PYSPARK_DRIVER_PYTHON"]) == (
        sys.executable,
        sys.executable,
    )


def test_in_cluster_mode_sparks_python_runner_runs_the_job_and_the_python_is_set_by_conf() -> None:
    config = parse_config(ONE_FLOW + "mirrorflow.spark.deploy.mode = Cluster\n", env={})
    (flow,) = config.flows
    copy = flow_dag_spec(config, flow, "run-1").copy
    assert (copy.deploy_mode, copy.java_class) == ("cluster", "org.apache.spark.deploy.PythonRunner")
    assert Path(copy.application).name.startswith("spark-core_")
    assert Path(copy.application).parent.name == "jars" and Path(copy.application).is_file()
    assert copy.application_args == (
        job_path("mirror_copy.py"), "", "--config", str(config.path), "--flow", flow.name, "--run-id", "run-1"
    )  # fmt: skip
    assert copy.env_vars == {}
    assert {k: copy.conf[k] for k in ("spark.pyspark.python", "spark.pyspark.driver.python")} == {
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
    }
    assert copy.conf["spark.master.rest.enabled"] == "true"


def test_the_deploy_mode_is_a_setting_of_its_own() -> None:
    with pytest.raises(ConfigError) as wrong:
        parse_config(ONE_FLOW + "mirrorflow.spark.deploy.mode = yarn\n", env={})
    assert "mirrorflow.spark.deploy.mode" in str(wrong.value) and "expected client or cluster" in str(
        wrong.value
    )
    with pytest.raises(ConfigError) as conf:
        parse_config(
            ONE_FLOW + "primary->backup.mirrorflow.spark.conf.spark.submit.deployMode = cluster\n", env={}
        )
    assert str(conf.value).startswith(
        "primary->backup.mirrorflow.spark.conf.spark.submit.deployMode: the deploy mode is set by "
        "mirrorflow.spark.deploy.mode (client or cluster); remove this key"
    )


def test_a_job_the_package_lacks_is_an_error() -> None:
    with pytest.raises(
        ConfigError,
        match=r"Spark job .*mirror_nothing\.py is missing from the installed mirrorflow_jobs; reinstall",
    ):
        job_path("mirror_nothing.py")


def test_the_connector_jars_come_from_mirror_jvm_cache(tmp_path: Path) -> None:
    folder = tmp_path / f"spark-kafka-{SPARK_VERSION}"
    folder.mkdir()
    for name in ("b.jar", "a.jar", "notes.txt"):
        (folder / name).write_text("")
    assert spark_jars({"MIRROR_JVM_CACHE": str(tmp_path)}) == f"{folder / 'a.jar'},{folder / 'b.jar'}"


def test_without_mirror_jvm_cache_the_error_says_what_to_set() -> None:
    with pytest.raises(ConfigError) as caught:
        spark_jars({})
    assert str(caught.value) == (
        f"env MIRROR_JVM_CACHE is not set: set it to the folder holding spark-kafka-{SPARK_VERSION}/ "
        "(Spark's Kafka connector jars, resolved by Maven from jvm/spark-kafka/pom.xml)"
    )


def test_an_empty_jar_folder_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError, match=rf"no jars in {tmp_path}/spark-kafka-{SPARK_VERSION} \(env MIRROR_JVM_CACHE\)"
    ):
        spark_jars({"MIRROR_JVM_CACHE": str(tmp_path)})


def test_the_copy_job_starts_with_the_first_jit_tier_unless_the_config_says_otherwise() -> None:
    config = parse_config(ONE_FLOW, env={})
    (flow,) = config.flows
    copy = flow_dag_spec(config, flow, "run-1").copy.conf
    assert dict(copy) == {
        "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1",
        "spark.speculation": "false",
        "spark.ui.showConsoleProgress": "false",
    }
    # verify decodes every record in the JVM: it keeps the full JIT.
    verify = spark_job_spec(config, flow, "mirror_verify.py", "run-1", "verify").conf
    assert dict(verify) == {"spark.speculation": "false", "spark.ui.showConsoleProgress": "false"}

    options = "mirrorflow.spark.conf.spark.driver.extraJavaOptions = -Dx=1\n"
    overridden = parse_config(ONE_FLOW + options, env={})
    (flow,) = overridden.flows
    assert flow_dag_spec(overridden, flow, "run-1").copy.conf["spark.driver.extraJavaOptions"] == "-Dx=1"
