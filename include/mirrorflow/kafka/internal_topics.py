"""Writing MM2's internal topics (checkpoints, heartbeats, offset syncs): single-partition,
compacted, created on first use with the configured replication factor.

Records go to partition 0 in the given order with an idempotent producer; any record not
acknowledged fails the step (``TransientError``: writing again is harmless, readers keep the
newest record per key). An ``InternalTopicWriter`` keeps one producer per cluster open across
writes: a DR window writes a heartbeat every second and offset syncs every micro-batch, and a new
producer costs about 0.1 s each time.
"""

from __future__ import annotations

from collections.abc import Sequence

from confluent_kafka import KafkaException, Message, Producer

from mirrorflow.config.clients import librdkafka_config
from mirrorflow.config.model import ClusterConfig
from mirrorflow.errors import TransientError
from mirrorflow.kafka.admin import ClusterAdmin, NewTopic

_CONFIGS = {"cleanup.policy": "compact"}
_TIMEOUT_S = 60.0


class _ClusterProducer:
    """One cluster's idempotent producer, the internal topics known to exist there, and the
    delivery errors of the write in progress."""

    def __init__(self, cluster: ClusterConfig) -> None:
        errors: list[str] = []

        # A closure over the list, not a bound method: the producer holding this object would be a
        # reference cycle, and the producer (its threads and connections) would outlive its use
        # until the garbage collector ran.
        def delivered(err: object, _msg: Message) -> None:
            if err is not None:
                errors.append(str(err))

        self.errors = errors
        self.topics: set[str] = set()
        self.producer = Producer(
            {
                **librdkafka_config(cluster.producer),
                "enable.idempotence": True,
                "acks": "all",
                "on_delivery": delivered,
            }
        )


class InternalTopicWriter:
    """Writes records to internal topics, one open producer per cluster until ``close``."""

    def __init__(self) -> None:
        self._producers: dict[str, _ClusterProducer] = {}

    def __enter__(self) -> InternalTopicWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for p in self._producers.values():
            p.producer.flush(_TIMEOUT_S)
        self._producers.clear()

    def open(self, cluster: ClusterConfig, topic: str, replication_factor: int) -> None:
        """Make ``cluster``'s producer ready to write ``topic`` now (the topic made if it does not
        exist), so that the first write pays nothing more than a write."""
        try:
            self._ready(cluster, topic, replication_factor)
        except KafkaException as exc:
            raise self._dropped(cluster, topic, exc) from exc

    def _dropped(self, cluster: ClusterConfig, topic: str, exc: KafkaException) -> TransientError:
        """A producer that failed is dropped: the next write makes a fresh one."""
        self._producers.pop(cluster.alias, None)
        return TransientError(f"cannot write to {topic} on cluster {cluster.alias}: {exc}")

    def _ready(self, cluster: ClusterConfig, topic: str, replication_factor: int) -> _ClusterProducer:
        p = self._producers.get(cluster.alias)
        if p is None:
            p = self._producers[cluster.alias] = _ClusterProducer(cluster)
        if topic not in p.topics:
            # Listing the cluster's topics also gets the idempotent producer its id now: left
            # alone, its first send waits about 0.5 s for it. Listing all topics never
            # auto-creates one.
            if topic not in p.producer.list_topics(timeout=_TIMEOUT_S).topics:
                with ClusterAdmin(cluster) as admin:
                    admin.create_topics({topic: NewTopic(1, replication_factor, _CONFIGS)})
            p.topics.add(topic)
        return p

    def write(
        self,
        cluster: ClusterConfig,
        topic: str,
        replication_factor: int,
        records: Sequence[tuple[bytes, bytes]],
    ) -> None:
        """Append (key, value) records to partition 0 of ``topic`` on ``cluster``."""
        try:
            p = self._ready(cluster, topic, replication_factor)
            p.errors.clear()
            for key, value in records:
                p.producer.produce(topic, key=key, value=value, partition=0)
            remaining = p.producer.flush(_TIMEOUT_S)
        except KafkaException as exc:
            raise self._dropped(cluster, topic, exc) from exc
        if remaining or p.errors:
            self._producers.pop(cluster.alias, None)  # a fresh producer for the next write
            raise TransientError(
                f"{remaining} records to {topic} on cluster {cluster.alias} undelivered, "
                f"errors: {p.errors[:3]}"
            )


def write_records(
    cluster: ClusterConfig,
    topic: str,
    replication_factor: int,
    records: Sequence[tuple[bytes, bytes]],
    writer: InternalTopicWriter | None = None,
) -> None:
    """Append (key, value) records to partition 0 of ``topic`` on ``cluster``, with ``writer``'s
    producer or with one made for this write."""
    if writer is not None:
        writer.write(cluster, topic, replication_factor, records)
        return
    with InternalTopicWriter() as once:
        once.write(cluster, topic, replication_factor, records)
