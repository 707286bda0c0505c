"""Checkpoints on real brokers: consumer-group positions translated exactly into MM2's format.

A group commits on the source, the flow runs, the checkpoint task emits; the records in
``primary.checkpoints.internal`` are decoded field by field, and a consumer that fails over to the
target at the checkpoint's downstream offset reads exactly the record after the last one it
consumed on the source: nothing re-read, nothing skipped. A group that read a partition to its end
fails over to the remote partition's end, past the copy's commit marker: its lag there is 0.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, Message
from mirror_helpers import (
    commit_group,
    committed_end,
    create_topic,
    run_flow,
    transactional_producer,
    wait_end,
)
from pyspark.sql import SparkSession

from mirrorflow.app.batch_run import checkpoint_run
from mirrorflow.app.checkpoints import emit_checkpoints
from mirrorflow.app.flow_session import FlowSession
from mirrorflow.app.run_folder import metrics_file
from mirrorflow.config.model import MirrorConfig
from mirrorflow.errors import CommitConflictError
from mirrorflow.mm2.records import Checkpoint, OffsetSync
from mirrorflow.store.checkpoint_log import latest_checkpoint_metrics
from mirrorflow.store.offsets_store import OffsetsStore
from mirrorflow_dev import sample_data
from mirrorflow_dev.local_kafka import LocalCluster
from mirrorflow_dev.sample_data import Record, sample_record

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

FLOW = "primary->backup"
Clusters = dict[str, LocalCluster]
WriteConfig = Callable[[str], MirrorConfig]


def _checkpoints(cluster: LocalCluster, group: str) -> list[Checkpoint]:
    records = sample_data.read_partition(cluster.bootstrap, "primary.checkpoints.internal", 0)
    decoded = [Checkpoint.decode(r.key or b"", r.value or b"") for r in records]
    return [c for c in decoded if c.group == group]


def _first_record_at(cluster: LocalCluster, topic: str, partition: int, offset: int) -> Record | None:
    """What a consumer positioned at ``offset`` reads first (None: nothing there yet)."""
    records = sample_data.read_partition(cluster.bootstrap, topic, partition)
    return records[offset] if offset < len(records) else None


def test_a_failed_over_consumer_resumes_exactly_at_the_next_record(
    kafka_clusters: Clusters, write_config: WriteConfig, spark: SparkSession, unique_name: str
) -> None:
    primary, backup = kafka_clusters["primary"], kafka_clusters["backup"]
    topic, remote, group = unique_name, f"primary.{unique_name}", f"{unique_name}-billing"
    create_topic(primary.bootstrap, topic, 2)
    sample_data.produce_samples(primary.bootstrap, topic, 2, 0, 30)
    config = write_config(f"primary->backup.enabled = true\nprimary->backup.topics = {topic}\n")
    run_flow(config, FLOW, "run-1", spark)
    # The group read 12 records of partition 0 and all of partition 1 on the source.
    commit_group(primary.bootstrap, group, {(topic, 0): 12, (topic, 1): 30})

    report = checkpoint_run(config, FLOW, "checkpoints")

    # Partition 1 was read to its end: the group stands past the copy's commit marker at 30, at the
    # remote partition's end, as a read_committed consumer that read it all does.
    assert sorted(
        (c.partition, c.upstream_offset, c.downstream_offset) for c in _checkpoints(backup, group)
    ) == [
        (0, 12, 12),
        (1, 30, 31),
    ]
    assert committed_end(backup.bootstrap, remote, 1) == 31
    (cp0,) = [c for c in _checkpoints(backup, group) if c.partition == 0]
    assert (cp0.group, cp0.topic, cp0.metadata) == (group, remote, "")
    assert _first_record_at(backup, remote, 0, cp0.downstream_offset) == sample_record(topic, 0, 12)
    assert len(report.emitted) == 2

    # Nothing moved: nothing new is emitted. The group moves on: one new checkpoint, but not from a
    # DR window whose run no longer holds the flow's lock (here: nobody holds it).
    assert checkpoint_run(config, FLOW, "checkpoints").emitted == ()
    commit_group(primary.bootstrap, group, {(topic, 0): 20})
    with (
        FlowSession(config, FLOW, "window-1", locked=True) as window,
        pytest.raises(CommitConflictError, match="run window-1 cannot emit checkpoints"),
    ):
        emit_checkpoints(window)
    assert len(_checkpoints(backup, group)) == 2
    (moved,) = checkpoint_run(config, FLOW, "checkpoints").emitted
    assert (moved.partition, moved.upstream_offset, moved.downstream_offset) == (0, 20, 20)
    assert len(_checkpoints(backup, group)) == 3
    # MM2's checkpoint latency per group and partition, for the newest checkpoint of each.
    with OffsetsStore(config.offsets_db_url) as store:
        latest = latest_checkpoint_metrics(store, FLOW)
    assert [(m.group, m.remote_topic, m.partition) for m in latest] == [
        (group, remote, 0),
        (group, remote, 1),
    ]
    assert all(0 <= m.latency_ms < 30_000 for m in latest)
    exported = metrics_file(config.state_dir, FLOW, "checkpoint").read_text().splitlines()
    assert exported == [
        "# TYPE kafka_connect_mirror_checkpoint_connector_checkpoint_latency_ms gauge",
        *(
            'kafka_connect_mirror_checkpoint_connector_checkpoint_latency_ms{source="primary",target="backup",'
            f'group="{group}",topic="{remote}",partition="{m.partition}"}} {m.latency_ms}'
            for m in latest
        ),
    ]


def test_transaction_markers_and_aborted_records_are_neither_re_read_nor_skipped(
    kafka_clusters: Clusters, write_config: WriteConfig, spark: SparkSession, unique_name: str
) -> None:
    primary, backup = kafka_clusters["primary"], kafka_clusters["backup"]
    topic, remote = unique_name, f"primary.{unique_name}"
    bs = primary.bootstrap
    create_topic(bs, topic, 1)
    committed = [sample_record(topic, 0, i) for i in range(5)]
    aborted = [sample_record(topic, 0, 100 + i) for i in range(2)]
    tx = transactional_producer(bs, unique_name)
    # Source offsets: 0 1 2 committed, 3 M commit, 4 5 aborted, 6 M abort, 7 8 committed, 9 M commit.
    for records, commit, end in ((committed[:3], True, 4), (aborted, False, 7), (committed[3:], True, 10)):
        tx.begin_transaction()
        sample_data.produce(tx, topic, 0, records)
        if commit:
            tx.commit_transaction(30)
        else:
            tx.abort_transaction(30)
        wait_end(bs, topic, 0, end)
    tx.close()
    config = write_config(f"primary->backup.enabled = true\nprimary->backup.topics = {topic}\n")
    run_flow(config, FLOW, "run-1", spark)
    assert sample_data.read_partition(backup.bootstrap, remote, 0) == committed
    # Groups that stopped at each interesting source position.
    positions = {"after-first-txn": 3, "on-aborted": 5, "after-abort": 7, "mid-last": 8, "at-end": 10}
    for name, offset in positions.items():
        commit_group(bs, f"{unique_name}-{name}", {(topic, 0): offset})

    checkpoint_run(config, FLOW, "checkpoints")

    translated = {
        name: _checkpoints(backup, f"{unique_name}-{name}")[-1].downstream_offset for name in positions
    }
    # The next committed record after source offset 3, 5 or 7 is source 7 = target 3; after 8 it
    # is source 8 = target 4; at the end there is none: past the copy's commit marker at 5, where
    # the remote partition ends.
    assert translated == {"after-first-txn": 3, "on-aborted": 3, "after-abort": 3, "mid-last": 4, "at-end": 6}
    assert _first_record_at(backup, remote, 0, 3) == committed[3]
    assert committed_end(backup.bootstrap, remote, 0) == 6

    # A transaction open on the remote partition (as a copy's in flight): the group at the end stays
    # before its records, which a commit would make visible. Once it aborts, the group stands past
    # its records and its marker.
    open_tx = transactional_producer(backup.bootstrap, f"{unique_name}-open")
    open_tx.begin_transaction()
    sample_data.produce(open_tx, remote, 0, aborted)
    open_tx.flush(30)
    wait_end(backup.bootstrap, remote, 0, 8)
    assert [c.partition for c in checkpoint_run(config, FLOW, "checkpoints").emitted] == []
    open_tx.abort_transaction(30)
    open_tx.close()
    wait_end(backup.bootstrap, remote, 0, 9)
    (past,) = checkpoint_run(config, FLOW, "checkpoints").emitted
    assert (past.group_id, past.downstream_offset) == (f"{unique_name}-at-end", 9)
    assert committed_end(backup.bootstrap, remote, 0) == 9


def _consumer(cluster: LocalCluster, group: str) -> Consumer:
    # auto.offset.reset=latest: without a committed offset the consumer would read nothing old.
    return Consumer(
        {"bootstrap.servers": cluster.bootstrap, "group.id": group, "auto.offset.reset": "latest",
         "enable.auto.commit": "false", "session.timeout.ms": "6000"}
    )  # fmt: skip


def _poll_one(consumer: Consumer, timeout: float = 30.0) -> Message:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            return msg
    raise AssertionError("no record within the timeout")


def test_group_offset_sync_lets_the_same_group_resume_on_the_target_and_spares_active_groups(
    kafka_clusters: Clusters, write_config: WriteConfig, spark: SparkSession, unique_name: str
) -> None:
    primary, backup = kafka_clusters["primary"], kafka_clusters["backup"]
    topic, remote = unique_name, f"primary.{unique_name}"
    idle, busy = f"{unique_name}-idle", f"{unique_name}-busy"
    create_topic(primary.bootstrap, topic, 1)
    sample_data.produce_samples(primary.bootstrap, topic, 1, 0, 20)
    config = write_config(
        f"primary->backup.enabled = true\nprimary->backup.topics = {topic}\n"
        "primary->backup.sync.group.offsets.enabled = true\n"
    )
    run_flow(config, FLOW, "run-1", spark)
    commit_group(primary.bootstrap, idle, {(topic, 0): 7})
    commit_group(primary.bootstrap, busy, {(topic, 0): 20})  # read to the end
    # The busy group is already consuming on the target.
    active = _consumer(backup, busy)
    active.subscribe([remote])
    deadline = time.monotonic() + 30
    while not active.assignment():
        active.poll(0.2)
        assert time.monotonic() < deadline, "the busy group never got its assignment"

    report = checkpoint_run(config, FLOW, "checkpoints")

    assert report.synced == {idle: {(remote, 0): 7}}
    assert report.active == (busy,)
    failed_over = _consumer(backup, idle)
    failed_over.subscribe([remote])
    try:
        msg = _poll_one(failed_over)
        assert (msg.offset(), msg.key(), msg.value()) == (
            7,
            sample_record(topic, 0, 7).key,
            sample_record(topic, 0, 7).value,
        )
    finally:
        failed_over.close()
    # Once the busy group stops, the next run syncs it too.
    active.close()
    deadline = time.monotonic() + 30
    while (report := checkpoint_run(config, FLOW, "checkpoints")).active:
        assert time.monotonic() < deadline, "the busy group never became empty"
        time.sleep(0.5)
    # Past the copy's commit marker at 20: at the remote partition's end, lag 0.
    assert report.synced == {busy: {(remote, 0): 21}}
    assert committed_end(backup.bootstrap, remote, 0) == 21


@pytest.mark.parametrize(
    ("location", "cluster", "topic_name"),
    [
        ("source", "primary", "mm2-offset-syncs.backup.internal"),
        ("target", "backup", "mm2-offset-syncs.primary.internal"),
    ],
)
def test_offset_syncs_are_written_in_mm2s_format_where_configured(
    kafka_clusters: Clusters,
    write_config: WriteConfig,
    spark: SparkSession,
    unique_name: str,
    location: str,
    cluster: str,
    topic_name: str,
) -> None:
    primary = kafka_clusters["primary"]
    topic = unique_name
    create_topic(primary.bootstrap, topic, 2)
    sample_data.produce_samples(primary.bootstrap, topic, 2, 0, 5)
    config = write_config(
        f"primary->backup.enabled = true\nprimary->backup.topics = {topic}\n"
        f"primary->backup.offset-syncs.topic.location = {location}\n"
    )
    run_flow(config, FLOW, "run-1", spark)
    sample_data.produce_samples(primary.bootstrap, topic, 1, 5, 3)
    run_flow(config, FLOW, "run-2", spark)

    records = sample_data.read_partition(kafka_clusters[cluster].bootstrap, topic_name, 0)
    syncs = [OffsetSync.decode(r.key or b"", r.value or b"") for r in records]
    # One sync per committed batch here (no source gaps): its first source offset and where it
    # landed, past run 1's commit marker for the second.
    assert [s for s in syncs if s.topic == topic] == [
        OffsetSync(topic, 0, 0, 0),
        OffsetSync(topic, 1, 0, 0),
        OffsetSync(topic, 0, 5, 6),
    ]
