"""The plan of one run: an explicit, immutable list of what to copy, and the result of executing it.

A plan is written once by the plan task and only read afterwards: every attempt of the copy task
executes the same plan, and the commit task checks the result against it. Both travel as JSON
documents (``core.documents``) in the run's folder (``app.run_folder``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from mirrorflow.core.documents import Document
from mirrorflow.core.metrics import Stats
from mirrorflow.core.schema_ids import NO_SCHEMA_IDS, SchemaIdMap
from mirrorflow.core.topic_partitions import TP
from mirrorflow.errors import PlanError

PLAN_VERSION = 1
RESULT_VERSION = 1


@dataclass(frozen=True)
class PartitionPlan:
    """Copy source offsets ``[source_start, source_end)`` of one partition to the same partition of
    ``remote_topic``, whose first record lands at ``target_start``.

    ``source_end`` never exceeds the partition's last stable offset at plan time, so a plan never
    reaches into open transactions. Offsets in the range may be missing (compaction, transaction
    markers, aborted records): only records that exist are copied, in offset order.
    """

    topic: str
    partition: int
    source_start: int
    source_end: int
    remote_topic: str
    target_start: int

    def __post_init__(self) -> None:
        if not 0 <= self.source_start < self.source_end:
            raise PlanError(
                f"{self.topic}-{self.partition}: source range [{self.source_start}, {self.source_end}) "
                "is empty or negative"
            )
        if self.target_start < 0:
            raise PlanError(f"{self.topic}-{self.partition}: negative target start {self.target_start}")


@dataclass(frozen=True)
class SourceGap:
    """Source offsets ``[source_start, source_end)`` of one partition that were deleted from the
    source (retention, delete-records) before they were mirrored, skipped with
    ``mirrorflow.on.source.data.loss = skip``.

    On the target the gap spans ``[target_start, target_end)``: records an interrupted attempt had
    copied from the lost range before it was deleted (usually none). Progress crosses the gap from
    (``source_start``, ``target_start``) to (``source_end``, ``target_end``), where the first record
    after the gap lands. With the batch log, gaps tile the partition's mirrored source offsets.
    """

    topic: str
    partition: int
    source_start: int
    source_end: int
    target_start: int
    target_end: int

    def __post_init__(self) -> None:
        if not 0 <= self.source_start < self.source_end or not 0 <= self.target_start <= self.target_end:
            raise PlanError(
                f"{self.topic}-{self.partition}: gap source [{self.source_start}, {self.source_end}) "
                f"target [{self.target_start}, {self.target_end}) is empty or negative"
            )

    def __str__(self) -> str:
        return offset_range(self.topic, self.partition, self.source_start, self.source_end)


def offsets_in(stretches: Iterable[tuple[int, int]]) -> int:
    """How many offsets the stretches ``[start, end)`` cover (a batch's or range's target gaps)."""
    return sum(end - start for start, end in stretches)


def offset_range(topic: str, partition: int, start: int, end: int) -> str:
    """``orders-0 [120, 300) (180 offsets)``: how messages name a range of a partition's offsets."""
    return f"{topic}-{partition} [{start}, {end}) ({end - start} offsets)"


@dataclass(frozen=True)
class PartitionState:
    """What the planner saw of one source partition: used for lag reporting after the copy.
    ``committed`` is where this run starts: the committed position, or the end of a skipped gap."""

    topic: str
    partition: int
    remote_topic: str
    log_start: int
    end: int
    committed: int

    @property
    def lag(self) -> int:
        return self.end - self.committed


@dataclass(frozen=True)
class Writer:
    """The producer id of the flow's transactional id on its target cluster, with the epoch one copy
    attempt fenced: every older epoch is refused from then on (``kafka.transactions``)."""

    producer_id: int
    producer_epoch: int


def transactional_id(flow: str) -> str:
    """The transactional id every copy of ``flow`` writes under: one per flow, so that each attempt's
    fence cuts off every earlier one."""
    return f"mirrorflow.{flow}"


