"""Test helpers: run a flow in-process (the same steps the DAG runs, with the session's Spark)."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from kafka.admin import KafkaAdminClient
from pyspark.sql import SparkSession

from mirrorflow import local_kafka, runner, sample_data
from mirrorflow.config import MirrorConfig
from mirrorflow.local_kafka import LocalCluster, ScramSecurity
from mirrorflow.plan import write_atomically
from mirrorflow.report import RunReport
from mirrorflow.spark_copy import copy_plan


def run_flow(config: MirrorConfig, flow_name: str, run_id: str, spark: SparkSession) -> RunReport:
    """plan -> copy -> commit -> release, as one DAG run does."""
    flow = config.flow(flow_name)
    try:
        plan = runner.plan_run(config, flow.name, run_id)
        if plan.partitions:
            result = copy_plan(spark, plan, flow.source.consumer, flow.target.producer)
            write_atomically(runner.run_files(config, flow, run_id).result, result.to_json())
        return runner.commit_run(config, flow.name, run_id).report
    finally:
        runner.release_run(config, flow.name, run_id)


def create_topic(bootstrap: str, name: str, partitions: int, configs: dict[str, str] | None = None) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics(
            {name: {"num_partitions": partitions, "replication_factor": 1, "configs": configs or {}}},
            wait_for_metadata=True,
        )
    finally:
        admin.close()


def topics(bootstrap: str) -> set[str]:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        return set(admin.list_topics())
    finally:
        admin.close()


def assert_same_records(
    src: str,
    topic: str,
    dst: str,
    remote: str,
    partitions: int,
    client_config: Mapping[str, str] | None = None,
) -> int:
    """Every partition of the remote topic equals the source's, record by record; returns the count.
    ``client_config``: librdkafka settings for reading both clusters (e.g. a SASL login)."""
    total = 0
    for p in range(partitions):
        expected = sample_data.read_partition(src, topic, p, extra=client_config)
        actual = sample_data.read_partition(dst, remote, p, extra=client_config)
        assert actual == expected, f"{remote}-{p} differs from {topic}-{p}"
        total += len(actual)
    return total


def wait_end(bootstrap: str, topic: str, partition: int, end: int) -> None:
    """Wait until the partition's high watermark (transaction markers included) reaches ``end``:
    the coordinator writes markers after commit/abort returns, so the layout below stays exact."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "mirrorflow-test-watermarks",
            "isolation.level": "read_uncommitted",  # the high watermark, not the last stable offset
        }
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            high = c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)[1]
            if high == end:
                return
            assert high < end, f"{topic}-{partition} ends at {high}, past the expected {end}"
            assert time.monotonic() < deadline, f"{topic}-{partition} stuck at {high}, expected {end}"
            time.sleep(0.05)
    finally:
        c.close()


def transactional_producer(bootstrap: str, txn_id: str) -> Producer:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": "5"})
    p.init_transactions(30)
    return p


def commit_group(
    bootstrap: str,
    group: str,
    offsets: dict[tuple[str, int], int],
    client_config: Mapping[str, str] | None = None,
) -> None:
    """Commit offsets for ``group`` as a consumer that read up to them would (retrying while the
    group coordinator is still loading on a fresh cluster). ``client_config``: more librdkafka
    settings, e.g. a SASL login."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": "false",
            **(client_config or {}),
        }
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                c.commit(
                    offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()], asynchronous=False
                )
                return
            except KafkaException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    finally:
        c.close()


@contextmanager
def local_clusters(
    aliases: Sequence[str],
    root: Path,
    extra_properties: Mapping[str, str] | None = None,
    security: ScramSecurity | None = None,
) -> Iterator[dict[str, LocalCluster]]:
    """Single-node clusters on free loopback ports, stopped by PID however the block ends.
    With ``security``, every cluster has its SASL users and authorizer (see ``ScramSecurity``)."""
    ports = local_kafka.free_ports(2 * len(aliases))
    specs = [(alias, ports[2 * i], ports[2 * i + 1]) for i, alias in enumerate(aliases)]
    # start_clusters is all-or-nothing: on failure it has already stopped the ones that started.
    clusters = local_kafka.start_clusters(specs, root, extra_properties=extra_properties, security=security)
    try:
        yield clusters
    finally:
        local_kafka.stop_clusters(clusters)
