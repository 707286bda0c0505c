"""Shared fixtures. Brokers start only when a test requests ``kafka_clusters`` (once per session)."""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Iterator

import pytest
from mirrorflow import local_kafka, paths
from mirrorflow.local_kafka import LocalCluster

SESSION_ALIASES = ("primary", "backup", "dr")
_names = itertools.count()


@pytest.fixture(scope="session")
def kafka_clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, LocalCluster]]:
    """Three independent single-node clusters ("primary", "backup", "dr") on free loopback ports.

    Shared by the whole session: tests must use ``unique_name`` for topics and groups. They are
    always stopped at session end, also when tests fail; missing jars fail loudly, never skip.
    """
    if not local_kafka.libs_present():
        pytest.fail(f"Kafka jars missing in {paths.kafka_libs()}: run `make setup`", pytrace=False)
    ports = local_kafka.free_ports(2 * len(SESSION_ALIASES))
    specs = [(alias, ports[2 * i], ports[2 * i + 1]) for i, alias in enumerate(SESSION_ALIASES)]
    # start_clusters is all-or-nothing: on failure it has already stopped the ones that started.
    clusters = local_kafka.start_clusters(specs, tmp_path_factory.mktemp("kafka"))
    try:
        yield clusters
    finally:
        local_kafka.stop_clusters(clusters)


@pytest.fixture
def unique_name(request: pytest.FixtureRequest) -> str:
    """A topic/group-safe name unique to this test call, this process and this session."""
    base = re.sub(r"[^A-Za-z0-9-]+", "-", request.node.name).strip("-")[:150]
    return f"{base}-{os.getpid()}-{next(_names)}"
