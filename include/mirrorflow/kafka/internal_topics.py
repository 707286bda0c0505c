"""Writing MM2's internal topics (checkpoints, heartbeats, offset syncs): single-partition,
compacted, created on first use with the configured replication factor.

Records go to partition 0 in the given order with an idempotent producer; any record not
acknowledged fails the step (``TransientError``: writing again is harmless, readers keep the
newest record per key).
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


def write_records(
    cluster: ClusterConfig, topic: str, replication_factor: int, records: Sequence[tuple[bytes, bytes]]
) -> None:
    """Append (key, value) records to partition 0 of ``topic`` on ``cluster``."""
    errors: list[str] = []

    def on_delivery(err: object, _msg: Message) -> None:
        if err is not None:
            errors.append(str(err))

    producer = Producer(
        {
            **librdkafka_config(cluster.producer),
            "enable.idempotence": True,
            "acks": "all",
            "on_delivery": on_delivery,
        }
    )
    try:
        # Listing the cluster's topics also gets the idempotent producer its id now: left alone,
        # its first send waits about 0.5 s for it. Listing all topics never auto-creates one.
        if topic not in producer.list_topics(timeout=_TIMEOUT_S).topics:
            with ClusterAdmin(cluster) as admin:
                admin.create_topics({topic: NewTopic(1, replication_factor, _CONFIGS)})
        for key, value in records:
            producer.produce(topic, key=key, value=value, partition=0)
        remaining = producer.flush(_TIMEOUT_S)
    except KafkaException as exc:
        raise TransientError(f"cannot write to {topic} on cluster {cluster.alias}: {exc}") from exc
    if remaining or errors:
        raise TransientError(
            f"{remaining} records to {topic} on cluster {cluster.alias} undelivered, errors: {errors[:3]}"
        )
