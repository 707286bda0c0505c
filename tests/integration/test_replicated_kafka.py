"""Real three-node KRaft clusters (static voters, production's replication defaults): a partition's
leader killed as a crash would loses no acknowledged record, and the node rejoins every ISR."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType
from mirror_helpers import assert_all_gone, replicated_clusters

from mirrorflow_dev import processes
from mirrorflow_dev.kafka_home import LocalKafkaError
from mirrorflow_dev.replicated_kafka import kill_node, node_homes, restart_node, start_replicated_cluster

pytestmark = [pytest.mark.kafka, pytest.mark.replicated]

TOPIC = "orders"
PARTITIONS = 3
RECORDS = 100
ALL_NODES = [1, 2, 3]

T = TypeVar("T")
# (partition, offset, key, value, timestamp)
Record = tuple[int, int, bytes, bytes, int]


def _admin(bootstrap: str) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=5000)


def _partitions(bootstrap: str) -> dict[int, dict[str, Any]]:
    """The topic's partitions as metadata describes them now (a new client: no cached metadata)."""
    admin = _admin(bootstrap)
    try:
        (topic,) = admin.describe_topics([TOPIC])
        return {p["partition_index"]: p for p in topic["partitions"]}
    finally:
        admin.close()


def _configs(bootstrap: str, kind: ConfigResourceType, name: str, *keys: str) -> dict[str, str] | None:
    """The values in effect of these keys of a topic or broker; None from a node that does not know
    the topic yet (its error, which kafka-python leaves out, leaves the answer empty)."""
    admin = _admin(bootstrap)
    try:
        described = admin.describe_configs(
            [ConfigResource(kind, name, dict.fromkeys(keys))], config_filter="all"
        )
    finally:
        admin.close()
    found = described.get(kind.name.lower(), {}).get(name)
    return {key: config["value"] for key, config in found.items()} if found else None


def _wait_for(what: str, probe: Callable[[], T | None], timeout: float = 60.0) -> T:
    """Poll ``probe`` until it returns something (not None); a client error counts as not yet."""
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        try:
            found = probe()
        except Exception as error:  # a request to the node just killed, a metadata refresh
            last = error
        else:
            if found is not None:
                return found
        time.sleep(0.25)
    raise AssertionError(f"no {what} after {timeout:.0f}s (last error: {last!r})")


def _consume_all(bootstrap: str, count: int, timeout: float = 30.0) -> list[Record]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None)
    try:
        tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        got: list[Record] = []
        deadline = time.monotonic() + timeout
        while len(got) < count and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=500).values():
                got += [(r.partition, r.offset, r.key, r.value, r.timestamp) for r in batch]
        # A little longer: nothing past the expected records may arrive either.
        for batch in consumer.poll(timeout_ms=500).values():
            got += [(r.partition, r.offset, r.key, r.value, r.timestamp) for r in batch]
        return sorted(got)
    finally:
        consumer.close()


