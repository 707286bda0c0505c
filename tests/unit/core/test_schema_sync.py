"""Which subjects travel and in which order: TopicNameStrategy's subjects renamed for the remote topic,
every version in version order, each after what it refers to, and a reference cycle refused."""

from __future__ import annotations

import pytest

from mirrorflow.core.schema_sync import Reference, SubjectVersion, registration_order, topic_subjects
from mirrorflow.errors import ConfigError


def test_each_side_of_each_topic_is_a_subject_named_after_the_remote_topic() -> None:
    subjects = topic_subjects(["orders", "audit"], lambda t: f"primary.{t}", lambda s: s != "audit-key")

    assert subjects == {
        "orders-key": "primary.orders-key",
        "orders-value": "primary.orders-value",
        "audit-value": "primary.audit-value",
    }


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
