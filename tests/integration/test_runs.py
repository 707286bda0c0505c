"""Run-level guarantees on real brokers: one run of a flow at a time, nothing double-committed."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

import pytest
from mirror_helpers import assert_same_records, create_topic, run_flow
from pyspark.sql import SparkSession

from mirrorflow.app import batch_run
from mirrorflow.config.model import MirrorConfig
from mirrorflow.copy.batch_copy import CopySettings, copy_partitions, copy_result
from mirrorflow.copy.flow_transaction import copied_in_one_transaction
from mirrorflow.core.plan import CopyResult, Plan
from mirrorflow.errors import CommitConflictError, FlowLockedError
from mirrorflow.store.offsets_store import OffsetsStore
from mirrorflow_dev import sample_data
from mirrorflow_dev.local_kafka import LocalCluster

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

FLOW = "primary->backup"


def test_a_second_concurrent_run_is_refused_and_cannot_commit(
    kafka_clusters: dict[str, LocalCluster],
    write_config: Callable[[str], MirrorConfig],
    spark: SparkSession,
    unique_name: str,
) -> None:
    primary = kafka_clusters["primary"]
    create_topic(primary.bootstrap, unique_name, 1)
    sample_data.produce_samples(primary.bootstrap, unique_name, 1, 0, 10)
    # A run waits for a held lock (mirrorflow.lock.wait.seconds): none here, it is refused at once.
    config = write_config(
        f"primary->backup.enabled = true\nprimary->backup.topics = {unique_name}\n"
        "mirrorflow.lock.wait.seconds = 0\n"
    )

    batch_run.plan_run(config, FLOW, "run-1")
    with pytest.raises(FlowLockedError, match="locked by run run-1") as refused:
        batch_run.plan_run(config, FLOW, "run-2")
    assert "Run run-2 did not start" in str(refused.value)
    # The refused run has no plan; a commit in its name is refused too, and moves nothing.
    with pytest.raises(CommitConflictError):
        OffsetsStore(config.offsets_db_url).commit(FLOW, "run-2", [])
    assert not batch_run.release_run(config, FLOW, "run-2")
    assert batch_run.release_run(config, FLOW, "run-1")

    report = run_flow(config, FLOW, "run-3", spark)
    assert report.records == 10
    assert [
        (b.run_id, b.source_start, b.source_end) for b in OffsetsStore(config.offsets_db_url).batches(FLOW)
    ] == [("run-3", 0, 10)]


def test_records_over_a_megabyte_are_mirrored_where_the_topics_allow_them(
    kafka_clusters: dict[str, LocalCluster],
    write_config: Callable[[str], MirrorConfig],
    spark: SparkSession,
    unique_name: str,
) -> None:
    # The source topic takes messages of up to 4 MB; its remote topic gets the same config.
    primary, backup = kafka_clusters["primary"], kafka_clusters["backup"]
    create_topic(primary.bootstrap, unique_name, 2, {"max.message.bytes": str(4 << 20)})
    producer = sample_data.producer(primary.bootstrap, {"message.max.bytes": str(4 << 20)})
    big = [bytes([i]) * ((3 << 20) // 2 + i) for i in range(3)]  # 1.5 MB and a little
    for partition in range(2):
        records = (
            sample_data.Record(b"k%d" % i, v, (), sample_data.BASE_TIMESTAMP_MS + i)
            for i, v in enumerate(big)
        )
        sample_data.produce(producer, unique_name, partition, records)
    config = write_config(
        f"{FLOW}.enabled = true\n{FLOW}.topics = {unique_name}\nbackup.producer.max.request.size = {5 << 20}"
    )

    run_flow(config, FLOW, "big", spark)

    remote = f"primary.{unique_name}"
    assert assert_same_records(primary.bootstrap, unique_name, backup.bootstrap, remote, 2) == 6


def test_a_copy_stopped_at_its_transactions_deadline_commits_what_it_copied_and_the_next_run_goes_on(
    kafka_clusters: dict[str, LocalCluster],
    write_config: Callable[[str], MirrorConfig],
    spark: SparkSession,
    unique_name: str,
) -> None:
    """Each partition holds more than one fetch round (10 MiB): a copy whose deadline passed before
    it began reads one round, writes and commits it, and the run's report shows the rest as lag.
    The next run copies the rest after it, each record once."""
    primary, backup = kafka_clusters["primary"], kafka_clusters["backup"]
    create_topic(primary.bootstrap, unique_name, 2)
    producer = sample_data.producer(primary.bootstrap)
    for partition in range(2):
        records = (sample_data.sample_record(unique_name, partition, i, 10_000) for i in range(1_400))
        sample_data.produce(producer, unique_name, partition, records)
    config = write_config(f"{FLOW}.enabled = true\n{FLOW}.topics = {unique_name}\n")
    flow = config.flow(FLOW)
    settings = CopySettings.of(flow)

    def copy_past_its_deadline(plan: Plan) -> CopyResult:
        return copied_in_one_transaction(
            settings.target,
            plan,
            lambda g: copy_result(
                plan,
                copy_partitions(plan.partitions, settings, replace(g, deadline=time.time()), plan.schema_ids),
            ),
        )

    plan = batch_run.plan_run(config, FLOW, "short")
    try:
        batch_run.execute_copy(config, flow, plan, lambda: copy_past_its_deadline(plan))
        first = batch_run.commit_run(config, FLOW, "short").report
    finally:
        batch_run.release_run(config, FLOW, "short")

    stopped = {(b.partition, b.source_end) for b in OffsetsStore(config.offsets_db_url).batches(FLOW)}
    assert len(stopped) == 2 and all(0 < end < 1_400 for _, end in stopped), stopped
    assert sorted((p.partition, p.records, p.lag) for p in first.partitions) == sorted(
        (partition, end, 1_400 - end) for partition, end in stopped
    )
    assert run_flow(config, FLOW, "rest", spark).records == 2_800 - sum(end for _, end in stopped)
    remote = f"primary.{unique_name}"
    assert assert_same_records(primary.bootstrap, unique_name, backup.bootstrap, remote, 2) == 2_800
