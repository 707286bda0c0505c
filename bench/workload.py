"""Workload W1 for bench/run.py: generate it on the source, fingerprint partitions, watch end offsets.

W1: 2 topics x 6 partitions, N records in total (round-robin over topics and partitions), 16-byte
random keys, 1 KiB random values, 2 headers, explicit timestamps. Random bytes come from os.urandom in
big chunks that are sliced per record, so generating is bound by the producer, not by Python.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import struct
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import cast

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

PARTITIONS = 6
KEY_SIZE = 16
VALUE_SIZE = 1024
HEADERS = 2
BASE_TIMESTAMP_MS = 1_000_000_000_000  # 2001: a copy cannot pass by stamping the send time
_CHUNK_RECORDS = 8192

# Producer settings shared by every writer in the bench (ours, MM2, ProducerPerformance).
PRODUCER_TUNING = {"acks": "all", "linger.ms": "20", "batch.size": "1000000", "compression.type": "none"}


@dataclass(frozen=True)
class PartitionDigest:
    records: int
    sha256: str


def create_topics(bootstrap: str, topics: Sequence[str], partitions: int = PARTITIONS) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(t, partitions, 1) for t in topics], operation_timeout=30)
    for f in futures.values():
        f.result(timeout=60)
    deadline = time.monotonic() + 30
    while True:  # metadata can lag creation by a moment
        md = admin.list_topics(timeout=10)
        if all(t in md.topics and len(md.topics[t].partitions) == partitions for t in topics):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"topics {list(topics)} did not show up in metadata")
        time.sleep(0.2)


def produce_w1(bootstrap: str, topics: Sequence[str], records: int) -> float:
    """Append ``records`` W1 records round-robin over ``topics`` x partitions; returns records/s."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": "true",
            "queue.buffering.max.kbytes": "262144",
            "queue.buffering.max.messages": "500000",
            **PRODUCER_TUNING,
        }
    )
    record_bytes = KEY_SIZE + VALUE_SIZE
    chunk = b""
    start = time.monotonic()
    n_topics = len(topics)
    for i in range(records):
        j = i % _CHUNK_RECORDS
        if j == 0:
            chunk = os.urandom(_CHUNK_RECORDS * record_bytes)
        base = j * record_bytes
        slot = i // n_topics
        while True:
            try:
                producer.produce(
                    topics[i % n_topics],
                    key=chunk[base : base + KEY_SIZE],
                    value=chunk[base + KEY_SIZE : base + record_bytes],
                    partition=slot % PARTITIONS,
                    timestamp=BASE_TIMESTAMP_MS + i,
                    headers=[("seq", i.to_bytes(8, "big")), ("origin", b"bench-w1")],
                )
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(300):
        raise RuntimeError("W1 records were not all delivered")
    return records / (time.monotonic() - start)


def end_offsets(
    bootstrap: str, topics: Sequence[str], partitions: int = PARTITIONS
) -> dict[tuple[str, int], int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-offsets"})
    try:
        return {
            (t, p): consumer.get_watermark_offsets(TopicPartition(t, p), timeout=30, cached=False)[1]
            for t in topics
            for p in range(partitions)
        }
    finally:
        consumer.close()


def fingerprint(
    bootstrap: str, topics: Sequence[str], partitions: int = PARTITIONS, timeout: float = 600.0
) -> dict[tuple[str, int], PartitionDigest]:
    """Per partition: record count and an order-sensitive sha256 over key|value|headers|timestamp."""
    ends = end_offsets(bootstrap, topics, partitions)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-verify",
            "enable.auto.commit": "false",
            "fetch.max.bytes": "104857600",
            "max.partition.fetch.bytes": "10485760",
        }
    )
    hashes = {tp: hashlib.sha256() for tp in ends}
    counts = dict.fromkeys(ends, 0)
    todo = {tp for tp, end in ends.items() if end > 0}
    pack = struct.Struct(">iiiq").pack
    try:
        consumer.assign([TopicPartition(t, p, OFFSET_BEGINNING) for (t, p) in todo])
        deadline = time.monotonic() + timeout
        while todo:
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"fingerprint: partitions {sorted(todo)} not read to the end in {timeout} s"
                )
            for m in consumer.consume(5000, timeout=1):
                if m.error():
                    raise KafkaException(m.error())
                tp = (str(m.topic()), int(m.partition() or 0))
                key, value = _as_bytes(m.key()), _as_bytes(m.value())
                headers = cast("list[tuple[str, bytes | None]]", m.headers() or [])
                h = hashes[tp]
                h.update(pack(len(key), len(value), len(headers), m.timestamp()[1]))
                h.update(key)
                h.update(value)
                for hk, hv in headers:
                    hkb, hvb = hk.encode(), _as_bytes(hv)
                    h.update(pack(len(hkb), len(hvb), 0, 0))
                    h.update(hkb)
                    h.update(hvb)
                counts[tp] += 1
                if (m.offset() or 0) + 1 >= ends[tp]:
                    todo.discard(tp)
    finally:
        consumer.close()
    return {tp: PartitionDigest(counts[tp], hashes[tp].hexdigest()) for tp in ends}


