"""MM2's offset-syncs topic, written from the batch log after each commit.

For a flow A->B the topic is ``mm2-offset-syncs.B.internal`` on A (``offset-syncs.topic.location =
source``, MM2's default) or ``mm2-offset-syncs.A.internal`` on B (``target``): MM2 names it after
the cluster it is not on. Each committed batch contributes one OffsetSync per run of consecutive
source offsets (``offset_sync.offset_syncs``), so MM2's own checkpointing, if pointed at these
clusters, never skips a record either. This product's checkpoints use the exact batch log instead.
"""

from __future__ import annotations

from collections.abc import Sequence

from mirrorflow.config.model import ClusterConfig, FlowConfig
from mirrorflow.core.progress import Batch
from mirrorflow.core.translation import offset_syncs
from mirrorflow.kafka.internal_topics import InternalTopicWriter, write_records


def emit_offset_syncs(
    flow: FlowConfig, batches: Sequence[Batch], writer: InternalTopicWriter | None = None
) -> int:
    """Write the offset syncs of ``batches``; returns how many (none when emit.offset-syncs.enabled
    is false)."""
    syncs = [s for b in batches for s in offset_syncs(b)] if flow.emit_offset_syncs else []
    if not syncs:
        return 0
    cluster, topic = _offset_syncs_topic(flow)
    write_records(
        cluster,
        topic,
        flow.offset_syncs_topic_replication_factor,
        [(s.key(), s.value()) for s in syncs],
        writer,
    )
    return len(syncs)


def open_offset_syncs(flow: FlowConfig, writer: InternalTopicWriter) -> None:
    """Make ``writer`` ready to write the flow's offset syncs (nothing when emit.offset-syncs.enabled
    is false)."""
    if flow.emit_offset_syncs:
        cluster, topic = _offset_syncs_topic(flow)
        writer.open(cluster, topic, flow.offset_syncs_topic_replication_factor)


def _offset_syncs_topic(flow: FlowConfig) -> tuple[ClusterConfig, str]:
    """The cluster and topic the flow's offset syncs go to (``offset-syncs.topic.location``)."""
    on_source = flow.offset_syncs_topic_location == "source"
    cluster, other = (flow.source, flow.target) if on_source else (flow.target, flow.source)
    return cluster, flow.replication_policy.offset_syncs_topic(other.alias)
