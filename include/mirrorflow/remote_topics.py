"""Topic selection and remote topic creation for one flow (MirrorMaker 2's rules).

Invariants: a remote topic exists with at least the source's partition count before any record is
planned for it; it is created with the source's non-default configs minus ``config.properties.exclude``;
nothing on the target is ever deleted or shrunk.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from mirrorflow.cluster_admin import ClusterAdmin, NewTopic
from mirrorflow.config import FlowConfig


@dataclass(frozen=True)
class RemoteTopics:
    """The flow's selected source topics with their partition counts and remote names."""

    partitions: Mapping[str, int]
    remote_names: Mapping[str, str]
    created: tuple[str, ...]


def select_topics(flow: FlowConfig, source: ClusterAdmin) -> dict[str, int]:
    selected = [t for t in source.topics() if flow.should_replicate_topic(t)]
    return source.partition_counts(selected)


def synced_configs(flow: FlowConfig, configs: Mapping[str, str]) -> dict[str, str]:
    excluded = [re.compile(p) for p in flow.config_properties_exclude]
    return {k: v for k, v in configs.items() if not any(p.fullmatch(k) for p in excluded)}


def ensure_remote_topics(flow: FlowConfig, source: ClusterAdmin, target: ClusterAdmin) -> RemoteTopics:
    partitions = select_topics(flow, source)
    remote = {t: flow.replication_policy.format_remote_topic(flow.source.alias, t) for t in partitions}
    existing = target.partition_counts(set(remote.values()) & target.topics())
    missing = sorted(t for t in partitions if remote[t] not in existing)
    configs = source.topic_configs(missing)
    target.create_topics(
        {
            remote[t]: NewTopic(
                partitions[t], flow.replication_factor, synced_configs(flow, configs.get(t, {}))
            )
            for t in missing
        }
    )
    for topic, count in partitions.items():
        if remote[topic] in existing and existing[remote[topic]] < count:
            target.add_partitions(remote[topic], count)
    return RemoteTopics(partitions, remote, tuple(remote[t] for t in missing))
