"""Source records deleted before they were mirrored, and source topics deleted and recreated, on real
brokers: a run fails naming exactly what was lost and commits nothing, or (skip) continues after the
gap, records it and copies every record after it exactly once; a recreated topic is never mixed into
the old copy."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from mirror_helpers import commit_group, create_topic, delete_records, recreate_topic, run_flow, topic_id
from pyspark.sql import SparkSession

from mirrorflow.app import batch_run
from mirrorflow.app.batch_run import checkpoint_run
from mirrorflow.config.model import MirrorConfig
from mirrorflow.copy.spark_copy import copy_plan
from mirrorflow.core.plan import SourceGap
from mirrorflow.core.progress import PartitionProgress
from mirrorflow.errors import SourceDataLostError, SourceTopicRecreatedError
from mirrorflow.store.cli import main
from mirrorflow.store.flow_lock import lock_holder
from mirrorflow.store.offsets_store import OffsetsStore
from mirrorflow_dev import sample_data
from mirrorflow_dev.local_kafka import LocalCluster
from mirrorflow_dev.sample_data import Record, sample_record

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

FLOW = "primary->backup"
Clusters = dict[str, LocalCluster]
WriteConfig = Callable[[str], MirrorConfig]


def _config(write_config: WriteConfig, topic: str, on_loss: str = "fail") -> MirrorConfig:
    return write_config(
        f"primary->backup.enabled = true\nprimary->backup.topics = {topic}\n"
        f"primary->backup.mirrorflow.on.source.data.loss = {on_loss}\n"
    )


def _samples(topic: str, partition: int, indexes: range) -> list[Record]:
    return [sample_record(topic, partition, i) for i in indexes]


def _remote(backup: LocalCluster, topic: str, partition: int) -> list[Record]:
    return sample_data.read_partition(backup.bootstrap, f"primary.{topic}", partition)


def _mirrored_with_lost_records(
    kafka_clusters: Clusters, config: MirrorConfig, spark: SparkSession, topic: str
) -> None:
    """Records 0-9 of 3 partitions mirrored; 10-19 produced, then 10-14 of partition 0 and 10-11 of
    partition 2 deleted from the source."""
    primary = kafka_clusters["primary"].bootstrap
    create_topic(primary, topic, 3)
    sample_data.produce_samples(primary, topic, 3, 0, 10)
    assert run_flow(config, FLOW, "run-1", spark).records == 30
    sample_data.produce_samples(primary, topic, 3, 10, 10)
    delete_records(primary, {(topic, 0): 15, (topic, 2): 12})


def test_records_deleted_before_a_run_fail_it_naming_every_lost_range_and_nothing_is_committed(
    kafka_clusters: Clusters, write_config: WriteConfig, spark: SparkSession, unique_name: str
) -> None:
    config = _config(write_config, unique_name)
    _mirrored_with_lost_records(kafka_clusters, config, spark, unique_name)
    store = OffsetsStore(config.offsets_db_url)
    before = store.progress(FLOW)

    with pytest.raises(SourceDataLostError) as caught:
        run_flow(config, FLOW, "run-2", spark)

    assert str(caught.value) == (
        f"flow primary->backup: source records were deleted from the source (retention or delete-records) "
        f"before they were mirrored: {unique_name}-0 [10, 15) (5 offsets), {unique_name}-2 [10, 12) "
        "(2 offsets). Nothing was copied or committed. Until the loss is accepted, every run of the flow "
        "fails here. To accept it, set `primary->backup.mirrorflow.on.source.data.loss = skip` and run "
        "the flow again: it continues after each lost range and records it in the offsets table "
        "(mirror_gaps) and the run report."
    )
    assert (
        store.progress(FLOW)
        == before
        == {(unique_name, p): PartitionProgress(unique_name, p, 10, 10) for p in range(3)}
    )
    assert [b.run_id for b in store.batches(FLOW)] == ["run-1"] * 3
    assert store.gaps(FLOW) == []
    assert [len(_remote(kafka_clusters["backup"], unique_name, p)) for p in range(3)] == [10, 10, 10]
    assert lock_holder(store, FLOW) is None


def test_with_skip_a_run_continues_after_the_gap_records_it_and_the_next_run_goes_on(
    kafka_clusters: Clusters, write_config: WriteConfig, spark: SparkSession, unique_name: str
) -> None:
    topic, group = unique_name, f"{unique_name}-group"
    primary, backup = kafka_clusters["primary"], kafka_clusters["backup"]
    config = _config(write_config, topic, "skip")
    _mirrored_with_lost_records(kafka_clusters, config, spark, topic)

    report = run_flow(config, FLOW, "run-2", spark)

    # On the target the gaps hold no copy of a lost record: run-1's commit marker at 10 begins
    # run-2's batch.
    gaps = (SourceGap(topic, 0, 10, 15, 10, 10), SourceGap(topic, 2, 10, 12, 10, 10))
    assert report.gaps == gaps
    assert report.as_dict()["gaps"] == [vars(g) for g in gaps]
    assert report.table().split("\n")[-3:] == [
        "source records lost before they were mirrored, skipped:",
        f"  {topic}-0 [10, 15) (5 offsets)",
        f"  {topic}-2 [10, 12) (2 offsets)",
    ]
    assert report.records == 5 + 10 + 8
    store = OffsetsStore(config.offsets_db_url)
    assert [(g.run_id, SourceGap(*list(vars(g).values())[:6])) for g in store.gaps(FLOW)] == [
        ("run-2", g) for g in gaps
    ]
    assert _remote(backup, topic, 0) == _samples(topic, 0, range(10)) + _samples(topic, 0, range(15, 20))
    assert _remote(backup, topic, 1) == _samples(topic, 1, range(20))
    assert _remote(backup, topic, 2) == _samples(topic, 2, range(10)) + _samples(topic, 2, range(12, 20))
    # A group positioned inside the gap resumes at the first record after it, on both clusters.
    commit_group(primary.bootstrap, group, {(topic, 0): 12})
    emitted = checkpoint_run(config, FLOW, "checkpoints").emitted
    assert [(p.upstream_offset, p.downstream_offset) for p in emitted if p.group_id == group] == [(12, 11)]

    sample_data.produce_samples(primary.bootstrap, topic, 3, 20, 3)
    again = run_flow(config, FLOW, "run-3", spark)

    assert (again.records, again.gaps) == (9, ())
    assert _remote(backup, topic, 0)[10:] == _samples(topic, 0, range(15, 23))
    # Records 15-19 at 11-15, run-2's marker at 16, records 20-22 at 17-19.
    assert store.progress(FLOW)[(topic, 0)] == PartitionProgress(topic, 0, 23, 20)
    # The gaps end at the source's log start: run-3's commit pruned them, with run-1's batches below
    # it. A group still inside them resumes where the first record after them landed, as before.
    assert store.gaps(FLOW) == []
    assert [(b.run_id, b.partition, b.source_start) for b in store.batches(FLOW) if b.partition != 1] == [
        ("run-2", 0, 15),
        ("run-3", 0, 20),
        ("run-2", 2, 12),
        ("run-3", 2, 20),
    ]
    commit_group(primary.bootstrap, f"{group}-late", {(topic, 0): 13})
    emitted = checkpoint_run(config, FLOW, "checkpoints").emitted
    assert [(p.upstream_offset, p.downstream_offset) for p in emitted if p.group_id == f"{group}-late"] == [
        (13, 11)
    ]


def test_copies_an_interrupted_attempt_left_are_neither_duplicated_nor_taken_for_lost_ones(
    kafka_clusters: Clusters, write_config: WriteConfig, spark: SparkSession, unique_name: str
) -> None:
    topic = unique_name
    primary, backup = kafka_clusters["primary"].bootstrap, kafka_clusters["backup"]
    config = _config(write_config, topic, "skip")
    create_topic(primary, topic, 1)
    sample_data.produce_samples(primary, topic, 1, 0, 10)
    run_flow(config, FLOW, "run-1", spark)
    sample_data.produce_samples(primary, topic, 1, 10, 10)
    # Run 2 copies records 10-19 and dies before its commit; then the source deletes up to 15.
    plan = batch_run.plan_run(config, FLOW, "run-2")
    copy_plan(spark.sparkContext, config.flow(FLOW), plan)
    batch_run.release_run(config, FLOW, "run-2")
    delete_records(primary, {(topic, 0): 15})
    sample_data.produce_samples(primary, topic, 1, 20, 5)

    report = run_flow(config, FLOW, "run-3", spark)

    # Target 10 is run 1's commit marker, 11-15 copy the lost records 10-14 and stay in the gap;
    # 15-19 (at 16-20, run 2's transaction committed) are skipped, 20-24 written.
    assert report.gaps == (SourceGap(topic, 0, 10, 15, 10, 16),)
    assert (report.records, report.partitions[0].skipped) == (10, 5)
    assert _remote(backup, topic, 0) == _samples(topic, 0, range(25))


def test_records_deleted_between_plan_and_copy_fail_the_run_at_commit_naming_them(
    kafka_clusters: Clusters, write_config: WriteConfig, spark: SparkSession, unique_name: str
) -> None:
    topic = unique_name
    primary = kafka_clusters["primary"].bootstrap
    config = _config(write_config, topic)
    flow = config.flow(FLOW)
    create_topic(primary, topic, 2)
    sample_data.produce_samples(primary, topic, 2, 0, 10)
    plan = batch_run.plan_run(config, FLOW, "run-1")
    delete_records(primary, {(topic, 1): 4})

    noted = batch_run.execute_copy(
        config,
        flow,
        plan,
        lambda: copy_plan(spark.sparkContext, flow, plan),
    )
    assert noted.startswith("copy of primary->backup stopped: flow primary->backup run run-1: planned source")
    with pytest.raises(SourceDataLostError) as caught:
        batch_run.commit_run(config, FLOW, "run-1")
    batch_run.release_run(config, FLOW, "run-1")

    message = str(caught.value)
    assert message.startswith(
        "flow primary->backup run run-1: source records were deleted from the source after the run was "
        f"planned, before they were copied: {topic}-1 [0, 4) (4 offsets). Nothing was committed. Until "
        "the loss is accepted, every run of the flow fails here."
    )
    assert f"offset 0 of {topic}-1 is no longer on the source cluster" in message
    store = OffsetsStore(config.offsets_db_url)
    assert store.batches(FLOW) == []
    assert store.progress(FLOW) == {(topic, p): PartitionProgress(topic, p, 0, 0) for p in range(2)}
    with pytest.raises(SourceDataLostError, match=rf"before they were mirrored: {topic}-1 \[0, 4\)"):
        run_flow(config, FLOW, "run-2", spark)


def test_a_recreated_source_topic_is_refused_until_its_state_is_forgotten(
    kafka_clusters: Clusters, write_config: WriteConfig, spark: SparkSession, unique_name: str
) -> None:
    topic = unique_name
    primary, backup = kafka_clusters["primary"].bootstrap, kafka_clusters["backup"]
    config = _config(write_config, topic)
    create_topic(primary, topic, 1)
    sample_data.produce_samples(primary, topic, 1, 0, 5)
    run_flow(config, FLOW, "run-1", spark)
    store = OffsetsStore(config.offsets_db_url)
    old_id = store.topic_ids(FLOW)[topic]
    assert old_id == topic_id(primary, topic)
    # The new topic holds more records than were mirrored of the old one: offsets alone cannot tell.
    recreate_topic(primary, topic, 1)
    sample_data.produce_samples(primary, topic, 1, 100, 8)

    with pytest.raises(SourceTopicRecreatedError) as caught:
        run_flow(config, FLOW, "run-2", spark)

    assert (
        f"source topics were deleted and recreated since they were first mirrored: {topic} (mirrored "
        f"topic id {old_id}, now {topic_id(primary, topic)}) into primary.{topic}. Nothing was copied"
    ) in str(caught.value)
    assert f"forget-topic --flow 'primary->backup' --topic {topic}" in str(caught.value)
    assert _remote(backup, topic, 0) == _samples(topic, 0, range(5))
    assert store.progress(FLOW) == {(topic, 0): PartitionProgress(topic, 0, 5, 5)}

    # The recovery the message names: keep the remote topic, forget the old topic's state.
    assert main(["forget-topic", "--flow", FLOW, "--topic", topic, "--db", config.offsets_db_url]) == 0
    assert run_flow(config, FLOW, "run-3", spark).records == 8

    assert _remote(backup, topic, 0) == _samples(topic, 0, range(5)) + _samples(topic, 0, range(100, 108))
    assert store.topic_ids(FLOW) == {topic: topic_id(primary, topic)}
