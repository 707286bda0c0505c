"""Copies planned partitions' record batches from the source to the target as bytes.

Runs inside one Spark task (or, for a plan of heartbeats only, in the plan task's process) over a
group of planned partitions, and never imports pyspark. A reader thread fetches the group's
partitions from the source (Fetch, read_committed) and turns each batch into what the target gets
(``record_batches``: passed as it is, or re-encoded exactly); the calling thread produces them
(Produce, acks=all, idempotent) as the flow's ``Writer``. Invariants:
- Records reach each remote partition in source order, each exactly once: one produce request in
  flight per partition, its batch resent with the same producer id and sequence until the target
  answers, so the broker appends it once and never after a later one.
- A record's sequence is its target offset (mod 2^31) and every copy of the flow writes as the same
  producer id, so the target's broker appends a batch only where the partition ends right before
  it. A copy that wakes up after a newer one took over (a stopped process, a timed-out task whose
  Spark job went on) can append only the very records the newer one would write next, at the same
  offsets; any other batch of it is refused (out of order) and fails it.
- What an attempt leaves on the target is a prefix of the planned records. Before writing, the
  ``target end - target_start`` records already there are read back and compared with the planned
  ones (key, value, headers, timestamp): records written by anything else are never taken for
  ours; ours are skipped, never written twice.
- A flow with transforms (``core.transforms``) copies every batch record by record: each planned
  record goes through the chain, and what it returns is re-encoded; a dropped record is an offset
  gap, a sync point of the result. Flows without transforms keep the batches as bytes.
- Memory is bounded by ``_BUFFER_BYTES`` per task, whatever the backlog.
- A failure fails the task with a classified error; the caller commits nothing for it. With
  ``isolate``, an error of one partition that a retry would meet again (a refused read or write, a
  record the target refuses, a failing transform, someone else's records on its remote partition)
  fails only that partition: its result carries the error, the others go on. Transient errors and
  lost source data still fail the task.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from mirrorflow.config.model import FlowConfig
from mirrorflow.config.transforms import TransformConfig
from mirrorflow.copy.record_batches import encode, passes, stamp
from mirrorflow.core.metrics import Stats, Timestamps
from mirrorflow.core.plan import CopyResult, PartitionFailure, PartitionPlan, PartitionResult, Plan, Writer
from mirrorflow.core.transforms import Chain, Encodable, Record
from mirrorflow.errors import (
    MirrorError,
    SourceDataLostError,
    TargetStateError,
    TransformError,
    TransientError,
)
from mirrorflow.kafka.connection import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    REFUSED,
    TIMEOUT_S,
    TP,
    Connection,
    end_offsets,
    error_description,
    error_name,
)
from mirrorflow.kafka.fetched_batches import SourceBatch, SourceRecord
from mirrorflow.kafka.produce import ProduceCall, new_writer, produce, refused_write
from mirrorflow.kafka.record_reads import fetch, read_records

# How long a batch may keep failing with retriable errors before the task gives up (the producer's
# delivery.timeout.ms default).
_DELIVERY_TIMEOUT_S = 120.0
_BUFFER_BYTES = 64 << 20
# Re-encoded batches: the size the Java producer's batch.size would give at most, well below the
# broker's 1 MiB default message.max.bytes.
_ENCODE_BYTES = 512 << 10

_DUPLICATE_SEQUENCE = 46
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
# REQUEST_TIMED_OUT, NETWORK_EXCEPTION, NOT_ENOUGH_REPLICAS_AFTER_APPEND.
_MAYBE_APPENDED = frozenset({7, 13, 20})
# Answers a resent batch would get again: INVALID_TOPIC_EXCEPTION, INVALID_TIMESTAMP (the remote
# topic's message.timestamp.*.max.ms), UNSUPPORTED_FOR_MESSAGE_FORMAT, POLICY_VIOLATION,
# UNSUPPORTED_COMPRESSION_TYPE, INVALID_RECORD.
_REFUSED_BATCH = frozenset({17, 32, 43, 44, 76, 87})


@dataclass
class _Piece:
    """Records of one partition ready to produce as one batch; stamped when first sent."""

    data: bytearray
    count: int
    timestamps: Timestamps
    budgeted: int
    stamped: bool = False


@dataclass
class _Partition:
    """Running state of one planned partition's copy."""

    plan: PartitionPlan
    already_written: int
    position: int
    records: int = 0
    bytes: int = 0
    prev_offset: int = -1
    sync_points: list[tuple[int, int]] = field(default_factory=list)
    record_age: Stats = field(default_factory=Stats)
    replication_latency: Stats = field(default_factory=Stats)
    first_received_ms: int = 0
    last_acked_ms: int = 0
    # Records this attempt wrote that the target acknowledged.
    acked: int = 0
    pending: deque[_Piece] = field(default_factory=deque)
    in_flight: bool = False
    failing_since: float = 0.0
    # Set (isolate) when the partition met an error a retry would meet again: it copies no more.
    failed: MirrorError | None = None

    @property
    def tp(self) -> TP:
        return (self.plan.topic, self.plan.partition)

    @property
    def next_target_offset(self) -> int:
        """Where the next batch lands: its records' sequences count from there."""
        return self.plan.target_start + self.already_written + self.acked

    @property
    def remote(self) -> TP:
        return (self.plan.remote_topic, self.plan.partition)

    def count(self, offsets: Sequence[int] | range) -> int:
        """Account for planned records at these source offsets (in order); returns the target offset
        of the first. A record whose offset does not follow the previous one is an offset-sync point."""
        target = self.plan.target_start + self.records
        if isinstance(offsets, range):
            if offsets.start != self.prev_offset + 1:
                self.sync_points.append((offsets.start, target))
        else:
            prev = self.prev_offset
            for i, offset in enumerate(offsets):
                if offset != prev + 1:
                    self.sync_points.append((offset, target + i))
                prev = offset
        if len(offsets):
            self.prev_offset = offsets[-1]
        self.records += len(offsets)
        return target

    def result(self) -> PartitionResult:
        if self.failed is not None:
            failure = PartitionFailure(type(self.failed).__name__, str(self.failed))
            return PartitionResult(
                self.plan.topic, self.plan.partition, 0, 0, 0, self.plan.target_start, failure=failure
            )
        return PartitionResult(
            topic=self.plan.topic,
            partition=self.plan.partition,
            records=self.records,
            skipped=min(self.already_written, self.records),
            bytes=self.bytes,
            target_start=self.plan.target_start,
            sync_points=tuple(self.sync_points),
            record_age=self.record_age,
            replication_latency=self.replication_latency,
            write_ms=max(self.last_acked_ms - self.first_received_ms, 0),
        )


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class _Budget:
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


