"""MirrorHeartbeat: MM2's heartbeats, arranged as MM2 arranges them, and the flow's freshness.

MM2 runs a heartbeat emitter for every pair of clusters, enabled flow or not: pair X->Y writes
Heartbeat(X, Y, now) to the ``heartbeats`` topic on Y. For a flow A->B this product writes both
of its pair's heartbeats at the start of each run: (A, B) to B, and (B, A) to A. The run then mirrors
A's ``heartbeats`` to ``A.heartbeats`` on B like any topic (heartbeats bypass the topic filter),
and a chain A->B->C carries it on to ``B.A.heartbeats`` on C. Those topic names are what
``MirrorClient.upstreamClusters`` and ``replicationHops`` read to discover the topology.

Freshness of the flow A->B: the age of the newest heartbeat in ``A.heartbeats`` on B, i.e. how long
ago the newest record known to be mirrored was written on the source.
"""

from __future__ import annotations

import time

from mirrorflow.config.model import FlowConfig
from mirrorflow.errors import AuthorizationError, TransientError
from mirrorflow.kafka.connection import READ_COMMITTED, Connection, end_offsets, log_start_offsets
from mirrorflow.kafka.fetched_batches import SourceRecord
from mirrorflow.kafka.internal_topics import InternalTopicWriter, write_records
from mirrorflow.kafka.record_reads import read_records
from mirrorflow.mm2.records import Heartbeat

# The newest heartbeat is read from this many offsets before the last stable offset on (further
# back when they hold no committed record).
_TAIL = 64


def emit_heartbeats(
    flow: FlowConfig, now_ms: int | None = None, writer: InternalTopicWriter | None = None
) -> None:
    """Write this run's two heartbeats (nothing when emit.heartbeats.enabled is false)."""
    if not flow.emit_heartbeats:
        return
    now = int(time.time() * 1000) if now_ms is None else now_ms
    topic = flow.replication_policy.heartbeats_topic()
    rf = flow.heartbeats_topic_replication_factor
    for cluster, beat in (
        (flow.target, Heartbeat(flow.source.alias, flow.target.alias, now)),
        (flow.source, Heartbeat(flow.target.alias, flow.source.alias, now)),
    ):
        write_records(cluster, topic, rf, [(beat.key(), beat.value())], writer)


def freshness_seconds(flow: FlowConfig, now_ms: int | None = None) -> float | None:
    """Age of the newest mirrored heartbeat on the target; None when none was mirrored yet."""
    with HeartbeatAges(flow) as ages:
        return ages.newest(now_ms)


class HeartbeatAges:
    """Reads the age of the newest heartbeat mirrored to ``flow``'s target, as often as asked, over one
    connection kept open (a new one per read costs its connections and metadata every time: a DR
    window reads the age every heartbeat interval)."""

    def __init__(self, flow: FlowConfig) -> None:
        self._flow = flow
        self._remote = flow.replication_policy.format_remote_topic(
            flow.source.alias, flow.replication_policy.heartbeats_topic()
        )
        self._connection: Connection | None = None

    def __enter__(self) -> HeartbeatAges:
        return self

    def __exit__(self, *_: object) -> None:
        if self._connection is not None:
            self._connection.close()

    def newest(self, now_ms: int | None = None) -> float | None:
        """Age of the newest mirrored heartbeat now; None when none was mirrored yet."""
        try:
            beat = self._newest_record()
        except AuthorizationError as exc:
            raise TransientError(str(exc)) from exc
        if beat is None:
            return None
        now = int(time.time() * 1000) if now_ms is None else now_ms
        return max(0.0, (now - Heartbeat.decode(beat.key or b"", beat.value or b"").timestamp) / 1000)

    def _newest_record(self) -> SourceRecord | None:
        """The last committed record of the remote heartbeats partition, read below its last stable
        offset: the markers of the copy's transactions (after a failed attempt its aborted records
        too) lie between it and the end, and an open transaction's records past that offset."""
        flow, tp = self._flow, (self._remote, 0)
        if self._connection is None:
            self._connection = Connection(flow.target.consumer, flow.target.alias, ())
        connection = self._connection
        if not connection.has_topic(self._remote):
            return None  # not created yet: nothing mirrored
        stable = end_offsets(connection, [tp], READ_COMMITTED)[tp]
        low = log_start_offsets(connection, [tp])[tp]
        tail = _TAIL
        while True:
            start = max(low, stable - tail)
            records = read_records(connection, tp, start, stable, READ_COMMITTED, stable - start)
            if records or start == low:
                return records[-1] if records else None
            tail *= 8
