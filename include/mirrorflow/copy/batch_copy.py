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
  for ours; ours are skipped, never written twice (this module). This attempt's records follow from
  the partition's end, and every acknowledgement must place them there (``produce_loop``).
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
  lost source data still fail the task (this module's ``give_up``; ``produce_loop`` classifies the
  target's answers).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from functools import partial
from typing import Any

from mirrorflow.config.model import FlowConfig
from mirrorflow.config.schemas import RegistryEndpoint
from mirrorflow.config.transforms import TransformConfig
from mirrorflow.copy.partition_copy import PartitionCopy
from mirrorflow.copy.produce_loop import ProduceLoop
from mirrorflow.copy.source_reader import BUFFER_BYTES, Budget, SourceReader, transformed
from mirrorflow.core.plan import CopyResult, Grant, PartitionPlan, PartitionResult, Plan
from mirrorflow.core.schema_ids import SchemaIdMap
from mirrorflow.core.transforms import Chain, Encodable
from mirrorflow.errors import MirrorError, SourceDataLostError, TargetStateError, TransientError
from mirrorflow.kafka.connection import READ_COMMITTED, READ_UNCOMMITTED, TIMEOUT_S, end_offsets, kept_open
from mirrorflow.kafka.fetched_batches import SourceRecord
from mirrorflow.kafka.record_reads import first_committed, records_of


class BatchCopy:
    """The copy of one group of planned partitions; use as a context manager."""

    def __init__(
        self, plans: Sequence[PartitionPlan], settings: CopySettings, grant: Grant, schema_ids: SchemaIdMap
    ) -> None:
        self.plans = plans
        self.grant = grant
        self.isolate = settings.isolate
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
        # start: one fetch round over every partition shows it, sparing a read per partition.
        behind = {
            (p.remote_topic, p.partition): p.target_start
            for p in self.plans
            if ends[(p.remote_topic, p.partition)] > p.target_start
        }
        committed_from = first_committed(self.target, behind)
        parts = []
        for plan in self.plans:
            remote = (plan.remote_topic, plan.partition)
            first = self.grant.first_sequence(*remote)
            part = PartitionCopy(plan, 0, plan.source_start, first_sequence=first, first_new=ends[remote])
            if committed_from.get(remote, ends[remote]) < ends[remote]:
                try:
                    self._check_written(part, ends[remote])
                except MirrorError as exc:
                    self._give_up(part, exc)
            parts.append(part)
        reader = SourceReader(self.source, parts, self.budget, self.chain, self._give_up, self.grant.deadline)
        reader.start()
        try:
            ProduceLoop(self.target, self.budget, self._give_up).write(reader, parts, self.grant)
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

    def _give_up(self, part: PartitionCopy, error: MirrorError) -> None:
        """Fail the partition alone (``isolate``) on an error a retry would meet again; anything
        else, or without ``isolate``, fails the task."""
        if not self.isolate or isinstance(error, (TransientError, SourceDataLostError)):
            raise error
        if part.failed is None:
            part.failed = error

    def _check_written(self, part: PartitionCopy, end: int) -> None:
        """The committed records between the planned target start and the partition's ``end`` (an
        earlier attempt's, whose transaction committed before the offsets table moved) must be the
        first planned records: they are counted where they are, and the source position moves past
        them. The rest of that stretch holds no record a committed read sees (transaction markers,
        aborted attempts' records). Both sides are read a batch at a time, as far as compared."""
        plan = part.plan
        planned = self._planned_records(part)
        wanted: deque[Encodable] = deque()
        found = 0
        for got in records_of(self.target, part.remote, plan.target_start, end, READ_COMMITTED):
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
                        "Nothing was committed; stop the other writer, then reset the flow's progress for "
                        "that topic to mirror it again."
                    )
            part.count([r.offset for r in want], [r.offset for r in got])
            found += len(got)
            part.position = want[-1].offset + 1
        part.already_written = found

    def _planned_records(self, part: PartitionCopy) -> Iterator[Sequence[Encodable]]:
        """The records the plan writes for the partition (after the transforms), a batch at a time."""
        plan = part.plan
        for read in records_of(self.source, part.tp, plan.source_start, plan.source_end, READ_COMMITTED):
            yield transformed(self.chain, part.tp, read)

    def _check_result(self, part: PartitionCopy, end: int) -> None:
        plan = part.plan
        if part.already_written > part.records:
            raise _too_many(plan, part.already_written, part.records)
        expected = part.first_new + part.records - part.already_written
        if end != expected:
            raise TargetStateError(
                f"remote partition {plan.remote_topic}-{plan.partition} ends at {end}, expected {expected} "
                "after this copy: something else writes to the remote topic. Nothing was committed; stop "
                "the other writer."
            )


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
        "writes to the remote topic. Nothing was committed; stop the other writer."
    )


@dataclass(frozen=True)
class CopySettings:
    """What a copy needs of its flow, as plain values that travel to Spark's executors: the
    source's consumer and the target's producer settings, the transforms, whether a partition's
    own error fails only that partition (``mirrorflow.on.partition.error = isolate``), and the source
    schema registry, asked which subjects hold the schema id of a record the copy refuses."""

    source: dict[str, str]
    target: dict[str, str]
    transforms: tuple[TransformConfig, ...] = ()
    isolate: bool = False
    source_registry: RegistryEndpoint | None = None

    @classmethod
    def of(cls, flow: FlowConfig) -> CopySettings:
        return cls(
            dict(flow.source.consumer),
            dict(flow.target.producer),
            flow.transforms,
            flow.settings.on_partition_error == "isolate",
            None if flow.schemas is None else flow.schemas.source,
        )


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
