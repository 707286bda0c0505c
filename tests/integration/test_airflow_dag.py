"""The flow DAG end to end through real Airflow (`airflow dags test`), real Spark and real brokers."""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition
from mirror_helpers import (
    AIRFLOW,
    airflow,
    assert_all_gone,
    assert_same_records,
    create_topic,
    migrated_airflow,
)

from mirrorflow.app.run_folder import metrics_file
from mirrorflow.config.model import MirrorConfig, load_config
from mirrorflow.store.flow_lock import lock_holder
from mirrorflow.store.offsets_store import OffsetsStore
from mirrorflow_dev import sample_data
from mirrorflow_dev.local_kafka import LocalCluster

pytestmark = [pytest.mark.kafka, pytest.mark.airflow]


@pytest.fixture
def airflow_for(tmp_path: Path) -> Callable[[MirrorConfig], dict[str, str]]:
    """A fresh Airflow home and metadata DB wired to this repo's DAGs and the given config."""

    def make(config: MirrorConfig) -> dict[str, str]:
        return migrated_airflow(tmp_path / "airflow", config, tmp_path)

    return make


def test_dag_runs_copy_exactly_and_only_what_is_new(
    kafka_clusters: dict[str, LocalCluster],
    airflow_for: Callable[[MirrorConfig], dict[str, str]],
    unique_name: str,
    tmp_path: Path,
) -> None:
    """A plain MM2 file, as it is: MM2's keys only, replication factors of -1 (the brokers' default:
    these brokers have one node, so MM2's defaults of 2 and 3 could not be met), no state setting (the
    state is kept in Airflow's home). No heartbeats: the session's clusters are shared, and every other
    test's flow would mirror a heartbeats topic on them."""
    primary, backup = kafka_clusters["primary"], kafka_clusters["backup"]
    topic = unique_name
    create_topic(primary.bootstrap, topic, 3)
    sample_data.produce_samples(primary.bootstrap, topic, 3, 0, 500)
    path = tmp_path / "mm2.properties"
    path.write_text(
        f"clusters = primary, backup\nprimary.bootstrap.servers = {primary.bootstrap}\n"
        f"backup.bootstrap.servers = {backup.bootstrap}\nprimary->backup.enabled = true\n"
        f"primary->backup.topics = {topic}\nreplication.factor = -1\n"
        "offset-syncs.topic.replication.factor = -1\ncheckpoints.topic.replication.factor = -1\n"
        "emit.heartbeats.enabled = false\n"
    )
    config = load_config(path, env={"AIRFLOW_HOME": str(tmp_path / "airflow")})
    assert config.offsets_db_url == f"sqlite:///{tmp_path / 'airflow' / 'mirrorflow' / 'offsets.db'}"
    env = airflow_for(config)
    del env["MIRROR_STATE_DIR"]
    store = OffsetsStore(config.offsets_db_url)

    first = airflow(env, tmp_path, "dags", "test", "mirror_primary_to_backup")
    assert first.returncode == 0, first.stdout[-5000:] + first.stderr[-5000:]
    assert f"state folder {config.state_dir} (the default, in Airflow's home" in first.stdout + first.stderr
    assert assert_same_records(primary.bootstrap, topic, backup.bootstrap, f"primary.{topic}", 3) == 1500

    sample_data.produce_samples(primary.bootstrap, topic, 3, 500, 40)
    second = airflow(env, tmp_path, "dags", "test", "mirror_primary_to_backup")
    assert second.returncode == 0, second.stdout[-5000:] + second.stderr[-5000:]
    assert assert_same_records(primary.bootstrap, topic, backup.bootstrap, f"primary.{topic}", 3) == 1620
    batches = store.batches("primary->backup")
    assert [(b.partition, b.source_start, b.source_end, b.records) for b in batches] == [
        (0, 0, 500, 500), (0, 500, 540, 40),
        (1, 0, 500, 500), (1, 500, 540, 40),
        (2, 0, 500, 500), (2, 500, 540, 40),
    ]  # fmt: skip
    # The commit task exports the flow's metrics for Prometheus: everything committed so far.
    exported = metrics_file(config.state_dir, "primary->backup", "source").read_text()
    for p in range(3):
        labels = f'source="primary",destination="backup",topic="primary.{topic}",partition="{p}"'
        assert f"kafka_connect_mirror_source_connector_record_count{{{labels}}} 540\n" in exported
        assert f"mirrorflow_lag_records{{{labels}}} 0\n" in exported
    # A run with nothing new copies nothing: the backfill's rerun keeps that case, under the scheduler
    # (tests/integration/test_backfill.py).
    assert lock_holder(store, "primary->backup") is None


