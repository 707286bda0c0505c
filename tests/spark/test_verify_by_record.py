"""The verify step on real brokers for the ranges it compares record by record: compacted topics,
where each cluster compacts on its own, and remote topics stamped with LogAppendTime, whose
consumers see the target's append time. Correct copies verify, with what each cluster compacted
away reported as such; a difference injected on the target fails the verification, named by
partition and offset.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

import pytest
from mirror_helpers import create_topic, run_flow, transactional_producer, wait_end
from pyspark.sql import SparkSession

from mirrorflow.app.verify import plan_verification
from mirrorflow.config.model import MirrorConfig
from mirrorflow.copy.spark_verify import verify_ranges
from mirrorflow.core.progress import Batch
from mirrorflow.core.verdicts import Found, RecordComparison, VerifyResult
from mirrorflow.core.verify_plan import VerifyRange, verify_plan
from mirrorflow.kafka.admin import ClusterAdmin
from mirrorflow.kafka.record_reads import read_partition
from mirrorflow_dev import sample_data
from mirrorflow_dev.local_kafka import LocalCluster
from mirrorflow_dev.sample_data import Record, sample_record

pytestmark = [pytest.mark.spark, pytest.mark.kafka]

FLOW = "primary->backup"
Clusters = dict[str, LocalCluster]
WriteConfig = Callable[[str], MirrorConfig]
# Compacts a segment as soon as it is rolled; rolls one when a record comes a minute (of record
# time) after the segment's first.
COMPACTED = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01", "segment.ms": "60000"}
# Records of these tests are timed now, a millisecond apart: a transaction marker (timed when it is
# written) then rolls no segment, as one after records of long ago would.
NOW = int(time.time() * 1000)


def _keyed(topic: str, indexes: range, keys: int = 5) -> list[Record]:
    """Samples timed now, with ``keys`` keys in turn (a compacted topic refuses records without a key)."""
    return [
        dataclasses.replace(sample_record(topic, 0, i), key=f"key-{i % keys}".encode(), timestamp=NOW + i)
        for i in indexes
    ]


def _later(topic: str) -> Record:
    """A record timed 1000 s after the others: it rolls the segment it is appended to."""
    return dataclasses.replace(sample_record(topic, 0, 1000), key=b"later", timestamp=NOW + 1_000_000)


def _wait_offsets(cluster: LocalCluster, topic: str, expected: list[int]) -> None:
    """Until partition 0 of ``topic`` holds exactly the records at ``expected`` (the cleaner ran)."""
    deadline = time.monotonic() + 30
    while True:
        held = [r.offset for r in read_partition({"bootstrap.servers": cluster.bootstrap}, "", topic, 0)]
        if held == expected:
            return
        assert time.monotonic() < deadline, f"{topic} holds offsets {held}, expected {expected}"
        time.sleep(0.1)


def _compact_soon(config: MirrorConfig, remote: str) -> None:
    """Give the remote topic the ``COMPACTED`` configs (the flow does not sync them), and wait until
    its broker has them (it applies them shortly after the controller took them)."""
    with ClusterAdmin(config.flow(FLOW).target) as target:
        target.alter_topic_configs({remote: COMPACTED})
        deadline = time.monotonic() + 30
        while (held := target.effective_topic_configs([remote], COMPACTED)[remote]) != COMPACTED:
            assert time.monotonic() < deadline, f"{remote} has the configs {held}, not {COMPACTED}"
            time.sleep(0.1)


def test_a_compacted_topic_verifies_record_by_record_reporting_what_each_cluster_compacted_away(
    kafka_clusters: Clusters, write_config: WriteConfig, spark: SparkSession, unique_name: str
) -> None:
    primary, backup = kafka_clusters["primary"], kafka_clusters["backup"]
    on_source, on_target = f"{unique_name}-s", f"{unique_name}-t"
    # The remote topics keep the default segment.ms: they compact only where the test rolls them.
    config = write_config(
        f"{FLOW}.enabled = true\n{FLOW}.topics = {unique_name}-.*\n"
        f"{FLOW}.config.properties.exclude = segment\\\\.ms, min\\\\.cleanable\\\\.dirty\\\\.ratio\n"
    )
    create_topic(primary.bootstrap, on_source, 1, COMPACTED)
    create_topic(primary.bootstrap, on_target, 1, {"cleanup.policy": "compact"})
    producer = sample_data.producer(primary.bootstrap)
    sample_data.produce(producer, on_source, 0, _keyed(on_source, range(20)))
    # Offsets 0-19 in a transaction, its marker at 20: the copy's offset map jumps after it.
    tx = transactional_producer(primary.bootstrap, unique_name)
    tx.begin_transaction()
    sample_data.produce(tx, on_target, 0, _keyed(on_target, range(20)))
    tx.commit_transaction(30)
    wait_end(primary.bootstrap, on_target, 0, 21)
    run_flow(config, FLOW, "run-1", spark)
    _compact_soon(config, f"primary.{on_target}")
    # Rolls the source's segment of offsets 0-19, which its cleaner compacts to each key's last record.
    sample_data.produce(producer, on_source, 0, [_later(on_source)])
    # Copied at target offset 21 (run 1's commit marker at 20), it rolls the remote segment of
    # offsets 0-20 likewise.
    sample_data.produce(producer, on_target, 0, [_later(on_target)])
    run_flow(config, FLOW, "run-2", spark)
    _wait_offsets(primary, on_source, list(range(15, 21)))
    _wait_offsets(backup, f"primary.{on_target}", [*range(15, 20), 21])

    plan = plan_verification(config, FLOW, "verify-1")

    assert plan.ranges == (
        VerifyRange(
            on_source,
            0,
            f"primary.{on_source}",
            0,
            21,
            0,
            22,
            True,
            ((0, 0, 20), (20, 21, 1)),
            target_gaps=((20, 21),),
        ),
        VerifyRange(
            on_target,
            0,
            f"primary.{on_target}",
            0,
            22,
            0,
            22,
            True,
            ((0, 0, 20), (21, 21, 1)),
            target_gaps=((20, 21),),
        ),
    )
    result = verify_ranges(spark, config.flow(FLOW), plan)

    first = tuple((i, i) for i in range(5))
    assert [v.records for v in result.partitions] == [
        RecordComparison(same=Found(6), only_on_target=Found(15, first)),
        RecordComparison(same=Found(6), only_on_source=Found(15, first)),
    ]
    assert result.mismatches == ()
    assert result.summary() == (
        f"verified flow {FLOW} run verify-1: 2 ranges, 27 source records, 27 target records, 2 match, "
        "0 differ; 15 records compacted away on the source after they were copied "
        f"({on_source}-0 {Found(15, first).describe()}); 15 records compacted away on the target after "
        f"they were copied ({on_target}-0 {Found(15, first).describe()})"
    )


def _forged_remote(
    backup: LocalCluster, name: str, copies: list[list[Record]], configs: dict[str, str]
) -> None:
    """A remote topic written by hand: what a faulty mirror could have left."""
    create_topic(backup.bootstrap, name, len(copies), configs)
    producer = sample_data.producer(backup.bootstrap)
    for partition, records in enumerate(copies):
        sample_data.produce(producer, name, partition, records)


def _exact_log(topic: str, remote: str, copies: list[list[Record]]) -> list[Batch]:
    """What the mirror would have committed for ``copies``: one batch per partition, the whole range."""
    return [Batch(topic, p, remote, 0, len(c), 0, len(c), len(c), 0) for p, c in enumerate(copies)]


def _assert_differs_only_at(result: VerifyResult, topic: str, remote: str, offset: int) -> None:
    """Of two partitions of 12 records, partition 1 differs at ``offset`` alone, and the summary
    names the partition and the offset."""
    assert [v.records for v in result.partitions] == [
        RecordComparison(same=Found(12)),
        RecordComparison(same=Found(11), differ=Found(1, ((offset, offset),))),
    ]
    assert result.mismatches == result.partitions[1:]
    assert result.summary().endswith(
        f"1 match, 1 differ: {topic}-1 [0, 12) -> {remote}-1 [0, 12): DIFFER record by record "
        f"(11 the same on both; 1 differ: source offset {offset} (target offset {offset}))"
    )


def test_a_difference_in_a_compacted_copy_is_named_by_partition_and_offset(
    kafka_clusters: Clusters, write_config: WriteConfig, spark: SparkSession, unique_name: str
) -> None:
    primary, backup = kafka_clusters["primary"], kafka_clusters["backup"]
    topic, remote = unique_name, f"forged.{unique_name}"
    flow = write_config(f"{FLOW}.enabled = true\n{FLOW}.topics = {topic}\n").flow(FLOW)
    create_topic(primary.bootstrap, topic, 2, {"cleanup.policy": "compact"})
    source = [_keyed(topic, range(12)), _keyed(topic, range(100, 112))]
    producer = sample_data.producer(primary.bootstrap)
    for partition, records in enumerate(source):
        sample_data.produce(producer, topic, partition, records)
    copies = [list(records) for records in source]
    copies[1][7] = dataclasses.replace(copies[1][7], value=b"changed")
    _forged_remote(backup, remote, copies, {"cleanup.policy": "compact"})
    plan = verify_plan(
        FLOW, "verify-1", _exact_log(topic, remote, copies), {(topic, 0): 0, (topic, 1): 0}, compacted={topic}
    )

    result = verify_ranges(spark, flow, plan)

    _assert_differs_only_at(result, topic, remote, 7)


def test_a_logappendtime_remote_topic_verifies_with_the_timestamps_its_records_carry(
    kafka_clusters: Clusters, write_config: WriteConfig, spark: SparkSession, unique_name: str
) -> None:
    primary = kafka_clusters["primary"]
    topic = unique_name
    # Every source config synced (MM2 leaves message.timestamp.type out by default).
    config = write_config(
        f"{FLOW}.enabled = true\n{FLOW}.topics = {topic}\n{FLOW}.config.properties.exclude =\n"
    )
    flow = config.flow(FLOW)
    create_topic(primary.bootstrap, topic, 2, {"message.timestamp.type": "LogAppendTime"})
    sample_data.produce_samples(primary.bootstrap, topic, 2, 0, 20)
    run_flow(config, FLOW, "run-1", spark)

    plan = plan_verification(config, FLOW, "verify-1")

    kinds = [(r.log_append_time, r.compacted, r.runs) for r in plan.ranges]
    assert kinds == [(True, False, ((0, 0, 20),))] * 2
    result = verify_ranges(spark, flow, plan)
    assert [v.records for v in result.partitions] == [RecordComparison(same=Found(20))] * 2
    assert result.mismatches == ()
    # What the target's consumers see is the target's append time: by it, every record would differ.
    as_consumers_see = dataclasses.replace(
        plan, ranges=tuple(dataclasses.replace(r, log_append_time=False, runs=()) for r in plan.ranges)
    )
    assert len(verify_ranges(spark, flow, as_consumers_see).mismatches) == 2


def test_a_timestamp_differing_in_a_logappendtime_copy_is_named_by_partition_and_offset(
    kafka_clusters: Clusters, write_config: WriteConfig, spark: SparkSession, unique_name: str
) -> None:
    primary, backup = kafka_clusters["primary"], kafka_clusters["backup"]
    topic, remote = unique_name, f"forged.{unique_name}"
    flow = write_config(f"{FLOW}.enabled = true\n{FLOW}.topics = {topic}\n").flow(FLOW)
    create_topic(primary.bootstrap, topic, 2)
    sample_data.produce_samples(primary.bootstrap, topic, 2, 0, 12)
    copies = [[sample_record(topic, p, i) for i in range(12)] for p in range(2)]
    copies[1][5] = dataclasses.replace(copies[1][5], timestamp=copies[1][5].timestamp + 1)
    _forged_remote(backup, remote, copies, {"message.timestamp.type": "LogAppendTime"})
    log = _exact_log(topic, remote, copies)
    plan = verify_plan(FLOW, "verify-1", log, {(topic, 0): 0, (topic, 1): 0}, log_append_time={remote})

    result = verify_ranges(spark, flow, plan)

    _assert_differs_only_at(result, topic, remote, 5)
