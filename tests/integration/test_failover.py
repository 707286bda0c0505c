"""The failover DAG through real Airflow (`airflow dags test`) on real brokers, with the source gone.

A topic is mirrored and checkpoints are emitted for consumer groups that committed on the source;
then the source's bootstrap.servers points at a closed loopback port and the failover DAG sets the
groups on the target from the newest checkpoints there. Checked: each group's exact committed offsets
on the target (a consumer resuming there reads exactly the record after the last one it consumed on
the source), an active group left alone, a group ahead of its checkpoint kept, a checkpoint of a
deleted remote topic listed as untranslatable, a dry run committing nothing, and the report files.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer
from failover_report import row
from kafka import KafkaAdminClient
from mirror_helpers import (
    airflow,
    commit_group,
    create_topic,
    first_records,
    group_offsets,
    migrated_airflow,
    run_flow,
    topics,
)
from pyspark.sql import SparkSession

from mirrorflow.app.batch_run import checkpoint_run
from mirrorflow.app.run_folder import flow_runs
from mirrorflow.config.model import MirrorConfig, load_config
from mirrorflow.errors import TransientError
from mirrorflow.kafka.admin import ClusterAdmin
from mirrorflow_dev import sample_data
from mirrorflow_dev.local_kafka import LocalCluster

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.airflow]

FLOW = "primary->backup"
DAG = "mirror_primary_to_backup_failover"
CHECKPOINTS = "primary.checkpoints.internal"


def _delete_topic(cluster: LocalCluster, name: str) -> None:
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        admin.delete_topics([name])
    finally:
        admin.close()
    deadline = time.monotonic() + 30
    while name in topics(cluster.bootstrap):
        assert time.monotonic() < deadline, f"{name} was not deleted within 30 s"
        time.sleep(0.2)


@contextmanager
def _active_consumer(cluster: LocalCluster, group: str, topic: str) -> Iterator[Consumer]:
    """A member of ``group`` consuming ``topic`` (assignment received), closed after the block."""
    consumer = Consumer(
        {"bootstrap.servers": cluster.bootstrap, "group.id": group, "enable.auto.commit": "false",
         "auto.offset.reset": "latest", "session.timeout.ms": "6000", "max.poll.interval.ms": "900000"}
    )  # fmt: skip
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 30
        while not consumer.assignment():
            consumer.poll(0.2)
            assert time.monotonic() < deadline, f"{group} never got its assignment"
        yield consumer
    finally:
        consumer.close()


def _at(topic: str, partition: int, offset: int) -> dict[str, Any]:
    return {"topic": topic, "partition": partition, "offset": offset}


def _failover(env: dict[str, str], cwd: Path, conf: dict[str, Any]) -> str:
    run = airflow(env, cwd, "dags", "test", DAG, "--conf", json.dumps(conf))
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-8000:]
    return output


def _reports(config: MirrorConfig) -> dict[Path, tuple[str, dict[str, Any]]]:
    """Every failover report of the flow: run folder -> (Markdown, JSON)."""
    runs = flow_runs(config.state_dir, FLOW)
    return {
        d: ((d / "failover.md").read_text(), json.loads((d / "failover.json").read_text()))
        for d in runs.iterdir()
        if (d / "failover.json").exists()
    }


def test_failover_sets_target_groups_from_the_newest_checkpoints_without_the_source(
    kafka_clusters: dict[str, LocalCluster],
    write_config: Callable[[str], MirrorConfig],
    spark: SparkSession,
    unique_name: str,
    tmp_path: Path,
) -> None:
    primary, backup = kafka_clusters["primary"], kafka_clusters["backup"]
    topic, gone = f"{unique_name}-t", f"{unique_name}-u"
    remote, remote_gone = f"primary.{topic}", f"primary.{gone}"
    resume, ahead, busy, other, missing = (
        f"{unique_name}-{g}" for g in ("resume", "ahead", "busy", "other", "missing")
    )
    create_topic(primary.bootstrap, topic, 2)
    create_topic(primary.bootstrap, gone, 1)
    sample_data.produce_samples(primary.bootstrap, topic, 2, 0, 30)
    sample_data.produce_samples(primary.bootstrap, gone, 1, 0, 10)
    # The groups filter keeps the failover to this test's groups: the target's checkpoints topic
    # holds those of every test of the session.
    config = write_config(
        f"{FLOW}.enabled = true\n{FLOW}.topics = {unique_name}-.*\n{FLOW}.groups = {unique_name}-.*\n"
    )
    run_flow(config, FLOW, "run-1", spark)
    commit_group(primary.bootstrap, resume, {(topic, 0): 12, (topic, 1): 25, (gone, 0): 4})
    commit_group(primary.bootstrap, ahead, {(topic, 0): 10, (topic, 1): 10})
    commit_group(primary.bootstrap, busy, {(topic, 0): 5})
    commit_group(primary.bootstrap, other, {(topic, 0): 3})
    assert len(checkpoint_run(config, FLOW, "checkpoints").emitted) == 7
    # The group reads on: a second, newer checkpoint for partition 0 (the older one stays readable
    # until compaction).
    commit_group(primary.bootstrap, resume, {(topic, 0): 20})
    assert len(checkpoint_run(config, FLOW, "checkpoints").emitted) == 1

    # On the target: one group already further on partition 0, one group consuming, and a remote topic
    # deleted since its checkpoint.
    commit_group(backup.bootstrap, ahead, {(remote, 0): 25})
    _delete_topic(backup, remote_gone)

    # The source is gone: its bootstrap.servers is a loopback port bound by nobody's listener.
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
        assert config.path is not None
        config.path.write_text(
            config.path.read_text().replace(primary.bootstrap, f"127.0.0.1:{port}")
            + "primary.admin.request.timeout.ms = 3000\nmirrorflow.task.retries = 0\n"
        )
        config = load_config(config.path, env={})
        with pytest.raises(TransientError, match=f"cluster primary \\(127.0.0.1:{port}\\) is unreachable"):
            ClusterAdmin(config.flow(FLOW).source)
        env = migrated_airflow(tmp_path / "airflow", config, tmp_path)
        checkpoint_records = sample_data.read_partition(backup.bootstrap, CHECKPOINTS, 0)

        with _active_consumer(backup, busy, remote):
            started = time.monotonic()
            dry_output = _failover(env, tmp_path, {"dry_run": True})
            dry_seconds = time.monotonic() - started
            # Nothing was committed.
            assert {g: group_offsets(backup.bootstrap, g) for g in (resume, ahead, other)} == {
                resume: {},
                ahead: {(remote, 0): 25},
                other: {},
            }
            (dry_md, dry), *more = _reports(config).values()
            assert more == []

            started = time.monotonic()
            output = _failover(env, tmp_path, {"groups": [resume, ahead, busy, missing]})
            real_seconds = time.monotonic() - started
        print(
            f"failover DAG runs through Airflow: dry run {dry_seconds:.1f} s, real run {real_seconds:.1f} s"
        )

    # Exactly where each group stopped on the source, on the remote topic; never backwards; the
    # active group and the group not asked for are untouched.
    assert {g: group_offsets(backup.bootstrap, g) for g in (resume, ahead, busy, other, missing)} == {
        resume: {(remote, 0): 20, (remote, 1): 25},
        ahead: {(remote, 0): 25, (remote, 1): 10},
        busy: {},
        other: {},
        missing: {},
    }
    # A consumer resuming on the target re-reads nothing and skips nothing.
    expected = {
        p: (o, sample_data.sample_record(topic, p, o).key, sample_data.sample_record(topic, p, o).value)
        for p, o in ((0, 20), (1, 25))
    }
    assert first_records(backup.bootstrap, resume, remote, 2) == expected

    # The report: logged, and written to the run's folder as Markdown and JSON.
    reports = _reports(config)
    assert len(reports) == 2
    ((md, real),) = [r for r in reports.values() if not r[1]["dry_run"]]
    records = len(checkpoint_records)
    keys = len({r.key for r in checkpoint_records})
    untranslatable = [
        row(resume, remote_gone, 0, 4, 4, reason="the remote topic does not exist on the target")
    ]
    kept = [row(ahead, remote, 0, 10, 10, committed=25)]
    assert {k: v for k, v in real.items() if k != "timings"} == {
        "flow": FLOW,
        "source": "primary",
        "target": "backup",
        "checkpoints_topic": CHECKPOINTS,
        "dry_run": False,
        "records_read": records,
        "checkpoints": keys,
        "selected": 6,
        "groups_set": {ahead: [_at(remote, 1, 10)], resume: [_at(remote, 0, 20), _at(remote, 1, 25)]},
        "set": [
            row(ahead, remote, 1, 10, 10, committed=None),
            row(resume, remote, 0, 20, 20, committed=None),
            row(resume, remote, 1, 25, 25, committed=None),
        ],
        "unchanged": [],
        "ahead": kept,
        "active": {busy: "Stable"},
        "untranslatable": untranslatable,
        "without_checkpoints": [missing],
        "undecodable_offsets": [],
    }
    assert sorted(real["timings"]) == ["commit_s", "inspect_s", "read_s", "started_at", "total_s"]
    print(f"failover task timings: dry run {dry['timings']}, real run {real['timings']}")
    assert 0 < real["timings"]["total_s"] < real_seconds
    assert md.splitlines()[0] == "# Failover of flow primary->backup"
    for line in (
        f"| {resume} | {remote} | 0 | 20 | none | 20 |",
        f"| {resume} | {remote} | 1 | 25 | none | 25 |",
        f"| {ahead} | {remote} | 1 | 10 | none | 10 |",
        f"| {ahead} | {remote} | 0 | 25 | 10 |",
        f"| {busy} | Stable |",
        f"| {resume} | {remote_gone} | 0 | 4 | 4 | the remote topic does not exist on the target |",
        f"| {missing} |",
    ):
        assert line in md.splitlines()
    assert "# Failover of flow primary->backup\n" in output
    assert f"| {resume} | {remote} | 0 | 20 | none | 20 |" in output

    # The dry run decided the same for every group of the flow (the one not asked for later too),
    # and said it committed nothing.
    assert dry["dry_run"] is True
    assert dry["groups_set"] == {
        ahead: [_at(remote, 1, 10)],
        other: [_at(remote, 0, 3)],
        resume: [_at(remote, 0, 20), _at(remote, 1, 25)],
    }
    assert (dry["selected"], dry["ahead"], dry["active"]) == (7, kept, {busy: "Stable"})
    assert (dry["untranslatable"], dry["without_checkpoints"]) == (untranslatable, [])
    assert dry_md.splitlines()[0] == "# Failover of flow primary->backup (dry run: nothing was committed)"
    assert "## Offsets that would be set (4)" in dry_md.splitlines()
    assert "(dry run: nothing was committed)" in dry_output
