"""Copies planned partitions' record batches from the source to the target as bytes.

Runs inside one Spark task (or, for a plan of heartbeats only, in the plan task's process) over a
group of planned partitions, and never imports pyspark. A reader thread (``source_reader``) fetches
the group's partitions from the source (Fetch, read_committed) and turns each batch into what the
target gets (``record_batches``: passed as it is, or re-encoded exactly); the calling thread
(``produce_loop``) produces them (Produce, acks=all) in the open transaction of the flow's writer
(``Grant``, from ``flow_transaction``); every request goes through the kafka layer
(``kafka.connection``, ``kafka.record_reads``, ``kafka.produce``). Invariants, each with the module
that keeps it:
- Records reach each remote partition in source order, each exactly once: one produce request in
  flight per partition, its batch resent with the same producer id, epoch and sequence until the
  target answers, so the broker appends it once and never after a later one (``produce_loop``).
- A copy whose attempt a newer one fenced appends nothing: the target refuses its epoch, whatever
  its records' timestamps, and what it wrote in its transaction was aborted (``flow_transaction``,
  ``produce_loop``).
- What an attempt leaves for read_committed consumers is a prefix of the planned records. Before
  writing, the committed records between the planned target start and the partition's end (an
  earlier attempt's, committed before the offsets table moved) are read back and compared with the
  planned ones (key, value, headers, timestamp): records written by anything else are never taken
  for ours; ours are skipped, never written twice (this module). On a source that compacts, the
  cleaner may have removed records the earlier attempt copied: when they no longer compare as a
  prefix, they are matched as ``core.compaction`` explains them, or refused as someone else's. A
  task Spark runs again after it failed finds what its failed run appended in the same transaction
  (the partition's open transaction, past its last stable offset: the writer's own batches, their
  sequences in turn), counts it as its own and goes on after it with the next sequence (this
  module). This attempt's records follow from the partition's end, and every acknowledgement must
  place them there (``produce_loop``).
- A flow with transforms (``core.transforms``) copies every batch record by record: each planned
  record goes through the chain, and what it returns is re-encoded; a dropped record is an offset
  gap, a sync point of the result (``partition_copy``). So does a topic whose keys or values are
  declared framed (their schema ids mapped); one with a side declared neither framed nor plain has
  its batches decoded and looked at, then passed as bytes; any other keeps its batches as bytes
  (``source_reader``). A refused record's schema id is looked up in the source registry for its
  message (``_holders``), only then.
- Memory is bounded by ``source_reader.BUFFER_BYTES`` per task, whatever the backlog
  (``source_reader``).
- A failure fails the task with a classified error; the caller commits nothing for it. With
  ``isolate``, an error of one partition that a retry would meet again (a refused read or write, a
  record the target refuses, a failing transform, someone else's records on its remote partition)
  fails only that partition: its result carries the error, the others go on. Transient errors and
  lost source data still fail the task (``kafka.faults.FaultPolicy``, applied by
  ``PartitionCopy.give_up``; ``produce_loop`` classifies the target's answers).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Hashable, Iterable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from mirrorflow.config.model import FlowConfig
from mirrorflow.config.schemas import RegistryEndpoint
from mirrorflow.config.transforms import TransformConfig
from mirrorflow.copy.partition_copy import PartitionCopy
from mirrorflow.copy.produce_loop import ProduceLoop, other_writer
from mirrorflow.copy.source_reader import BUFFER_BYTES, Budget, SourceReader, transformed
from mirrorflow.core.compaction import Held, Removed, Undecided, copied_sources
from mirrorflow.core.digest import record_digest
from mirrorflow.core.plan import CopyResult, Grant, PartitionPlan, PartitionResult, Plan
from mirrorflow.core.schema_ids import SchemaIdMap
from mirrorflow.core.topic_partitions import TP
from mirrorflow.core.transforms import Chain, Encodable
from mirrorflow.core.verify_plan import CLEANUP_POLICY, compacts
from mirrorflow.errors import MirrorError, TargetStateError, TransientError
from mirrorflow.kafka.connection import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    Connection,
    end_offsets,
    kept_open,
    topic_config,
)
from mirrorflow.kafka.faults import TIMEOUT_S, FaultPolicy
from mirrorflow.kafka.fetched_batches import SourceRecord
from mirrorflow.kafka.record_reads import batches_of, committed_from, records_of

# How long a compacted topic keeps a tombstone once cleaned: the remote partition's may be gone after it.
DELETE_RETENTION_MS = "delete.retention.ms"


class BatchCopy:
    """The copy of one group of planned partitions; use as a context manager."""

    def __init__(
        self, plans: Sequence[PartitionPlan], settings: CopySettings, grant: Grant, schema_ids: SchemaIdMap
    ) -> None:
        self.plans = plans
        self.grant = grant
        self.policy = settings.policy
        registry = settings.source_registry
        self.chain = Chain(
            settings.transforms, schema_ids, None if registry is None else partial(_holders, registry)
        )
        self._open = ExitStack()
        try:
            self.target = self._open.enter_context(
                kept_open(settings.target, "target", {p.remote_topic for p in plans})
            )
            self.source = self._open.enter_context(
                kept_open(settings.source, "source", {p.topic for p in plans})
            )
        except BaseException:
            self._open.close()
            raise
        self.budget = Budget(BUFFER_BYTES)

    def __enter__(self) -> BatchCopy:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.budget.close()
        # Left open for the next task of this worker, unless the copy failed.
        self._open.__exit__(*exc)

    def run(self) -> list[PartitionResult]:
        ends = end_offsets(self.target, [(p.remote_topic, p.partition) for p in self.plans], READ_UNCOMMITTED)
        for plan in self.plans:
            if ends[(plan.remote_topic, plan.partition)] < plan.target_start:
                raise TargetStateError(
                    f"remote partition {plan.remote_topic}-{plan.partition} ends before the planned start "
                    f"{plan.target_start}: it was truncated or recreated since the plan was made"
                )
        # Most often only the commit marker of the flow's last transaction lies past the planned
        # start: one fetch round over every partition shows it (and whether a transaction is open
        # there), sparing a read per partition.
        behind = {
            (p.remote_topic, p.partition): p.target_start
            for p in self.plans
            if ends[(p.remote_topic, p.partition)] > p.target_start
        }
        found = committed_from(self.target, behind)
        parts = []
        for plan in self.plans:
            remote = (plan.remote_topic, plan.partition)
            end = ends[remote]
            first = self.grant.first_sequence(*remote)
            part = PartitionCopy(plan, 0, plan.source_start, first_sequence=first, first_new=end)
            read = found.get(remote)
            stable = end if read is None or read.stable_end is None else min(read.stable_end, end)
            try:
                if read is not None and read.first < stable:
                    self._check_written(part, stable)
                if stable < end:
                    self._take_own_writes(part, stable, end)
            except MirrorError as exc:
                part.give_up(exc, self.policy)
            parts.append(part)
        reader = SourceReader(self.source, parts, self.budget, self.chain, self.policy, self.grant.deadline)
        reader.start()
        try:
            ProduceLoop(self.target, self.budget, self.policy, self.grant).write(reader, parts)
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
                    part.give_up(exc, self.policy)
        return [p.result() for p in parts]

    def _check_written(self, part: PartitionCopy, end: int) -> None:
        """The committed records between the planned target start and the partition's ``end`` (an
        earlier attempt's, whose transaction committed before the offsets table moved) must be the
        first planned records: they are counted where they are, and the source position moves past
        them. The rest of that stretch holds no record a committed read sees (transaction markers,
        aborted attempts' records). On a source that compacts, records the cleaner removed since may
        be among them (``_match_compacted``)."""
        try:
            self._compare_written(part, end)
        except TargetStateError:
            # Only once the stream compare failed: an unbroken prefix needs no more than it.
            removed = self._removed(part)
            if not ((removed.source or removed.target) and self._match_compacted(part, end, removed)):
                raise

    def _removed(self, part: PartitionCopy) -> Removed:
        """On which side of ``part`` a cleaner may have removed records, and which tombstones the
        remote partition's may have dropped: those older than its ``delete.retention.ms``."""
        target = _compacts(self.target, part.remote)
        retention = topic_config(self.target, part.remote, DELETE_RETENTION_MS) if target else None
        before = None if retention is None else int(time.time() * 1000) - int(retention)
        return Removed(_compacts(self.source, part.tp), target, before)

    def _compare_written(self, part: PartitionCopy, end: int) -> None:
        """The committed records past the planned target start, compared with the planned records one
        by one (``_compare``)."""
        plan = part.plan
        reads = records_of(self.target, part.remote, plan.target_start, end, READ_COMMITTED)
        part.already_written = self._compare(part, reads)

    def _take_own_writes(self, part: PartitionCopy, start: int, end: int) -> None:
        """The partition's open transaction (``[start, end)``: its last stable offset to its end) holds
        what an earlier run of this very task appended in this transaction before it failed (Spark runs
        a failed task again, with the same grant): those records are the next planned ones (compared
        as committed ones are), count as this attempt's own, and its batches go on from the sequence
        after them. Anything else open there is someone else's."""
        part.in_transaction = self._compare(part, self._own_records(part, start, end))

    def _own_records(self, part: PartitionCopy, start: int, end: int) -> Iterator[list[SourceRecord]]:
        """The records of ``[start, end)``, a batch at a time, each batch checked to be this
        transaction's: its writer's producer id and epoch, its sequence the next one."""
        plan, writer = part.plan, self.grant.writer
        where = f"remote partition {plan.remote_topic}-{plan.partition}"
        sequence = part.first_sequence
        for batch in batches_of(self.target, part.remote, start, end, READ_UNCOMMITTED):
            if (batch.producer_id, batch.producer_epoch) != (writer.producer_id, writer.producer_epoch):
                raise TargetStateError(
                    f"{where} offset {batch.base_offset} holds records of another writer's open "
                    f"transaction: something else writes to the remote topic. {other_writer(plan.topic)}"
                )
            if batch.base_sequence != sequence:
                raise TransientError(
                    f"{where} offset {batch.base_offset}: this copy's transaction holds a batch of sequence "
                    f"{batch.base_sequence} where {sequence} was next; nothing was committed, and the next "
                    "attempt fences the writer anew and reads back what is there"
                )
            sequence = (sequence + batch.count) % (1 << 31)
            yield [r for r in batch.records() if start <= r.offset < end]

    def _compare(self, part: PartitionCopy, reads: Iterable[list[SourceRecord]]) -> int:
        """``reads`` (records a batch at a time) compared one by one with the planned records from
        the partition's position on, each counted where it is; how many there were. Both sides are
        read a batch at a time, as far as compared."""
        plan = part.plan
        planned = self._planned_records(part)
        wanted: deque[Encodable] = deque()
        found = 0
        for got in reads:
            if not got:
                continue
            while len(wanted) < len(got) and (more := next(planned, None)) is not None:
                wanted.extend(more)
            if len(wanted) < len(got):
                raise _too_many(plan, found + len(got), found + len(wanted))
            want = [wanted.popleft() for _ in got]
            for target, source in zip(got, want, strict=True):
                if not _same(target, source):
                    raise TargetStateError(
                        f"remote partition {plan.remote_topic}-{plan.partition} offset {target.offset} holds "
                        f"another record where this flow wrote the record of source offset {source.offset} "
                        f"of {plan.topic}-{plan.partition}: something else writes to the remote topic. "
                        f"{other_writer(plan.topic)}"
                    )
            part.count([r.offset for r in want], [r.offset for r in got])
            found += len(got)
            part.position = want[-1].offset + 1
        return found

    def _match_compacted(self, part: PartitionCopy, end: int, removed: Removed) -> bool:
        """Whether the committed records past the planned target start are what an earlier attempt
        wrote, some of them copies of records the source's cleaner removed since, some of its copies
        removed by the remote partition's own cleaner (``core.compaction``; ``removed`` says which side
        compacts); if so, counted. Each is counted at the source offset it copies; a record the source
        removed at one of the free offsets right before the next record the source kept, so the batch
        log stays contiguous, translates every offset the source still holds exactly, and a consumer
        at a removed record's offset resumes at or before the first copy it had not read. A planned
        record whose copy the target removed is covered without one, as a record a transform drops.
        Both sides are read whole (a plan's records at most: ``mirrorflow.max.records.per.partition``),
        and the source past the plan's end only for keys nothing else explains, until each is found."""
        plan = part.plan
        part.uncount()
        written: list[Held] = []
        stamped = False
        for got in records_of(self.target, part.remote, plan.target_start, end, READ_COMMITTED):
            for r in got:
                stamped |= r.appended
                written.append(_held(r, r.appended))
        planned = [_held(r, stamped) for records in self._planned_records(part) for r in records]
        copied = copied_sources(
            written,
            planned,
            plan.source_start,
            plan.source_end,
            lambda keys: self._held_later(part, keys),
            removed,
        )
        if copied is None:
            return False
        if isinstance(copied, Undecided):
            raise TargetStateError(
                f"remote partition {plan.remote_topic}-{plan.partition}: an earlier attempt's copy, "
                "committed past the offsets table, may have gone on past its last record the target holds, "
                "into records the remote topic's cleaner removed since, up to the tombstone of source offset "
                f"{copied.offset} of {plan.topic}-{plan.partition}, older than the remote topic's "
                "delete.retention.ms: whether it copied them cannot be told, and copying them again could "
                f"write them twice. {other_writer(plan.topic)}"
            )
        part.count(copied.sources, [w.offset for w in written])
        part.already_written = len(written)
        part.position = copied.position
        return True

    def _held_later(self, part: PartitionCopy, keys: frozenset[Hashable]) -> set[Hashable]:
        """Which of ``keys`` the source holds past the plan's end (records as the transforms make
        them), up to its end now, read until each is found."""
        tp = part.tp
        end = end_offsets(self.source, [tp], READ_COMMITTED)[tp]
        found: set[Hashable] = set()
        for read in records_of(self.source, tp, part.plan.source_end, end, READ_COMMITTED):
            found.update(r.key for r in transformed(self.chain, tp, read) if r.key in keys)
            if len(found) == len(keys):
                break
        return found

    def _planned_records(self, part: PartitionCopy) -> Iterator[Sequence[Encodable]]:
        """The records the plan writes for the partition from its position on (after the
        transforms), a batch at a time."""
        plan = part.plan
        for read in records_of(self.source, part.tp, part.position, plan.source_end, READ_COMMITTED):
            yield transformed(self.chain, part.tp, read)

    def _check_result(self, part: PartitionCopy, end: int) -> None:
        plan = part.plan
        if part.already_written > part.records:
            raise _too_many(plan, part.already_written, part.records)
        expected = part.landing
        if end != expected:
            raise TargetStateError(
                f"remote partition {plan.remote_topic}-{plan.partition} ends at {end}, expected {expected} "
                f"after this copy: something else writes to the remote topic. {other_writer(plan.topic)}"
            )


def _held(record: Encodable, stamped: bool) -> Held:
    """``record`` as ``core.compaction`` matches it: equal to its copy as ``_same`` has it (without its
    timestamp where the target's broker stamps its own)."""
    timestamp = -1 if stamped else record.timestamp
    same = record_digest((record.key, record.value, record.headers, timestamp))
    return Held(record.offset, same, record.key, record.value is None, record.timestamp)


def _compacts(conn: Connection, tp: TP) -> bool:
    """Whether the topic of ``tp`` compacts (its ``cleanup.policy`` now). Only such a topic loses
    records from the middle of its log; on any other side, records that no longer compare are someone
    else's, whatever offsets are free (a source's transaction markers' would otherwise make room for
    someone else's records to pass as removed ones)."""
    policy = topic_config(conn, tp, CLEANUP_POLICY)
    return policy is not None and compacts({CLEANUP_POLICY: policy})


def _same(target: SourceRecord, source: Encodable) -> bool:
    """The target record is a copy of the source one; a time the target's broker stamped (a
    LogAppendTime remote topic) is not compared."""
    return (target.key, target.value, target.headers) == (source.key, source.value, source.headers) and (
        target.appended or target.timestamp == source.timestamp
    )


def _too_many(plan: PartitionPlan, found: int, planned: int) -> TargetStateError:
    return TargetStateError(
        f"remote partition {plan.remote_topic}-{plan.partition} holds more records past the planned "
        f"start {plan.target_start} (at least {found}) than the {planned} planned: something else "
        f"writes to the remote topic. {other_writer(plan.topic)}"
    )


@dataclass(frozen=True)
class CopySettings:
    """What a copy needs of its flow, as plain values that travel to Spark's executors: the
    source's consumer and the target's producer settings, the transforms, the flow's fault policy
    (whether a partition's own error fails only that partition), and the source schema registry,
    asked which subjects hold the schema id of a record the copy refuses."""

    source: dict[str, str]
    target: dict[str, str]
    transforms: tuple[TransformConfig, ...] = ()
    policy: FaultPolicy = field(default_factory=FaultPolicy)
    source_registry: RegistryEndpoint | None = None

    @classmethod
    def of(cls, flow: FlowConfig) -> CopySettings:
        source, target = dict(flow.source.consumer), dict(flow.target.producer)
        registry = None if flow.schemas is None else flow.schemas.source
        return cls(source, target, flow.transforms, FaultPolicy.of(flow), registry)


def _holders(registry: RegistryEndpoint, schema_id: int) -> list[str]:
    """The subjects of the source ``registry`` holding ``schema_id``: asked only for a refused record."""
    from mirrorflow.kafka.schema_registry import Registry  # noqa: PLC0415  lazy: 0.4 s to import, paid only here

    return Registry(registry, "source").holders(schema_id)


def copy_partitions(
    plans: Sequence[PartitionPlan], settings: CopySettings, grant: Grant, schema_ids: SchemaIdMap
) -> list[PartitionResult]:
    """Copy one group of planned partitions (one Spark task's) in the open transaction of ``grant``,
    mapping ``schema_ids`` (their plan's); one result per planned partition."""
    if not plans:
        return []
    with BatchCopy(plans, settings, grant, schema_ids) as copy:
        return copy.run()


def open_connections(settings: CopySettings) -> None:
    """Open this process's connections to both clusters' brokers and leave them idle for its next
    copy (``kept_open``), which then pays no connection set-up."""
    for side, props in (("source", settings.source), ("target", settings.target)):
        with kept_open(props, side, ()) as connection:
            connection.connect_brokers()


def copy_result(plan: Plan, results: Iterable[PartitionResult]) -> CopyResult:
    """The copy's result, in plan order."""
    done = {(r.topic, r.partition): r for r in results}
    return CopyResult(plan.flow, plan.run_id, tuple(done[(p.topic, p.partition)] for p in plan.partitions))
