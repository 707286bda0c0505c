"""Topic selection and remote topic creation for one flow (MirrorMaker 2's rules).

Invariants: a remote topic exists with at least the source's partition count before any record is
planned for it; it is created with the source's non-default configs minus ``config.properties.exclude``;
with ``sync.topic.configs.enabled`` (default true) each run brings existing remote topics' configs in
line (MM2's incremental sync: SET what the source sets, revert what the source leaves at its default,
never touch excluded keys); nothing on the target is ever deleted or shrunk.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from mirrorflow.config.model import FlowConfig
from mirrorflow.core.topic_partitions import TP
from mirrorflow.kafka.admin import ClusterAdmin, NewTopic, TopicDescription


@dataclass(frozen=True)
class RemoteTopics:
    """The flow's selected source topics with their partition counts, ids (where the source has
    topic ids) and remote names, and what the target needs to match them: remote topics to create,
    to grow to the source's partition count, and configs to change."""

    partitions: Mapping[str, int]
    topic_ids: Mapping[str, str]
    remote_names: Mapping[str, str]
    created: Mapping[str, NewTopic]
    grown: Mapping[str, tuple[int, int]]
    reconfigured: Mapping[str, Mapping[str, str | None]]

    def absent_partitions(self) -> frozenset[TP]:
        """Remote partitions that do not exist until the changes are made."""
        created = {(r, p) for r, new in self.created.items() for p in range(new.partitions)}
        grown = {(r, p) for r, (old, new) in self.grown.items() for p in range(old, new)}
        return frozenset(created | grown)


def select_topics(
    flow: FlowConfig, source: ClusterAdmin, only: frozenset[str] = frozenset()
) -> dict[str, TopicDescription]:
    """The source topics the flow selects; with ``only``, just those of them."""
    selected = [t for t in source.topics() if flow.should_replicate_topic(t) and (not only or t in only)]
    return source.describe_topics(selected)


def synced_configs(flow: FlowConfig, configs: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in configs.items() if not _excluded(flow, k)}


def _excluded(flow: FlowConfig, key: str) -> bool:
    return any(re.fullmatch(p, key) for p in flow.config_properties_exclude)


def config_changes(
    flow: FlowConfig, source: Mapping[str, str], remote: Mapping[str, str]
) -> dict[str, str | None]:
    """What makes the remote topic's own configs match the source's: a value to SET, or ``None`` to
    revert a key the remote sets but the source leaves at its default. Excluded keys never change."""
    changes: dict[str, str | None] = {
        k: v for k, v in synced_configs(flow, source).items() if remote.get(k) != v
    }
    changes.update({k: None for k in remote if k not in source and not _excluded(flow, k)})
    return changes


def remote_topic_changes(
    flow: FlowConfig, source: ClusterAdmin, target: ClusterAdmin, only: frozenset[str] = frozenset()
) -> RemoteTopics:
    """What the target needs for the selected topics (``only``: just those), without changing it."""
    selected = select_topics(flow, source, only)
    partitions = {t: d.partitions for t, d in selected.items()}
    remote = {t: flow.replication_policy.format_remote_topic(flow.source.alias, t) for t in partitions}
    existing = {
        t: d.partitions for t, d in target.describe_topics(set(remote.values()) & target.topics()).items()
    }
    missing = sorted(t for t in partitions if remote[t] not in existing)
    kept = sorted(t for t in partitions if remote[t] in existing) if flow.sync_topic_configs else []
    configs = source.topic_configs([*missing, *kept])
    remote_configs = target.topic_configs(remote[t] for t in kept)
    return RemoteTopics(
        partitions=partitions,
        topic_ids={t: d.topic_id for t, d in selected.items() if d.topic_id is not None},
        remote_names=remote,
        created={
            remote[t]: NewTopic(
                partitions[t], flow.replication_factor, synced_configs(flow, configs.get(t, {}))
            )
            for t in missing
        },
        grown={
            remote[t]: (existing[remote[t]], n)
            for t, n in partitions.items()
            if remote[t] in existing and existing[remote[t]] < n
        },
        reconfigured={
            remote[t]: c
            for t in kept
            if (c := config_changes(flow, configs.get(t, {}), remote_configs.get(remote[t], {})))
        },
    )


def ensure_remote_topics(
    flow: FlowConfig, source: ClusterAdmin, target: ClusterAdmin, only: frozenset[str] = frozenset()
) -> RemoteTopics:
    """Make the target match the selected topics (``only``: just those); returns what it changed."""
    topics = remote_topic_changes(flow, source, target, only)
    target.create_topics(topics.created)
    for remote, (_, count) in topics.grown.items():
        target.add_partitions(remote, count)
    target.alter_topic_configs(topics.reconfigured)
    return topics
