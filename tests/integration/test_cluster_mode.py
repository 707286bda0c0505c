"""A flow in cluster deploy mode through real Airflow (`airflow dags test`) on a real Spark standalone
cluster (a master and two workers started from pyspark here): the copy's driver runs on a worker,
with a state folder of its own, and everything the run's steps hand each other travels through the
offsets database."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from mirror_helpers import airflow, assert_same_records, create_topic, migrated_airflow

from mirrorflow.config.model import MirrorConfig
from mirrorflow.store.offsets_store import OffsetsStore
from mirrorflow.store.run_documents import find_document
from mirrorflow_dev import sample_data
from mirrorflow_dev.local_kafka import LocalCluster
from mirrorflow_dev.local_spark import SparkStandalone

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.airflow]

FLOW = "primary->backup"
DAG = "mirror_primary_to_backup"


# Six JVMs (a standalone master, two workers, the driver and its executors): make test keeps the DAG
# spec's cluster-mode submission (tests/unit/app/test_dag_spec.py) and every run's steps handing each
# other their documents through the offsets database (tests/integration/test_airflow_dag.py).
@pytest.mark.extended
def test_a_flow_in_cluster_deploy_mode_copies_every_record_with_its_driver_on_a_worker(
    kafka_clusters: dict[str, LocalCluster],
    write_config: Callable[[str], MirrorConfig],
    unique_name: str,
    tmp_path: Path,
) -> None:
    primary, backup = kafka_clusters["primary"], kafka_clusters["backup"]
    topic = unique_name
    create_topic(primary.bootstrap, topic, 3)
    sample_data.produce_samples(primary.bootstrap, topic, 3, 0, 300)
    database = tmp_path / "shared" / "offsets.db"
    config = write_config(
        f"{FLOW}.enabled = true\n{FLOW}.topics = {topic}\n"
        "mirrorflow.spark.deploy.mode = cluster\nmirrorflow.spark.conn.id = spark_cluster\n"
        f"mirrorflow.offsets.db.url = sqlite:///{database}\n"
    )
    # The driver's state folder is not the Airflow worker's: the workers' environment names another.
    driver_state = tmp_path / "driver-state"
    with SparkStandalone(
        tmp_path / "spark",
        workers=2,
        timeout=120,
        rest=True,
        worker_env={"MIRROR_STATE_DIR": str(driver_state)},
    ) as cluster:
        assert cluster.rest_url is not None
        env = migrated_airflow(tmp_path / "airflow", config, tmp_path)
        # The master's REST server takes the submission; Airflow polls the driver there (rest-port).
        env["AIRFLOW_CONN_SPARK_CLUSTER"] = json.dumps(
            {"conn_type": "spark", "host": cluster.rest_url, "extra": {"rest-port": cluster.rest_port}}
        )

        run = airflow(env, tmp_path, "dags", "test", DAG)

        assert run.returncode == 0, run.stdout[-5000:] + run.stderr[-5000:]
        drivers = sorted((tmp_path / "spark").glob("worker-*/work/driver-*"))
        applications = cluster.applications()

    assert assert_same_records(primary.bootstrap, topic, backup.bootstrap, f"primary.{topic}", 3) == 900
    # Airflow submitted the copy to the cluster and followed its driver there until it finished.
    output = run.stdout + run.stderr
    (driver,) = drivers
    assert f"identified spark driver id: {driver.name}" in output
    assert "copied 900 records for primary->backup" in (driver / "stdout").read_text()
    assert [(a["name"].split(" manual__")[0], a["state"]) for a in applications] == [
        (f"mirror {FLOW}", "FINISHED")
    ]
    # The plan and the copy's result went through the offsets database, not a disk both share.
    store = OffsetsStore(config.offsets_db_url)
    ((run_id, _),) = {(b.run_id, b.topic) for b in store.batches(FLOW)}
    assert find_document(store, FLOW, run_id, "result") is not None
    assert not driver_state.exists()
    assert not (config.state_dir / "runs").exists()
