"""The README's failover and failback runbook on real brokers, with `primary`'s broker stopped by PID.

Active/active: `primary->backup` and `backup->primary` enabled, reverse checkpoints on for
`backup->primary`. Records are produced on `primary` (part of them in transactions, so that source
and remote offsets differ), two groups consume partway there and the flows run; more records arrive
on `primary` that are not mirrored before its broker stops. The groups fail over to `backup`, consume
further there (one of them also `backup`'s own topic, produced meanwhile), `primary` comes back, and
the README's failback steps run, the last one (`mirror_backup_to_primary_failover`) through
`airflow dags test`. Checked: nothing is lost either way, and each group's positions on `primary` are
exactly where it stopped on `backup`: at the source record whose copy it had not consumed, or at the
source's end when it read every copy, so it re-reads nothing and skips nothing; MM2's own
`RemoteClusterUtils.translateOffsets` run on `primary` for alias `backup` returns the same positions.
A group that read a partition to its end is set at the other side's end, past the copies' commit
markers, both ways: its lag there is 0.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from mirror_helpers import (
    airflow,
    assert_same_records,
    commit_group,
    committed_end,
    create_topic,
    first_records,
    group_offsets,
    migrated_airflow,
    mirror_client,
    run_flow,
    transactional_producer,
)
from pyspark.sql import SparkSession

from mirrorflow.app.batch_run import checkpoint_run
from mirrorflow.app.failover import FailoverOptions, run_failover
from mirrorflow.config.model import MirrorConfig
from mirrorflow.kafka.record_reads import read_partition
from mirrorflow_dev import local_kafka, sample_data
from mirrorflow_dev.local_kafka import LocalCluster

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.airflow]

THERE, BACK = "primary->backup", "backup->primary"


def _transactions(bootstrap: str, topic: str, partitions: int, txn_id: str) -> None:
    """Three committed transactions of 5 records per partition: each adds a marker offset to the
    source that the remote topic does not have."""
    producer = transactional_producer(bootstrap, txn_id)
    for t in range(3):
        producer.begin_transaction()
        for p in range(partitions):
            records = (sample_data.sample_record(topic, p, 100 + 5 * t + i) for i in range(5))
            sample_data.produce(producer, topic, p, records)
        producer.commit_transaction(30)


def _resume_at(config: MirrorConfig, primary: LocalCluster, topic: str, partition: int, position: int) -> int:
    """Where a group at ``position`` of ``primary.<topic>`` on ``backup`` resumes on ``primary``, read
    off both clusters: the offset of the source record whose copy is at ``position``, or the
    source's end when it read every copy."""
    source = read_partition(config.clusters["primary"].consumer, "primary", topic, partition)
    copies = read_partition(config.clusters["backup"].consumer, "backup", f"primary.{topic}", partition)
    assert [(r.key, r.value) for r in copies] == [(r.key, r.value) for r in source]
    copied_at = [r.offset for r in copies]
    if position in copied_at:
        return source[copied_at.index(position)].offset
    assert position > copied_at[-1], f"{position} is not a position of the remote partition"
    return committed_end(primary.bootstrap, topic, partition)