# The plan refusing bad input before anything is written, through Airflow: make test keeps a trigger
# param's case (tests/integration/test_trigger_params.py).
@pytest.mark.extended
def test_a_missing_spark_connection_fails_the_plan_before_anything_happens(
    kafka_clusters: dict[str, LocalCluster],
    write_config: Callable[[str], MirrorConfig],
    airflow_for: Callable[[MirrorConfig], dict[str, str]],
    unique_name: str,
    tmp_path: Path,
) -> None:
    create_topic(kafka_clusters["primary"].bootstrap, unique_name, 1)
    config = write_config(
        f"primary->backup.enabled = true\nprimary->backup.topics = {unique_name}\n"
        "mirrorflow.spark.conn.id = spark_nowhere\n"
    )
    env = airflow_for(config)

    run = airflow(env, tmp_path, "dags", "test", "mirror_primary_to_backup")

    assert run.returncode != 0
    assert "the Airflow connection 'spark_nowhere' (mirrorflow.spark.conn.id) is not defined" in (
        run.stdout + run.stderr
    )
    store = OffsetsStore(config.offsets_db_url)
    assert store.progress("primary->backup") == {}
    assert lock_holder(store, "primary->backup") is None


def test_a_copy_that_times_out_is_killed_whole_and_commits_nothing(
    kafka_clusters: dict[str, LocalCluster],
    write_config: Callable[[str], MirrorConfig],
    airflow_for: Callable[[MirrorConfig], dict[str, str]],
    unique_name: str,
    tmp_path: Path,
) -> None:
    primary = kafka_clusters["primary"]
    topic, count = unique_name, 150_000
    create_topic(primary.bootstrap, topic, 3)
    sample_data.produce_samples(primary.bootstrap, topic, 3, 0, count)
    flow_lines = f"primary->backup.enabled = true\nprimary->backup.topics = {topic}\n"
    # About as long as spark-submit takes to start a JVM, the Python driver and a SparkContext (5-6 s
    # here), short of that plus the copy: the batch copy moves these records in a few seconds, so a
    # longer timeout could miss it.
    config = write_config(flow_lines + "mirrorflow.copy.timeout.seconds = 5\nmirrorflow.task.retries = 0\n")
    assert config.path is not None
    env = airflow_for(config)
    store = OffsetsStore(config.offsets_db_url)

    timed_out = airflow(env, tmp_path, "dags", "test", "mirror_primary_to_backup")

    assert timed_out.returncode != 0
    assert "AirflowTaskTimeout" in timed_out.stdout + timed_out.stderr
    # The driver JVM, the Python driver and the Python workers are all gone.
    marker = f"MIRROR_CONFIG={config.path}"  # inherited by everything the run started
    assert_all_gone(lambda p: marker in p.cmdline or marker in p.environ, "processes of the run")
    assert store.batches("primary->backup") == []
    assert {p.next_source_offset for p in store.progress("primary->backup").values()} == {0}
    assert lock_holder(store, "primary->backup") is None
    # The next run after a copy killed whole copies exactly once: the fault suite keeps that case for
    # copies killed at every stage (tests/integration/test_faults.py).


