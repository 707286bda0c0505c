"""Workloads W1-W3 and W1A for bench/run.py: generate one on the source, fingerprint partitions,
watch end offsets.

Every workload: 2 topics x 6 partitions, N records in total (round-robin over topics and partitions),
random keys, 2 headers, explicit timestamps; the workloads differ in value size, value content and
compression (``WORKLOADS``). W1A is W1 in Avro: each value in Confluent's wire format (magic byte,
the id its topic's value subject has in the source registry) around an Avro record of one ``bytes``
field, 1 KiB in all. Random bytes come from os.urandom in big chunks that are sliced per record,
so generating is bound by the producer, not by Python.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import struct
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import cast

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from mirrorflow.core.schema_ids import schema_id, with_schema_id

PARTITIONS = 6
HEADERS = 2
BASE_TIMESTAMP_MS = 1_000_000_000_000  # 2001: a copy cannot pass by stamping the send time
_CHUNK_RECORDS = 8192
# Fills the non-random tail of compressible values: repeats within a value and across records.
_PATTERN = b"mirrorflow-bench"
# A W1A value's bytes before its random ones: the wire format's 5, and the field's 2-byte length.
AVRO_HEADER_BYTES = 7

# Producer tuning shared by every writer in the bench (source, ours, MM2, ProducerPerformance, the
# librdkafka limit writer); each workload adds its compression.type.
PRODUCER_TUNING = {"acks": "all", "linger.ms": "20", "batch.size": "1000000"}


@dataclass(frozen=True)
class Workload:
    """The records of one benchmark workload (topics, partitions and headers are the same for all)."""

    name: str
    key_size: int
    value_size: int
    compression: str
    default_records: int
    description: str
    # Leading random bytes of each value; the rest repeats _PATTERN (so compression has work to do).
    random_value_bytes: int
    # The Avro schema of the values (JSON), registered per topic; None: the values are bytes alone.
    value_schema: str | None = None

    @property
    def record_bytes(self) -> int:
        return self.key_size + self.value_size

    @property
    def producer(self) -> dict[str, str]:
        return {**PRODUCER_TUNING, "compression.type": self.compression}

    @property
    def shape(self) -> str:
        return (
            f"{self.key_size}-byte keys, {self.value_size}-byte values, {HEADERS} headers, "
            f"compression {self.compression}"
        )

    @property
    def body_size(self) -> int:
        """A value's bytes after the header its topic gives it (W1A's ``avro_header``)."""
        return self.value_size - (AVRO_HEADER_BYTES if self.value_schema is not None else 0)

    def chunk(self) -> bytes:
        """``_CHUNK_RECORDS`` records laid out key|value body, ``key_size + body_size`` bytes each."""
        random_bytes = self.key_size + self.random_value_bytes
        data = os.urandom(_CHUNK_RECORDS * random_bytes)
        if self.random_value_bytes == self.body_size:
            return data
        filler = (_PATTERN * self.value_size)[: self.body_size - self.random_value_bytes]
        return b"".join(data[i : i + random_bytes] + filler for i in range(0, len(data), random_bytes))


WORKLOADS = {
    w.name: w
    for w in (
        Workload("W1", 16, 1024, "none", 1_000_000, "16-byte random keys, 1 KiB random values", 1024),
        Workload(
            "W2",
            16,
            1024,
            "lz4",
            1_000_000,
            "16-byte random keys, 1 KiB values of 512 random bytes then 512 bytes of a repeated fixed "
            "pattern (so that lz4 has something to compress)",
            512,
        ),
        Workload("W3", 16, 100, "none", 10_000_000, "16-byte random keys, 100-byte random values", 100),
        Workload(
            "W1A",
            16,
            1024,
            "none",
            1_000_000,
            "16-byte random keys, 1 KiB Avro values in Confluent's wire format (5-byte header, a record "
            "of one bytes field: 2-byte length, 1017 random bytes)",
            1024 - AVRO_HEADER_BYTES,
            '{"type": "record", "name": "Blob", "namespace": "bench", '
            '"fields": [{"name": "data", "type": "bytes"}]}',
        ),
    )
}


def avro_header(schema_id: int) -> bytes:
    """What precedes the random bytes of each W1A value: the wire format's magic byte and schema id,
    and the Avro length (zigzag varint) of the record's one ``bytes`` field."""
    data = 1024 - AVRO_HEADER_BYTES
    return b"\0" + schema_id.to_bytes(4, "big") + bytes([(data * 2) & 0x7F | 0x80, (data * 2) >> 7])


