"""The dr-faults scenario's compacted topic: keyed records overwritten and deleted on a source whose
log cleaner is at work all along, and the check of their copy.

``TOPIC`` (``PARTITIONS`` partitions, ``CONFIG``: compacted, a segment rolled every 10 s, cleaned as
soon as anything is dirty) gets ``RATE`` records/s over ``KEYS`` keys (key ``i`` in partition
``i % PARTITIONS``), every ``TOMBSTONE_EVERY``-th a tombstone. Every record carries a sequence number,
unique over the topic and growing in each partition's produce order, in its header ``seq`` (a
tombstone has no value to carry it).

``check`` compares what a read_committed consumer reads of the remote topic with what the source still
holds, per partition:
- lost: a record the source still holds that the target lacks, unless the target holds a later record
  of its key (the target's own cleaner removed it: the remote topic is compacted too);
- duplicated: a sequence number read twice; reordered: one read after a higher one;
- last value per key: each key's newest record (value or tombstone) the same on both sides;
- compacted away: a record the target holds and the source no longer does: explained when the source
  holds a later record of its key (its cleaner removed it after it was copied), else unexplained.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition

TOPIC = "compacted"
PARTITIONS = 3
KEYS = 60
RATE = 10
TOMBSTONE_EVERY = 20
CONFIG = {"cleanup.policy": "compact", "segment.ms": "10000", "min.cleanable.dirty.ratio": "0.01"}
READ_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Held:
    """A record as read: its offset on its cluster, key, sequence number, and whether a tombstone."""

    offset: int
    key: bytes
    seq: int
    tombstone: bool


class KeyedProducer:
    """The topic's producer (idempotent, acks=all): ``run`` trickles ``RATE`` records/s, ``overwrite``
    writes every key once."""

    def __init__(self, bootstrap: str) -> None:
        self.producer = Producer(
            {"bootstrap.servers": bootstrap, "enable.idempotence": "true", "acks": "all", "linger.ms": "5"}
        )
        self.produced = 0
        self._lock = threading.Lock()  # sequence numbers in each partition's produce order
        self._rng = random.Random(7)

    def one(self, key: int, *, tombstone: bool = False) -> int:
        """Its sequence number."""
        with self._lock:
            seq = self.produced
            name = f"k{key:03d}".encode()
            value = None if tombstone else seq.to_bytes(8, "big") + name + self._rng.randbytes(48)
            while True:
                try:
                    self.producer.produce(
                        TOPIC,
                        key=name,
                        value=value,
                        partition=key % PARTITIONS,
                        headers=[("seq", seq.to_bytes(8, "big"))],
                    )
                    break
                except BufferError:
                    self.producer.poll(0.01)
            self.produced = seq + 1
        return seq

    def overwrite(self, tombstones: int = 0) -> int:
        """Every key once, the first ``tombstones`` of them deleted, delivered when it returns; the
        last one's sequence number."""
        last = [self.one(key, tombstone=key < tombstones) for key in range(KEYS)][-1]
        self.flush()
        return last

    def run(self, stop: threading.Event) -> None:
        """``RATE`` records/s on random keys until ``stop``, then every record delivered."""
        start, sent = time.monotonic(), 0
        while not stop.wait(0.05):
            while sent < RATE * (time.monotonic() - start):
                self.one(self._rng.randrange(KEYS), tombstone=sent % TOMBSTONE_EVERY == TOMBSTONE_EVERY - 1)
                sent += 1
            self.producer.poll(0)
        self.flush()

    def flush(self) -> None:
        if self.producer.flush(60):
            raise RuntimeError(f"{TOPIC} records were not all delivered")


def read(bootstrap: str, topic: str, starts: Mapping[int, int] | None = None) -> dict[int, list[Held]]:
    """Every record of ``topic``'s partitions a read_committed consumer reads, from ``starts`` (default:
    the log start) to the partition's end now."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-compacted-check",
            "enable.auto.commit": "false",
            "enable.partition.eof": "true",
            "isolation.level": "read_committed",
        }
    )
    held: dict[int, list[Held]] = {p: [] for p in range(PARTITIONS)}
    try:
        consumer.assign(
            [TopicPartition(topic, p, (starts or {}).get(p, OFFSET_BEGINNING)) for p in range(PARTITIONS)]
        )
        at_end: set[int] = set()
        deadline = time.monotonic() + READ_TIMEOUT_S
        while len(at_end) < PARTITIONS:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{topic}: partitions {sorted(set(held) - at_end)} not read to their end")
            for msg in consumer.consume(500, 0.5):
                error, p = msg.error(), msg.partition() or 0
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        at_end.add(p)
                    continue
                seq = dict(msg.headers() or []).get("seq")
                if not isinstance(seq, bytes):
                    raise RuntimeError(f"{topic}-{p} at {msg.offset()}: a record without its seq header")
                key = msg.key()
                held[p].append(
                    Held(
                        msg.offset() or 0,
                        key if isinstance(key, bytes) else b"",
                        int.from_bytes(seq, "big"),
                        msg.value() is None,
                    )
                )
    finally:
        consumer.close()
    return held


def caught_up(source: str, target: str, timeout: float) -> dict[int, list[Held]]:
    """The source as read once the target's newest record of every partition is the source's (or
    ``timeout`` passed)."""
    deadline = time.monotonic() + timeout
    while True:
        held = read(source, TOPIC)
        copied = read(target, f"source.{TOPIC}")
        if all(not held[p] or (copied[p] and copied[p][-1].seq >= held[p][-1].seq) for p in held):
            return held
        if time.monotonic() > deadline:
            return held
        time.sleep(2)


def check(source: str, target: str, produced: int, timeout: float = 120.0) -> dict[str, Any]:
    """The copy against the source (the module's doc), once the target caught up."""
    held = caught_up(source, target, timeout)
    copied = read(target, f"source.{TOPIC}")
    out = Counter[str]()
    for p in range(PARTITIONS):
        src, dst = held[p], copied[p]
        on_source = {r.seq for r in src}
        seen = Counter(r.seq for r in dst)
        out["duplicated"] += sum(n - 1 for n in seen.values())
        highest, read_before = -1, set[int]()
        for r in dst:  # as rpo's watch counts: a duplicate is not also out of order
            if r.seq not in read_before:
                out["reordered"] += r.seq < highest
                highest = max(highest, r.seq)
                read_before.add(r.seq)
        newest_copied = {r.key: r.seq for r in dst}
        newest_held = {r.key: r.seq for r in src}
        out["last value differs"] += sum(newest_copied.get(k) != s for k, s in newest_held.items())
        out["last value differs"] += len(newest_copied.keys() - newest_held.keys())
        for r in src:
            if r.seq not in seen:
                out["compacted on the target" if newest_copied.get(r.key, -1) > r.seq else "lost"] += 1
        for r in dst:
            if r.seq not in on_source:
                explained = newest_held.get(r.key, -1) > r.seq
                out["compacted away after copied" if explained else "unexplained on the target"] += 1
        out["source holds"] += len(src)
        out["target holds"] += len(dst)
    names = (
        "source holds",
        "target holds",
        "lost",
        "duplicated",
        "reordered",
        "last value differs",
        "compacted away after copied",
        "compacted on the target",
        "unexplained on the target",
    )
    return {"produced": produced, **{name: out[name] for name in names}}