@dataclass(frozen=True)
class Grant:
    """What a copy task writes as, in one open transaction: the flow's transactional id, the writer
    its attempt fenced, and the first sequence of each remote partition in the transaction (the
    records the writer's earlier transactions of the epoch wrote there; 0 for the others)."""

    transactional_id: str
    writer: Writer
    sequences: tuple[tuple[str, int, int], ...] = ()
    # When (epoch seconds) the tasks stop reading further source records, well inside the
    # transaction's timeout: what they read by then is written and committed, the rest is the next
    # copy's. 0: no deadline.
    deadline: float = 0.0
    # When (epoch seconds) the transaction's coordinator aborts it: a batch the target keeps refusing
    # is not resent past it. 0: never.
    expires: float = 0.0

    def first_sequence(self, remote_topic: str, partition: int) -> int:
        return next((s for t, p, s in self.sequences if (t, p) == (remote_topic, partition)), 0)


# Planned records that make a second Spark task worth its start (see ``Plan.task_count``).
RECORDS_PER_TASK = 10_000


@dataclass(frozen=True)
class Plan(Document):
    marker = ("version", PLAN_VERSION)
    what = default_source = "plan"
    remedy = "re-run the plan task"

    flow: str
    run_id: str
    created_at: str
    partitions: tuple[PartitionPlan, ...]
    states: tuple[PartitionState, ...] = field(default=())
    gaps: tuple[SourceGap, ...] = field(default=())
    # Only heartbeats are planned: the plan task copies them itself, without starting Spark.
    in_process: bool = False
    # Only some of the flow's topics were planned (a run's topics option): the plan does not measure
    # the whole flow, so its commit proves no recovery point (``core.recovery_point``).
    narrowed: bool = False
    # The schema ids the copy maps, as the run's schema sync left them (``core.schema_ids``): a retry
    # maps with the same ones.
    schema_ids: SchemaIdMap = NO_SCHEMA_IDS

    def __post_init__(self) -> None:
        seen: set[TP] = set()
        for p in self.partitions:
            if (p.topic, p.partition) in seen:
                raise PlanError(f"{self.flow}: partition {p.topic}-{p.partition} planned twice")
            seen.add((p.topic, p.partition))
        gaps: dict[TP, SourceGap] = {}
        for g in self.gaps:
            if (g.topic, g.partition) in gaps:
                raise PlanError(f"{self.flow}: partition {g.topic}-{g.partition} has two gaps in one plan")
            gaps[(g.topic, g.partition)] = g
        for p in self.partitions:
            gap = gaps.get((p.topic, p.partition))
            if gap is not None and (gap.source_end, gap.target_end) != (p.source_start, p.target_start):
                raise PlanError(
                    f"{self.flow}: {p.topic}-{p.partition} is planned from (source {p.source_start}, "
                    f"target {p.target_start}), not from the end of its gap {gap}"
                )

    @property
    def max_records(self) -> int:
        return sum(p.source_end - p.source_start for p in self.partitions)

    @property
    def log_starts(self) -> dict[TP, int]:
        """Each planned source partition's log start, as the planner read it."""
        return {(s.topic, s.partition): s.log_start for s in self.states}

    def task_count(self, cores: int) -> int:
        """How many Spark tasks copy this plan: one per core, but one per ``RECORDS_PER_TASK``
        planned records at most. A second task costs about 40 ms of scheduling in a running
        application, what a task copies of some 10,000 records in the time (a DR window's
        micro-batches are mostly smaller)."""
        return max(1, min(cores, -(-self.max_records // RECORDS_PER_TASK)))

    def task_groups(self, tasks: int) -> list[tuple[PartitionPlan, ...]]:
        """The planned partitions spread over at most ``tasks`` groups of about equal planned size
        (largest first, each onto the least loaded group), each group in plan order. One Spark task
        copies one group: per-task set-up is paid per group, not per partition."""
        groups: list[list[PartitionPlan]] = [[] for _ in range(max(1, min(tasks, len(self.partitions))))]
        loads = [0] * len(groups)
        for p in sorted(self.partitions, key=lambda p: p.source_start - p.source_end):
            least = loads.index(min(loads))
            groups[least].append(p)
            loads[least] += p.source_end - p.source_start
        order = {(p.topic, p.partition): i for i, p in enumerate(self.partitions)}
        return [tuple(sorted(g, key=lambda p: order[p.topic, p.partition])) for g in groups if g]

    @classmethod
    def _build(cls, raw: dict[str, Any]) -> Plan:
        return cls(
            flow=raw["flow"],
            run_id=raw["run_id"],
            created_at=raw["created_at"],
            partitions=tuple(PartitionPlan(**p) for p in raw["partitions"]),
            states=tuple(PartitionState(**s) for s in raw["states"]),
            # Absent from plans written before gaps were recorded: those have none.
            gaps=tuple(SourceGap(**g) for g in raw.get("gaps", ())),
            in_process=bool(raw.get("in_process", False)),
            narrowed=bool(raw.get("narrowed", False)),
            # Absent from plans written before schemas travelled: those map none.
            schema_ids=SchemaIdMap.of(raw["schema_ids"]) if "schema_ids" in raw else NO_SCHEMA_IDS,
        )

    def check_belongs_to(self, flow: str, run_id: str, source: str) -> None:
        """Refuse a plan written for another flow or run: executing it would copy the wrong ranges."""
        if (self.flow, self.run_id) != (flow, run_id):
            raise PlanError(
                f"{source} belongs to flow {self.flow!r} run {self.run_id!r}, not flow {flow!r} run "
                f"{run_id!r}; re-run the plan task of this run"
            )


@dataclass(frozen=True)
class PartitionFailure:
    """Why one partition of a copy failed alone (``mirrorflow.on.partition.error = isolate``): the
    error's class name (``mirrorflow.errors``) and message."""

    kind: str
    message: str


@dataclass(frozen=True)
class PartitionResult:
    """What the copy did for one planned partition.

    ``records`` counts every record read from the source range, ``skipped`` those found already on
    the target from an earlier attempt of the same plan. The records occupy target offsets
    ``[target_start, target_end)`` outside ``target_gaps`` (as ``core.progress.Batch`` has them).
    ``sync_points`` lists (source offset, target offset) for each record whose source offset is not
    the previous one plus one (the first record counts against ``source_start``): between sync
    points and target gaps the mapping is arithmetic. ``record_age`` and
    ``replication_latency`` cover the records this attempt wrote (see ``mirrorflow.core.metrics``), over
    ``write_ms`` from the first one received to the last one acknowledged. A result with a
    ``failure`` copied nothing that may be committed: its counts are 0. ``source_end`` is where a
    copy stopped at its transaction's deadline (``Grant.deadline``), before the planned end: it
    copied ``[source_start, source_end)``, and the next copy starts there. None: the planned end.
    ``appended`` counts the records this attempt's writer appended to the remote partition in its
    transaction, also for a result with a ``failure`` (they commit with the others' under isolate):
    the sequences it used there.
    """

    topic: str
    partition: int
    records: int
    skipped: int
    bytes: int
    target_start: int
    sync_points: tuple[tuple[int, int], ...] = ()
    target_gaps: tuple[tuple[int, int], ...] = ()
    record_age: Stats = field(default_factory=Stats)
    replication_latency: Stats = field(default_factory=Stats)
    write_ms: int = 0
    failure: PartitionFailure | None = None
    source_end: int | None = None
    appended: int = 0

    @property
    def target_end(self) -> int:
        return self.target_start + self.records + offsets_in(self.target_gaps)

    def copied_to(self, plan: PartitionPlan) -> int:
        """Where the copy of ``plan`` ended on the source: where it stopped, or the planned end."""
        return plan.source_end if self.source_end is None else self.source_end


@dataclass(frozen=True)
class CopyResult(Document):
    marker = ("version", RESULT_VERSION)
    what, default_source = "copy result", "result"
    remedy = "re-run the copy task"

    flow: str
    run_id: str
    partitions: tuple[PartitionResult, ...]

    @classmethod
    def _build(cls, raw: dict[str, Any]) -> CopyResult:
        return cls(
            flow=raw["flow"],
            run_id=raw["run_id"],
            partitions=tuple(
                PartitionResult(
                    **{
                        **p,
                        "sync_points": tuple(tuple(s) for s in p["sync_points"]),
                        "target_gaps": tuple(tuple(g) for g in p.get("target_gaps", ())),
                        "record_age": Stats(**p["record_age"]),
                        "replication_latency": Stats(**p["replication_latency"]),
                        "failure": PartitionFailure(**p["failure"]) if p.get("failure") else None,
                    }
                )
                for p in raw["partitions"]
            ),
        )
