"""A flow's schema registries: the source cluster's and the target's (Confluent's Schema Registry API),
which subjects travel with the data, and which topics' keys and values are in Confluent's wire format.

    primary->backup.mirrorflow.schema.registry.source.url = https://registry.primary:8081
    primary->backup.mirrorflow.schema.registry.target.url = https://registry.backup:8081
    primary->backup.mirrorflow.schema.registry.target.basic.auth.user.info = ${file:/etc/sr.properties:backup}
    primary->backup.mirrorflow.schema.registry.framed.value.topics = orders, payments-.*
    primary->backup.mirrorflow.schema.registry.plain.key.topics = orders

The sync reads the subjects that the subject name strategies the source's serializers use
(``subject.name.strategies``: Confluent's TopicNameStrategy, TopicRecordNameStrategy and
RecordNameStrategy) give a mirrored topic (``core.schema_sync``); ``subjects.include`` /
``subjects.exclude`` (regular expressions, comma-separated, as MM2's topic lists) narrow those that
travel. Each side of a topic (its keys, its values) is declared framed (``framed.key.topics``,
``framed.value.topics``: every id mapped, or the record refused), plain (``plain.key.topics``,
``plain.value.topics``: never looked at), or neither (``core.schema_ids``). Batch runs sync in each plan
task, DR windows at each topic refresh.
Invariants: both URLs or neither (one alone is an error naming the other);
each registry's settings are exactly those Confluent's client takes (``url``,
``basic.auth.user.info``, ``ssl.ca.location``, ``ssl.certificate.location``, ``ssl.key.location``),
read through the config providers, and a schema key set without the URLs is warned about by name; a
strategy the sync does not know is refused at load, by name; a side of a topic declared both framed
and plain is an error naming both keys, never a guess.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from mirrorflow.config.key_values import default
from mirrorflow.config.keys import (
    SCHEMA_FRAMED_KEYS,
    SCHEMA_FRAMED_VALUES,
    SCHEMA_PLAIN_KEYS,
    SCHEMA_PLAIN_VALUES,
    SCHEMA_REGISTRY,
    SCHEMA_REGISTRY_CLIENT_KEYS,
    SCHEMA_REGISTRY_SIDES,
    SCHEMA_STRATEGIES,
    SCHEMA_SUBJECTS_EXCLUDE,
    SCHEMA_SUBJECTS_INCLUDE,
)
from mirrorflow.config.property_view import PropertyView
from mirrorflow.errors import ConfigError
from mirrorflow.mm2.policy import ReplicationPolicy

log = logging.getLogger(__name__)

SUBJECTS_INCLUDE_DEFAULT = default(SCHEMA_SUBJECTS_INCLUDE)
# Confluent's subject name strategies, by the names its serializers' settings give them.
STRATEGIES = ("TopicNameStrategy", "TopicRecordNameStrategy", "RecordNameStrategy")
TOPIC_NAME, TOPIC_RECORD_NAME, RECORD_NAME = STRATEGIES
# The Java serializers' class names of the same strategies (``value.subject.name.strategy``).
_JAVA_PACKAGE = "io.confluent.kafka.serializers.subject."
SIDES = ("key", "value")
FRAMED, PLAIN, UNDECLARED = "framed", "plain", "undeclared"
# The keys declaring each side framed or plain.
DECLARING = {
    ("key", FRAMED): SCHEMA_FRAMED_KEYS,
    ("value", FRAMED): SCHEMA_FRAMED_VALUES,
    ("key", PLAIN): SCHEMA_PLAIN_KEYS,
    ("value", PLAIN): SCHEMA_PLAIN_VALUES,
}


@dataclass(frozen=True)
class RegistryEndpoint:
    """One registry: its URL and Confluent client settings (``client``, the URL included). The
    settings may hold a password: kept out of ``repr``."""

    url: str
    client: tuple[tuple[str, str], ...] = field(repr=False)


@dataclass(frozen=True)
class SchemaSync:
    """The registries of a flow, its subject patterns, the subject name strategies whose subjects it
    reads, and the topic patterns declaring each side framed or plain (``declared``); every pattern
    a regular expression matched in full."""

    source: RegistryEndpoint
    target: RegistryEndpoint
    include: tuple[str, ...] = (SUBJECTS_INCLUDE_DEFAULT,)
    exclude: tuple[str, ...] = ()
    strategies: tuple[str, ...] = STRATEGIES
    # Source topic patterns declaring keys or values framed or plain (DECLARING's keys).
    framed_keys: tuple[str, ...] = ()
    framed_values: tuple[str, ...] = ()
    plain_keys: tuple[str, ...] = ()
    plain_values: tuple[str, ...] = ()

    def selects(self, subject: str) -> bool:
        return any(re.fullmatch(p, subject) for p in self.include) and not any(
            re.fullmatch(p, subject) for p in self.exclude
        )

    def declared(self, topic: str, side: str) -> str:
        """How the flow declares the keys or values (``side``) of source topic ``topic``: ``FRAMED``,
        ``PLAIN`` or ``UNDECLARED``."""
        patterns = {
            FRAMED: self.framed_keys if side == "key" else self.framed_values,
            PLAIN: self.plain_keys if side == "key" else self.plain_values,
        }
        found = {how: next((p for p in ps if re.fullmatch(p, topic)), None) for how, ps in patterns.items()}
        if found[FRAMED] is not None and found[PLAIN] is not None:
            raise ConfigError(
                f"topic {topic}'s {side}s are declared framed ({DECLARING[(side, FRAMED)]}: "
                f"{found[FRAMED]}) and plain ({DECLARING[(side, PLAIN)]}: {found[PLAIN]}): narrow one "
                "of them so that it no longer matches the topic"
            )
        return next((how for how, p in found.items() if p is not None), UNDECLARED)

    def sides(self, topics: Iterable[str], policy: ReplicationPolicy) -> dict[str, dict[str, str]]:
        """Source topic -> side -> how it is declared (``declared``), for each of ``topics`` but MM2's
        heartbeats topics: never in the wire format, whatever a pattern matches."""
        return {
            topic: {side: self.declared(topic, side) for side in SIDES}
            for topic in sorted(topics)
            if not policy.is_heartbeats_topic(topic)
        }


def schema_sync(props: PropertyView, flow: str) -> SchemaSync | None:
    """The flow's schema registries, or None when it names none."""
    urls = {side: props.get(f"{SCHEMA_REGISTRY}{side}.url", "").strip() for side in SCHEMA_REGISTRY_SIDES}
    if not any(urls.values()):
        unused = sorted(props.written_as(k) for k in props if k.startswith(SCHEMA_REGISTRY))
        if unused:
            log.warning(
                "flow %s names no schema registry: %s has no effect (it applies with %ssource.url and "
                "%starget.url)",
                flow,
                ", ".join(unused),
                SCHEMA_REGISTRY,
                SCHEMA_REGISTRY,
            )
        return None
    for side, other in (("source", "target"), ("target", "source")):
        if not urls[side]:
            raise ConfigError(
                f"flow {flow}: {props.written_as(f'{SCHEMA_REGISTRY}{other}.url')} is set but "
                f"{SCHEMA_REGISTRY}{side}.url is not; schemas travel from one registry to another: set "
                "both, or neither"
            )
    endpoints = {side: _endpoint(props, side) for side in SCHEMA_REGISTRY_SIDES}
    return SchemaSync(
        endpoints["source"],
        endpoints["target"],
        _patterns(props, SCHEMA_SUBJECTS_INCLUDE) or (SUBJECTS_INCLUDE_DEFAULT,),
        _patterns(props, SCHEMA_SUBJECTS_EXCLUDE),
        _strategies(props),
        framed_keys=_patterns(props, SCHEMA_FRAMED_KEYS),
        framed_values=_patterns(props, SCHEMA_FRAMED_VALUES),
        plain_keys=_patterns(props, SCHEMA_PLAIN_KEYS),
        plain_values=_patterns(props, SCHEMA_PLAIN_VALUES),
    )


