"""Heartbeats on real brokers: MM2's arrangement across a chain of three clusters, freshness, and
what MM2's own client library (connect-mirror-client, run with the JDK) reads from our clusters.

These tests start clusters of their own ("west", "east", "north"): heartbeat topics on the shared
session clusters would be mirrored by every other test's flow.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from mirror_helpers import commit_group, create_topic, local_clusters, mirror_client, run_flow, topics
from pyspark.sql import SparkSession

from mirrorflow.app.batch_run import checkpoint_run
from mirrorflow.config.model import MirrorConfig, load_config
from mirrorflow.kafka.heartbeats import freshness_seconds
from mirrorflow.mm2.records import Heartbeat
from mirrorflow_dev import sample_data
from mirrorflow_dev.local_kafka import LocalCluster

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

ALIASES = ("west", "east", "north")


@pytest.fixture(scope="module")
def chain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, LocalCluster]]:
    # Brokers' default, off in the harness elsewhere: reading a remote topic that does not exist yet
    # must not create it.
    auto_create = {"auto.create.topics.enable": "true"}
    with local_clusters(ALIASES, tmp_path_factory.mktemp("chain"), auto_create) as clusters:
        yield clusters


def _config(clusters: dict[str, LocalCluster], folder: Path, topics: str = ".*chain-data") -> MirrorConfig:
    lines = [
        f"clusters = {', '.join(ALIASES)}",
        *(f"{a}.bootstrap.servers = {c.bootstrap}" for a, c in clusters.items()),
        "replication.factor = 1",
        "heartbeats.topic.replication.factor = 1",
        "checkpoints.topic.replication.factor = 1",
        "offset-syncs.topic.replication.factor = 1",
        f"mirrorflow.state.dir = {folder / 'state'}",
        # Heartbeats are mirrored whatever this says (they bypass the topic filter), but only by a
        # run that copies data too: a heartbeat alone does not start Spark.
        f"topics = {topics}",
        "west->east.enabled = true",
        "east->north.enabled = true",
        "north->west.enabled = true",  # never run here
    ]
    path = folder / "mm2.properties"
    path.write_text("\n".join(lines) + "\n")
    return load_config(path, env={})


def _heartbeats(cluster: LocalCluster, topic: str) -> list[Heartbeat]:
    return [
        Heartbeat.decode(r.key or b"", r.value or b"")
        for r in sample_data.read_partition(cluster.bootstrap, topic, 0)
    ]


def test_a_chain_of_three_clusters_is_traceable_through_mirrored_heartbeats(
    chain: dict[str, LocalCluster], tmp_path: Path, spark: SparkSession
) -> None:
    west, east, north = chain["west"], chain["east"], chain["north"]
    config = _config(chain, tmp_path)
    create_topic(west.bootstrap, "chain-data", 1)
    sample_data.produce_samples(west.bootstrap, "chain-data", 1, 0, 3)  # data for both hops
    before = int(time.time() * 1000)

    run_flow(config, "west->east", "run-1", spark)
    run_flow(config, "east->north", "run-1", spark)

    after = int(time.time() * 1000)
    # Each flow writes its pair's two heartbeats: (source, target) on the target and (target,
    # source) on the source, as MM2's emitters for both directions of the pair do.
    assert {(h.source_cluster_alias, h.target_cluster_alias) for h in _heartbeats(west, "heartbeats")} == {
        ("east", "west")
    }
    assert {(h.source_cluster_alias, h.target_cluster_alias) for h in _heartbeats(east, "heartbeats")} == {
        ("west", "east"),
        ("north", "east"),
    }
    assert all(before <= h.timestamp <= after for h in _heartbeats(east, "heartbeats"))
    # Mirrored heartbeat topics name every hop: what MirrorClient.upstreamClusters and
    # replicationHops read.
    assert {t for t in topics(east.bootstrap) if t.endswith("heartbeats")} == {
        "heartbeats",
        "west.heartbeats",
    }
    assert {t for t in topics(north.bootstrap) if t.endswith("heartbeats")} == {
        "heartbeats",
        "east.heartbeats",
        "east.west.heartbeats",
    }
    assert _heartbeats(north, "east.west.heartbeats") == _heartbeats(west, "heartbeats")
    assert _heartbeats(east, "west.heartbeats") == _heartbeats(west, "heartbeats")


def test_freshness_is_the_age_of_the_newest_mirrored_heartbeat(
    chain: dict[str, LocalCluster], tmp_path: Path, spark: SparkSession
) -> None:
    config = _config(chain, tmp_path)
    flow = config.flow("west->east")
    sample_data.produce_samples(chain["west"].bootstrap, "chain-data", 1, 3, 1)
    run_flow(config, "west->east", "fresh-1", spark)
    (*_, newest) = _heartbeats(chain["east"], "west.heartbeats")

    assert freshness_seconds(flow, now_ms=newest.timestamp + 2500) == 2.5
    # A flow that never ran has no mirrored heartbeat yet; looking for it created no topic.
    assert freshness_seconds(config.flow("north->west")) is None
    time.sleep(2)  # a broker creates a topic a metadata request asked for after answering it
    assert "north.heartbeats" not in topics(chain["west"].bootstrap)


def test_mm2s_own_client_reads_our_topology_and_translates_our_checkpoints(
    chain: dict[str, LocalCluster], tmp_path: Path, spark: SparkSession
) -> None:
    west, east, north = chain["west"], chain["east"], chain["north"]
    topic, group = "client-check", "client-check-group"
    create_topic(west.bootstrap, topic, 2)
    sample_data.produce_samples(west.bootstrap, topic, 2, 0, 10)
    config = _config(chain, tmp_path, topics=topic)
    run_flow(config, "west->east", "client-1", spark)
    commit_group(west.bootstrap, group, {(topic, 0): 4, (topic, 1): 10})
    checkpoint_run(config, "west->east", "checkpoints")
    run_flow(config, "east->north", "client-1", spark)

    assert mirror_client(east, "west", group, "west", "north") == [
        "upstream west",
        "hops west 1",
        "hops north -1",
        f"offset west.{topic}-0 4",
        f"offset west.{topic}-1 11",  # read to the end: past the copy's commit marker at 10
        f"lag west.{topic}-0 7",  # 6 records and the marker
        f"lag west.{topic}-1 0",
    ]
    assert mirror_client(north, "-", "-", "west", "east") == [
        "upstream east,west",
        "hops west 2",
        "hops east 1",
    ]
