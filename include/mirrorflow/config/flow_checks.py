"""Checks across a config's enabled flows, made when it loads (``config.model``): what no flow is
wrong alone but two together are. Each refusal names both flows (or the flow and the key) and the fix.

Invariants: no two flows share an Airflow DAG id; identity naming never runs a flow each way between
two clusters; no two flows into one cluster write one remote topic that a flow names as it is; a
flow asking for reverse checkpoints has its opposite flow enabled and its own checkpoints on.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from mirrorflow.config.keys import REVERSE_CHECKPOINTS
from mirrorflow.config.property_view import PropertyView
from mirrorflow.errors import ConfigError
from mirrorflow.mm2.policy import CLASS_CONFIG, IdentityReplicationPolicy

if TYPE_CHECKING:  # the model imports this module to check what it built
    from mirrorflow.config.model import FlowConfig


def check_flows(flows: Sequence[FlowConfig]) -> None:
    """Every check across ``flows``; the first that fails raises its ``ConfigError``."""
    _dag_ids(flows)
    _identity_pairs(flows)
    _shared_remote_topics(flows)
    _reverse_checkpoints(flows)


def _dag_ids(flows: Sequence[FlowConfig]) -> None:
    """No two flows may share a DAG id: not their run DAGs, nor one's cutover or failover DAG and
    another's (a target alias ending in ``_failover`` could otherwise make one)."""
    seen: dict[str, str] = {}
    for flow in flows:
        for dag_id in flow.dag_ids:
            if dag_id in seen:
                raise ConfigError(
                    f"flows {seen[dag_id]} and {flow.name} would both be Airflow DAG {dag_id}; "
                    "rename one of the aliases",
                    key="clusters",
                )
            seen[dag_id] = flow.name


def _identity_pairs(flows: Sequence[FlowConfig]) -> None:
    """Identity naming keeps no provenance in topic names, so with a flow in each direction between
    two clusters each would mirror the other's copies back: refused, naming both flows."""
    for i, flow in enumerate(flows):
        for back in flows[i + 1 :]:
            if (back.source.alias, back.target.alias) != (flow.target.alias, flow.source.alias):
                continue
            identity = [
                f for f in (flow, back) if isinstance(f.replication_policy, IdentityReplicationPolicy)
            ]
            if identity:
                key = _written(identity[0], CLASS_CONFIG)
                raise ConfigError(
                    f"flows {flow.name} and {back.name} are both enabled, and "
                    f"{' and '.join(f.name for f in identity)} use IdentityReplicationPolicy: remote topics "
                    "keep their names, so each flow would mirror the other's copies back in a loop. Disable "
                    "one direction, or use DefaultReplicationPolicy for active/active",
                    key=key,
                )


# A topic name, not a pattern: what ``topics`` lists when it names topics one by one.
_TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]+")


def _shared_remote_topics(flows: Sequence[FlowConfig]) -> None:
    """Two flows into one cluster never write one remote topic: each would take the other's records
    for a foreign writer's and stop (with IdentityReplicationPolicy, a topic of the same name on both
    sources, or one source's topic named as the other's remote topic). A topic a flow's ``topics``
    names as it is (not a pattern) whose remote topic another flow into the same cluster would also
    write (its filter selects the topic it would name so) is refused, naming both flows. Topics only
    patterns select are the sources' to show: ``check-config`` lists what each flow would mirror."""
    for flow in flows:
        for other in flows:
            if other is flow or other.target.alias != flow.target.alias:
                continue
            for topic in flow.topics:
                if not _TOPIC_NAME.fullmatch(topic) or not flow.should_replicate_topic(topic):
                    continue
                remote = flow.replication_policy.format_remote_topic(flow.source.alias, topic)
                policy = other.replication_policy
                for upstream in {remote, policy.upstream_topic(remote) or remote}:
                    if policy.format_remote_topic(
                        other.source.alias, upstream
                    ) == remote and other.should_replicate_topic(upstream):
                        raise ConfigError(
                            f"flows {flow.name} and {other.name} would both write topic {remote} on "
                            f"cluster {flow.target.alias} (from {flow.source.alias}'s {topic} and "
                            f"{other.source.alias}'s {upstream}): each would stop at the other's records "
                            f"as someone else's. Exclude the topic from one of them "
                            f"(`{other.name}.topics.exclude`), or use DefaultReplicationPolicy, whose remote "
                            "topics carry their source's alias",
                            key=_written(flow, "topics"),
                        )


def _reverse_checkpoints(flows: Sequence[FlowConfig]) -> None:
    """Reverse checkpoints translate through the opposite flow's batch log, and are checkpoints:
    a flow asking for them needs its opposite flow enabled and its own checkpoints on."""
    names = {flow.name for flow in flows}
    for flow in flows:
        if not flow.settings.reverse_checkpoints:
            continue
        key = _written(flow, REVERSE_CHECKPOINTS)
        if flow.opposite not in names:
            raise ConfigError(
                f"flow {flow.name} asks for reverse checkpoints, but flow {flow.opposite} is not enabled: "
                f"they translate positions on {flow.opposite}'s remote topics through its batch log. Enable "
                f"{flow.opposite} (`{flow.opposite}.enabled = true`) or turn the key off",
                key=key,
            )
        if not flow.emit_checkpoints:
            raise ConfigError(
                f"flow {flow.name} asks for reverse checkpoints but has emit.checkpoints.enabled = false; "
                "reverse checkpoints are written by the checkpoint task: turn one of the two keys around",
                key=key,
            )


def _written(flow: FlowConfig, key: str) -> str:
    """``key`` of ``flow`` as the config file wrote it (with its flow prefix where it had one)."""
    props = flow.properties
    return props.written_as(key) if isinstance(props, PropertyView) else key
