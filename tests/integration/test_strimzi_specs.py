"""Strimzi ``KafkaMirrorMaker2`` specs loaded as the config and mirroring: the articles' minimal spec
with the same article's connector settings for single-broker clusters, and each of Strimzi's examples
(``tests/strimzi/examples``, both API versions) with only its addresses and secrets made local: the
plain ones on the session clusters, the TLS and SCRAM ones on clusters secured as they expect."""

from __future__ import annotations

from pathlib import Path

import pytest
from kafka.admin import ACLOperation, ACLResourcePatternType, ResourcePattern, ResourceType
from mirror_helpers import assert_same_records, create_topic, local_clusters, run_flow
from pyspark.sql import SparkSession
from secured_helpers import CLUSTER_RESOURCE, create_acls, create_secured_topic, grants
from strimzi_examples import FORMS, SOURCE, TARGET, assert_example_mirrors, local_example, write_secret

from mirrorflow.config.clients import librdkafka_config
from mirrorflow.config.model import load_config
from mirrorflow_dev import sample_data
from mirrorflow_dev.kafka_security import SUPER_USER, LocalTls, ScramSecurity, TlsSecurity
from mirrorflow_dev.local_kafka import LocalCluster
from mirrorflow_dev.paths import REPO_ROOT

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

FLOW = "my-cluster-source->my-cluster-target"
SCRAM_USER = "my-mirror-user"


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


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize(
    ("kind", "remote_prefix"),
    [("plain", f"{SOURCE}."), ("sync-groups", f"{SOURCE}."), ("custom-replication-policy", "")],
)
def test_each_plain_example_mirrors(
    kafka_clusters: dict[str, LocalCluster],
    spark: SparkSession,
    unique_name: str,
    tmp_path: Path,
    kind: str,
    remote_prefix: str,
    form: str,
) -> None:
    clusters = {SOURCE: kafka_clusters["primary"], TARGET: kafka_clusters["backup"]}
    create_topic(clusters[SOURCE].bootstrap, unique_name, 2)
    config = local_example(f"{kind}-{form}", tmp_path, clusters, unique_name)

    assert_example_mirrors(config, clusters, spark, unique_name, f"{remote_prefix}{unique_name}")


def test_the_tls_example_mirrors_over_tls(spark: SparkSession, tmp_path: Path) -> None:
    """Both clusters behind TLS with a certificate of a CA the example trusts through a secret; no
    client authentication."""
    tls = LocalTls.generate(tmp_path / "tls")
    security = TlsSecurity(tls, client_certificates=False)
    for alias in (SOURCE, TARGET):
        write_secret(tmp_path, f"{alias}-cluster-ca-cert", "ca.crt", tls.ca_file.read_bytes())
    admin_conf = librdkafka_config(security.client_properties(SUPER_USER))
    with local_clusters((SOURCE, TARGET), tmp_path / "kafka", security=security) as clusters:
        for form in FORMS:
            topic = f"orders-{form}"
            create_secured_topic(clusters[SOURCE], security, topic, 2, {})
            config = local_example(f"tls-{form}", tmp_path, clusters, topic)

            assert_example_mirrors(config, clusters, spark, topic, f"{SOURCE}.{topic}", admin_conf)


# Strimzi's SCRAM example: make test keeps SCRAM over SASL_SSL through an Airflow run
# (tests/integration/test_secrets.py) and Strimzi's TLS example (above).
@pytest.mark.extended
def test_the_scram_example_mirrors_over_sasl_ssl(spark: SparkSession, tmp_path: Path) -> None:
    """Both clusters behind TLS, the mirror logging in as the example's SCRAM-SHA-512 user, its
    password in a secret; the brokers' authorizer grants that user every topic, group and
    transactional id (a Strimzi ``KafkaUser`` with such ACLs)."""
    tls = LocalTls.generate(tmp_path / "tls")
    security = ScramSecurity.generate(SCRAM_USER, tls=tls)
    for alias in (SOURCE, TARGET):
        write_secret(tmp_path, f"{alias}-cluster-ca-cert", "ca.crt", tls.ca_file.read_bytes())
    write_secret(tmp_path, SCRAM_USER, "password", security.passwords[SCRAM_USER].encode())
    user = f"User:{SCRAM_USER}"
    acls = [
        *grants(user, CLUSTER_RESOURCE, ACLOperation.ALL),
        *(
            acl
            for kind in (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.TRANSACTIONAL_ID)
            for acl in grants(
                user, ResourcePattern(kind, "*", ACLResourcePatternType.LITERAL), ACLOperation.ALL
            )
        ),
    ]
    admin_conf = librdkafka_config(security.client_properties(SUPER_USER))
    with local_clusters((SOURCE, TARGET), tmp_path / "kafka", security=security) as clusters:
        for cluster in clusters.values():
            create_acls(cluster, security, acls)
        for form in FORMS:
            topic = f"orders-{form}"
            create_secured_topic(clusters[SOURCE], security, topic, 2, {})
            config = local_example(f"scram-{form}", tmp_path, clusters, topic)

            assert_example_mirrors(config, clusters, spark, topic, f"{SOURCE}.{topic}", admin_conf)