def _as_bytes(data: str | bytes | None) -> bytes:
    if data is None:
        return b""
    return data.encode() if isinstance(data, str) else data


def compare(
    source: dict[tuple[str, int], PartitionDigest],
    target: dict[tuple[str, int], PartitionDigest],
    remote: dict[str, str],
) -> list[str]:
    """Differences between source partitions and their remote partitions (empty list: exact copy)."""
    problems = []
    for (topic, p), want in sorted(source.items()):
        got = target.get((remote[topic], p))
        if got is None:
            problems.append(f"{remote[topic]}-{p}: missing")
        elif got.records != want.records:
            problems.append(f"{remote[topic]}-{p}: {got.records} records, source has {want.records}")
        elif got.sha256 != want.sha256:
            problems.append(f"{remote[topic]}-{p}: checksum differs ({want.records} records)")
    return problems


@dataclass
class OffsetWatcher:
    """Samples the summed end offsets of topics every ``interval`` s in a thread (0 while missing)."""

    bootstrap: str
    topics: Sequence[str]
    interval: float = 0.5
    partitions: int = PARTITIONS
    samples: list[tuple[float, int]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> OffsetWatcher:
        self._thread = threading.Thread(target=self._run, name="offset-watcher", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)

    def latest(self) -> int:
        return self.samples[-1][1] if self.samples else 0

    def _total(self, consumer: Consumer) -> int:
        md = consumer.list_topics(timeout=5)
        total = 0
        for t in self.topics:
            meta = md.topics.get(t)
            if meta is None or meta.error is not None:
                continue
            for p in meta.partitions:
                total += consumer.get_watermark_offsets(TopicPartition(t, p), timeout=5, cached=False)[1]
        return total

    def _run(self) -> None:
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "bench-watch"})
        try:
            while not self._stop.is_set():
                t0 = time.monotonic()
                with contextlib.suppress(KafkaException):
                    self.samples.append((t0, self._total(consumer)))
                self._stop.wait(max(0.0, self.interval - (time.monotonic() - t0)))
        finally:
            consumer.close()

    def wait_for(self, total: int, timeout: float, alive: threading.Event | None = None) -> float | None:
        """Monotonic time of the first sample reaching ``total``; None on timeout."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for t, n in self.samples:
                if n >= total:
                    return t
            if alive is not None and not alive.is_set():
                return None
            time.sleep(0.1)
        return None


def crossing(samples: Sequence[tuple[float, int]], level: float) -> float | None:
    """Time at which the sampled count reaches ``level``, linearly interpolated between samples."""
    prev: tuple[float, int] | None = None
    for t, n in samples:
        if n >= level:
            if prev is None or n == prev[1]:
                return t
            t0, n0 = prev
            return t0 + (t - t0) * (level - n0) / (n - n0)
        prev = (t, n)
    return None


def steady_rate(samples: Sequence[tuple[float, int]], total: int) -> float | None:
    """Records/s between 10% and 90% of ``total`` (None if the samples do not span that range)."""
    t10, t90 = crossing(samples, 0.1 * total), crossing(samples, 0.9 * total)
    if t10 is None or t90 is None or t90 <= t10:
        return None
    return 0.8 * total / (t90 - t10)
