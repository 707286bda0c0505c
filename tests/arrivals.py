"""Records produced at a steady rate and when they arrive on a target, to tell how long a record
waited to be mirrored: a producer in a thread of its own notes when the source acknowledged each
batch, a consumer of the remote topic in another notes when it read each record, which is when a
consumer of the target could have read it."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping

from confluent_kafka import Consumer, TopicPartition

from mirrorflow_dev import sample_data

BATCH = 10  # records per partition in each batch produced
EVERY_S = 0.1


class Producing:
    """Appends ``BATCH`` sample records to every partition of ``topic`` every ``EVERY_S`` with one
    producer, until the block ends; ``acked`` holds each batch's first index and when the source
    acknowledged the batch, ``count`` the records produced to each partition (final once the block
    ended). ``extra``: the producer's librdkafka settings (a login)."""

    def __init__(
        self, bootstrap: str, topic: str, partitions: int, extra: Mapping[str, str] | None = None
    ) -> None:
        self.topic, self.partitions = topic, partitions
        self.acked: list[tuple[int, float]] = []
        self.count = 0
        self._producer = sample_data.producer(bootstrap, extra)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._produce, daemon=True)

    def __enter__(self) -> Producing:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _produce(self) -> None:
        while not self._stop.is_set():
            start = self.count
            for p in range(self.partitions):
                records = (sample_data.sample_record(self.topic, p, i) for i in range(start, start + BATCH))
                sample_data.produce(self._producer, self.topic, p, records)
            self.acked.append((start, time.monotonic()))
            self.count += BATCH
            time.sleep(EVERY_S)


class Arrivals:
    """Reads ``topic``'s ``partitions`` on the cluster at ``bootstrap`` from their start until the
    block ends; ``times`` holds each record's arrival (``time.monotonic``), in the order read, and
    ``arrived`` each sample record's, by (partition, index)."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        self.times: list[float] = []
        self.arrived: dict[tuple[int, int], float] = {}
        self._consumer = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": "arrivals", "enable.auto.commit": False}
        )
        self._consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)

    def __enter__(self) -> Arrivals:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        self._consumer.close()

    def _read(self) -> None:
        while not self._stop.is_set():
            for message in self._consumer.consume(1000, timeout=0.02):
                if message.error() is None:
                    at = time.monotonic()
                    self.times.append(at)
                    # A sample record's timestamp says its index (sample_data.sample_record).
                    index = (message.timestamp()[1] - sample_data.BASE_TIMESTAMP_MS) // 1000
                    self.arrived[(message.partition() or 0, index)] = at

    def wait_for_all(self, producing: Producing, timeout: float = 30.0) -> None:
        """Wait until every record ``producing`` wrote could be read on the target."""
        wanted = {(p, i) for p in range(producing.partitions) for i in range(producing.count)}
        deadline = time.monotonic() + timeout
        while not self.arrived.keys() >= wanted:
            missing = len(wanted - self.arrived.keys())
            assert time.monotonic() < deadline, f"{missing} records never arrived on the target"
            time.sleep(0.1)

    def longest_wait(self, producing: Producing, start: float, end: float) -> float:
        """The longest time a record the source acknowledged between ``start`` and ``end`` waited
        until it could be read on the target (one not arrived yet: until now)."""
        now = time.monotonic()
        partitions = range(producing.partitions)
        return max(
            max(self.arrived.get((p, i), now) for p in partitions for i in range(first, first + BATCH))
            - acked
            for first, acked in producing.acked
            if start <= acked <= end
        )
