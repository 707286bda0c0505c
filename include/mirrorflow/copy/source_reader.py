"""The copy's reader thread: fetches a task's planned partitions from the source and turns each
batch into the pieces the target gets, within a memory budget.

Invariants:
- Each partition's pieces are queued in source order, and only planned records go into them: a
  batch wholly inside the range passes as bytes (``record_batches.passes``), any other is
  re-encoded with only its planned records.
- A flow with transforms (``core.transforms``) copies every batch record by record: each planned
  record goes through the chain, and what it returns is re-encoded; a dropped record is an offset
  gap, a sync point of the result. So does a topic with a side declared framed (its schema ids
  mapped). A topic with a side the flow declares neither framed nor plain has each batch decoded
  and looked at (``Chain.inspect``: a record that may carry the source's schema id is refused), and
  passes as bytes. Any other topic's batches pass as bytes unread.
- Memory is bounded by ``BUFFER_BYTES`` per task, whatever the backlog: bytes read and not yet
  acknowledged by the target are taken from the ``Budget``, and the reader waits while it is spent.
- Past its ``deadline`` the reader fetches no more: each partition's position then ends what it
  queued, whole fetch answers only. It always makes one fetch round, so every copy moves on.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterator, Sequence

import numpy as np

from mirrorflow.copy.partition_copy import PartitionCopy, Piece, now_ms
from mirrorflow.copy.record_batches import encode, passes
from mirrorflow.core.metrics import Timestamps
from mirrorflow.core.topic_partitions import TP
from mirrorflow.core.transforms import Chain, Encodable, Record
from mirrorflow.errors import RecordRefusedError, TransientError
from mirrorflow.kafka.connection import READ_COMMITTED, Connection
from mirrorflow.kafka.faults import TIMEOUT_S, FaultPolicy
from mirrorflow.kafka.fetched_batches import SourceBatch, SourceRecord
from mirrorflow.kafka.record_reads import fetch

BUFFER_BYTES = 64 << 20
# Re-encoded batches: the size the Java producer's batch.size would give at most, well below the
# broker's 1 MiB default message.max.bytes.
_ENCODE_BYTES = 512 << 10


class Budget:
    """Bytes read but not yet acknowledged, bounded: the reader waits while the writer is behind."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._used = 0
        self._cond = threading.Condition()
        self.closed = False

    def take(self, n: int) -> bool:
        with self._cond:
            while self._used > 0 and self._used + n > self._limit and not self.closed:
                self._cond.wait(0.5)
            self._used += n
            return not self.closed

    def give(self, n: int) -> None:
        with self._cond:
            self._used -= n
            self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self.closed = True
            self._cond.notify_all()


class SourceReader(threading.Thread):
    """Fetches the task's partitions and queues their pieces, in source order per partition."""

    def __init__(
        self,
        source: Connection,
        parts: Sequence[PartitionCopy],
        budget: Budget,
        chain: Chain,
        policy: FaultPolicy,
        deadline: float = 0.0,
    ) -> None:
        super().__init__(name="mirror-reader", daemon=True)
        self.deadline = deadline
        self.source = source
        self.parts = {p.tp: p for p in parts}
        self.budget = budget
        self.chain = chain
        self.policy = policy
        self.ready: deque[tuple[PartitionCopy, Piece]] = deque()
        self.error: BaseException | None = None
        self.finished = threading.Event()
        self.wake = threading.Event()

    def run(self) -> None:
        try:
            self._read()
        except BaseException as exc:  # handed to the writer, which raises it
            self.error = exc
        finally:
            self.finished.set()
            self.wake.set()

    def _read(self) -> None:
        stalled_since: dict[TP, float] = {}
        while not self.budget.closed:
            todo = {
                tp: p.position
                for tp, p in self.parts.items()
                if p.failed is None and p.position < p.plan.source_end
            }
            if not todo:
                return
            for tp, got in fetch(self.source, todo, READ_COMMITTED).items():
                part = self.parts[tp]
                received = now_ms()
                if got.error is not None:
                    part.give_up(got.error, self.policy)
                    continue
                try:
                    for batch in got.batches:
                        self._queue(part, batch, received)
                except RecordRefusedError as exc:
                    part.give_up(exc, self.policy)
                    continue
                if got.next_offset is not None:
                    part.position = max(part.position, got.next_offset)
                    stalled_since.pop(tp, None)
                elif got.stable_end <= part.position:
                    # Waiting for an open transaction before the planned end to finish.
                    since = stalled_since.setdefault(tp, time.monotonic())
                    if time.monotonic() - since > TIMEOUT_S:
                        raise TransientError(
                            f"{tp[0]}-{tp[1]} has no committed records at {part.position} (planned up "
                            f"to {part.plan.source_end}): a transaction stays open; the plan can be re-run"
                        )
            self.wake.set()
            if self.deadline and time.time() >= self.deadline:
                return

    def _queue(self, part: PartitionCopy, batch: SourceBatch, received: int) -> None:
        start, end = max(part.position, part.plan.source_start), part.plan.source_end
        if batch.last_offset < start or batch.base_offset >= end:
            return
        if not part.first_received_ms:
            part.first_received_ms = received
        changes = self.chain.changes(part.tp[0])
        planned: list[SourceRecord] | None = None
        if not changes and self.chain.inspects(part.tp[0]):
            planned = [r for r in batch.records() if start <= r.offset < end]
            self.chain.inspect(*part.tp, planned)
        if not changes and passes(batch, start, end):
            part.count(range(batch.base_offset, batch.last_offset + 1))
            pieces = [(bytearray(batch.data), batch.count, batch.timestamps())]
        else:
            if planned is None:
                planned = [r for r in batch.records() if start <= r.offset < end]
            records = transformed(self.chain, part.tp, planned)
            part.count([r.offset for r in records])
            pieces = [
                (data, len(chunk), record_timestamps(chunk)) for chunk, data in encoded(records, batch.codec)
            ]
        for data, count, timestamps in pieces:
            part.record_age = part.record_age.merge(timestamps.elapsed(received))
            part.bytes += len(data)
            if not self.budget.take(len(data)):
                return
            self.ready.append((part, Piece(data, count, timestamps, len(data))))


def transformed(chain: Chain, tp: TP, records: list[SourceRecord]) -> Sequence[Encodable]:
    """What ``chain`` makes of one partition's ``records`` (the records themselves where it changes
    none of the topic's)."""
    topic, partition = tp
    if not chain.changes(topic) or not records:
        return records
    return chain.apply([Record(topic, partition, *r[:5]) for r in records])


def encoded(
    records: Sequence[Encodable], codec: int, max_bytes: int = _ENCODE_BYTES
) -> Iterator[tuple[Sequence[Encodable], bytearray]]:
    """Records as re-encoded batches, each with the records it holds."""
    i = 0
    for data in encode(records, codec, max_bytes):
        n = _record_count(data)
        yield records[i : i + n], data
        i += n


def record_timestamps(records: Sequence[Encodable]) -> Timestamps:
    return Timestamps.of(np.array([r.timestamp for r in records], dtype=np.int64))


def _record_count(data: bytearray) -> int:
    return int.from_bytes(data[57:61], "big", signed=True)