# A run killed whole keeps the flow's lock until released, and the next run copies exactly once: make
# test keeps the killed DR window's case (tests/integration/test_dr_dag.py).
@pytest.mark.extended
def test_a_killed_airflow_run_leaves_its_lock_and_the_next_run_after_release_copies_exactly_once(
    kafka_clusters: dict[str, LocalCluster],
    write_config: Callable[[str], MirrorConfig],
    airflow_for: Callable[[MirrorConfig], dict[str, str]],
    unique_name: str,
    tmp_path: Path,
) -> None:
    primary, backup = kafka_clusters["primary"], kafka_clusters["backup"]
    topic, remote, count = unique_name, f"primary.{unique_name}", 100_000
    create_topic(primary.bootstrap, topic, 2)
    sample_data.produce_samples(primary.bootstrap, topic, 2, 0, count)
    config = write_config(f"primary->backup.enabled = true\nprimary->backup.topics = {topic}\n")
    assert config.path is not None
    env = airflow_for(config)
    store = OffsetsStore(config.offsets_db_url)
    watch = Consumer({"bootstrap.servers": backup.bootstrap, "group.id": "kill-watch"})

    def written() -> int:
        try:
            return sum(
                watch.get_watermark_offsets(TopicPartition(remote, p), timeout=10)[1] for p in range(2)
            )
        except KafkaException:
            return 0  # the remote topic does not exist yet

    # The worker running the DAG dies mid-copy: its whole process group is SIGKILLed.
    run = subprocess.Popen(
        [AIRFLOW, "dags", "test", "mirror_primary_to_backup"],
        env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + 300
    while run.poll() is None and written() < count // 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(run.pid, signal.SIGKILL)
    run.wait(timeout=30)
    watch.close()
    marker = f"MIRROR_CONFIG={config.path}"  # inherited by everything the run started
    assert_all_gone(lambda p: marker in p.cmdline or marker in p.environ, "processes of the run")
    assert store.batches("primary->backup") == []
    dead_run = lock_holder(store, "primary->backup")
    assert dead_run is not None  # its teardown never ran
    # No scheduler runs here to find the run dead: mark it failed, as a person would in the UI, or the
    # next run would wait for it too (an earlier run still running).
    _mark_failed(tmp_path / "airflow", dead_run)

    wait_briefly = '{"lock_wait_timeout_seconds": 1}'
    blocked = airflow(env, tmp_path, "dags", "test", "mirror_primary_to_backup", "--conf", wait_briefly)

    # The next run waited for its turn, before planning, as long as its param says (counted from its
    # first look, a reschedule ago), then gave up naming the lock's holder and how to release it.
    output = blocked.stdout + blocked.stderr
    assert blocked.returncode != 0
    waited = re.search(r"waited (\d+) s for its turn \(trigger param lock_wait_timeout_seconds: 1\)", output)
    assert waited is not None and int(waited.group(1)) >= 1, output[-5000:]
    assert f"flow primary->backup is locked by run {dead_run}" in output
    assert "python -m mirrorflow.store release-lock --flow 'primary->backup'" in output
    released = subprocess.run(
        [sys.executable, "-m", "mirrorflow.store", "release-lock", "--flow", "primary->backup",
         "--db", config.offsets_db_url],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert released.returncode == 0 and f"held by run {dead_run}" in released.stdout, released.stderr
    again = airflow(env, tmp_path, "dags", "test", "mirror_primary_to_backup")
    assert again.returncode == 0, again.stdout[-5000:] + again.stderr[-5000:]
    assert assert_same_records(primary.bootstrap, topic, backup.bootstrap, remote, 2) == 2 * count


def _mark_failed(home: Path, run_id: str) -> None:
    """Mark Airflow run ``run_id`` failed in the metadata DB (SQLite) of ``home``."""
    connection = sqlite3.connect(home / "airflow.db")
    try:
        with connection:
            marked = connection.execute("UPDATE dag_run SET state = 'failed' WHERE run_id = ?", (run_id,))
        assert marked.rowcount == 1
    finally:
        connection.close()