class _Reader(threading.Thread):
    """Fetches the task's partitions and queues their pieces, in source order per partition."""

    def __init__(
        self,
        source: Connection,
        parts: Sequence[_Partition],
        budget: _Budget,
        chain: Chain,
        give_up: Callable[[_Partition, MirrorError], None],
    ) -> None:
        super().__init__(name="mirror-reader", daemon=True)
        self.source = source
        self.parts = {p.tp: p for p in parts}
        self.budget = budget
        self.chain = chain
        self.give_up = give_up
        self.ready: deque[tuple[_Partition, _Piece]] = deque()
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
                received = _now_ms()
                if got.error is not None:
                    self.give_up(part, got.error)
                    continue
                try:
                    for batch in got.batches:
                        self._queue(part, batch, received)
                except TransformError as exc:
                    self.give_up(part, exc)
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

    def _queue(self, part: _Partition, batch: SourceBatch, received: int) -> None:
        start, end = max(part.position, part.plan.source_start), part.plan.source_end
        if batch.last_offset < start or batch.base_offset >= end:
            return
        if not part.first_received_ms:
            part.first_received_ms = received
        if not self.chain and passes(batch, start, end):
            part.count(range(batch.base_offset, batch.last_offset + 1))
            pieces = [(bytearray(batch.data), batch.count, batch.timestamps())]
        else:
            records = transformed(
                self.chain, part.tp, [r for r in batch.records() if start <= r.offset < end]
            )
            part.count([r.offset for r in records])
            pieces = [
                (data, len(chunk), _timestamps(chunk)) for chunk, data in _encoded(records, batch.codec)
            ]
        for data, count, timestamps in pieces:
            part.record_age = part.record_age.merge(timestamps.elapsed(received))
            part.bytes += len(data)
            if not self.budget.take(len(data)):
                return
            self.ready.append((part, _Piece(data, count, timestamps, len(data))))


def transformed(chain: Chain, tp: TP, records: list[SourceRecord]) -> Sequence[Encodable]:
    """What ``chain`` makes of one partition's ``records`` (the records themselves without
    transforms)."""
    if not chain or not records:
        return records
    topic, partition = tp
    return chain.apply([Record(topic, partition, *r[:5]) for r in records])


def _encoded(
    records: Sequence[Encodable], codec: int, max_bytes: int = _ENCODE_BYTES
) -> Iterator[tuple[Sequence[Encodable], bytearray]]:
    """Records as re-encoded batches, each with the records it holds."""
    i = 0
    for data in encode(records, codec, max_bytes):
        n = _record_count(data)
        yield records[i : i + n], data
        i += n