def _strategies(props: PropertyView) -> tuple[str, ...]:
    """The strategies named (short or by the Java serializers' class names), in STRATEGIES' order."""
    written = props.get(SCHEMA_STRATEGIES, default(SCHEMA_STRATEGIES))
    named = [n.strip() for n in written.split(",") if n.strip()]
    for name in named:
        if name.removeprefix(_JAVA_PACKAGE) not in STRATEGIES:
            raise ConfigError(
                f"{props.written_as(SCHEMA_STRATEGIES)}: {name} is not a subject name strategy the schema "
                f"sync knows; it knows {', '.join(STRATEGIES)} (Confluent's): records serialized under "
                "the subjects of another one are refused, never passed on. Name only those"
            )
    short = {n.removeprefix(_JAVA_PACKAGE) for n in named}
    if not short:
        raise ConfigError(
            f"{props.written_as(SCHEMA_STRATEGIES)}: names no strategy; name those the source's serializers "
            f"use, of {', '.join(STRATEGIES)}"
        )
    return tuple(s for s in STRATEGIES if s in short)


def _endpoint(props: PropertyView, side: str) -> RegistryEndpoint:
    client = tuple(
        (key, props[f"{SCHEMA_REGISTRY}{side}.{key}"].strip())
        for key in SCHEMA_REGISTRY_CLIENT_KEYS
        if props.get(f"{SCHEMA_REGISTRY}{side}.{key}")
    )
    return RegistryEndpoint(dict(client)["url"].rstrip("/"), client)


def _patterns(props: PropertyView, key: str) -> tuple[str, ...]:
    patterns = tuple(p.strip() for p in props.get(key, "").split(",") if p.strip())
    for pattern in patterns:
        try:
            re.compile(pattern)
        except re.error as error:
            raise ConfigError(
                f"{props.written_as(key)}: {pattern!r} is not a regular expression ({error})"
            ) from None
    return patterns
