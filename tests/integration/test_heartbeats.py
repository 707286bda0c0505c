"""Heartbeats on real brokers: MM2's arrangement across a chain of three clusters, and freshness.

These tests start clusters of their own ("west", "east", "north"): heartbeat topics on the shared
session clusters would be mirrored by every other test's flow.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from mirror_helpers import run_flow, topics
from pyspark.sql import SparkSession

from mirrorflow import local_kafka, sample_data
from mirrorflow.config import MirrorConfig, load_config
from mirrorflow.heartbeat import Heartbeat
from mirrorflow.local_kafka import LocalCluster
from mirrorflow.mirror_heartbeat import freshness_seconds

pytestmark = [pytest.mark.integration, pytest.mark.spark]

ALIASES = ("west", "east", "north")


@pytest.fixture(scope="module")
def chain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, LocalCluster]]:
    ports = local_kafka.free_ports(2 * len(ALIASES))
    specs = [(alias, ports[2 * i], ports[2 * i + 1]) for i, alias in enumerate(ALIASES)]
    clusters = local_kafka.start_clusters(specs, tmp_path_factory.mktemp("chain"))
    try:
        yield clusters
    finally:
        local_kafka.stop_clusters(clusters)


def _config(clusters: dict[str, LocalCluster], folder: Path) -> MirrorConfig:
    lines = [
        f"clusters = {', '.join(ALIASES)}",
        *(f"{a}.bootstrap.servers = {c.bootstrap}" for a, c in clusters.items()),
        "replication.factor = 1",
        "heartbeats.topic.replication.factor = 1",
        "checkpoints.topic.replication.factor = 1",
        f"mirrorflow.state.dir = {folder / 'state'}",
        # Only heartbeats are mirrored: they bypass the topic filter.
        "topics = none-of-these",
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
    run_flow(config, "west->east", "fresh-1", spark)
    (*_, newest) = _heartbeats(chain["east"], "west.heartbeats")

    assert freshness_seconds(flow, now_ms=newest.timestamp + 2500) == 2.5
    # A flow that never ran has no mirrored heartbeat yet.
    assert freshness_seconds(config.flow("north->west")) is None
