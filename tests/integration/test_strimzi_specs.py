"""The articles' minimal Strimzi ``KafkaMirrorMaker2``, with the same article's connector settings for
single-broker clusters, loaded as the config and mirroring on the session clusters."""

from __future__ import annotations

from pathlib import Path

import pytest
from mirror_helpers import assert_same_records, create_topic, run_flow
from pyspark.sql import SparkSession

from mirrorflow.config.model import load_config
from mirrorflow_dev import sample_data
from mirrorflow_dev.local_kafka import LocalCluster
from mirrorflow_dev.paths import REPO_ROOT

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

FLOW = "my-cluster-source->my-cluster-target"


def test_the_articles_minimal_spec_mirrors(
    kafka_clusters: dict[str, LocalCluster], spark: SparkSession, unique_name: str, tmp_path: Path
) -> None:
    primary, backup = kafka_clusters["primary"], kafka_clusters["backup"]
    create_topic(primary.bootstrap, unique_name, 2)
    sample_data.produce_samples(primary.bootstrap, unique_name, 2, 0, 25)
    text = (REPO_ROOT / "tests" / "strimzi" / "minimal.yaml").read_text()
    for old, new in (
        ("my-cluster-source-kafka-bootstrap:9092", primary.bootstrap),
        ("my-cluster-target-kafka-bootstrap:9092", backup.bootstrap),
        # The article's own internal topic settings (its third snippet), and this test's topic only:
        # the session clusters are shared.
        (
            "    sourceConnector: {}",
            f"    topicsPattern: {unique_name}\n    sourceConnector:\n      config:\n"
            "        replication.factor: 1\n        offset-syncs.topic.replication.factor: 1",
        ),
    ):
        assert old in text
        text = text.replace(old, new)
    spec = tmp_path / "mirror-maker.yaml"
    spec.write_text(text)
    config = load_config(spec, env={"MIRROR_STATE_DIR": str(tmp_path / "state")})

    report = run_flow(config, FLOW, "strimzi", spark)

    remote = f"my-cluster-source.{unique_name}"
    assert assert_same_records(primary.bootstrap, unique_name, backup.bootstrap, remote, 2) == 50
    assert sum(p.records for p in report.partitions) == 50
