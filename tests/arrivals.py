"""When records arrive on a target: a consumer of the remote topic in a thread of its own notes the
time it reads each record, which is when a consumer of the target could have read it."""

from __future__ import annotations

import itertools
import threading
import time

from confluent_kafka import Consumer, TopicPartition


class Arrivals:
    """Reads ``topic``'s ``partitions`` on the cluster at ``bootstrap`` from their start until
    ``stop``; ``times`` holds each record's arrival (``time.monotonic``), in the order read."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        self.times: list[float] = []
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
                    self.times.append(time.monotonic())

    def longest_gap(self, start: float, end: float) -> float:
        """The longest time between ``start`` and ``end`` in which no record arrived."""
        inside = [t for t in self.times if start <= t <= end]
        edges = [start, *inside, end]
        return max(b - a for a, b in itertools.pairwise(edges))
