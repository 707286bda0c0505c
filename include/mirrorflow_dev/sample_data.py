"""Sample records for the demo, the tests and the benchmark, and an exact reader to check copies.

Records are deterministic for a (topic, partition, index): keyed, with repeated and binary headers,
explicit timestamps, and the occasional null key and tombstone, so a copy can be compared record by
record with what was produced.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import cast

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition

from mirrorflow.errors import TransientError

# 2001-09-09T01:46:40Z: far in the past, so copies cannot pass by stamping the send time.
BASE_TIMESTAMP_MS = 1_000_000_000_000


@dataclass(frozen=True)
class Record:
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp: int


def sample_record(topic: str, partition: int, index: int, value_size: int = 64) -> Record:
    seed = hashlib.sha256(f"{topic}/{partition}/{index}".encode()).digest()
    key = None if index % 17 == 5 else f"key-{index % 11}".encode()
    value = None if index % 13 == 7 else (seed * (value_size // len(seed) + 1))[:value_size]
    headers = (("trace", seed[:8]), ("source", b"demo"), ("trace", b"\x00\xff")) if index % 3 else ()
    return Record(key, value, headers, BASE_TIMESTAMP_MS + index * 1000 + partition)


def producer(bootstrap: str, extra: Mapping[str, str] | None = None) -> Producer:
    # Idempotent with one request in flight: otherwise a broker race (KAFKA-15591) can append a new
    # partition's first batches out of order, and the source would not hold what the test wrote.
    return Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": "20",
            "enable.idempotence": "true",
            "max.in.flight.requests.per.connection": "1",
            **(extra or {}),
        }
    )


def produce(p: Producer, topic: str, partition: int, records: Iterable[Record]) -> None:
    for r in records:
        while True:
            try:
                p.produce(
                    topic,
                    value=r.value,
                    key=r.key,
                    partition=partition,
                    timestamp=r.timestamp,
                    headers=list(r.headers) or None,
                )
                break
            except BufferError:
                p.poll(0.1)
    if p.flush(60):
        raise TransientError(f"records to {topic}-{partition} were not all delivered")


def produce_samples(
    bootstrap: str,
    topic: str,
    partitions: int,
    start: int,
    count: int,
    extra: Mapping[str, str] | None = None,
) -> None:
    """Append records ``start .. start+count-1`` of the sample sequence to every partition.
    ``extra``: more librdkafka settings, e.g. a SASL login."""
    p = producer(bootstrap, extra)
    for partition in range(partitions):
        produce(
            p, topic, partition, (sample_record(topic, partition, i) for i in range(start, start + count))
        )


def read_partition(
    bootstrap: str,
    topic: str,
    partition: int,
    read_committed: bool = True,
    timeout: float = 60.0,
    extra: Mapping[str, str] | None = None,
) -> list[Record]:
    """Every record of a partition, from the beginning to its current end, in offset order.
    ``extra``: more librdkafka settings, e.g. a SASL login."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "mirrorflow-reader",
            "enable.auto.commit": "false",
            "isolation.level": "read_committed" if read_committed else "read_uncommitted",
            **(extra or {}),
        }
    )
    try:
        tp = TopicPartition(topic, partition)
        low, end = c.get_watermark_offsets(tp, timeout=30)
        if end <= low:
            return []
        c.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
        out: list[Record] = []
        deadline = time.monotonic() + timeout
        # The position is invalid (negative) until the first fetch; it passes aborted records and
        # transaction markers that consume() never returns. consume() waits out its whole timeout
        # unless it fills its batch, so the timeout is short: a partition's tail is read in 0.1 s.
        while c.position([tp])[0].offset < end:
            if time.monotonic() > deadline:
                raise TransientError(f"reading {topic}-{partition} did not reach offset {end} in {timeout} s")
            for m in c.consume(1000, timeout=0.1):
                if m.error():
                    raise KafkaException(m.error())
                headers = cast("list[tuple[str, bytes | None]]", m.headers() or [])
                out.append(Record(m.key(), m.value(), tuple(headers), m.timestamp()[1]))
        return out
    finally:
        c.close()
