"""Topic ACL sync on real brokers started with Kafka's StandardAuthorizer.

Clusters of this module's own: an authorizer on the shared session clusters would change what every
other test may do. The PLAINTEXT principal (User:ANONYMOUS) is a super user, so the test and the
mirror can manage ACLs; SASL users come with the security work.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka.admin import (
    ACL,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    KafkaAdminClient,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)
from mirror_helpers import create_topic, local_clusters

from mirrorflow import runner
from mirrorflow.config import load_config
from mirrorflow.local_kafka import LocalCluster

pytestmark = [pytest.mark.integration]

AUTHORIZER = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:ANONYMOUS",
    "allow.everyone.if.no.acl.found": "true",
}


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, LocalCluster]]:
    with local_clusters(("primary", "backup"), tmp_path_factory.mktemp("acl"), AUTHORIZER) as clusters:
        yield clusters


def _acl(
    topic: str, principal: str, op: ACLOperation, perm: ACLPermissionType, prefixed: bool = False
) -> ACL:
    pattern = ACLResourcePatternType.PREFIXED if prefixed else ACLResourcePatternType.LITERAL
    return ACL(principal, "*", op, perm, ResourcePattern(ResourceType.TOPIC, topic, pattern))


def _topic_acls(cluster: LocalCluster, topic: str) -> set[tuple[str, str, str, str]]:
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
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


def test_literal_topic_acls_reach_the_remote_topic_with_mm2s_rules(
    secured: dict[str, LocalCluster], tmp_path: Path
) -> None:
    primary, backup = secured["primary"], secured["backup"]
    create_topic(primary.bootstrap, "orders", 1)
    admin = KafkaAdminClient(bootstrap_servers=primary.bootstrap)
    try:
        result = admin.create_acls(
            [
                _acl("orders", "User:alice", ACLOperation.READ, ACLPermissionType.ALLOW),
                _acl("orders", "User:alice", ACLOperation.WRITE, ACLPermissionType.ALLOW),
                _acl("orders", "User:bob", ACLOperation.ALL, ACLPermissionType.ALLOW),
                _acl("orders", "User:mallory", ACLOperation.WRITE, ACLPermissionType.DENY),
                _acl("ord", "User:carol", ACLOperation.READ, ACLPermissionType.ALLOW, prefixed=True),
            ]
        )
        assert not result["failed"]
    finally:
        admin.close()
    path = tmp_path / "mm2.properties"
    path.write_text(
        f"clusters = primary, backup\nprimary.bootstrap.servers = {primary.bootstrap}\n"
        f"backup.bootstrap.servers = {backup.bootstrap}\nreplication.factor = 1\n"
        f"emit.heartbeats.enabled = false\nmirrorflow.state.dir = {tmp_path / 'state'}\n"
        "primary->backup.enabled = true\nprimary->backup.topics = orders\n"
    )
    config = load_config(path, env={})

    for run in ("run-1", "run-2"):  # the second run finds them there and adds nothing
        runner.plan_run(config, "primary->backup", run)
        runner.release_run(config, "primary->backup", run)

    assert _topic_acls(backup, "primary.orders") == {
        ("User:alice", "READ", "ALLOW", "LITERAL"),
        ("User:bob", "READ", "ALLOW", "LITERAL"),  # ALLOW ALL became READ
        ("User:mallory", "WRITE", "DENY", "LITERAL"),
    }
