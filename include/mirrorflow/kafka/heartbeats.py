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

from confluent_kafka import Consumer, KafkaException, TopicPartition

from mirrorflow.config.clients import librdkafka_config
from mirrorflow.config.model import FlowConfig
from mirrorflow.errors import TransientError
from mirrorflow.kafka.internal_topics import InternalTopicWriter, write_records
from mirrorflow.mm2.records import Heartbeat

_TIMEOUT_S = 30.0
# The newest heartbeat is read from this many offsets before the end on: the end holds the markers
# of the copy's transactions, after a failed attempt its aborted records too.
_TAIL = 64
# Once a record came, how long to wait for a later one before taking it for the last.
_MORE_S = 0.2


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


def _last_record(consumer: Consumer, where: str) -> tuple[bytes, bytes]:
    """Key and value of the last committed record of the assigned partition from its assigned
    offset on: the copy's transaction markers (and its aborted attempts' records) follow the newest
    heartbeat, and a committed read skips them. Errors in between are skipped until the deadline: a
    login without group ACLs gets its group coordinator refused, which an assigned read does not
    need."""
    deadline = time.monotonic() + _TIMEOUT_S
    error, last = None, None
    while (left := deadline - time.monotonic()) > 0:
        msg = consumer.poll(min(left, _MORE_S) if last is not None else left)
        if msg is None and last is not None:
            return last  # nothing more came: the end
        if msg is not None and msg.error() is None:
            last = (msg.key() or b"", msg.value() or b"")
        elif msg is not None:
            error = msg.error()
    raise TransientError(f"cannot read the newest heartbeat of {where}: {error or 'timed out'}")


def freshness_seconds(flow: FlowConfig, now_ms: int | None = None) -> float | None:
    """Age of the newest mirrored heartbeat on the target; None when none was mirrored yet."""
    with HeartbeatAges(flow) as ages:
        return ages.newest(now_ms)


class HeartbeatAges:
    """Reads the age of the newest heartbeat mirrored to ``flow``'s target, as often as asked, over one
    consumer kept open (a new one per read costs its connections and metadata every time: a DR
    window reads the age every heartbeat interval)."""

    def __init__(self, flow: FlowConfig) -> None:
        self._flow = flow
        self._remote = flow.replication_policy.format_remote_topic(
            flow.source.alias, flow.replication_policy.heartbeats_topic()
        )
        self._consumer = Consumer(
            {
                **librdkafka_config(flow.target.consumer),
                "group.id": "mirrorflow-freshness",
                "enable.auto.commit": False,
                # A read is one record at the end: answer at once (librdkafka's default waits up to
                # 500 ms for more, on every read of a consumer kept open).
                "fetch.wait.max.ms": 10,
            }
        )

    def __enter__(self) -> HeartbeatAges:
        return self

    def __exit__(self, *_: object) -> None:
        self._consumer.close()

    def newest(self, now_ms: int | None = None) -> float | None:
        """Age of the newest mirrored heartbeat now; None when none was mirrored yet."""
        remote, consumer, target = self._remote, self._consumer, self._flow.target.alias
        try:
            tp = TopicPartition(remote, 0)
            found = consumer.list_topics(remote, timeout=_TIMEOUT_S).topics.get(remote)
            if found is None or found.error is not None:
                return None
            low, high = consumer.get_watermark_offsets(tp, timeout=_TIMEOUT_S, cached=False)
            if high <= low:
                return None
            consumer.assign([TopicPartition(remote, 0, max(low, high - _TAIL))])
            beat = Heartbeat.decode(*_last_record(consumer, f"{remote} on {target}"))
        except KafkaException as exc:
            raise TransientError(f"cannot read {remote} on {target}: {exc}") from exc
        now = int(time.time() * 1000) if now_ms is None else now_ms
        return max(0.0, (now - beat.timestamp) / 1000)
