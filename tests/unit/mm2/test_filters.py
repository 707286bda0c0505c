"""Topic and group filters and MM2's topic replication rule (internal topics, heartbeats, cycles)."""

from __future__ import annotations

import pytest

from mirrorflow.errors import ConfigError
from mirrorflow.mm2.filters import (
    GroupFilter,
    TopicFilter,
    compile_patterns,
    is_cycle,
    should_replicate_topic,
)
from mirrorflow.mm2.policy import DefaultReplicationPolicy, IdentityReplicationPolicy

DEFAULT = DefaultReplicationPolicy()


@pytest.mark.parametrize(
    ("topic", "selected"),
    [
        ("orders", True),
        ("primary.orders", True),
        ("connect-offsets-internal", False),
        ("primary.checkpoints.internal", False),
        ("orders.replica", False),
        ("__consumer_offsets", False),
        ("orders.replica.v2", True),
    ],
)
def test_default_topic_filter(topic: str, selected: bool) -> None:
    assert TopicFilter().should_replicate_topic(topic) is selected


@pytest.mark.parametrize(
    ("group", "selected"),
    [
        ("billing", True),
        ("console-consumer-4242", False),
        ("connect-mirror", False),
        ("__internal", False),
        ("my-connect-group", True),
    ],
)
def test_default_group_filter(group: str, selected: bool) -> None:
    assert GroupFilter().should_replicate_group(group) is selected


def test_defaults_are_mm2_defaults() -> None:
    assert TopicFilter() == TopicFilter((".*",), (r".*[\-\.]internal", r".*\.replica", "__.*"))
    assert GroupFilter() == GroupFilter((".*",), ("console-consumer-.*", "connect-.*", "__.*"))


def test_exclude_wins_over_include() -> None:
    topics = TopicFilter(("orders.*",), ("orders-test",))
    assert topics.should_replicate_topic("orders-eu")
    assert not topics.should_replicate_topic("orders-test")


def test_full_name_match_not_prefix_or_search() -> None:
    topics = TopicFilter(("orders", "pay.*"), ())
    assert topics.should_replicate_topic("orders")
    assert not topics.should_replicate_topic("orders2")
    assert not topics.should_replicate_topic("old-orders")
    assert topics.should_replicate_topic("payments")
    assert not topics.should_replicate_topic("prepayments")


def test_alternation_and_inline_flags_in_any_item() -> None:
    topics = TopicFilter(("a|b", "(?i)orders"), ())
    assert [topics.should_replicate_topic(t) for t in ("a", "b", "ab", "ORDERS", "Orders", "orders2")] == [
        True,
        True,
        False,
        True,
        True,
        False,
    ]


def test_empty_include_list_selects_nothing() -> None:
    assert not TopicFilter((), ()).should_replicate_topic("orders")
    assert compile_patterns((), "topics") == ()


def test_invalid_regex_names_the_key() -> None:
    with pytest.raises(ConfigError) as caught:
        TopicFilter(("ok", "bad("), ())
    assert caught.value.key == "topics"
    assert "invalid regular expression 'bad('" in str(caught.value)
    with pytest.raises(ConfigError) as caught:
        TopicFilter(exclude=("[",))
    assert caught.value.key == "topics.exclude"
    with pytest.raises(ConfigError) as caught:
        GroupFilter(include=("*",))
    assert caught.value.key == "groups"
    with pytest.raises(ConfigError) as caught:
        GroupFilter(exclude=("?",), exclude_key="primary->backup.groups.exclude")
    assert caught.value.key == "primary->backup.groups.exclude"


def test_filters_are_immutable() -> None:
    topics = TopicFilter()
    with pytest.raises(AttributeError):
        topics.include = ("x",)  # type: ignore[misc]


def test_cycle_prevention() -> None:
    # B.orders came from B: never back to B.
    assert is_cycle(DEFAULT, "B.orders", "B")
    # C.B.orders came from B through C: never back to B either.
    assert is_cycle(DEFAULT, "C.B.orders", "B")
    assert not is_cycle(DEFAULT, "C.B.orders", "A")
    assert not is_cycle(DEFAULT, "orders", "B")


def test_active_active_never_creates_primary_backup_names() -> None:
    # primary->backup turns orders into primary.orders on backup; backup->primary must skip it.
    topics = TopicFilter()
    assert should_replicate_topic(DEFAULT, topics, "orders", "backup")
    assert not should_replicate_topic(DEFAULT, topics, "primary.orders", "primary")
    assert should_replicate_topic(DEFAULT, topics, "backup.orders", "backup") is False
    assert should_replicate_topic(DEFAULT, topics, "orders", "primary")


def test_identity_policy_cannot_see_cycles() -> None:
    policy = IdentityReplicationPolicy(source_cluster_alias="primary")
    assert not is_cycle(policy, "orders", "backup")
    assert is_cycle(policy, "backup.heartbeats", "backup")
    assert not is_cycle(IdentityReplicationPolicy(), "orders", "backup")


def test_heartbeats_are_replicated_despite_the_filter() -> None:
    only_orders = TopicFilter(("orders",), ())
    assert should_replicate_topic(DEFAULT, only_orders, "heartbeats", "backup")
    assert should_replicate_topic(DEFAULT, only_orders, "other.heartbeats", "backup")
    assert not should_replicate_topic(DEFAULT, only_orders, "backup.heartbeats", "backup")
    assert not should_replicate_topic(DEFAULT, only_orders, "payments", "backup")


@pytest.mark.parametrize(
    "topic",
    [
        "__consumer_offsets",
        ".hidden",
        "mm2-offset-syncs.backup.internal",
        "primary.checkpoints.internal",
        "connect-status-internal",
    ],
)
def test_internal_topics_are_never_replicated(topic: str) -> None:
    include_everything = TopicFilter((".*",), ())
    assert not should_replicate_topic(DEFAULT, include_everything, topic, "backup")
