"""Remote topic naming, as MM2's DefaultReplicationPolicy and IdentityReplicationPolicy."""

from __future__ import annotations

import pytest

from mirrorflow.errors import ConfigError
from mirrorflow.mm2.policy import (
    REPLICATION_POLICY_NAMES,
    DefaultReplicationPolicy,
    IdentityReplicationPolicy,
    replication_policy,
)

DEFAULT = DefaultReplicationPolicy()


def test_remote_name_is_source_alias_separator_topic() -> None:
    assert DEFAULT.format_remote_topic("us-west", "orders") == "us-west.orders"


def test_multi_hop_names_resolve_to_the_original() -> None:
    assert DEFAULT.topic_source("us-west.us-east.orders") == "us-west"
    assert DEFAULT.upstream_topic("us-west.us-east.orders") == "us-east.orders"
    assert DEFAULT.original_topic("us-west.us-east.orders") == "orders"


def test_chain_a_to_b_to_c() -> None:
    on_b = DEFAULT.format_remote_topic("A", "t")
    on_c = DEFAULT.format_remote_topic("B", on_b)
    assert (on_b, on_c) == ("A.t", "B.A.t")
    assert DEFAULT.topic_source(on_c) == "B"
    assert DEFAULT.upstream_topic(on_c) == "A.t"
    assert DEFAULT.original_topic(on_c) == "t"


def test_name_without_separator_is_not_remote() -> None:
    assert DEFAULT.topic_source("orders") is None
    assert DEFAULT.upstream_topic("orders") is None
    assert DEFAULT.original_topic("orders") == "orders"


def test_lexical_parsing_like_java_split() -> None:
    # Trailing empty parts are dropped by Java's split: these are not remote names.
    assert DEFAULT.topic_source("orders.") is None
    assert DEFAULT.topic_source("orders..") is None
    # A leading separator gives an empty source alias, as in MM2.
    assert DEFAULT.topic_source(".orders") == ""
    assert DEFAULT.upstream_topic("a..b") == ".b"


def test_custom_separator() -> None:
    policy = DefaultReplicationPolicy("_")
    assert policy.format_remote_topic("primary", "orders") == "primary_orders"
    assert policy.topic_source("backup_primary_orders") == "backup"
    assert policy.upstream_topic("backup_primary_orders") == "primary_orders"
    assert policy.original_topic("backup_primary_orders") == "orders"
    assert policy.topic_source("primary.orders") is None
    assert policy.offset_syncs_topic("primary") == "mm2-offset-syncs_primary_internal"
    assert policy.checkpoints_topic("primary") == "primary_checkpoints_internal"
    assert policy.is_checkpoints_topic("primary_checkpoints_internal")
    assert policy.is_mm2_internal_topic("mm2-offset-syncs_primary_internal")
    assert policy.is_internal_topic("mm2-offset-syncs_primary_internal")


def test_multi_character_separator() -> None:
    policy = DefaultReplicationPolicy("__")
    assert policy.topic_source("a__b__c") == "a"
    assert policy.upstream_topic("a__b__c") == "b__c"


def test_internal_topic_names() -> None:
    assert DEFAULT.heartbeats_topic() == "heartbeats"
    assert DEFAULT.offset_syncs_topic("primary") == "mm2-offset-syncs.primary.internal"
    assert DEFAULT.checkpoints_topic("primary") == "primary.checkpoints.internal"
    assert DEFAULT.is_checkpoints_topic("primary.checkpoints.internal")
    assert DEFAULT.is_checkpoints_topic("backup.primary.checkpoints.internal")
    assert not DEFAULT.is_checkpoints_topic("primary.checkpoints")
    assert DEFAULT.is_mm2_internal_topic("mm2-offset-syncs.primary.internal")
    assert not DEFAULT.is_mm2_internal_topic("connect-offsets-internal")


def test_heartbeats_topics_at_any_hop() -> None:
    assert DEFAULT.is_heartbeats_topic("heartbeats")
    assert DEFAULT.is_heartbeats_topic("primary.heartbeats")
    assert DEFAULT.is_heartbeats_topic("backup.primary.heartbeats")
    assert not DEFAULT.is_heartbeats_topic("heartbeats.primary")
    assert not DEFAULT.is_heartbeats_topic("myheartbeats")


