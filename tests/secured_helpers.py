"""Secured clusters for the tests: the grants of User:mirror for a flow primary->backup, and nothing
more (tests/integration/test_topic_acls.py says what each one is for; the README lists them), the
topics and the config such a flow runs with."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from kafka.admin import (
    ACL,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    KafkaAdminClient,
    ResourcePattern,
    ResourceType,
)

from mirrorflow.config.model import MirrorConfig, load_config
from mirrorflow_dev.kafka_security import SUPER_USER, BrokerSecurity, ScramSecurity
from mirrorflow_dev.local_kafka import LocalCluster

SECURED_FLOW = "primary->backup"
CLUSTER_RESOURCE = ResourcePattern(ResourceType.CLUSTER, "kafka-cluster", ACLResourcePatternType.LITERAL)


def topic_resource(
    name: str, pattern: ACLResourcePatternType = ACLResourcePatternType.LITERAL
) -> ResourcePattern:
    return ResourcePattern(ResourceType.TOPIC, name, pattern)


def grants(principal: str, resource: ResourcePattern, *ops: ACLOperation) -> list[ACL]:
    return [ACL(principal, "*", op, ACLPermissionType.ALLOW, resource) for op in ops]


def mirror_source_topic_acls(topic: str) -> list[ACL]:
    """What the mirror needs on each mirrored source topic."""
    return grants("User:mirror", topic_resource(topic), ACLOperation.READ, ACLOperation.DESCRIBE_CONFIGS)


# Plan, copy and commit (with ACL sync), heartbeats off.
MIRROR_SOURCE_ACLS = [
    *grants("User:mirror", CLUSTER_RESOURCE, ACLOperation.DESCRIBE),
    *grants(
        "User:mirror",
        topic_resource("mm2-offset-syncs.backup.internal"),
        ACLOperation.CREATE,
        ACLOperation.WRITE,
    ),
]
MIRROR_TARGET_ACLS = [
    *grants("User:mirror", CLUSTER_RESOURCE, ACLOperation.DESCRIBE, ACLOperation.ALTER),
    *grants(
        "User:mirror",
        topic_resource("primary.", ACLResourcePatternType.PREFIXED),
        ACLOperation.CREATE,
        ACLOperation.ALTER,
        ACLOperation.ALTER_CONFIGS,
        ACLOperation.WRITE,
    ),
    # The copy writes in transactions of the flow's transactional id (WRITE implies DESCRIBE).
    *grants(
        "User:mirror",
        ResourcePattern(
            ResourceType.TRANSACTIONAL_ID, f"mirrorflow.{SECURED_FLOW}", ACLResourcePatternType.LITERAL
        ),
        ACLOperation.WRITE,
    ),
]
# What heartbeats and checkpoints need on top of a copy.
MIRROR_HEARTBEAT_SOURCE_ACLS = [
    *grants(
        "User:mirror",
        topic_resource("heartbeats"),
        ACLOperation.CREATE,
        ACLOperation.WRITE,
        ACLOperation.READ,
        ACLOperation.DESCRIBE_CONFIGS,
    ),
    *grants(
        "User:mirror",
        ResourcePattern(ResourceType.GROUP, "*", ACLResourcePatternType.LITERAL),
        ACLOperation.DESCRIBE,
    ),
]
MIRROR_HEARTBEAT_TARGET_ACLS = [
    *grants("User:mirror", topic_resource("heartbeats"), ACLOperation.CREATE, ACLOperation.WRITE),
    *grants("User:mirror", topic_resource("primary.heartbeats"), ACLOperation.READ),
]


def secured_admin(cluster: LocalCluster, security: BrokerSecurity) -> KafkaAdminClient:
    """An admin client logged in as the super user."""
    return KafkaAdminClient(bootstrap_servers=cluster.bootstrap, **security.kafka_python(SUPER_USER))


def create_acls(cluster: LocalCluster, security: ScramSecurity, acls: list[ACL]) -> None:
    admin = secured_admin(cluster, security)
    try:
        result = admin.create_acls(acls)
        assert not result["failed"]
    finally:
        admin.close()


def create_secured_topic(
    cluster: LocalCluster, security: BrokerSecurity, name: str, partitions: int, configs: dict[str, str]
) -> None:
    """Create a topic as the super user."""
    admin = secured_admin(cluster, security)
    try:
        admin.create_topics(
            {name: {"num_partitions": partitions, "replication_factor": 1, "configs": configs}},
            wait_for_metadata=True,
        )
    finally:
        admin.close()


def create_source_topic(
    cluster: LocalCluster, security: ScramSecurity, name: str, partitions: int, configs: dict[str, str]
) -> None:
    """Create a topic on the source as the super user, and grant the mirror what it needs on it."""
    create_secured_topic(cluster, security, name, partitions, configs)
    create_acls(cluster, security, mirror_source_topic_acls(name))


def secured_config(
    folder: Path,
    clusters: Mapping[str, LocalCluster],
    client_properties: Mapping[str, str],
    topic: str,
    *,
    heartbeats: bool,
    extra: Sequence[str] = (),
    per_cluster: Mapping[str, Mapping[str, str]] | None = None,
) -> MirrorConfig:
    """An mm2.properties in ``folder`` for the flow primary->backup of ``topic``, whose clients use
    ``client_properties`` (MM2's keys, e.g. the mirror's login) on every cluster, or ``per_cluster``'s
    of their alias where given; ``extra`` lines last."""
    lines = [
        "clusters = primary, backup",
        "replication.factor = 1",
        "offset-syncs.topic.replication.factor = 1",
        "heartbeats.topic.replication.factor = 1",
        "checkpoints.topic.replication.factor = 1",
        f"emit.heartbeats.enabled = {str(heartbeats).lower()}",
        f"mirrorflow.state.dir = {folder / 'state'}",
        f"{SECURED_FLOW}.enabled = true",
        f"{SECURED_FLOW}.topics = {topic}",
        *extra,
    ]
    for alias, cluster in clusters.items():
        lines.append(f"{alias}.bootstrap.servers = {cluster.bootstrap}")
        props = (per_cluster or {}).get(alias, client_properties)
        lines += [f"{alias}.{k} = {v}" for k, v in props.items()]
    path = folder / "mm2.properties"
    path.write_text("\n".join(lines) + "\n")
    return load_config(path, env={})
