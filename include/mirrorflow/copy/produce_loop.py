"""The copy's produce side: sends each partition's pieces in the flow writer's open transaction, one
request in flight per partition, and decides from each answer whether a batch counts, is resent, is
split, or fails.

Invariants:
- Records reach each remote partition in source order, each exactly once: one produce request in
  flight per partition, its batch resent with the same producer id, epoch and sequence until the
  target answers. The broker holds the writer's state while its transaction is open (a leader that
  takes over rebuilds it from the log), so it appends a resent batch once: an answer lost to a
  timeout or a leader change is settled by sending the batch again.
- A copy whose attempt was fenced (a newer attempt of the flow took over) can append nothing: the
  target refuses its epoch, whatever its records' timestamps, and the copy stops
  (``WriterFencedError``).
- A batch counts as written only where the copy expects it: every acknowledgement's base offset is
  the partition's next offset for this copy, or the partition fails (something else wrote there).
- Every answer is classified by its verdict (``kafka.faults``): a refusal a retry would meet again
  fails its partition or the task (``PartitionCopy.give_up``), a passing one is resent until
  ``DELIVERY_TIMEOUT_S`` or its transaction's end, and an attempt gives up only once no request of it
  is left on the wire.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Sequence

from mirrorflow.copy.partition_copy import PartitionCopy, Piece, now_ms
from mirrorflow.copy.record_batches import stamp
from mirrorflow.copy.source_reader import Budget, SourceReader, encoded, record_timestamps
from mirrorflow.core.plan import Grant
from mirrorflow.errors import MirrorError, TargetStateError, TransientError, WriterFencedError
from mirrorflow.kafka.connection import Connection
from mirrorflow.kafka.faults import (
    DELIVERY_TIMEOUT_S,
    TIMEOUT_S,
    FaultPolicy,
    Verdict,
    error_description,
    error_name,
    verdict,
)
from mirrorflow.kafka.fetched_batches import SourceBatch
from mirrorflow.kafka.produce import ProduceCall, produce, refused_write


def other_writer(topic: str) -> str:
    """What to do once someone else's records are on the remote topic of source ``topic``. Not to
    forget the flow's state of the topic alone: the next run would then copy the whole topic again
    after what the remote topic holds."""
    return (
        "Nothing was committed; stop the other writer, then delete the remote topic and forget the "
        f"flow's state of {topic} while no run of the flow is going (python -m mirrorflow.store "
        f"forget-topic --flow <flow> --topic {shlex.quote(topic)}): the next run creates the remote "
        "topic again and mirrors the topic anew. Kept, the remote topic would get the whole topic "
        "again after what it holds."
    )


class ProduceLoop:
    """Produces the pieces a ``SourceReader`` queues to ``target`` as the writer of ``grant``, in its
    open transaction; an answer a retry would meet again fails the partition or the task, as the
    flow's ``policy`` says (``PartitionCopy.give_up``)."""

    def __init__(self, target: Connection, budget: Budget, policy: FaultPolicy, grant: Grant) -> None:
        self.target = target
        self.budget = budget
        self.policy = policy
        self.grant = grant

    def write(self, reader: SourceReader, parts: Sequence[PartitionCopy]) -> None:
        in_flight: dict[int, tuple[ProduceCall, list[PartitionCopy]]] = {}
        try:
            self._write_all(reader, parts, in_flight)
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
                batches = [(p.remote, self._stamped(p)) for p in sending]
                in_flight[node] = (produce(self.target, node, batches, self.grant.transactional_id), sending)
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

    def _stamped(self, part: PartitionCopy) -> bytes:
        """The partition's head batch as the writer's, in its open transaction."""
        piece = part.pending[0]
        if not piece.stamped:
            writer = self.grant.writer
            stamp(
                piece.data, writer.producer_id, writer.producer_epoch, part.next_sequence, transactional=True
            )
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
                part.give_up(exc, self.policy)

    @staticmethod
    def _check_placed(part: PartitionCopy, base_offset: int) -> None:
        expected = part.next_target_offset
        where = f"{part.plan.remote_topic}-{part.plan.partition}"
        if base_offset < expected:
            # The broker answers with an earlier offset only for a batch this producer id and epoch
            # wrote before: a task of the same attempt ran before this one.
            raise TransientError(
                f"the target took this copy's batch for {where} for one its writer had appended at offset "
                f"{base_offset} (expected at {expected}): another task of this attempt wrote there. Nothing "
                "was committed; the next attempt fences the writer anew and reads back what is there"
            )
        if base_offset > expected:
            raise TargetStateError(
                f"the target appended this copy's batch for {where} at offset {base_offset}, where this copy "
                f"expected it at {expected}: something else wrote to the remote partition meanwhile. "
                f"{other_writer(part.plan.topic)}"
            )

    def _acked(self, part: PartitionCopy, now: int) -> None:
        piece = part.pending.popleft()
        part.acked += piece.count
        part.replication_latency = part.replication_latency.merge(piece.timestamps.elapsed(now))
        part.last_acked_ms = now
        part.failing_since = 0.0
        self.budget.give(piece.budgeted)

    def _failed(self, part: PartitionCopy, code: int | None, exception: BaseException | None) -> None:
        """The head batch was not appended, or its answer was lost: its answer's verdict
        (``kafka.faults``) says what follows; a passing one resends it as it is (same producer id,
        epoch and sequence: the broker appends it once) until the delivery timeout, or until the
        transaction's own time is up (its coordinator aborts it then: resending is in vain)."""
        where = f"{part.plan.remote_topic}-{part.plan.partition}"
        rule = Verdict.PASSING if code is None else verdict(code)
        reason = error_name(code) if code is not None else repr(exception)
        if rule is Verdict.REFUSED:
            raise refused_write(f"{where}: {reason}")
        if rule is Verdict.FENCED:
            raise WriterFencedError(
                f"the target refused this copy's batch for {where} ({reason}): a newer attempt of "
                "the flow fenced its writer, and the transaction of this one is aborted. Nothing of it was "
                "committed; nothing needs doing if another run of the flow is going, else run the flow again"
            )
        if rule is Verdict.STATE_LOST:
            raise TransientError(
                f"the target's state of this copy's writer for {where} does not go on where the copy's does "
                f"({reason}); nothing was committed, and the next attempt fences the writer anew "
                "and reads back what is there"
            )
        if rule is Verdict.TOO_LARGE:
            self._split(part, where)
            return
        if rule is Verdict.BAD_BATCH:
            raise TargetStateError(
                f"the target refused a batch for {where}: {reason} ({error_description(code or 0)}) "
                "Nothing of that partition was committed; change the remote topic (or the broker) to accept "
                "the source's records, then run the flow again"
            )
        if not part.failing_since:
            part.failing_since = time.monotonic()
        if time.monotonic() - part.failing_since > DELIVERY_TIMEOUT_S:
            raise TransientError(
                f"the target kept refusing a batch for {where}: {reason}; the plan can be re-run safely"
            )
        if self.grant.expires and time.time() > self.grant.expires:
            raise TransientError(
                f"the target refused a batch for {where} ({reason}) until its transaction's time ran out: "
                "its coordinator aborts the transaction, so nothing of it was committed; the plan can be "
                "re-run safely"
            )
        self.target.request_update()
        time.sleep(0.1)

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
