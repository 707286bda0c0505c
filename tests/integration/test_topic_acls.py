"""Topic ACL sync, and a whole run, on brokers with SASL/SCRAM-SHA-512 users and StandardAuthorizer.

Clusters of this module's own: an authorizer on the shared session clusters would change what every
other test may do. Both clusters know the same users, each with a password generated per test run:
``admin`` (the only super user: the test sets up topics and ACLs with it), ``mirror`` (the mirror's
login), and ``alice``, ``bob``, ``mallory``, ``carol`` (consumers whose source ACLs the flow syncs).
``allow.everyone.if.no.acl.found`` is false: a user may do only what an ACL grants.

The mirror runs as ``mirror`` with these grants, all needed (and nothing more) for plan, copy and
commit of a flow ``primary->backup`` with heartbeats off (the whole-run test adds what heartbeats and
checkpoints need: on the source CREATE, WRITE, READ and DESCRIBE_CONFIGS on ``heartbeats`` and
DESCRIBE on groups; on the target CREATE and WRITE on ``heartbeats`` and READ on
``primary.heartbeats``):

source (primary)
- each mirrored topic (literal): READ, which implies DESCRIBE (plan: list and describe the topic,
  list its offsets; copy: Spark's reader fetches records), and DESCRIBE_CONFIGS (plan: the configs
  a remote topic is created or synced with);
- cluster: DESCRIBE (plan: list the ACLs to sync);
- topic ``mm2-offset-syncs.backup.internal`` (literal): CREATE and WRITE (commit: the offset syncs).

target (backup)
- topics prefixed ``primary.`` (the remote topics): CREATE (plan: create them), ALTER (plan: add
  partitions when the source topic grows), ALTER_CONFIGS, which implies DESCRIBE_CONFIGS (plan: sync
  their configs), WRITE, which implies DESCRIBE (plan: end offsets; copy: the records, and the end
  offsets the writer checks);
- cluster: DESCRIBE and ALTER (plan: list the target's ACLs and create the synced ones);
- transactional id ``mirrorflow.primary->backup`` (literal): WRITE, which implies DESCRIBE (copy: the
  flow's writer fences it and writes in its transactions).

The cluster grants serve sync.topic.acls.enabled only; ALTER on the target cluster lets its holder
grant itself anything, so a flow without ACL sync should not have it. The transactional
writer needs no IDEMPOTENT_WRITE: WRITE on its transactional id authorizes it. No consumer group ACL is
needed: Spark's reader assigns partitions and seeks to planned offsets, and the librdkafka consumers
that read end offsets never join or commit their group (they look up its coordinator, which the
broker denies and logs, harmlessly).

The mirror's own literal grants on a mirrored topic are topic ACLs like any other: they are synced
to the remote topic too (READ and DESCRIBE_CONFIGS for User:mirror), as MM2 does.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import (
    ACL,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    AlterConfigOp,
    ConfigResource,
    ConfigResourceType,
    NewPartitions,
    ResourcePatternFilter,
    ResourceType,
)
from kafka.errors import TopicAuthorizationFailedError
from mirror_helpers import assert_same_records, commit_group, local_clusters, run_flow
from pyspark.sql import SparkSession
from secured_helpers import (
    MIRROR_HEARTBEAT_SOURCE_ACLS,
    MIRROR_HEARTBEAT_TARGET_ACLS,
    MIRROR_SOURCE_ACLS,
    MIRROR_TARGET_ACLS,
    create_acls,
    create_source_topic,
    grants,
    secured_admin,
    secured_config,
    topic_resource,
)

from mirrorflow.app.batch_run import checkpoint_run, plan_run, release_run
from mirrorflow.config.clients import librdkafka_config
from mirrorflow.config.model import MirrorConfig
from mirrorflow.errors import AuthorizationError
from mirrorflow.kafka.heartbeats import freshness_seconds
from mirrorflow.store.offsets_store import OffsetsStore
from mirrorflow_dev import sample_data
from mirrorflow_dev.kafka_security import SUPER_USER, ScramSecurity
from mirrorflow_dev.local_kafka import LocalCluster

pytestmark = [pytest.mark.kafka]

FLOW = "primary->backup"
DENY = ACLPermissionType.DENY


class Secured(NamedTuple):
    primary: LocalCluster
    backup: LocalCluster
    security: ScramSecurity


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    security = ScramSecurity.generate("mirror", "alice", "bob", "mallory", "carol")
    root = tmp_path_factory.mktemp("acl")
    with local_clusters(("primary", "backup"), root, security=security) as clusters:
        primary, backup = clusters["primary"], clusters["backup"]
        create_acls(primary, security, MIRROR_SOURCE_ACLS)
        create_acls(backup, security, MIRROR_TARGET_ACLS)
        yield Secured(primary, backup, security)


def _config(secured: Secured, folder: Path, topic: str, heartbeats: bool = False) -> MirrorConfig:
    """An mm2.properties for the flow, with MM2's keys for the mirror's SASL login to each cluster."""
    clusters = {"primary": secured.primary, "backup": secured.backup}
    return secured_config(
        folder, clusters, secured.security.client_properties("mirror"), topic, heartbeats=heartbeats
    )


def _topic_acls(secured: Secured, topic: str) -> set[tuple[str, str, str, str]]:
    admin = secured_admin(secured.backup, secured.security)
    try:
        everything = ACLFilter(
            None, None, ACLOperation.ANY, ACLPermissionType.ANY,
            ResourcePatternFilter(ResourceType.TOPIC, topic, ACLResourcePatternType.ANY),
        )  # fmt: skip
        acls, _error = admin.describe_acls(everything)
    finally:
        admin.close()
    return {
        (a.principal, a.operation.name, a.permission_type.name, a.resource_pattern.pattern_type.name)
        for a in acls
    }


def _remote_topic_state(secured: Secured, topic: str) -> tuple[int, str]:
    """Partition count and retention.ms of a topic on the target."""
    admin = secured_admin(secured.backup, secured.security)
    try:
        partitions = len(admin.describe_topics([topic])[0]["partitions"])
        configs = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])["topic"][topic]
    finally:
        admin.close()
    return partitions, str(configs["retention.ms"]["value"])


def _read(cluster: LocalCluster, security: ScramSecurity, user: str, topic: str) -> list[tuple[bytes, bytes]]:
    """Partition 0 of ``topic``, every record, read as ``user`` (no consumer group)."""
    consumer = KafkaConsumer(
        bootstrap_servers=cluster.bootstrap,
        group_id=None,
        enable_auto_commit=False,
        **security.kafka_python(user),
    )
    try:
        tp = TopicPartition(topic, 0)
        # Raises for a user the topic is hidden from; poll() would only log it and return nothing.
        end = consumer.end_offsets([tp])[tp]
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        got: list[tuple[bytes, bytes]] = []
        deadline = time.monotonic() + 30
        while consumer.position(tp) < end:
            assert time.monotonic() < deadline, f"{user} read {len(got)} records of {topic}-0, not {end}"
            got += [(r.key, r.value) for batch in consumer.poll(timeout_ms=500).values() for r in batch]
        return got
    finally:
        consumer.close()


def test_literal_topic_acls_reach_the_remote_topic_with_mm2s_rules_and_work(
    secured: Secured, tmp_path: Path
) -> None:
    security = secured.security
    create_source_topic(secured.primary, security, "orders", 1, {"retention.ms": "604800000"})
    create_acls(
        secured.primary,
        security,
        [
            *grants("User:alice", topic_resource("orders"), ACLOperation.READ, ACLOperation.WRITE),
            *grants("User:bob", topic_resource("orders"), ACLOperation.ALL),
            ACL("User:mallory", "*", ACLOperation.WRITE, DENY, topic_resource("orders")),
            *grants("User:carol", topic_resource("ord", ACLResourcePatternType.PREFIXED), ACLOperation.READ),
        ],
    )
    config = _config(secured, tmp_path, "orders")

    plan_run(config, FLOW, "run-1")
    release_run(config, FLOW, "run-1")
    assert _remote_topic_state(secured, "primary.orders") == (1, "604800000")
    # The source topic grows and changes: the next run needs ALTER and ALTER_CONFIGS on the target.
    admin = secured_admin(secured.primary, security)
    try:
        admin.create_partitions({"orders": NewPartitions(2)})
        admin.alter_configs(
            [
                ConfigResource(
                    ConfigResourceType.TOPIC,
                    "orders",
                    configs={"retention.ms": (AlterConfigOp.SET, "86400000")},
                )
            ],
            incremental=True,
        )
    finally:
        admin.close()
    plan_run(config, FLOW, "run-2")  # finds the ACLs there and adds none
    release_run(config, FLOW, "run-2")

    assert _remote_topic_state(secured, "primary.orders") == (2, "86400000")
    assert _topic_acls(secured, "primary.orders") == {
        ("User:alice", "READ", "ALLOW", "LITERAL"),
        ("User:bob", "READ", "ALLOW", "LITERAL"),  # ALLOW ALL became READ
        ("User:mallory", "WRITE", "DENY", "LITERAL"),
        ("User:mirror", "READ", "ALLOW", "LITERAL"),
        ("User:mirror", "DESCRIBE_CONFIGS", "ALLOW", "LITERAL"),
    }

    producer = KafkaProducer(bootstrap_servers=secured.backup.bootstrap, **security.kafka_python(SUPER_USER))
    try:
        producer.send("primary.orders", key=b"k", value=b"v", partition=0).get(timeout=30)
    finally:
        producer.close()
    assert _read(secured.backup, security, "alice", "primary.orders") == [(b"k", b"v")]
    # carol's PREFIXED ACL on the source is not synced: no ACL lets her even see the remote topic.
    with pytest.raises(TopicAuthorizationFailedError):
        _read(secured.backup, security, "carol", "primary.orders")


@pytest.mark.spark
def test_a_run_as_the_mirror_user_copies_records_heartbeats_and_checkpoints(
    secured: Secured, tmp_path: Path, spark: SparkSession
) -> None:
    admin_conf = librdkafka_config(secured.security.client_properties(SUPER_USER))
    # What heartbeats and checkpoints need on top of a copy (the README lists the same grants).
    create_acls(secured.primary, secured.security, MIRROR_HEARTBEAT_SOURCE_ACLS)
    create_acls(secured.backup, secured.security, MIRROR_HEARTBEAT_TARGET_ACLS)
    create_source_topic(secured.primary, secured.security, "payments", 2, {})
    producer = sample_data.producer(secured.primary.bootstrap, admin_conf)
    for partition in range(2):
        sample_data.produce(
            producer,
            "payments",
            partition,
            (sample_data.sample_record("payments", partition, i) for i in range(25)),
        )
    config = _config(secured, tmp_path, "payments", heartbeats=True)

    run_flow(config, FLOW, "run-1", spark)
    commit_group(secured.primary.bootstrap, "billing", {("payments", 0): 12, ("payments", 1): 25}, admin_conf)
    report = checkpoint_run(config, FLOW, "checkpoints")

    copied = assert_same_records(
        secured.primary.bootstrap, "payments", secured.backup.bootstrap, "primary.payments", 2, admin_conf
    )
    assert copied == 50
    # Partition 1 was read to its end: past the copy's commit marker, read off the remote partition.
    assert [(p.partition, p.upstream_offset, p.downstream_offset) for p in report.emitted] == [
        (0, 12, 12),
        (1, 25, 26),
    ]
    age = freshness_seconds(config.flow(FLOW))
    assert age is not None and age < 300


@pytest.mark.spark
def test_a_refused_write_fails_the_copy_as_an_authorization_error_and_commits_nothing(
    secured: Secured, tmp_path: Path, spark: SparkSession
) -> None:
    admin_conf = librdkafka_config(secured.security.client_properties(SUPER_USER))
    create_source_topic(secured.primary, secured.security, "denied", 1, {})
    sample_data.produce(
        sample_data.producer(secured.primary.bootstrap, admin_conf),
        "denied",
        0,
        (sample_data.sample_record("denied", 0, i) for i in range(5)),
    )
    # DENY wins over the prefixed ALLOW WRITE the mirror holds on the remote topics.
    create_acls(
        secured.backup,
        secured.security,
        [ACL("User:mirror", "*", ACLOperation.WRITE, DENY, topic_resource("primary.denied"))],
    )
    config = _config(secured, tmp_path, "denied")

    with pytest.raises(AuthorizationError) as caught:
        run_flow(config, FLOW, "run-1", spark)

    assert str(caught.value) == (
        "the target cluster refused the mirror's login to write: primary.denied-0: "
        "TopicAuthorizationFailedError. Grant it WRITE on the remote topics (README: Secured clusters); "
        "nothing was committed."
    )
    with OffsetsStore(config.offsets_db_url) as store:
        assert store.batches(FLOW) == []