def test_leader_killed_loses_no_acknowledged_record_and_rejoins(tmp_path: Path) -> None:
    with replicated_clusters(["primary"], tmp_path) as clusters:
        cluster = clusters["primary"]
        assert [n.alias for n in cluster.nodes] == ["primary-node-1", "primary-node-2", "primary-node-3"]
        assert cluster.bootstrap == ",".join(f"127.0.0.1:{n.port}" for n in cluster.nodes)

        admin = _admin(cluster.bootstrap)
        try:
            described = admin.describe_cluster()
            assert sorted((b["broker_id"], b["port"]) for b in described["brokers"]) == [
                (i, n.port) for i, n in enumerate(cluster.nodes, 1)
            ]
            admin.create_topics(
                {TOPIC: {"num_partitions": PARTITIONS, "replication_factor": 3}}, wait_for_metadata=True
            )
        finally:
            admin.close()
        # wait_for_metadata waited for one node's metadata; a client may ask another, which learns of
        # the topic a moment later.
        partitions = _wait_for("the topic's partitions", lambda: _partitions(cluster.bootstrap) or None)
        assert sorted(partitions) == [0, 1, 2]
        # In effect for the topic: the brokers' static setting (the topic sets none of its own).
        topic_configs = _wait_for(
            "the topic's configs",
            lambda: _configs(cluster.bootstrap, ConfigResourceType.TOPIC, TOPIC, "min.insync.replicas"),
        )
        assert topic_configs == {"min.insync.replicas": "2"}
        broker_defaults = ("default.replication.factor", "offsets.topic.replication.factor")
        assert _configs(cluster.bootstrap, ConfigResourceType.BROKER, "1", *broker_defaults) == {
            "default.replication.factor": "3",
            "offsets.topic.replication.factor": "3",
        }
        for p in partitions.values():
            assert sorted(p["replica_nodes"]) == ALL_NODES
            assert sorted(p["isr_nodes"]) == ALL_NODES

        base_ts = int(time.time() * 1000) - 60_000
        expected: list[Record] = []
        producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all")
        try:
            futures = [
                (
                    i,
                    producer.send(
                        TOPIC,
                        key=f"k{i}".encode(),
                        value=f"v{i}".encode(),
                        partition=i % 3,
                        timestamp_ms=base_ts + i,
                    ),
                )
                for i in range(RECORDS)
            ]
            producer.flush(timeout=30)
            for i, future in futures:
                meta = future.get(timeout=0)
                expected.append(
                    (meta.partition, meta.offset, f"k{i}".encode(), f"v{i}".encode(), base_ts + i)
                )
        finally:
            producer.close()
        # Offsets 0.. in send order on each partition: 34, 33 and 33 records, all acknowledged by two
        # replicas at least (acks=all, min.insync.replicas 2).
        assert sorted((p, o) for p, o, *_ in expected) == [
            (p, o) for p in range(PARTITIONS) for o in range(len(range(p, RECORDS, PARTITIONS)))
        ]

        old_leader = partitions[0]["leader_id"]
        victim = cluster.node(old_leader)
        survivors = [n for n in ALL_NODES if n != old_leader]
        meta = (victim.home / "data" / "meta.properties").read_text()
        killed_at = time.monotonic()
        assert kill_node(victim) is True
        assert not processes.process_alive(victim.pid)
        assert not (victim.home / "kafka.pid").exists()
        assert kill_node(victim) is False, "killing twice is a no-op"

        def new_leader() -> dict[str, Any] | None:
            p0 = _partitions(cluster.bootstrap)[0]
            return p0 if p0["leader_id"] in survivors else None

        p0 = _wait_for("new leader of partition 0", new_leader)
        failover = time.monotonic() - killed_at
        # The controller fenced the killed node: out of the ISR, which keeps min.insync.replicas.
        assert sorted(p0["isr_nodes"]) == survivors
        assert sorted(p0["replica_nodes"]) == ALL_NODES
        assert _consume_all(cluster.bootstrap, RECORDS) == sorted(expected)

        restarted_at = time.monotonic()
        restarted = restart_node(victim)
        cluster = cluster.with_node(restarted)
        assert (restarted.alias, restarted.port, restarted.home) == (victim.alias, victim.port, victim.home)
        assert restarted.pid != victim.pid
        assert cluster.node(old_leader) == restarted
        assert (victim.home / "data" / "meta.properties").read_text() == meta, "never reformatted"

        def full_isr() -> dict[int, dict[str, Any]] | None:
            now = _partitions(cluster.bootstrap)
            return now if all(sorted(p["isr_nodes"]) == ALL_NODES for p in now.values()) else None

        rejoined = _wait_for("ISR of 3 on every partition", full_isr)
        assert sorted(rejoined) == [0, 1, 2]
        assert _consume_all(cluster.bootstrap, RECORDS) == sorted(expected)
        print(
            f"failover {failover:.1f}s, restart and rejoin {time.monotonic() - restarted_at:.1f}s "
            f"(node {old_leader} killed)"
        )


def test_a_node_that_cannot_start_stops_the_others(tmp_path: Path) -> None:
    ports = processes.free_ports(6)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", ports[5]))  # node 3's controller port
        taken.listen()
        with pytest.raises(LocalKafkaError, match=r"primary-node-3: port 127\.0\.0\.1:\d+ is already in use"):
            start_replicated_cluster("primary", ports, tmp_path)
    # Nodes 1 and 2, a majority of the voters, did start: all or nothing stopped them.
    assert_all_gone(lambda p: "kafka.Kafka" in p.cmdline and str(tmp_path) in p.cmdline, "started nodes")
    assert [(home / "kafka.pid").exists() for home in node_homes("primary", tmp_path)] == [False] * 3
    assert "Kafka Server started" in (tmp_path / "primary" / "node-1" / "logs" / "server.log").read_text()