def test_failback_puts_each_group_on_primary_exactly_where_it_stopped_on_backup(
    kafka_clusters: dict[str, LocalCluster],
    write_config: Callable[[str], MirrorConfig],
    spark: SparkSession,
    unique_name: str,
    tmp_path: Path,
) -> None:
    primary, backup = kafka_clusters["primary"], kafka_clusters["backup"]
    topic = f"{unique_name}-orders"
    there, back = f"primary.{topic}", f"backup.{topic}"  # on backup, on primary
    billing, shipping = f"{unique_name}-billing", f"{unique_name}-shipping"
    create_topic(primary.bootstrap, topic, 2)
    create_topic(backup.bootstrap, topic, 2)
    sample_data.produce_samples(primary.bootstrap, topic, 2, 0, 20)
    _transactions(primary.bootstrap, topic, 2, f"{unique_name}-tx")
    config = write_config(
        "".join(
            f"{flow}.enabled = true\n{flow}.topics = {unique_name}-.*\n{flow}.groups = {unique_name}-.*\n"
            for flow in (THERE, BACK)
        )
        + f"{BACK}.mirrorflow.reverse.checkpoints.enabled = true\nmirrorflow.task.retries = 0\n"
    )

    # Before the outage: both flows run; the groups consumed partway on primary.
    run_flow(config, THERE, "there-1", spark)
    run_flow(config, BACK, "back-1", spark)
    commit_group(primary.bootstrap, billing, {(topic, 0): 12, (topic, 1): 28})
    commit_group(primary.bootstrap, shipping, {(topic, 0): 5, (topic, 1): 38})  # partition 1: all
    assert len(checkpoint_run(config, THERE, "checkpoints").emitted) == 4
    # Records that reach primary but not backup before primary's broker stops.
    sample_data.produce_samples(primary.bootstrap, topic, 2, 20, 4)
    local_kafka.stop_cluster(primary)

    try:
        # Failover (README steps 2-7): the groups set on backup from the checkpoints there.
        failover = run_failover(config, THERE, FailoverOptions())
        assert failover.groups_set == {
            billing: {(there, 0): 12, (there, 1): 27},  # source offset 28 follows one marker
            # Past the last copy's commit marker at 35: at the end, lag 0.
            shipping: {(there, 0): 5, (there, 1): 36},
        }
        assert committed_end(backup.bootstrap, there, 1) == 36
        # On backup: new records on its own topic; the groups read on (billing all of its
        # partition 1).
        sample_data.produce_samples(backup.bootstrap, topic, 2, 0, 10)
        commit_group(
            backup.bootstrap, billing, {(there, 0): 26, (there, 1): 31, (topic, 0): 4, (topic, 1): 10}
        )
        commit_group(backup.bootstrap, shipping, {(there, 0): 30})
    finally:
        # primary is back, on the same port and data (the session's clusters stop it by this PID).
        primary = kafka_clusters["primary"] = local_kafka.start_cluster(
            primary.alias, primary.port, primary.controller_port, primary.home
        )

    # Failback (README steps 1-4).
    run_flow(config, THERE, "there-2", spark)  # the 4 records per partition primary held back
    # Read to the end, those included: past the last copy and its transaction's commit marker.
    shipping_end = committed_end(backup.bootstrap, there, 0)
    commit_group(backup.bootstrap, shipping, {(there, 0): shipping_end})
    run_flow(config, BACK, "back-2", spark)
    emitted = checkpoint_run(config, BACK, "checkpoints").emitted
    assert {(p.group_id, p.topic, p.partition, p.remote_topic) for p in emitted} == {
        (billing, topic, 0, back),  # backup's own topic: checkpoints
        (billing, topic, 1, back),
        (billing, there, 0, topic),  # primary's topic: reverse checkpoints
        (billing, there, 1, topic),
        (shipping, there, 0, topic),
        (shipping, there, 1, topic),
    }
    env = migrated_airflow(tmp_path / "airflow", config, tmp_path)
    run = airflow(env, tmp_path, "dags", "test", "mirror_backup_to_primary_failover")
    assert run.returncode == 0, (run.stdout + run.stderr)[-8000:]

    # Nothing lost either way.
    assert assert_same_records(primary.bootstrap, topic, backup.bootstrap, there, 2) == 2 * 39
    assert assert_same_records(backup.bootstrap, topic, primary.bootstrap, back, 2) == 2 * 10
    # On primary each group is exactly where it stopped on backup: read off both clusters.
    expected = {
        billing: {
            (topic, 0): _resume_at(config, primary, topic, 0, 26),
            (topic, 1): _resume_at(config, primary, topic, 1, 31),
            (back, 0): 4,
            (back, 1): committed_end(primary.bootstrap, back, 1),
        },
        shipping: {
            (topic, 0): _resume_at(config, primary, topic, 0, shipping_end),
            (topic, 1): _resume_at(config, primary, topic, 1, 36),
        },
    }
    # Markers move source offsets ahead of the copies; shipping read everything on partition 0,
    # billing all of backup's partition 1: past the copy's commit marker at 10.
    assert expected == {
        billing: {(topic, 0): 27, (topic, 1): 33, (back, 0): 4, (back, 1): 11},
        shipping: {(topic, 0): 42, (topic, 1): 38},
    }
    assert {g: group_offsets(primary.bootstrap, g) for g in (billing, shipping)} == expected
    # MM2's own client on primary reads the same positions from backup's checkpoints; a
    # read_committed consumer there finds no lag where the group had read everything.
    for group, offsets in expected.items():
        facts = mirror_client(primary, "backup", group)
        assert [f for f in facts if f.startswith("offset")] == [
            f"offset {t}-{p} {o}" for (t, p), o in sorted(offsets.items())
        ]
        lags = dict(f.split(" ")[1:] for f in facts if f.startswith("lag"))
        caught_up = {billing: [f"{back}-1"], shipping: [f"{topic}-0"]}[group]
        assert [lags[tp] for tp in caught_up] == ["0"]
    # A consumer of billing on primary resumes with the record after the last one it read on backup.
    first = first_records(primary.bootstrap, billing, topic, 2)
    copies = {p: sample_data.read_partition(backup.bootstrap, there, p) for p in (0, 1)}
    assert first == {p: (o, copies[p][c].key, copies[p][c].value) for p, o, c in ((0, 27, 26), (1, 33, 31))}