@dataclass(frozen=True)
class PartitionDigest:
    records: int
    sha256: str


def create_topics(
    bootstrap: str,
    topics: Sequence[str],
    partitions: int = PARTITIONS,
    replication_factor: int = 1,
    config: Mapping[str, str] | None = None,
) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(t, partitions, replication_factor, config=dict(config or {})) for t in topics],
        operation_timeout=30,
    )
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


def produce(
    bootstrap: str,
    topics: Sequence[str],
    records: int,
    workload: Workload,
    partitions: int = PARTITIONS,
    value_headers: Mapping[str, bytes] | None = None,
) -> float:
    """Append ``records`` records of ``workload`` round-robin over ``topics`` x ``partitions``, with an
    idempotent librdkafka producer; returns records/s from the first produce to the end of the flush.
    ``value_headers``: per topic, the bytes each value starts with (W1A's ``avro_header``)."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": "true",
            "queue.buffering.max.kbytes": "262144",
            "queue.buffering.max.messages": "500000",
            **workload.producer,
        }
    )
    key_size, record_bytes = workload.key_size, workload.key_size + workload.body_size
    headers = [(value_headers or {}).get(t, b"") for t in topics]
    if workload.value_schema is not None and not all(headers):
        raise ValueError(f"{workload.name} values need a header per topic: {list(topics)}")
    origin = f"bench-{workload.name.lower()}".encode()
    chunk = b""
    start = time.monotonic()
    n_topics = len(topics)
    for i in range(records):
        j = i % _CHUNK_RECORDS
        if j == 0:
            chunk = workload.chunk()
        base = j * record_bytes
        slot = i // n_topics
        while True:
            try:
                producer.produce(
                    topics[i % n_topics],
                    key=chunk[base : base + key_size],
                    value=headers[i % n_topics] + chunk[base + key_size : base + record_bytes],
                    partition=slot % partitions,
                    timestamp=BASE_TIMESTAMP_MS + i,
                    headers=[("seq", i.to_bytes(8, "big")), ("origin", origin)],
                )
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(300):
        raise RuntimeError(f"{workload.name} records were not all delivered")
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
    bootstrap: str,
    topics: Sequence[str],
    partitions: int = PARTITIONS,
    timeout: float = 600.0,
    without_headers: frozenset[str] = frozenset(),
    schema_ids: Mapping[int, int] | None = None,
) -> dict[tuple[str, int], PartitionDigest]:
    """Per partition: record count and an order-sensitive sha256 over key|value|headers|timestamp;
    headers named in ``without_headers`` left out (what a copy dropping them must hold), and each
    value's schema id replaced as ``schema_ids`` maps it (a target's ids back to the source's)."""
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
                if schema_ids and (found := schema_id(value)) is not None and found in schema_ids:
                    value = with_schema_id(value, schema_ids[found])
                headers = [
                    (k, v)
                    for k, v in cast("list[tuple[str, bytes | None]]", m.headers() or [])
                    if k not in without_headers
                ]
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
            # The position, not the last record, says a partition is read: a transactional copy's
            # partition ends with a commit marker that consume() never returns.
            for at in consumer.position([TopicPartition(t, p) for t, p in todo]):
                if at.offset >= ends[(str(at.topic), at.partition)]:
                    todo.discard((str(at.topic), at.partition))
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
