"""Reads one partition's committed records in an offset range with librdkafka, outside Spark: for
the few records the control plane needs (gap checks, heartbeats-only runs)."""

from __future__ import annotations

import hashlib
import itertools
import time
from collections.abc import Generator, Mapping
from contextlib import closing

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from mirrorflow.config.clients import librdkafka_config
from mirrorflow.config.model import ClusterConfig
from mirrorflow.errors import SourceDataLostError, TransientError

_READ_TIMEOUT_S = 60.0


def record_digests(
    cluster: ClusterConfig, topic: str, partition: int, start: int, stop: int, limit: int
) -> list[bytes]:
    """Digests of key, value, headers and timestamp (what the copy keeps) of the committed records
    of a partition from offset ``start`` on, before offset ``stop``, at most ``limit``, oldest first."""
    with closing(read_range(cluster.consumer, cluster.alias, topic, partition, start, stop)) as records:
        return [_digest(m) for m in itertools.islice(records, limit)]


def _digest(m: Message) -> bytes:
    return hashlib.blake2b(repr((m.key(), m.value(), m.headers() or [], m.timestamp()[1])).encode()).digest()


def read_range(
    consumer_props: Mapping[str, str], cluster: str, topic: str, partition: int, start: int, stop: int
) -> Generator[Message, None, None]:
    """The committed records of ``topic``-``partition`` at offsets in ``[start, stop)``, oldest first
    (aborted records and transaction markers are passed, never returned). Records before ``start``
    deleted from the log raise ``SourceDataLostError``; anything else failing is transient."""
    consumer = Consumer(
        {
            **librdkafka_config(consumer_props),
            "group.id": "mirrorflow-range-reader",
            "enable.auto.commit": "false",
            "isolation.level": "read_committed",
            # A start the log no longer holds is lost data, never a reason to move elsewhere.
            "auto.offset.reset": "error",
        }
    )
    tp = TopicPartition(topic, partition, start)
    try:
        consumer.assign([tp])
        deadline = time.monotonic() + _READ_TIMEOUT_S
        # The position is invalid (negative) until the first fetch; it passes aborted records and
        # transaction markers, which consume() never returns.
        while consumer.position([tp])[0].offset < stop:
            if time.monotonic() > deadline:
                raise TransientError(
                    f"reading {topic}-{partition} on cluster {cluster} from offset {start} did not reach "
                    f"offset {stop} in {_READ_TIMEOUT_S:.0f} s"
                )
            # consume() waits for all 1000 or the timeout: short, so that a few records are read quickly.
            for m in consumer.consume(1000, timeout=0.2):
                error = m.error()
                if error is not None and error.code() == KafkaError._AUTO_OFFSET_RESET:
                    raise SourceDataLostError(
                        f"{topic}-{partition} on cluster {cluster} no longer holds offset {start}: "
                        f"{error.str()}"
                    )
                if error is not None:
                    raise KafkaException(error)
                offset = m.offset()
                if offset is not None and offset < stop:
                    yield m
    except KafkaException as exc:
        raise TransientError(f"cannot read {topic}-{partition} on cluster {cluster}: {exc}") from exc
    finally:
        consumer.close()


def read_partition(
    consumer_props: Mapping[str, str], cluster: str, topic: str, partition: int
) -> list[Message]:
    """Every committed record of ``topic``-``partition``, from its log start to its end when called."""
    consumer = Consumer({**librdkafka_config(consumer_props), "group.id": "mirrorflow-range-reader"})
    try:
        low, end = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=_READ_TIMEOUT_S)
    except KafkaException as exc:
        raise TransientError(f"cannot read {topic}-{partition} on cluster {cluster}: {exc}") from exc
    finally:
        consumer.close()
    return list(read_range(consumer_props, cluster, topic, partition, low, end)) if end > low else []