def _timestamps(records: Sequence[Encodable]) -> Timestamps:
    return Timestamps.of(np.array([r.timestamp for r in records], dtype=np.int64))


def _record_count(data: bytearray) -> int:
    return int.from_bytes(data[57:61], "big", signed=True)


class BatchCopy:
    """The copy of one group of planned partitions; use as a context manager."""

    def __init__(self, plans: Sequence[PartitionPlan], settings: CopySettings, writer: Writer | None) -> None:
        self.plans = plans
        self.writer = writer
        self.isolate = settings.isolate
        self.chain = Chain(settings.transforms)
        self.target = Connection(settings.target, "target", {p.remote_topic for p in plans})
        try:
            self.source = Connection(settings.source, "source", {p.topic for p in plans})
        except BaseException:
            self.target.close()
            raise
        self.budget = _Budget(_BUFFER_BYTES)

    def __enter__(self) -> BatchCopy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.budget.close()
        self.source.close()
        self.target.close()

    def run(self) -> list[PartitionResult]:
        ends = end_offsets(self.target, [(p.remote_topic, p.partition) for p in self.plans], READ_UNCOMMITTED)
        parts = []
        for plan in self.plans:
            written = ends[(plan.remote_topic, plan.partition)] - plan.target_start
            if written < 0:
                raise TargetStateError(
                    f"remote partition {plan.remote_topic}-{plan.partition} ends before the planned start "
                    f"{plan.target_start}: it was truncated or recreated since the plan was made"
                )
            part = _Partition(plan, written, plan.source_start, prev_offset=plan.source_start - 1)
            if written:
                try:
                    self._check_written(part)
                except MirrorError as exc:
                    self._give_up(part, exc)
            parts.append(part)
        writer = self.writer or new_writer(self.target)
        producer_id, epoch = writer.producer_id, writer.producer_epoch
        reader = _Reader(self.source, parts, self.budget, self.chain, self._give_up)
        reader.start()
        try:
            self._write(reader, parts, producer_id, epoch)
        finally:
            self.budget.close()
            reader.join(TIMEOUT_S)
        # One request per broker for every partition's end, not one per partition.
        ends = end_offsets(self.target, [part.remote for part in parts], READ_UNCOMMITTED)
        for part in parts:
            if part.failed is None:
                try:
                    self._check_result(part, ends[part.remote])
                except MirrorError as exc:
                    self._give_up(part, exc)
        return [p.result() for p in parts]

    def _give_up(self, part: _Partition, error: MirrorError) -> None:
        """Fail the partition alone (``isolate``) on an error a retry would meet again; anything
        else, or without ``isolate``, fails the task."""
        if not self.isolate or isinstance(error, (TransientError, SourceDataLostError)):
            raise error
        if part.failed is None:
            part.failed = error

    def _drop_failed(self, parts: Sequence[_Partition]) -> None:
        """What a failed partition still had to write is dropped (its request in flight answers
        first)."""
        for part in parts:
            if part.failed is not None and not part.in_flight:
                while part.pending:
                    self.budget.give(part.pending.popleft().budgeted)

    def _check_written(self, part: _Partition) -> None:
        """The ``already_written`` records after the planned target start must be the first planned
        records; the source position then moves past them."""
        plan = part.plan
        n = part.already_written
        source = self._planned_records(part, n)
        target = read_records(
            self.target, part.remote, plan.target_start, plan.target_start + n, READ_UNCOMMITTED, n
        )
        if len(source) < n:
            raise _too_many(plan, n, len(source))
        for i, want in enumerate(source):
            got = target[i] if i < len(target) else None
            if got is None or not _same(got, want):
                raise TargetStateError(
                    f"remote partition {plan.remote_topic}-{plan.partition} offset {plan.target_start + i} "
                    f"holds {'nothing readable' if got is None else 'another record'} where this flow "
                    f"wrote the record of source offset {want.offset} of {plan.topic}-{plan.partition}: "
                    "something else writes to the remote topic. Nothing was committed; stop the other "
                    "writer, then reset the flow's progress for that topic to mirror it again."
                )
        part.count([r.offset for r in source])
        part.position = source[-1].offset + 1

    def _planned_records(self, part: _Partition, n: int) -> list[Encodable]:
        """The first ``n`` records the plan writes for the partition (after the transforms)."""
        plan = part.plan
        records: list[Encodable] = []
        position = plan.source_start
        while len(records) < n and position < plan.source_end:
            read = read_records(
                self.source, part.tp, position, plan.source_end, READ_COMMITTED, n - len(records)
            )
            if not read:
                break
            records += transformed(self.chain, part.tp, read)
            position = read[-1].offset + 1
        return records[:n]

    def _write(self, reader: _Reader, parts: Sequence[_Partition], producer_id: int, epoch: int) -> None:
        in_flight: dict[int, tuple[ProduceCall, list[_Partition]]] = {}
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
        reader: _Reader,
        parts: Sequence[_Partition],
        producer_id: int,
        epoch: int,
        in_flight: dict[int, tuple[ProduceCall, list[_Partition]]],
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

    def _stamped(self, part: _Partition, producer_id: int, epoch: int) -> bytes:
        """The partition's head batch as the writer's, its sequence the target offset it lands at."""
        piece = part.pending[0]
        if not piece.stamped:
            stamp(piece.data, producer_id, epoch, part.next_target_offset % _SEQUENCES)
            piece.stamped = True
        return bytes(piece.data)

    def _settle(self, call: ProduceCall, sending: Sequence[_Partition]) -> None:
        now = _now_ms()
        by_tp = {p.remote: p for p in sending}
        codes = call.codes()
        for tp, part in by_tp.items():
            part.in_flight = False
            code = codes.get(tp)
            if part.failed is not None:
                continue
            if code in (0, _DUPLICATE_SEQUENCE):
                self._acked(part, now)
                continue
            try:
                self._failed(part, code, call.exception if code is None else None)
            except MirrorError as exc:
                self._give_up(part, exc)

    def _acked(self, part: _Partition, now: int) -> None:
        piece = part.pending.popleft()
        part.acked += piece.count
        part.replication_latency = part.replication_latency.merge(piece.timestamps.elapsed(now))
        part.last_acked_ms = now
        part.failing_since = 0.0
        self.budget.give(piece.budgeted)

    def _failed(self, part: _Partition, code: int | None, exception: BaseException | None) -> None:
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
            self._acked(part, _now_ms())
            return
        self.target.request_update()
        time.sleep(0.1)

    def _appended(self, part: _Partition, where: str, reason: str) -> bool:
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

    def _split(self, part: _Partition, where: str) -> None:
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
            _Piece(data, len(chunk), _timestamps(chunk), budgeted=0)
            for chunk, data in _encoded(records, batch.codec, len(piece.data) // 2)
        ]
        halves[0].budgeted = piece.budgeted
        part.pending.popleft()
        part.pending.extendleft(reversed(halves))

    def _check_result(self, part: _Partition, end: int) -> None:
        plan = part.plan
        if part.already_written > part.records:
            raise _too_many(plan, part.already_written, part.records)
        if end != plan.target_start + part.records:
            raise TargetStateError(
                f"remote partition {plan.remote_topic}-{plan.partition} ends at {end}, expected "
                f"{plan.target_start + part.records} after this copy: something else writes to the "
                "remote topic. Nothing was committed; stop the other writer."
            )


