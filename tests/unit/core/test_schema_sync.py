"""Which subjects travel and in which order: each strategy's subjects of the mirrored topics (named
after the remote topic; a record's subject keeps its name), every version in version order, each
after what it refers to, and a reference cycle refused."""

from __future__ import annotations

import pytest

from mirrorflow.config.schemas import STRATEGIES
from mirrorflow.core.schema_sync import (
    Reference,
    SubjectVersion,
    registration_order,
    strategy_of,
    topic_subjects,
)
from mirrorflow.errors import ConfigError

HELD = [
    "orders-key",
    "orders-value",
    "orders-shop.Order",  # TopicRecordNameStrategy: either side
    "orders-eu-value",  # topic orders-eu's, not mirrored
    "audit-key",
    "audit-value",
    "shop.Payment",  # RecordNameStrategy
    "shop/money.proto",  # a Protobuf file, referred to by others: no strategy's
    "other-value",
]


def remote(topic: str) -> str:
    return f"primary.{topic}"


def test_each_strategys_subjects_of_each_side_read_named_after_the_remote_topic() -> None:
    subjects = topic_subjects(HELD, {"orders": ["key", "value"], "audit": ["value"]}, remote, STRATEGIES)

    assert subjects == {
        "orders-key": "primary.orders-key",
        "orders-value": "primary.orders-value",
        "orders-shop.Order": "primary.orders-shop.Order",
        "audit-value": "primary.audit-value",
        "shop.Payment": "shop.Payment",
    }


def test_only_the_strategies_named_and_only_sides_read() -> None:
    assert topic_subjects(HELD, {"orders": ["value"]}, remote, ("TopicNameStrategy",)) == {
        "orders-value": "primary.orders-value"
    }
    # No side read (every side plain): no subject at all, not even a record's.
    assert topic_subjects(HELD, {"orders": [], "audit": []}, remote, STRATEGIES) == {}


@pytest.mark.parametrize(
    ("subject", "topic", "strategy"),
    [
        ("orders-value", "orders", "TopicNameStrategy"),
        ("orders-shop.Order", "orders", "TopicRecordNameStrategy"),
        ("shop.Order", "orders", "RecordNameStrategy"),
        ("orders-eu-value", "orders", None),
        ("other-value", "orders", None),
        ("shop/money.proto", "orders", None),
    ],
)
def test_the_strategy_a_subject_of_a_topic_comes_from(subject: str, topic: str, strategy: str | None) -> None:
    assert strategy_of(subject, topic) == strategy


def version(subject: str, number: int, *refs: tuple[str, int]) -> SubjectVersion:
    return SubjectVersion(
        subject,
        number,
        hash((subject, number)) % 1000,
        "PROTOBUF",
        f"{subject}/{number}",
        tuple(Reference(f"{s}.proto", s, v) for s, v in refs),
    )


def test_references_come_before_the_versions_that_use_them() -> None:
    versions = {
        v.key: v
        for v in (
            version("orders-value", 1, ("common", 1)),
            version("orders-value", 2, ("common", 2), ("money", 1)),
            version("common", 1),
            version("common", 2, ("money", 1)),
            version("money", 1),
        )
    }

    order = registration_order(versions, [("orders-value", 1), ("orders-value", 2)])

    assert [v.key for v in order] == [
        ("common", 1),
        ("orders-value", 1),
        ("money", 1),
        ("common", 2),
        ("orders-value", 2),
    ]


def test_a_reference_cycle_is_refused_naming_it() -> None:
    versions = {v.key: v for v in (version("a", 1, ("b", 1)), version("b", 1, ("a", 1)))}

    with pytest.raises(ConfigError) as caught:
        registration_order(versions, [("a", 1)])

    assert str(caught.value) == (
        "the source registry's schemas refer to each other in a cycle: "
        "a version 1 -> b version 1 -> a version 1"
    )
