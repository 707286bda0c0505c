"""The Spark copy on real brokers: exact records, idempotent re-execution, transactions, resumption, cap.

Each test mirrors its own topic of "primary" to "primary.<topic>" on "backup" with the steps a DAG run
takes (plan -> copy -> commit -> release) and compares the target with the source record by record
(key, value, headers, timestamp, order), per partition.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from confluent_kafka import Producer
from kafka.admin import KafkaAdminClient
from mirror_helpers import create_topic, run_flow, transactional_producer, wait_end
from pyspark.sql import SparkSession

from mirrorflow.app import batch_run
from mirrorflow.app.run_folder import metrics_file
from mirrorflow.config.model import MirrorConfig
from mirrorflow.copy.spark_copy import copy_plan
from mirrorflow.core.plan import RECORDS_PER_TASK, CopyResult, Plan
from mirrorflow.core.progress import PartitionProgress
from mirrorflow.core.report import RunReport
from mirrorflow.errors import TargetStateError
from mirrorflow.kafka.connection import READ_UNCOMMITTED, Connection
from mirrorflow.kafka.record_reads import fetch
from mirrorflow.store.offsets_store import OffsetsStore
from mirrorflow.store.run_documents import save_document
from mirrorflow_dev import sample_data
from mirrorflow_dev.local_kafka import LocalCluster
from mirrorflow_dev.sample_data import BASE_TIMESTAMP_MS, Record, sample_record

pytestmark = [pytest.mark.spark, pytest.mark.kafka]

FLOW = "primary->backup"
Clusters = dict[str, LocalCluster]
WriteConfig = Callable[[str], MirrorConfig]


def _config(write_config: WriteConfig, topic: str, extra: str = "") -> MirrorConfig:
    return write_config(f"primary->backup.enabled = true\nprimary->backup.topics = {topic}\n{extra}")


def _expected(topic: str, partition: int, start: int, stop: int) -> list[Record]:
    return [sample_record(topic, partition, i) for i in range(start, stop)]


def _read(cluster: LocalCluster, topic: str, partition: int, committed: bool = True) -> list[Record]:
    return sample_data.read_partition(cluster.bootstrap, topic, partition, read_committed=committed)


def _partition_count(cluster: LocalCluster, topic: str) -> int:
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        (described,) = admin.describe_topics([topic])
        return len(described["partitions"])
    finally:
        admin.close()


def _copy(config: MirrorConfig, plan: Plan, spark: SparkSession) -> CopyResult:
    flow = config.flow(FLOW)
    return copy_plan(spark.sparkContext, flow, plan)


def _commit(config: MirrorConfig, run_id: str, result: CopyResult) -> RunReport:
    with OffsetsStore(config.offsets_db_url) as store:
        save_document(store, FLOW, run_id, "result", result.to_json())
    return batch_run.commit_run(config, FLOW, run_id).report


def test_copies_a_multi_partition_topic_exactly(
    kafka_clusters: Clusters, write_config: WriteConfig, spark: SparkSession, unique_name: str
) -> None:
    primary, backup = kafka_clusters["primary"], kafka_clusters["backup"]
    topic, remote, partitions, count = unique_name, f"primary.{unique_name}", 3, 40
    create_topic(primary.bootstrap, topic, partitions)
    sample_data.produce_samples(primary.bootstrap, topic, partitions, 0, count)
    expected = {p: _expected(topic, p, 0, count) for p in range(partitions)}
    every = [r for rs in expected.values() for r in rs]
    # The sample covers what a lossy copy would get wrong.
    assert any(r.key is None for r in every) and any(r.value is None for r in every)
    assert any(len({k for k, _ in r.headers}) < len(r.headers) for r in every), "repeated header keys"
    assert any(b"\x00" in (r.value or b"") for r in every), "binary values"
    assert max(r.timestamp for r in every) < BASE_TIMESTAMP_MS + 100_000, "timestamps from 2001"

    report = run_flow(config := _config(write_config, topic), FLOW, "run-1", spark)

    assert _partition_count(backup, remote) == partitions
    for p in range(partitions):
        assert _read(primary, topic, p) == expected[p]
        assert _read(backup, remote, p) == expected[p], f"{remote}-{p} differs"
    (t,) = report.topics
    assert (t.topic, t.remote_topic, t.partitions) == (topic, remote, partitions)
    assert (t.records, t.skipped, t.lag) == (partitions * count, 0, 0)
    with OffsetsStore(config.offsets_db_url) as store:
        assert store.progress(FLOW) == {
            (topic, p): PartitionProgress(topic, p, count, count) for p in range(partitions)
        }


def test_reexecution_after_a_partial_write_skips_exactly_what_is_there(
    kafka_clusters: Clusters, write_config: WriteConfig, spark: SparkSession, unique_name: str
) -> None:
    primary, backup = kafka_clusters["primary"], kafka_clusters["backup"]
    topic, remote, count, k = unique_name, f"primary.{unique_name}", 30, 7
    create_topic(primary.bootstrap, topic, 2)
    sample_data.produce_samples(primary.bootstrap, topic, 2, 0, count)
    config = _config(write_config, topic)
    try:
        plan = batch_run.plan_run(config, FLOW, "run-1")
        assert [(p.partition, p.source_start, p.source_end, p.target_start) for p in plan.partitions] == [
            (0, 0, count, 0),
            (1, 0, count, 0),
        ]
        # An earlier attempt crashed after writing the first k planned records of partition 1, in
        # two batches: the copy reads them back a batch at a time.
        first_k = _read(primary, topic, 1)[:k]
        producer = sample_data.producer(backup.bootstrap)
        sample_data.produce(producer, remote, 1, first_k[:3])
        sample_data.produce(producer, remote, 1, first_k[3:])
        assert _read(backup, remote, 1) == _expected(topic, 1, 0, k)

        result = _copy(config, plan, spark)
        assert [(r.partition, r.records, r.skipped, r.target_start) for r in result.partitions] == [
            (0, count, 0, 0),
            (1, count, k, 0),
        ]
        report = _commit(config, "run-1", result)
    finally:
        batch_run.release_run(config, FLOW, "run-1")

    for p in range(2):
        assert _read(backup, remote, p) == _expected(topic, p, 0, count), f"{remote}-{p}"
    (t,) = report.topics
    assert (t.records, t.skipped, t.lag) == (2 * count, k, 0)


def test_records_someone_else_wrote_to_the_remote_partition_are_never_taken_for_ours(
    kafka_clusters: Clusters, write_config: WriteConfig, spark: SparkSession, unique_name: str
) -> None:
    primary, backup = kafka_clusters["primary"], kafka_clusters["backup"]
    topic, remote, count = unique_name, f"primary.{unique_name}", 20
    create_topic(primary.bootstrap, topic, 1)
    sample_data.produce_samples(primary.bootstrap, topic, 1, 0, count)
    config = _config(write_config, topic)
    try:
        plan = batch_run.plan_run(config, FLOW, "run-1")
        # After the plan, another producer appends 3 records of its own to the remote partition: the
        # copy would otherwise count them as an earlier attempt's and skip 3 source records.
        foreign = [sample_record("elsewhere", 0, i) for i in range(3)]
        sample_data.produce(sample_data.producer(backup.bootstrap), remote, 0, foreign)

        with pytest.raises(TargetStateError) as caught:  # raised in a Spark task, classified again
            _copy(config, plan, spark)
    finally:
        batch_run.release_run(config, FLOW, "run-1")

    assert str(caught.value).startswith(
        f"remote partition {remote}-0 offset 0 holds another record where this flow "
        f"wrote the record of source offset 0 of {topic}-0: something else writes to the remote topic. "
        "Nothing was committed; stop the other writer"
    )
    assert _read(backup, remote, 0) == foreign
    with OffsetsStore(config.offsets_db_url) as store:
        assert store.batches(FLOW) == []


def test_executing_the_same_plan_twice_duplicates_nothing(
    kafka_clusters: Clusters, write_config: WriteConfig, spark: SparkSession, unique_name: str
) -> None:
    primary, backup = kafka_clusters["primary"], kafka_clusters["backup"]
    topic, remote, count = unique_name, f"primary.{unique_name}", 25
    create_topic(primary.bootstrap, topic, 2)
    sample_data.produce_samples(primary.bootstrap, topic, 2, 0, count)
    config = _config(write_config, topic)
    try:
        plan = batch_run.plan_run(config, FLOW, "run-1")
        first = _copy(config, plan, spark)
        assert [(r.records, r.skipped) for r in first.partitions] == [(count, 0), (count, 0)]
        second = _copy(config, plan, spark)  # e.g. a task retried after the copy had succeeded
        assert [(r.records, r.skipped) for r in second.partitions] == [(count, count), (count, count)]
        assert [(r.target_start, r.sync_points) for r in second.partitions] == [(0, ()), (0, ())]
        report = _commit(config, "run-1", second)
    finally:
        batch_run.release_run(config, FLOW, "run-1")

    for p in range(2):
        assert _read(backup, remote, p) == _expected(topic, p, 0, count), f"{remote}-{p}"
    assert (report.records, report.topics[0].skipped) == (2 * count, 2 * count)
    # Committed: the next run has nothing to copy and changes nothing.
    again = run_flow(config, FLOW, "run-2", spark)
    assert (again.records, again.topics[0].lag) == (0, 0)
    for p in range(2):
        assert _read(backup, remote, p) == _expected(topic, p, 0, count), f"{remote}-{p}"


def _tasks_run(spark: SparkSession, job_group: str) -> int:
    tracker = spark.sparkContext.statusTracker()
    jobs = [tracker.getJobInfo(j) for j in tracker.getJobIdsForGroup(job_group)]
    stages = [tracker.getStageInfo(s) for j in jobs if j is not None for s in j.stageIds]
    return sum(s.numTasks for s in stages if s is not None)


def test_partitions_share_one_task_per_core_and_each_is_copied_exactly(
    kafka_clusters: Clusters, write_config: WriteConfig, spark: SparkSession, unique_name: str
) -> None:
    primary, backup = kafka_clusters["primary"], kafka_clusters["backup"]
    topic, remote, partitions, k = unique_name, f"primary.{unique_name}", 7, 5
    # Uneven, so tasks get different partition mixes; over RECORDS_PER_TASK in all, so there are two.
    counts = [1500 + 400 * p for p in range(partitions)]
    assert sum(counts) > RECORDS_PER_TASK
    create_topic(primary.bootstrap, topic, partitions)
    for p, count in enumerate(counts):
        sample_data.produce(sample_data.producer(primary.bootstrap), topic, p, _expected(topic, p, 0, count))
    config = _config(write_config, topic)
    try:
        plan = batch_run.plan_run(config, FLOW, "run-1")
        # An earlier attempt wrote the first k records of partition 4 before it crashed.
        sample_data.produce(sample_data.producer(backup.bootstrap), remote, 4, _expected(topic, 4, 0, k))
        spark.sparkContext.setJobGroup(unique_name, "copy")
        result = _copy(config, plan, spark)
        report = _commit(config, "run-1", result)
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
        batch_run.release_run(config, FLOW, "run-1")

    assert _tasks_run(spark, unique_name) == spark.sparkContext.defaultParallelism == 2
    assert plan.task_count(2) == 2
    assert [(r.partition, r.records, r.skipped) for r in result.partitions] == [
        (p, count, k if p == 4 else 0) for p, count in enumerate(counts)
    ]
    for p, count in enumerate(counts):
        assert _read(backup, remote, p) == _expected(topic, p, 0, count), f"{remote}-{p}"
    assert report.records == sum(counts)


def _send(p: Producer, topic: str, partition: int, records: Sequence[Record]) -> None:
    sample_data.produce(p, topic, partition, records)  # flushes: each record is in the log after this


def test_aborted_transactions_are_not_mirrored_and_gaps_become_sync_points(
    kafka_clusters: Clusters, write_config: WriteConfig, spark: SparkSession, unique_name: str
) -> None:
    primary, backup = kafka_clusters["primary"], kafka_clusters["backup"]
    topic, remote = unique_name, f"primary.{unique_name}"
    bs = primary.bootstrap
    create_topic(bs, topic, 2)
    c = _expected(topic, 0, 0, 7)  # committed / plain records of partition 0, in offset order
    a = _expected(topic, 0, 100, 103)  # aborted records of partition 0
    only_aborted = _expected(topic, 1, 100, 103)
    plain = sample_data.producer(bs)
    tx_a, tx_b = (
        transactional_producer(bs, f"{unique_name}-a"),
        transactional_producer(bs, f"{unique_name}-b"),
    )

    # Partition 0, offset by offset (M = transaction marker):
    #   0 c0  1 c1  plain | 2 c2 (A)  3 a0 (B)  4 c3 (A)  5 a1 (B)  6 M commit A  7 M abort B
    #   8 a2 (B)  9 M abort B | 10 c4 (A)  11 M commit A | 12 c5  13 c6  plain
    _send(plain, topic, 0, c[0:2])
    tx_a.begin_transaction()
    tx_b.begin_transaction()
    _send(tx_a, topic, 0, c[2:3])
    _send(tx_b, topic, 0, a[0:1])
    _send(tx_a, topic, 0, c[3:4])
    _send(tx_b, topic, 0, a[1:2])
    tx_a.commit_transaction(30)
    wait_end(bs, topic, 0, 7)
    tx_b.abort_transaction(30)
    wait_end(bs, topic, 0, 8)
    tx_b.begin_transaction()
    _send(tx_b, topic, 0, a[2:3])
    tx_b.abort_transaction(30)
    wait_end(bs, topic, 0, 10)
    tx_a.begin_transaction()
    _send(tx_a, topic, 0, c[4:5])
    tx_a.commit_transaction(30)
    wait_end(bs, topic, 0, 12)
    _send(plain, topic, 0, c[5:7])
    wait_end(bs, topic, 0, 14)
    # Partition 1: one aborted transaction, nothing else: 0 1 2 aborted, 3 M abort.
    tx_b.begin_transaction()
    _send(tx_b, topic, 1, only_aborted)
    tx_b.abort_transaction(30)
    wait_end(bs, topic, 1, 4)
    for producer in (plain, tx_a, tx_b):
        producer.close()

    # The aborted records are really in the source log; a read_committed reader skips them.
    assert _read(primary, topic, 0, committed=False) == [
        c[0], c[1], c[2], a[0], c[3], a[1], a[2], c[4], c[5], c[6]
    ]  # fmt: skip
    assert _read(primary, topic, 1, committed=False) == only_aborted
    assert _read(primary, topic, 0) == c

    config = _config(write_config, topic)
    report = run_flow(config, FLOW, "run-1", spark)

    assert _read(backup, remote, 0) == c
    assert _read(backup, remote, 1) == []
    assert (report.records, report.topics[0].lag) == (7, 0)
    with OffsetsStore(config.offsets_db_url) as store:
        batches = store.batches(FLOW)
        progress = store.progress(FLOW)
    assert [
        (b.partition, b.source_start, b.source_end, b.target_start, b.target_end, b.records, b.sync_points)
        for b in batches
    ] == [
        # Source offset -> target offset at every gap: 2->2 follows on, 4 after 2, 10 after 4, 12 after 10.
        (0, 0, 14, 0, 7, 7, ((4, 3), (10, 4), (12, 5))),
        # Only aborted records and a marker: nothing copied, but the range is done.
        (1, 0, 4, 0, 0, 0, ()),
    ]
    assert progress == {
        (topic, 0): PartitionProgress(topic, 0, 14, 7),
        (topic, 1): PartitionProgress(topic, 1, 4, 0),
    }
    # Nothing is left to plan: the aborted range is not retried forever.
    again = run_flow(config, FLOW, "run-2", spark)
    assert (again.records, again.topics[0].lag) == (0, 0)


def test_a_second_run_copies_only_new_records(
    kafka_clusters: Clusters, write_config: WriteConfig, spark: SparkSession, unique_name: str
) -> None:
    primary, backup = kafka_clusters["primary"], kafka_clusters["backup"]
    topic, remote, partitions = unique_name, f"primary.{unique_name}", 2
    create_topic(primary.bootstrap, topic, partitions)
    sample_data.produce_samples(primary.bootstrap, topic, partitions, 0, 20)
    config = _config(write_config, topic)
    first = run_flow(config, FLOW, "run-1", spark)
    assert first.records == partitions * 20

    sample_data.produce_samples(primary.bootstrap, topic, partitions, 20, 15)
    second = run_flow(config, FLOW, "run-2", spark)

    assert (second.records, second.topics[0].skipped, second.topics[0].lag) == (partitions * 15, 0, 0)
    for p in range(partitions):
        assert _read(backup, remote, p) == _expected(topic, p, 0, 35), f"{remote}-{p}"
    with OffsetsStore(config.offsets_db_url) as store:
        batches = store.batches(FLOW)
    assert [
        (b.run_id, b.partition, b.source_start, b.source_end, b.target_start, b.target_end) for b in batches
    ] == [
        ("run-1", 0, 0, 20, 0, 20),
        ("run-2", 0, 20, 35, 20, 36),
        ("run-1", 1, 0, 20, 0, 20),
        ("run-2", 1, 20, 35, 20, 36),
    ]
    # Run 1's commit marker at offset 20: run 2's records land after it.
    assert [b.target_gaps for b in batches] == [(), ((20, 21),), (), ((20, 21),)]


def test_per_run_cap_copies_n_per_partition_and_the_next_run_continues(
    kafka_clusters: Clusters, write_config: WriteConfig, spark: SparkSession, unique_name: str
) -> None:
    primary, backup = kafka_clusters["primary"], kafka_clusters["backup"]
    topic, remote, partitions, count, cap = unique_name, f"primary.{unique_name}", 3, 25, 10
    create_topic(primary.bootstrap, topic, partitions)
    sample_data.produce_samples(primary.bootstrap, topic, partitions, 0, count)
    config = _config(write_config, topic, f"mirrorflow.max.records.per.partition = {cap}")
    assert config.flow(FLOW).settings.max_records_per_partition == cap

    for run, (copied_to, records, lag) in enumerate([(10, 30, 45), (20, 30, 15), (25, 15, 0)], start=1):
        report = run_flow(config, FLOW, f"run-{run}", spark)
        assert (report.records, report.topics[0].lag) == (records, lag), f"run {run}"
        for p in range(partitions):
            assert _read(backup, remote, p) == _expected(topic, p, 0, copied_to), f"run {run}: {remote}-{p}"


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _prometheus(path: Path) -> dict[str, float]:
    """``name{labels}`` -> value of a Prometheus text file."""
    samples = (line.rsplit(" ", 1) for line in path.read_text().splitlines() if not line.startswith("#"))
    return {series: float(value) for series, value in samples}


def test_runs_measure_mm2_latency_and_age_keep_history_and_export_prometheus_text(
    kafka_clusters: Clusters, write_config: WriteConfig, spark: SparkSession, unique_name: str
) -> None:
    primary = kafka_clusters["primary"]
    topic, remote, partitions, count = unique_name, f"primary.{unique_name}", 2, 30
    create_topic(primary.bootstrap, topic, partitions)
    sample_data.produce_samples(primary.bootstrap, topic, partitions, 0, count)
    config = _config(write_config, topic)

    before = _now_ms()
    report = run_flow(config, FLOW, "run-1", spark)
    after = _now_ms()
    idle = run_flow(config, FLOW, "run-2", spark)  # nothing new: the export keeps run-1's times

    assert idle.records == 0
    for p in range(partitions):
        m = report.partitions[p]
        age, latency = m.record_age, m.replication_latency
        # Sample timestamps: BASE + i * 1000 + p; the last record is the newest.
        oldest, newest = BASE_TIMESTAMP_MS + p, BASE_TIMESTAMP_MS + (count - 1) * 1000 + p
        assert (m.partition, m.records, age.count, latency.count) == (p, count, count, count)
        assert before - newest <= age.min <= age.last <= age.max <= after - oldest
        assert age.last == age.min
        # A record is acknowledged after it was received.
        assert latency.min >= age.min and latency.max >= age.max and latency.total >= age.total
        assert latency.max <= after - oldest
        assert 0 < m.write_ms <= after - before
    with OffsetsStore(config.offsets_db_url) as store:
        assert store.partition_metrics(FLOW) == list(report.partitions)
    metrics = _prometheus(metrics_file(config.state_dir, FLOW, "source"))
    for m in report.partitions:
        labels = f'source="primary",destination="backup",topic="{remote}",partition="{m.partition}"'
        prefix = "kafka_connect_mirror_source_connector_"
        assert metrics[f"{prefix}record_count{{{labels}}}"] == count
        assert metrics[f"{prefix}byte_count{{{labels}}}"] == m.bytes
        assert metrics[f"{prefix}replication_latency_ms_max{{{labels}}}"] == m.replication_latency.max
        assert metrics[f"{prefix}record_age_ms_min{{{labels}}}"] == m.record_age.min
        assert metrics[f"{prefix}record_rate{{{labels}}}"] == pytest.approx(m.record_rate)
        assert metrics[f"mirrorflow_lag_records{{{labels}}}"] == 0


CODECS = {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def test_compressed_batches_stay_compressed_and_logappendtime_records_keep_the_source_time(
    kafka_clusters: Clusters, write_config: WriteConfig, spark: SparkSession, unique_name: str
) -> None:
    primary, backup = kafka_clusters["primary"], kafka_clusters["backup"]
    appended = f"{unique_name}-appended"
    create_topic(primary.bootstrap, appended, 1, {"message.timestamp.type": "LogAppendTime"})
    sample_data.produce_samples(primary.bootstrap, appended, 1, 0, 30)
    for codec in CODECS:
        create_topic(primary.bootstrap, f"{unique_name}-{codec}", 1)
        producer = sample_data.producer(primary.bootstrap, {"compression.type": codec})
        sample_data.produce(
            producer, f"{unique_name}-{codec}", 0, (sample_record(codec, 0, i) for i in range(300))
        )

    report = run_flow(_config(write_config, f"{unique_name}-.*"), FLOW, "run-1", spark)

    assert report.records == 30 + 300 * len(CODECS)
    for topic in [appended, *(f"{unique_name}-{c}" for c in CODECS)]:
        source = _read(primary, topic, 0)
        assert _read(backup, f"primary.{topic}", 0) == source, f"primary.{topic} differs"
    # Consumers of the source saw the broker's append times: so do consumers of the copy.
    assert all(r.timestamp > BASE_TIMESTAMP_MS + 10**9 for r in _read(backup, f"primary.{appended}", 0))
    remotes = {codec: (f"primary.{unique_name}-{codec}", 0) for codec in CODECS}
    target = Connection({"bootstrap.servers": backup.bootstrap}, "target", [t for t, _ in remotes.values()])
    try:
        for codec, number in CODECS.items():
            remote = remotes[codec]
            batches = fetch(target, {remote: 0}, READ_UNCOMMITTED)[remote].batches
            assert batches and {b.codec for b in batches} == {number}, f"{codec} batches recompressed"
    finally:
        target.close()
