"""The copy's produce side: sends each partition's pieces as the flow's writer, one request in flight
per partition, and decides from each answer whether a batch counts, is resent, is split, or fails.

Invariants:
- Records reach each remote partition in source order, each exactly once: one produce request in
  flight per partition, its batch resent with the same producer id and sequence until the target
  answers, so the broker appends it once and never after a later one.
- A record's sequence is its target offset (mod 2^31) and every copy of the flow writes as the same
  producer id, so the target's broker appends a batch only where the partition ends right before
  it. A copy that wakes up after a newer one took over can append only the very records the newer
  one would write next, at the same offsets; any other batch of it is refused (out of order) and
  fails it.
- A batch whose answer was lost counts as written only if the target's end shows it: it is never
  resent blindly (the broker may have dropped the writer's state that would refuse a repeat).
- A batch counts as written only where the plan puts it: every acknowledgement's base offset is
  the partition's next planned target offset, or the partition fails (a broker that had dropped
  the writer's state appends a batch wherever the partition ends).
- Every answer is classified: a refusal a retry would meet again fails its partition (``give_up``),
  a passing one is retried until ``_DELIVERY_TIMEOUT_S``, and an attempt gives up only once no
  request of it is left on the wire.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from mirrorflow.copy.partition_copy import PartitionCopy, Piece, now_ms
from mirrorflow.copy.record_batches import stamp
from mirrorflow.copy.source_reader import Budget, SourceReader, encoded, record_timestamps
from mirrorflow.errors import MirrorError, TargetStateError, TransientError
from mirrorflow.kafka.connection import (
    READ_UNCOMMITTED,
    REFUSED,
    TIMEOUT_S,
    Connection,
    end_offsets,
    error_description,
    error_name,
)
from mirrorflow.kafka.fetched_batches import SourceBatch
from mirrorflow.kafka.produce import ProduceCall, produce, refused_write

# How long a batch may keep failing with retriable errors before the task gives up (the producer's
# delivery.timeout.ms default).
_DELIVERY_TIMEOUT_S = 120.0
# Producer sequences wrap at 2^31 (the broker's own arithmetic).
_SEQUENCES = 1 << 31
_TOO_LARGE = frozenset({10, 18})  # MESSAGE_TOO_LARGE, RECORD_LIST_TOO_LARGE
# A batch whose sequence is not the partition's next one for the flow's writer: written where the
# partition no longer ends (see the module's invariants).
_OUT_OF_ORDER_SEQUENCE = 45
# Errors after which the writer's state on the broker is gone: only a fresh attempt, which reads
# the target back first, may continue. INVALID_PRODUCER_EPOCH, UNKNOWN_PRODUCER_ID.
_WRITER_LOST = frozenset({47, 59})
# Answers that leave open whether the batch was appended (no answer at all does too):
# REQUEST_TIMED_OUT, NETWORK_EXCEPTION, NOT_ENOUGH_REPLICAS_AFTER_APPEND, DUPLICATE_SEQUENCE_NUMBER
# (an answer without the offset: whose batch holds that sequence, the target's end tells).
_MAYBE_APPENDED = frozenset({7, 13, 20, 46})
# Answers a resent batch would get again: INVALID_TOPIC_EXCEPTION, INVALID_TIMESTAMP (the remote
# topic's message.timestamp.*.max.ms), UNSUPPORTED_FOR_MESSAGE_FORMAT, POLICY_VIOLATION,
# UNSUPPORTED_COMPRESSION_TYPE, INVALID_RECORD.
_REFUSED_BATCH = frozenset({17, 32, 43, 44, 76, 87})


class ProduceLoop:
    """Produces the pieces a ``SourceReader`` queues to ``target`` as one writer; ``give_up`` fails a
    partition on an error a retry would meet again (or raises it, failing the task)."""

    def __init__(
        self, target: Connection, budget: Budget, give_up: Callable[[PartitionCopy, MirrorError], None]
    ) -> None:
        self.target = target
        self.budget = budget
        self.give_up = give_up

    def write(
        self, reader: SourceReader, parts: Sequence[PartitionCopy], producer_id: int, epoch: int
    ) -> None:
        in_flight: dict[int, tuple[ProduceCall, list[PartitionCopy]]] = {}
        try:
            self._write_all(reader, parts, producer_id, epoch, in_flight)
        except BaseException:
            # A retry must never race a request of this attempt still on the wire: wait for the
            # answers (or the connections' end) before giving up.
            deadline = time.monotonic() + TIMEOUT_S
            while any(not call.done for call, _ in in_flight.values()) and time.monotonic() < deadline:
                self.target.poll(100)
            raise

    def _write_all(
        self,
        reader: SourceReader,
        parts: Sequence[PartitionCopy],
        producer_id: int,
        epoch: int,
        in_flight: dict[int, tuple[ProduceCall, list[PartitionCopy]]],
    ) -> None:
        while True:
            if reader.error is not None:
                raise reader.error
            while reader.ready:
                part, piece = reader.ready.popleft()
                part.pending.append(piece)
            self._drop_failed(parts)
            idle = [p for p in parts if p.pending and not p.in_flight and p.failed is None]
            for node, owned in self.target.by_leader(p.remote for p in idle).items():
                if node in in_flight:
                    continue
                batch_of = {p.remote: p for p in idle}
                sending = [batch_of[tp] for tp in owned]
                batches = [(p.remote, self._stamped(p, producer_id, epoch)) for p in sending]
                in_flight[node] = (produce(self.target, node, batches), sending)
                for p in sending:
                    p.in_flight = True
            if not in_flight:
                if reader.finished.is_set() and not reader.ready and not any(p.pending for p in parts):
                    if reader.error is not None:
                        raise reader.error
                    return
                reader.wake.wait(0.05)
                reader.wake.clear()
                continue
            self.target.poll(5)
            for node, (call, sending) in list(in_flight.items()):
                if call.done:
                    del in_flight[node]
                    self._settle(call, sending)

    def _stamped(self, part: PartitionCopy, producer_id: int, epoch: int) -> bytes:
        """The partition's head batch as the writer's, its sequence the target offset it lands at."""
        piece = part.pending[0]
        if not piece.stamped:
            stamp(piece.data, producer_id, epoch, part.next_target_offset % _SEQUENCES)
            piece.stamped = True
        return bytes(piece.data)

    def _settle(self, call: ProduceCall, sending: Sequence[PartitionCopy]) -> None:
        now = now_ms()
        by_tp = {p.remote: p for p in sending}
        answers = call.answers()
        for tp, part in by_tp.items():
            part.in_flight = False
            code, base_offset = answers.get(tp, (None, -1))
            if part.failed is not None:
                continue
            try:
                if code == 0:
                    self._check_placed(part, base_offset)
                    self._acked(part, now)
                else:
                    self._failed(part, code, call.exception if code is None else None)
            except MirrorError as exc:
                self.give_up(part, exc)

    @staticmethod
    def _check_placed(part: PartitionCopy, base_offset: int) -> None:
        planned = part.next_target_offset
        if base_offset != planned:
            raise TargetStateError(
                f"the target appended this copy's batch for {part.plan.remote_topic}-{part.plan.partition} "
                f"at offset {base_offset}, where the plan puts it at {planned}: the partition did not end "
                "where this copy's writer left it (something else wrote there, or the broker had dropped "
                "the writer's state). Nothing was committed; the remote partition holds records the plan "
                "does not: stop any other writer, then reset the flow's progress for that topic to mirror "
                "it again."
            )

    def _acked(self, part: PartitionCopy, now: int) -> None:
        piece = part.pending.popleft()
        part.acked += piece.count
        part.replication_latency = part.replication_latency.merge(piece.timestamps.elapsed(now))
        part.last_acked_ms = now
        part.failing_since = 0.0
        self.budget.give(piece.budgeted)

    def _failed(self, part: PartitionCopy, code: int | None, exception: BaseException | None) -> None:
        """The head batch was not appended, or its answer was lost: classify, count it as written if
        the target's end says it was, or resend it as it is (same producer id and sequence)."""
        where = f"{part.plan.remote_topic}-{part.plan.partition}"
        if code in REFUSED:
            raise refused_write(f"{where}: {error_name(code)}")
        if code == _OUT_OF_ORDER_SEQUENCE:
            raise TransientError(
                f"the target refused this copy's batch for {where} as out of order: a newer copy of the "
                "flow wrote there meanwhile (or the target lost the writer's state); nothing was written "
                "twice, and the plan can be re-run safely: the next attempt reads back what is there"
            )
        if code in _WRITER_LOST:
            raise TransientError(
                f"the target lost this copy's producer state for {where} ({error_name(code)}); the plan can "
                "be re-run safely: the next attempt reads back what is there"
            )
        if code in _TOO_LARGE:
            self._split(part, where)
            return
        if code in _REFUSED_BATCH:
            raise TargetStateError(
                f"the target refused a batch for {where}: {error_name(code)} ({error_description(code)}) "
                "Nothing of that partition was committed; change the remote topic (or the broker) to accept "
                "the source's records, then run the flow again"
            )
        if not part.failing_since:
            part.failing_since = time.monotonic()
        reason = error_name(code) if code is not None else repr(exception)
        if time.monotonic() - part.failing_since > _DELIVERY_TIMEOUT_S:
            raise TransientError(
                f"the target kept refusing a batch for {where}: {reason}; the plan can be re-run safely"
            )
        if (code is None or code in _MAYBE_APPENDED) and self._appended(part, where, reason):
            self._acked(part, now_ms())
            return
        self.target.request_update()
        time.sleep(0.1)

    def _appended(self, part: PartitionCopy, where: str, reason: str) -> bool:
        """Whether the head batch, whose answer was lost, is on the target: the partition's end tells,
        as this attempt is its only writer and has one request in flight. Resending it blindly could
        append it twice: the broker drops a batch that repeats a sequence only while it still holds
        the producer's state, and it drops that state (on restart, or when it expires producers) once
        the batches' record timestamps are older than producer.id.expiration.ms, as mirrored
        history often is."""
        before = part.next_target_offset
        while True:
            try:
                end = end_offsets(self.target, [part.remote], READ_UNCOMMITTED)[part.remote]
                break
            except TransientError:
                if time.monotonic() - part.failing_since > _DELIVERY_TIMEOUT_S:
                    raise TransientError(
                        f"the target stopped answering for {where}: {reason}; the plan can be re-run safely"
                    ) from None
                time.sleep(0.5)
        count = part.pending[0].count
        if end not in (before, before + count):
            raise TargetStateError(
                f"remote partition {where} ends at {end} after a write whose answer was lost, where this "
                f"copy expected {before} (not written) or {before + count} (written): something else "
                "writes to the remote topic. Nothing was committed; stop the other writer."
            )
        return end == before + count

    def _split(self, part: PartitionCopy, where: str) -> None:
        """The head batch re-encoded as batches of half its size, in its place."""
        piece = part.pending[0]
        batch = SourceBatch.parse(memoryview(piece.data))
        records = batch.records()
        if len(records) < 2:
            raise TargetStateError(
                f"{where}: a record of {len(piece.data)} bytes is larger than the target accepts; raise "
                "the remote topic's max.message.bytes (and the broker's message.max.bytes) to at least "
                "the source's"
            )
        halves = [
            Piece(data, len(chunk), record_timestamps(chunk), budgeted=0)
            for chunk, data in encoded(records, batch.codec, len(piece.data) // 2)
        ]
        halves[0].budgeted = piece.budgeted
        part.pending.popleft()
        part.pending.extendleft(reversed(halves))

    def _drop_failed(self, parts: Sequence[PartitionCopy]) -> None:
        """What a failed partition still had to write is dropped (its request in flight answers
        first)."""
        for part in parts:
            if part.failed is not None and not part.in_flight:
                while part.pending:
                    self.budget.give(part.pending.popleft().budgeted)