def _same(target: SourceRecord, source: Encodable) -> bool:
    """The target record is a copy of the source one; a time the target's broker stamped (a
    LogAppendTime remote topic) is not compared."""
    return (target.key, target.value, target.headers) == (source.key, source.value, source.headers) and (
        target.appended or target.timestamp == source.timestamp
    )


def _too_many(plan: PartitionPlan, found: int, planned: int) -> TargetStateError:
    return TargetStateError(
        f"remote partition {plan.remote_topic}-{plan.partition} holds {found} records past the planned "
        f"start {plan.target_start}, more than the {planned} planned: something else writes to the "
        "remote topic. Nothing was committed; stop the other writer."
    )


@dataclass(frozen=True)
class CopySettings:
    """What a copy needs of its flow, as plain values that travel to Spark's executors: the
    source's consumer and the target's producer settings, the transforms, and whether a partition's
    own error fails only that partition (``mirrorflow.on.partition.error = isolate``)."""

    source: dict[str, str]
    target: dict[str, str]
    transforms: tuple[TransformConfig, ...] = ()
    isolate: bool = False

    @classmethod
    def of(cls, flow: FlowConfig) -> CopySettings:
        return cls(
            dict(flow.source.consumer),
            dict(flow.target.producer),
            flow.transforms,
            flow.settings.on_partition_error == "isolate",
        )


def copy_partitions(
    plans: Sequence[PartitionPlan], settings: CopySettings, writer: Writer | None
) -> list[PartitionResult]:
    """Copy one group of planned partitions (one Spark task's) as ``writer`` (``None``: a fresh
    producer id, which fences nothing); one result per planned partition."""
    if not plans:
        return []
    with BatchCopy(plans, settings, writer) as copy:
        return copy.run()


def copy_result(plan: Plan, results: Iterable[PartitionResult]) -> CopyResult:
    """The copy's result, in plan order."""
    done = {(r.topic, r.partition): r for r in results}
    return CopyResult(plan.flow, plan.run_id, tuple(done[(p.topic, p.partition)] for p in plan.partitions))
