"""Remote topic naming, with MirrorMaker 2's ``ReplicationPolicy`` semantics.

A policy is a pure, lexical function of names: it never looks at a cluster. The same policy must be
used by every flow that reads or writes a given set of clusters, otherwise cycle detection and offset
translation see different names than MM2 would.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass

from mirrorflow.errors import ConfigError

CLASS_CONFIG = "replication.policy.class"
CLASS_DEFAULT = "org.apache.kafka.connect.mirror.DefaultReplicationPolicy"
SEPARATOR_CONFIG = "replication.policy.separator"
SEPARATOR_DEFAULT = "."

_HEARTBEATS_TOPIC = "heartbeats"
_MM2_PACKAGE = "org.apache.kafka.connect.mirror."


class ReplicationPolicy(ABC):
    """How a topic is named on the target, and how to read a remote name back (MM2's interface)."""

    @abstractmethod
    def format_remote_topic(self, source_alias: str, topic: str) -> str:
        """Name on the target cluster of ``topic`` replicated from cluster ``source_alias``."""

    @abstractmethod
    def topic_source(self, topic: str) -> str | None:
        """Alias of the cluster ``topic`` was replicated from, or None for a topic that is not remote."""

    @abstractmethod
    def upstream_topic(self, topic: str) -> str | None:
        """Name of ``topic`` on the cluster it came from (itself maybe remote), None if not remote."""

    @abstractmethod
    def offset_syncs_topic(self, cluster_alias: str) -> str:
        """MM2's offset-syncs topic named after ``cluster_alias``, the cluster it is not on (the
        target by default: ``mm2-offset-syncs.B.internal`` lives on A for the flow A->B)."""

    @abstractmethod
    def checkpoints_topic(self, cluster_alias: str) -> str:
        """Internal topic, on the target, holding checkpoints of groups of source ``cluster_alias``."""

    @abstractmethod
    def is_checkpoints_topic(self, topic: str) -> bool:
        """True for a checkpoints topic of any source cluster."""

    @abstractmethod
    def is_mm2_internal_topic(self, topic: str) -> bool:
        """True for MM2's own internal topics (checkpoints, offset syncs, MM2's Connect topics)."""

    def original_topic(self, topic: str) -> str:
        """Name of the topic on the cluster where it was first produced, through any number of hops.

        Stops when there is no upstream or the upstream equals the topic (identity naming).
        """
        upstream = self.upstream_topic(topic)
        while upstream is not None and upstream != topic:
            topic, upstream = upstream, self.upstream_topic(upstream)
        return topic

    def heartbeats_topic(self) -> str:
        return _HEARTBEATS_TOPIC

    def is_heartbeats_topic(self, topic: str) -> bool:
        """True for ``heartbeats`` and every remote copy of it, however many hops away."""
        return self.original_topic(topic) == self.heartbeats_topic()

    def is_internal_topic(self, topic: str) -> bool:
        """Never replicated: Kafka's (``__*``, ``.*``), Connect's and MM2's (``*.internal``, ``*-internal``).

        MM2 internal topics named with a custom separator are internal too.
        """
        return (
            self.is_mm2_internal_topic(topic)
            or topic.startswith(("__", "."))
            or topic.endswith((".internal", "-internal"))
        )


@dataclass(frozen=True)
class DefaultReplicationPolicy(ReplicationPolicy):
    """Remote name = ``<source alias><separator><topic>``; MM2's default.

    Parsing is purely lexical, so a local topic whose name contains the separator looks remote.
    Internal topic names use the separator too (MM2's default since Kafka 3.1).
    """

    separator: str = SEPARATOR_DEFAULT

    def __post_init__(self) -> None:
        _require_separator(self.separator, SEPARATOR_CONFIG)

    def format_remote_topic(self, source_alias: str, topic: str) -> str:
        return f"{source_alias}{self.separator}{topic}"

    def topic_source(self, topic: str) -> str | None:
        # Java's String.split drops trailing empty parts: "a." and "a.." are not remote, "a..b" is.
        parts = topic.split(self.separator)
        while parts and not parts[-1]:
            parts.pop()
        return parts[0] if len(parts) >= 2 else None

    def upstream_topic(self, topic: str) -> str | None:
        source = self.topic_source(topic)
        return None if source is None else topic[len(source) + len(self.separator) :]

    def offset_syncs_topic(self, cluster_alias: str) -> str:
        return f"mm2-offset-syncs{self.separator}{cluster_alias}{self._internal_suffix}"

    def checkpoints_topic(self, cluster_alias: str) -> str:
        return f"{cluster_alias}{self._checkpoints_suffix}"

    def is_checkpoints_topic(self, topic: str) -> bool:
        return topic.endswith(self._checkpoints_suffix)

    def is_mm2_internal_topic(self, topic: str) -> bool:
        return topic.endswith(self._internal_suffix)

    @property
    def _internal_suffix(self) -> str:
        return f"{self.separator}internal"

    @property
    def _checkpoints_suffix(self) -> str:
        return f"{self.separator}checkpoints{self._internal_suffix}"


@dataclass(frozen=True)
class IdentityReplicationPolicy(DefaultReplicationPolicy):
    """Remote name = source name, except heartbeats, which are named as by the default policy.

    Names carry no provenance, so cycles cannot be detected: never use it for active/active flows.
    ``source_cluster_alias`` (MM2's ``source.cluster.alias``) is what ``topic_source`` reports for
    every topic but heartbeats; None when unknown.
    """

    source_cluster_alias: str | None = None

    def format_remote_topic(self, source_alias: str, topic: str) -> str:
        if self._looks_like_heartbeats(topic):
            return super().format_remote_topic(source_alias, topic)
        return topic

    def topic_source(self, topic: str) -> str | None:
        if self._looks_like_heartbeats(topic):
            return super().topic_source(topic)
        return self.source_cluster_alias

    def upstream_topic(self, topic: str) -> str | None:
        if self._looks_like_heartbeats(topic):
            return super().upstream_topic(topic)
        return topic

    def _looks_like_heartbeats(self, topic: str) -> bool:
        return topic.endswith(self.heartbeats_topic())


_POLICIES: dict[str, Callable[[str, str | None], ReplicationPolicy]] = {
    name: factory
    for class_name, short_name, factory in (
        ("DefaultReplicationPolicy", "default", lambda separator, _: DefaultReplicationPolicy(separator)),
        ("IdentityReplicationPolicy", "identity", IdentityReplicationPolicy),
    )
    for name in (_MM2_PACKAGE + class_name, class_name, short_name)
}

REPLICATION_POLICY_NAMES: tuple[str, ...] = tuple(_POLICIES)
"""Accepted values of ``replication.policy.class``: MM2's class names, short class names, short names."""


def replication_policy(
    class_name: str,
    separator: str,
    *,
    source_cluster_alias: str | None = None,
    class_key: str = CLASS_CONFIG,
    separator_key: str = SEPARATOR_CONFIG,
) -> ReplicationPolicy:
    """The policy named by ``class_name`` (a ``replication.policy.class`` value) with ``separator``.

    ``source_cluster_alias`` is used by the identity policy only (see ``IdentityReplicationPolicy``).
    ``class_key`` and ``separator_key`` name the properties in errors (flow overrides have a prefix).
    """
    factory = _POLICIES.get(class_name)
    if factory is None:
        raise ConfigError(
            f"unknown replication policy {class_name!r}; use one of: {', '.join(REPLICATION_POLICY_NAMES)}",
            key=class_key,
        )
    _require_separator(separator, separator_key)
    return factory(separator, source_cluster_alias)


def _require_separator(separator: str, key: str) -> None:
    if not separator:
        raise ConfigError(
            f"the separator must not be empty; remove the key to use {SEPARATOR_DEFAULT!r}", key=key
        )
