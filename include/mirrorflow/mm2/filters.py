"""Which topics and consumer groups a flow mirrors: MM2's default filters and replication rules.

Patterns are Python regular expressions matched against the whole name (as Java's
``Matcher.matches``); the exclude list wins over the include list; an empty include list matches
nothing (MM2: a blank property selects nothing, not everything).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import InitVar, dataclass, field

from mirrorflow.errors import ConfigError
from mirrorflow.mm2.policy import ReplicationPolicy

TOPICS_DEFAULT: tuple[str, ...] = (".*",)
TOPICS_EXCLUDE_DEFAULT: tuple[str, ...] = (r".*[\-\.]internal", r".*\.replica", "__.*")
GROUPS_DEFAULT: tuple[str, ...] = (".*",)
GROUPS_EXCLUDE_DEFAULT: tuple[str, ...] = ("console-consumer-.*", "connect-.*", "__.*")


def compile_patterns(patterns: Sequence[str], key: str) -> tuple[re.Pattern[str], ...]:
    """``patterns`` compiled one by one; ``key`` is the property they come from, named in errors.

    Kept apart rather than joined with ``|`` (as MM2 does, same meaning) so that an error names the
    culprit and inline flags such as ``(?i)`` work in any item, as in Java.
    """
    compiled = []
    for pattern in patterns:
        try:
            compiled.append(re.compile(pattern))
        except re.error as error:
            raise ConfigError(
                f"invalid regular expression {pattern!r} ({error}); fix it or remove it from the list",
                key=key,
            ) from error
    return tuple(compiled)


@dataclass(frozen=True)
class _NameFilter:
    """Include/exclude regex lists; ``*_key`` name the properties for errors and are not kept."""

    include: tuple[str, ...]
    exclude: tuple[str, ...]
    include_key: InitVar[str]
    exclude_key: InitVar[str]
    _include: tuple[re.Pattern[str], ...] = field(init=False, repr=False, compare=False)
    _exclude: tuple[re.Pattern[str], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self, include_key: str, exclude_key: str) -> None:
        # Compiled once here: frozen, so set through object.__setattr__.
        object.__setattr__(self, "_include", compile_patterns(self.include, include_key))
        object.__setattr__(self, "_exclude", compile_patterns(self.exclude, exclude_key))

    def _matches(self, name: str) -> bool:
        return _any_matches(self._include, name) and not _any_matches(self._exclude, name)


def _any_matches(patterns: tuple[re.Pattern[str], ...], name: str) -> bool:
    return any(pattern.fullmatch(name) for pattern in patterns)


@dataclass(frozen=True)
class TopicFilter(_NameFilter):
    """MM2's ``DefaultTopicFilter``: properties ``topics`` and ``topics.exclude``."""

    include: tuple[str, ...] = TOPICS_DEFAULT
    exclude: tuple[str, ...] = TOPICS_EXCLUDE_DEFAULT
    include_key: InitVar[str] = "topics"
    exclude_key: InitVar[str] = "topics.exclude"

    def should_replicate_topic(self, topic: str) -> bool:
        return self._matches(topic)


@dataclass(frozen=True)
class GroupFilter(_NameFilter):
    """MM2's ``DefaultGroupFilter``: properties ``groups`` and ``groups.exclude``."""

    include: tuple[str, ...] = GROUPS_DEFAULT
    exclude: tuple[str, ...] = GROUPS_EXCLUDE_DEFAULT
    include_key: InitVar[str] = "groups"
    exclude_key: InitVar[str] = "groups.exclude"

    def should_replicate_group(self, group: str) -> bool:
        return self._matches(group)


def is_cycle(policy: ReplicationPolicy, topic: str, target_alias: str) -> bool:
    """True when ``topic`` came from ``target_alias`` at any hop, i.e. it is already on the target.

    Walks upstream through the remote names; stops when a name has no upstream or is its own
    upstream (identity naming, where cycles cannot be seen).
    """
    while True:
        source = policy.topic_source(topic)
        if source is None:
            return False
        if source == target_alias:
            return True
        upstream = policy.upstream_topic(topic)
        if upstream is None or upstream == topic:
            return False
        topic = upstream


def should_replicate_topic(
    policy: ReplicationPolicy, topic_filter: TopicFilter, topic: str, target_alias: str
) -> bool:
    """MM2's rule: (passes the filter or is a heartbeats topic) and not internal and not a cycle.

    Heartbeats bypass the filter so that every hop can be traced whatever topics a flow selects.
    """
    return (
        (topic_filter.should_replicate_topic(topic) or policy.is_heartbeats_topic(topic))
        and not policy.is_internal_topic(topic)
        and not is_cycle(policy, topic, target_alias)
    )
