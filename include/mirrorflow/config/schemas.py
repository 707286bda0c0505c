"""A flow's schema registries: the source cluster's and the target's (Confluent's Schema Registry API),
and which subjects travel with the data.

    primary->backup.mirrorflow.schema.registry.source.url = https://registry.primary:8081
    primary->backup.mirrorflow.schema.registry.target.url = https://registry.backup:8081
    primary->backup.mirrorflow.schema.registry.target.basic.auth.user.info = ${file:/etc/sr.properties:backup}
    primary->backup.mirrorflow.schema.registry.subjects.exclude = .*-key

The subjects of a mirrored topic are Confluent's TopicNameStrategy's, ``<topic>-key`` and
``<topic>-value``; on the target they are named after the remote topic, as the replication policy
names it. ``subjects.include`` / ``subjects.exclude`` (regular expressions, comma-separated, as MM2's
topic lists) narrow them. Batch runs sync them in each plan task, DR windows at each topic refresh.
Invariants: both URLs or neither (one alone is an error naming the other);
each registry's settings are exactly those Confluent's client takes (``url``,
``basic.auth.user.info``, ``ssl.ca.location``, ``ssl.certificate.location``, ``ssl.key.location``),
read through the config providers, and a schema key set without the URLs is warned about by name.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field

from mirrorflow.config.key_values import default
from mirrorflow.config.keys import (
    SCHEMA_REGISTRY,
    SCHEMA_REGISTRY_CLIENT_KEYS,
    SCHEMA_REGISTRY_SIDES,
    SCHEMA_SUBJECTS_EXCLUDE,
    SCHEMA_SUBJECTS_INCLUDE,
)
from mirrorflow.config.property_view import PropertyView
from mirrorflow.errors import ConfigError

log = logging.getLogger(__name__)

SUBJECTS_INCLUDE_DEFAULT = default(SCHEMA_SUBJECTS_INCLUDE)


@dataclass(frozen=True)
class RegistryEndpoint:
    """One registry: its URL and Confluent client settings (``client``, the URL included). The
    settings may hold a password: kept out of ``repr``."""

    url: str
    client: tuple[tuple[str, str], ...] = field(repr=False)


@dataclass(frozen=True)
class SchemaSync:
    """The registries of a flow and its subject patterns (regular expressions matched in full)."""

    source: RegistryEndpoint
    target: RegistryEndpoint
    include: tuple[str, ...] = (SUBJECTS_INCLUDE_DEFAULT,)
    exclude: tuple[str, ...] = ()

    def selects(self, subject: str) -> bool:
        return any(re.fullmatch(p, subject) for p in self.include) and not any(
            re.fullmatch(p, subject) for p in self.exclude
        )


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
    )


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
