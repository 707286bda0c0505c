"""A flow's schema registries as configured: both URLs or neither, each registry's Confluent client
settings, subject patterns, the subject name strategies (an unknown one refused at load), each side of
a topic declared framed, plain or neither, and keys without registries warned about by name."""

from __future__ import annotations

import logging

import pytest

from mirrorflow.config.model import parse_config
from mirrorflow.config.property_view import PropertyView
from mirrorflow.config.schemas import (
    FRAMED,
    PLAIN,
    STRATEGIES,
    UNDECLARED,
    RegistryEndpoint,
    SchemaSync,
    schema_sync,
)
from mirrorflow.errors import ConfigError
from mirrorflow.mm2.policy import DefaultReplicationPolicy

FLOW = "primary->backup"
SR = f"{FLOW}.mirrorflow.schema.registry."


def sync_of(**keys: str) -> SchemaSync | None:
    overrides = {f"mirrorflow.schema.registry.{k.replace('_', '.')}": v for k, v in keys.items()}
    return schema_sync(PropertyView.layered([(f"{FLOW}.", overrides)]), FLOW)


def test_a_flow_without_registries_has_no_schema_sync() -> None:
    assert sync_of() is None


def test_both_registries_with_confluents_client_settings() -> None:
    sync = sync_of(
        **{
            "source_url": "https://sr.primary:8081/",
            "target_url": "https://sr.backup:8081",
            "target_basic_auth_user_info": "mirror:s3cret",
            "target_ssl_ca_location": "/etc/ca.pem",
        }
    )

    assert sync == SchemaSync(
        RegistryEndpoint("https://sr.primary:8081", (("url", "https://sr.primary:8081/"),)),
        RegistryEndpoint(
            "https://sr.backup:8081",
            (
                ("url", "https://sr.backup:8081"),
                ("basic.auth.user.info", "mirror:s3cret"),
                ("ssl.ca.location", "/etc/ca.pem"),
            ),
        ),
    )
    assert "s3cret" not in repr(sync)


def test_subject_patterns_match_whole_subjects() -> None:
    sync = sync_of(source_url="http://a", target_url="http://b", subjects_include="orders.*, payments-value")
    assert sync is not None
    assert [
        s
        for s in ("orders-value", "orders-key", "payments-value", "payments-key", "x-orders-value")
        if sync.selects(s)
    ] == [
        "orders-value",
        "orders-key",
        "payments-value",
    ]
    narrowed = sync_of(source_url="http://a", target_url="http://b", subjects_exclude=".*-key")
    assert narrowed is not None and narrowed.selects("t-value") and not narrowed.selects("t-key")


@pytest.mark.parametrize(("given", "missing"), [("source", "target"), ("target", "source")])
def test_one_registry_alone_is_an_error_naming_the_other(given: str, missing: str) -> None:
    with pytest.raises(ConfigError) as caught:
        sync_of(**{f"{given}_url": "http://a"})
    assert str(caught.value) == (
        f"flow {FLOW}: {SR}{given}.url is set but mirrorflow.schema.registry.{missing}.url is not; schemas "
        "travel from one registry to another: set both, or neither"
    )


def test_a_pattern_that_is_no_regular_expression_is_an_error_naming_it() -> None:
    with pytest.raises(ConfigError, match=rf"^{SR}subjects.exclude: '\(' is not a regular expression"):
        sync_of(source_url="http://a", target_url="http://b", subjects_exclude="(")


def test_schema_keys_without_registries_are_warned_about_by_name(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        assert sync_of(subjects_exclude=".*-key") is None
    assert caplog.messages == [
        f"flow {FLOW} names no schema registry: {SR}subjects.exclude has no effect (it applies with "
        "mirrorflow.schema.registry.source.url and mirrorflow.schema.registry.target.url)"
    ]


def test_a_flow_loads_with_its_registries() -> None:
    text = (
        "clusters = primary, backup\nprimary.bootstrap.servers = p:9092\nbackup.bootstrap.servers = b:9092\n"
        f"{FLOW}.enabled = true\nmirrorflow.state.dir = /var/lib/mirrorflow\n"
        f"{SR}source.url = http://a\n{SR}target.url = http://b\n"
    )
    schemas = parse_config(text, env={}).flow(FLOW).schemas

    assert schemas is not None and (schemas.source.url, schemas.target.url) == ("http://a", "http://b")


def test_the_strategies_are_confluents_by_their_short_or_java_names() -> None:
    default = sync_of(source_url="http://a", target_url="http://b")
    named = sync_of(
        source_url="http://a",
        target_url="http://b",
        **{
            "subject.name.strategies": (
                "io.confluent.kafka.serializers.subject.RecordNameStrategy, TopicNameStrategy"
            )
        },
    )

    assert default is not None and default.strategies == STRATEGIES
    assert named is not None and named.strategies == ("TopicNameStrategy", "RecordNameStrategy")


def test_a_strategy_the_sync_does_not_know_is_refused_at_load_by_name() -> None:
    with pytest.raises(ConfigError) as caught:
        sync_of(
            source_url="http://a", target_url="http://b", **{"subject.name.strategies": "com.acme.ByTeam"}
        )

    assert str(caught.value) == (
        f"{SR}subject.name.strategies: com.acme.ByTeam is not a subject name strategy the schema sync "
        "knows; it knows TopicNameStrategy, TopicRecordNameStrategy, RecordNameStrategy (Confluent's): "
        "records serialized under the subjects of another one are refused, never passed on. Name only those"
    )


def test_each_side_of_a_topic_is_declared_framed_plain_or_neither() -> None:
    sync = sync_of(
        source_url="http://a",
        target_url="http://b",
        **{
            "framed.value.topics": "orders, pay.*",
            "plain.key.topics": "orders",
            "framed.key.topics": "audit",
        },
    )
    assert sync is not None

    assert [
        (sync.declared(t, "key"), sync.declared(t, "value")) for t in ("orders", "payments", "audit")
    ] == [
        (PLAIN, FRAMED),
        (UNDECLARED, FRAMED),
        (FRAMED, UNDECLARED),
    ]


def test_a_side_declared_framed_and_plain_is_an_error_naming_both() -> None:
    sync = sync_of(
        source_url="http://a",
        target_url="http://b",
        **{"framed.value.topics": "o.*", "plain.value.topics": "orders"},
    )
    assert sync is not None

    with pytest.raises(ConfigError) as caught:
        sync.declared("orders", "value")

    assert str(caught.value) == (
        "topic orders's values are declared framed (mirrorflow.schema.registry.framed.value.topics: o.*) "
        "and plain (mirrorflow.schema.registry.plain.value.topics: orders): narrow one of them so that it "
        "no longer matches the topic"
    )


def test_heartbeats_topics_are_never_declared_whatever_a_pattern_matches() -> None:
    sync = sync_of(source_url="http://a", target_url="http://b", **{"framed.value.topics": ".*"})
    assert sync is not None

    assert sync.sides(["orders", "heartbeats", "backup.heartbeats"], DefaultReplicationPolicy()) == {
        "orders": {"key": UNDECLARED, "value": FRAMED}
    }
