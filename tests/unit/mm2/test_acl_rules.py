"""MM2's topic ACL rules: which source ACLs reach the target, and how they change on the way."""

from __future__ import annotations

from mirrorflow.mm2.acl_rules import TopicAcl, missing_acls, target_acls

REMOTE = {"orders": "primary.orders", "payments": "primary.payments"}


def acl(topic: str, operation: str, permission: str = "ALLOW", principal: str = "User:alice") -> TopicAcl:
    return TopicAcl(topic, principal, "*", operation, permission)


def test_mm2s_rules_drop_allow_write_turn_allow_all_into_read_and_rename() -> None:
    source = [
        acl("orders", "READ"),
        acl("orders", "WRITE"),  # only the mirror writes remote topics
        acl("orders", "ALL", principal="User:bob"),
        acl("orders", "WRITE", "DENY", "User:mallory"),  # DENY is copied, WRITE or not
        acl("payments", "DESCRIBE"),
        acl("not-mirrored", "READ"),
    ]

    assert target_acls(source, REMOTE) == [
        acl("primary.orders", "READ"),
        acl("primary.orders", "READ", principal="User:bob"),
        acl("primary.orders", "WRITE", "DENY", "User:mallory"),
        acl("primary.payments", "DESCRIBE"),
    ]


def test_duplicates_collapse_and_only_missing_acls_are_created() -> None:
    wanted = target_acls([acl("orders", "READ"), acl("orders", "ALL")], REMOTE)
    assert wanted == [acl("primary.orders", "READ")]
    assert missing_acls(wanted, [acl("primary.orders", "READ")]) == []
    assert missing_acls(wanted, [acl("primary.orders", "READ", principal="User:bob")]) == wanted
