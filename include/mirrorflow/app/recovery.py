"""The live half of a flow's recovery point (``core.recovery``): whether the source holds anything
past the flow's committed progress right now. The status page asks it with a bounded wait; a
source that does not answer leaves the recovery point at its stored bound, never at 0."""

from __future__ import annotations

from collections.abc import Mapping

from mirrorflow.config.model import FlowConfig
from mirrorflow.core.topic_partitions import TP
from mirrorflow.kafka.admin import ClusterAdmin

__all__ = ["caught_up_now"]


def caught_up_now(flow: FlowConfig, committed: Mapping[TP, int]) -> bool:
    """Whether every partition of the topics ``flow`` selects on its source ends (last stable
    offset, as plans read it) at its ``committed`` next source offset, or is empty and never
    mirrored."""
    with ClusterAdmin(flow.source) as source:
        topics = [t for t in source.topics() if flow.should_replicate_topic(t)]
        tps = [(t, p) for t, d in source.describe_topics(topics).items() for p in range(d.partitions)]
        ends = source.latest_offsets(tps)
        starts = source.earliest_offsets([tp for tp in tps if tp not in committed])
    return all(ends[tp] <= committed.get(tp, starts.get(tp, 0)) for tp in tps)
