"""What a copy's result commits and reports: the batch log rows it proves (``batches_for``, exactly
the plan's partitions or refused), and the report of the run: per partition and per topic, records,
bytes, rates, MM2's record age and replication latency, the lag left, the source gaps the run skipped
and the partitions that failed on their own."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from functools import reduce
from typing import Any

from mirrorflow.config.keys import ON_PARTITION_ERROR
from mirrorflow.core.metrics import Stats, rate
from mirrorflow.core.plan import CopyResult, PartitionFailure, Plan, SourceGap
from mirrorflow.core.progress import Batch
from mirrorflow.errors import PartitionsFailedError, PlanError


@dataclass(frozen=True)
class PartitionReport:
    """One source partition in a run. ``records`` were committed by the run (they match the batch
    log); ``skipped`` of them were found already on the target, written by an earlier attempt of the
    same plan, so only the others were measured. ``lag`` is what is left to copy: the source's last
    stable offset at plan time minus what is now committed."""

    topic: str
    partition: int
    remote_topic: str
    records: int = 0
    skipped: int = 0
    bytes: int = 0
    lag: int = 0
    record_age: Stats = field(default_factory=Stats)
    replication_latency: Stats = field(default_factory=Stats)
    write_ms: int = 0

    @property
    def written(self) -> int:
        return self.records - self.skipped

    def then(self, later: PartitionReport) -> PartitionReport:
        """This partition's figures followed by ``later``'s (a DR window's micro-batches summed up
        for its metrics history): counts and time add up, the lag is the later one."""
        return replace(
            later,
            records=self.records + later.records,
            skipped=self.skipped + later.skipped,
            bytes=self.bytes + later.bytes,
            record_age=self.record_age.merge(later.record_age),
            replication_latency=self.replication_latency.merge(later.replication_latency),
            write_ms=self.write_ms + later.write_ms,
        )

    @property
    def record_rate(self) -> float:
        return rate(self.written, self.write_ms)

    @property
    def byte_rate(self) -> float:
        # Bytes of skipped records cannot be told apart: the rate spreads all bytes over the records.
        return rate(self.bytes * self.written // self.records if self.records else 0, self.write_ms)


@dataclass(frozen=True)
class TopicReport:
    topic: str
    remote_topic: str
    partitions: int
    records: int
    skipped: int
    bytes: int
    lag: int


@dataclass(frozen=True)
class FailedPartition:
    """A partition the run left uncommitted on its own error (``mirrorflow.on.partition.error =
    isolate``)."""

    topic: str
    partition: int
    remote_topic: str
    failure: PartitionFailure

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}: {self.failure.kind}: {self.failure.message}"


@dataclass(frozen=True)
class RunReport:
    """``gaps``: source records deleted before they were mirrored, which the run skipped
    (``mirrorflow.on.source.data.loss = skip``); ``failed``: partitions left uncommitted on their
    own errors, which still lag by everything planned."""

    flow: str
    run_id: str
    partitions: tuple[PartitionReport, ...]
    gaps: tuple[SourceGap, ...] = ()
    failed: tuple[FailedPartition, ...] = ()

    @property
    def records(self) -> int:
        return sum(p.records for p in self.partitions)

    @property
    def topics(self) -> tuple[TopicReport, ...]:
        by_topic: dict[str, list[PartitionReport]] = {}
        for p in self.partitions:
            by_topic.setdefault(p.topic, []).append(p)
        return tuple(
            TopicReport(
                topic,
                ps[0].remote_topic,
                len(ps),
                sum(p.records for p in ps),
                sum(p.skipped for p in ps),
                sum(p.bytes for p in ps),
                sum(p.lag for p in ps),
            )
            for topic, ps in sorted(by_topic.items())
        )

    def as_dict(self) -> dict[str, Any]:
        """The run in brief (per topic, and each source gap skipped, which is rare): small enough for
        an XCom whatever the partition count."""
        latency = _merged(p.replication_latency for p in self.partitions)
        age = _merged(p.record_age for p in self.partitions)
        return {
            "flow": self.flow,
            "run_id": self.run_id,
            "records": self.records,
            "bytes": sum(p.bytes for p in self.partitions),
            "lag": sum(p.lag for p in self.partitions),
            "replication_latency_ms_max": latency.max if latency.count else None,
            "record_age_ms_max": age.max if age.count else None,
            "topics": [asdict(t) for t in self.topics],
            "gaps": [asdict(g) for g in self.gaps],
            "failed_partitions": [
                {
                    "topic": f.topic,
                    "partition": f.partition,
                    "error": f.failure.kind,
                    "message": f.failure.message,
                }
                for f in self.failed
            ],
        }

    def table(self) -> str:
        """One row per partition that copied records or still lags (idle ones are left out), then
        the flow's total: records per second written, replication latency and record age in ms;
        then the source gaps skipped, if any."""
        head = (
            "topic", "partition", "records", "skipped", "bytes", "rec/s", "lat avg ms", "lat max ms",
            "age max ms", "lag left",
        )  # fmt: skip
        rows = [(p.topic, str(p.partition), *_figures(p)) for p in self.partitions if p.records or p.lag]
        total = PartitionReport(
            "",
            -1,
            "",
            self.records,
            sum(p.skipped for p in self.partitions),
            sum(p.bytes for p in self.partitions),
            sum(p.lag for p in self.partitions),
            _merged(p.record_age for p in self.partitions),
            _merged(p.replication_latency for p in self.partitions),
        )
        rows.append(("total", "", *_figures(total)))
        lines = text_table(head, rows)
        if self.gaps:
            lines.append("source records lost before they were mirrored, skipped:")
            lines.extend(f"  {g}" for g in self.gaps)
        if self.failed:
            lines.append("partitions that failed on their own, nothing of them committed:")
            lines.extend(f"  {f}" for f in self.failed)
        return "\n".join(lines)


def text_table(head: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    """Lines of a left-aligned plain-text table, for task logs."""
    table = [head, *rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(head))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in table]


def markdown_table(head: Sequence[str], rows: Iterable[Sequence[object]]) -> list[str]:
    """Lines of a Markdown table; cells are escaped (pipes, backslashes, line breaks)."""
    return [
        "| " + " | ".join(head) + " |",
        "|" + "|".join("---" for _ in head) + "|",
        *("| " + " | ".join(_markdown_cell(v) for v in row) + " |" for row in rows),
    ]


def _markdown_cell(value: object) -> str:
    return str(value).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def _figures(p: PartitionReport) -> tuple[str, ...]:
    lat = p.replication_latency
    return (
        str(p.records),
        str(p.skipped),
        str(p.bytes),
        f"{p.record_rate:.0f}" if p.write_ms else "",
        f"{lat.avg:.0f}" if lat.avg is not None else "",
        str(lat.max) if lat.count else "",
        str(p.record_age.max) if p.record_age.count else "",
        str(p.lag),
    )


def _merged(stats: Iterable[Stats]) -> Stats:
    return reduce(Stats.merge, stats, Stats())


def build_report(plan: Plan, result: CopyResult) -> RunReport:
    """Every partition the planner saw, in topic and partition order."""
    planned = {(p.topic, p.partition): p for p in plan.partitions}
    copied = {(r.topic, r.partition): r for r in result.partitions}
    partitions = []
    failed = []
    for s in sorted(plan.states, key=lambda s: (s.topic, s.partition)):
        p = planned.get((s.topic, s.partition))
        r = copied[(s.topic, s.partition)] if p is not None else None
        if r is not None and r.failure is not None:
            failed.append(FailedPartition(s.topic, s.partition, s.remote_topic, r.failure))
        if p is None or r is None or r.failure is not None:
            partitions.append(PartitionReport(s.topic, s.partition, s.remote_topic, lag=s.lag))
            continue
        partitions.append(
            PartitionReport(
                s.topic,
                s.partition,
                s.remote_topic,
                r.records,
                r.skipped,
                r.bytes,
                s.end - r.copied_to(p),
                r.record_age,
                r.replication_latency,
                r.write_ms,
            )
        )
    return RunReport(plan.flow, plan.run_id, tuple(partitions), plan.gaps, tuple(failed))


def batches_for(plan: Plan, result: CopyResult) -> list[Batch]:
    """The batch log rows for a result (none for a partition that failed alone); refuses a result
    that does not match its plan exactly."""
    if (result.flow, result.run_id) != (plan.flow, plan.run_id):
        raise PlanError(
            f"copy result is for flow {result.flow!r} run {result.run_id!r}, the plan for flow {plan.flow!r} "
            f"run {plan.run_id!r}; re-run the copy task"
        )
    by_tp = {(r.topic, r.partition): r for r in result.partitions}
    if len(by_tp) != len(result.partitions):
        raise PlanError("copy result lists a partition twice; re-run the copy task")
    batches = []
    for p in plan.partitions:
        r = by_tp.get((p.topic, p.partition))
        end = p.source_end if r is None else r.copied_to(p)
        if (
            r is None
            or r.target_start != p.target_start
            or not p.source_start <= end <= p.source_end
            or (end == p.source_start and r.target_end != p.target_start)
        ):
            raise PlanError(
                f"copy result does not match the plan for {p.topic}-{p.partition}; re-run the copy task"
            )
        if r.failure is not None or end == p.source_start:
            # A failed partition, or one whose copy stopped at its deadline before a record.
            continue
        batches.append(
            Batch(
                topic=p.topic,
                partition=p.partition,
                remote_topic=p.remote_topic,
                source_start=p.source_start,
                source_end=end,
                target_start=p.target_start,
                target_end=r.target_end,
                records=r.records,
                bytes=r.bytes,
                sync_points=r.sync_points,
                target_gaps=r.target_gaps,
            )
        )
    if len(by_tp) != len(plan.partitions):
        raise PlanError("copy result holds partitions the plan does not; re-run the copy task")
    return batches


def partitions_failed(flow: str, run_id: str, failed: Sequence[FailedPartition]) -> PartitionsFailedError:
    """The error of a run that committed all but the ``failed`` partitions."""
    listed = "; ".join(str(f) for f in failed)
    return PartitionsFailedError(
        f"flow {flow} run {run_id}: {len(failed)} partitions failed and were left for the next "
        f"run ({ON_PARTITION_ERROR} = isolate), every other partition was committed. {listed}. Fix what "
        "each error names; the next run copies the failed partitions' records again, nothing twice"
    )
