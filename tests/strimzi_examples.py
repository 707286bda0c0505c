"""Strimzi's MirrorMaker 2 examples (``tests/strimzi/examples``) pointed at local clusters, as a user
would point them: the bootstrap addresses and secrets are the only changes, and the ``.*`` patterns
narrowed to a test's own topic (the session's clusters are shared)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from mirror_helpers import assert_same_records, run_flow
from pyspark.sql import SparkSession

from mirrorflow.config.model import MirrorConfig, load_config
from mirrorflow_dev import sample_data
from mirrorflow_dev.kafka_security import write_private
from mirrorflow_dev.local_kafka import LocalCluster
from mirrorflow_dev.paths import REPO_ROOT

EXAMPLES = REPO_ROOT / "tests" / "strimzi" / "examples"
FORMS = ("v1", "v1beta2")
FLOW = "cluster-a->cluster-b"
SOURCE, TARGET = "cluster-a", "cluster-b"


def write_secret(folder: Path, secret: str, key: str, data: bytes) -> None:
    """Key ``key`` of Kubernetes secret ``secret``, as mounted beside the specs ``local_example``
    writes in ``folder``."""
    write_private(folder / "secrets" / secret / key, data)


def local_example(
    example: str,
    folder: Path,
    clusters: Mapping[str, LocalCluster],
    topic: str,
    replacements: Sequence[tuple[str, str]] = (),
) -> MirrorConfig:
    """``example`` (e.g. ``tls-v1``) for ``clusters`` (``cluster-a`` and ``cluster-b``), mirroring
    ``topic`` and groups named ``<topic>-...`` only, with ``replacements`` (each must apply), its
    state in ``folder``."""
    text = (EXAMPLES / f"{example}.yaml").read_text()
    for alias in (SOURCE, TARGET):
        text, found = re.subn(rf"{alias}-kafka-bootstrap:\d+", clusters[alias].bootstrap, text)
        assert found == 1, f"{example}: {found} bootstrap addresses of {alias}"
    for old, new in (
        ('topicsPattern: ".*"', f'topicsPattern: "{topic}"'),
        ('groupsPattern: ".*"', f'groupsPattern: "{topic}-.*"'),
        *replacements,
    ):
        assert old in text, f"{example}: {old!r} not found"
        text = text.replace(old, new)
    spec = folder / f"{example}.yaml"
    spec.write_text(text)
    return load_config(spec, env={"MIRROR_STATE_DIR": str(folder / f"{example}-state")})


def assert_example_mirrors(
    config: MirrorConfig,
    clusters: Mapping[str, LocalCluster],
    spark: SparkSession,
    topic: str,
    remote: str,
    client_config: Mapping[str, str] | None = None,
) -> None:
    """One run of the example's flow copies ``topic``'s records (produced here, two partitions) to
    ``remote`` exactly, as read back from both clusters."""
    source, target = clusters[SOURCE], clusters[TARGET]
    sample_data.produce_samples(source.bootstrap, topic, 2, 0, 20, client_config)
    report = run_flow(config, FLOW, "example", spark)
    # (a source's heartbeats ride along, as MM2 mirrors them whatever the topic patterns)
    assert sum(p.records for p in report.partitions if p.topic == topic) == 40
    assert assert_same_records(source.bootstrap, topic, target.bootstrap, remote, 2, client_config) == 40