@pytest.mark.parametrize(
    ("topic", "internal"),
    [
        ("__consumer_offsets", True),
        ("__transaction_state", True),
        (".hidden", True),
        ("connect-configs.internal", True),
        ("connect-offsets-internal", True),
        ("primary.checkpoints.internal", True),
        ("mm2-offset-syncs.backup.internal", True),
        ("orders", False),
        ("orders_internal", False),
        ("internal.orders", False),
        ("a_b__c", False),
    ],
)
def test_internal_topic_rule(topic: str, internal: bool) -> None:
    assert DEFAULT.is_internal_topic(topic) is internal


def test_identity_keeps_names_except_heartbeats() -> None:
    policy = IdentityReplicationPolicy(source_cluster_alias="primary")
    assert policy.format_remote_topic("primary", "orders") == "orders"
    assert policy.format_remote_topic("primary", "us.orders") == "us.orders"
    assert policy.format_remote_topic("primary", "heartbeats") == "primary.heartbeats"
    assert policy.upstream_topic("orders") == "orders"
    assert policy.original_topic("orders") == "orders"
    # Names carry no provenance: the source is what the flow says it is.
    assert policy.topic_source("orders") == "primary"
    assert IdentityReplicationPolicy().topic_source("orders") is None


def test_identity_heartbeats_are_read_like_the_default_policy() -> None:
    policy = IdentityReplicationPolicy(source_cluster_alias="backup")
    assert policy.topic_source("primary.heartbeats") == "primary"
    assert policy.upstream_topic("primary.heartbeats") == "heartbeats"
    assert policy.topic_source("heartbeats") is None
    assert policy.is_heartbeats_topic("backup.primary.heartbeats")
    assert policy.offset_syncs_topic("backup") == "mm2-offset-syncs.backup.internal"
    assert policy.checkpoints_topic("backup") == "backup.checkpoints.internal"


@pytest.mark.parametrize(
    "name",
    ["org.apache.kafka.connect.mirror.DefaultReplicationPolicy", "DefaultReplicationPolicy", "default"],
)
def test_factory_default_names(name: str) -> None:
    assert replication_policy(name, "_") == DefaultReplicationPolicy("_")


@pytest.mark.parametrize(
    "name",
    ["org.apache.kafka.connect.mirror.IdentityReplicationPolicy", "IdentityReplicationPolicy", "identity"],
)
def test_factory_identity_names(name: str) -> None:
    assert replication_policy(name, ".", source_cluster_alias="primary") == IdentityReplicationPolicy(
        ".", "primary"
    )


def test_factory_unknown_class_lists_the_accepted_names() -> None:
    with pytest.raises(ConfigError) as caught:
        replication_policy("com.example.MyPolicy", ".")
    assert caught.value.key == "replication.policy.class"
    assert str(caught.value) == (
        "replication.policy.class: unknown replication policy 'com.example.MyPolicy'; use one of: "
        "org.apache.kafka.connect.mirror.DefaultReplicationPolicy, DefaultReplicationPolicy, default, "
        "org.apache.kafka.connect.mirror.IdentityReplicationPolicy, IdentityReplicationPolicy, identity"
    )
    assert len(REPLICATION_POLICY_NAMES) == 6


def test_factory_names_the_keys_given() -> None:
    with pytest.raises(ConfigError) as caught:
        replication_policy("nope", ".", class_key="a->b.replication.policy.class")
    assert caught.value.key == "a->b.replication.policy.class"
    with pytest.raises(ConfigError) as caught:
        replication_policy("default", "", separator_key="a->b.replication.policy.separator")
    assert caught.value.key == "a->b.replication.policy.separator"


def test_empty_separator_is_an_error() -> None:
    with pytest.raises(ConfigError) as caught:
        DefaultReplicationPolicy("")
    assert caught.value.key == "replication.policy.separator"
    with pytest.raises(ConfigError) as caught:
        replication_policy("identity", "")
    assert caught.value.key == "replication.policy.separator"
