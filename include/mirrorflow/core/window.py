"""A DR window: what its micro-batches did, and when the control-plane steps inside it are due.

``WindowCounts`` is what the window's micro-batches did so far, a value each micro-batch replaces;
``WindowSummary`` the window's JSON document (the Airflow run's counts); ``Scheduler`` runs the
periodic steps (``Periodic``) at MM2's intervals between micro-batches, as MM2's ``Scheduler`` repeats
its tasks; ``StepTimes`` says where the window's time went.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from mirrorflow.core.documents import Document
from mirrorflow.core.report import PartitionReport, RunReport
from mirrorflow.core.topic_partitions import TP

WINDOW_VERSION = 1


@dataclass(frozen=True)
class WindowSummary(Document):
    """Counts of one window, the lag its last micro-batch left per partition, and the error that
    ended it early (``error``: the ``MirrorError`` class name and message), if any.

    ``micro_batches`` counts every plan made; ``spark_copies`` those copied in Spark (an empty plan,
    or one of heartbeats only, needs none). ``records`` and ``bytes`` count what was written.
    """

    marker = ("window_version", WINDOW_VERSION)
    what, default_source = "DR window summary", "window summary"
    remedy = "re-run the window task"

    flow: str
    run_id: str
    started_at: str
    ended_at: str
    micro_batches: int = 0
    spark_copies: int = 0
    records: int = 0
    bytes: int = 0
    checkpoints: int = 0
    lags: tuple[tuple[str, int, int], ...] = ()
    heartbeat_age_s: float | None = None
    error: tuple[str, str] | None = None
    # Seconds the window spent in each step (plan, copy, commit, checkpoints, heartbeats, topics, idle).
    step_seconds: tuple[tuple[str, float], ...] = ()
    # The window that took the flow over from this one (none: the window ended without a handover).
    successor: str | None = None

    @property
    def lag_by_partition(self) -> dict[TP, int]:
        return {(t, p): lag for t, p, lag in self.lags}

    def as_dict(self) -> dict[str, Any]:
        """The Airflow-facing counts (the run's XCom)."""
        return {
            "micro_batches": self.micro_batches,
            "spark_copies": self.spark_copies,
            "records": self.records,
            "bytes": self.bytes,
            "checkpoints": self.checkpoints,
            "lag": sum(lag for _, _, lag in self.lags),
            "heartbeat_age_s": self.heartbeat_age_s,
            "step_seconds": dict(self.step_seconds),
            "started_at": self.started_at,
            "ended_at": self.ended_at,
        }

    @classmethod
    def _build(cls, raw: dict[str, Any]) -> WindowSummary:
        fields = {k: v for k, v in raw.items() if k != "window_version"}
        error = fields.pop("error")
        return cls(
            **{
                **fields,
                "lags": tuple((str(t), int(p), int(lag)) for t, p, lag in fields["lags"]),
                "step_seconds": tuple((str(k), float(v)) for k, v in fields["step_seconds"]),
                "error": None if error is None else (str(error[0]), str(error[1])),
            }
        )


@dataclass
class StepTimes:
    """Seconds spent per step, measured with ``clock``: where a micro-batch's time goes."""

    clock: Callable[[], float]
    totals: dict[str, float] = field(default_factory=dict)

    @contextmanager
    def timed(self, step: str) -> Iterator[None]:
        started = self.clock()
        try:
            yield
        finally:
            self.totals[step] = self.totals.get(step, 0.0) + self.clock() - started

    def since(self, earlier: Mapping[str, float]) -> dict[str, float]:
        """The seconds per step spent after ``earlier`` (a copy of ``totals`` taken then)."""
        return {k: v - earlier.get(k, 0.0) for k, v in self.totals.items()}

    def as_tuple(self) -> tuple[tuple[str, float], ...]:
        return tuple((k, round(v, 3)) for k, v in self.totals.items())


def steps_text(spent: Mapping[str, float], at_least: float = 0.0) -> str:
    """``plan 1.6, copy 52.2``: the seconds of each step that took ``at_least``."""
    return ", ".join(f"{k} {v:.1f}" for k, v in spent.items() if v >= at_least)


class Periodic(StrEnum):
    """A step a DR window repeats between micro-batches, at its own interval; the value names it in
    the window's step times."""

    HEARTBEATS = "heartbeats"
    # The remote topics refreshed (created, configs and partitions synced, their schemas with them).
    TOPICS = "topics"
    ACLS = "acls"
    CHECKPOINTS = "checkpoints"
    # The micro-batches' batch-log rows merged (what a handover still has to merge is this long's).
    COALESCE = "coalesce"
    # A progress line logged and the metrics history written.
    PROGRESS = "progress"
    # The metrics file rewritten, and the recovery point an idle micro-batch proves recorded.
    RECOVERY = "recovery"
    # The newest mirrored heartbeat's age read (a consumer's round trips).
    HEARTBEAT_AGE = "heartbeat age"
    # The warning that the window goes on past its end, waiting for the next one.
    OVERRUN = "overrun"


@dataclass
class Scheduler:
    """When each periodic step is due at ``now`` (seconds on a monotonic clock): at the first call,
    then once its interval has passed since it last ran (``ran``). ``every`` gives a step its task,
    which ``run_due`` runs, timed under the step's name, when it is due; a step without a task is
    only asked (``due``) and told (``ran``)."""

    intervals: Mapping[Periodic, float]
    times: StepTimes
    last: dict[Periodic, float] = field(default_factory=dict)
    tasks: dict[Periodic, Callable[[], object]] = field(default_factory=dict)

    def every(self, step: Periodic, task: Callable[[], object]) -> None:
        self.tasks[step] = task

    def due(self, step: Periodic, now: float) -> bool:
        last = self.last.get(step)
        return last is None or now - last >= self.intervals[step]

    def ran(self, step: Periodic, now: float) -> None:
        self.last[step] = now

    def run_due(self, steps: Iterable[Periodic], now: float) -> None:
        """The tasks of ``steps`` that are due, in that order."""
        for step in steps:
            task = self.tasks.get(step)
            if task is not None and self.due(step, now):
                # Under the step's plain name: the totals end in the window's JSON summary.
                with self.times.timed(str(step)):
                    task()
                self.ran(step, now)


@dataclass(frozen=True)
class WindowCounts:
    """What a window's micro-batches did so far. ``micro_batches`` counts every plan made,
    ``spark_copies`` the copies run in Spark; ``records`` and ``bytes`` what was committed; ``lags``
    each partition's lag after the newest micro-batch; ``log_starts`` each source partition's log start
    as the newest plan read it (the batch log is pruned below); ``unrecorded`` each partition's figures
    since the metrics history was last written, under ``last_batch_id``, the newest micro-batch that
    committed."""

    micro_batches: int = 0
    spark_copies: int = 0
    records: int = 0
    bytes: int = 0
    checkpoints: int = 0
    lags: Mapping[TP, int] = field(default_factory=dict)
    log_starts: Mapping[TP, int] = field(default_factory=dict)
    unrecorded: Mapping[TP, PartitionReport] = field(default_factory=dict)
    last_batch_id: str | None = None

    def planned(self) -> WindowCounts:
        return replace(self, micro_batches=self.micro_batches + 1)

    def copied_in_spark(self) -> WindowCounts:
        return replace(self, spark_copies=self.spark_copies + 1)

    def checkpointed(self, emitted: int) -> WindowCounts:
        return replace(self, checkpoints=self.checkpoints + emitted)

    def lagging(self, report: RunReport) -> WindowCounts:
        """The lags the newest micro-batch left."""
        return replace(self, lags={(p.topic, p.partition): p.lag for p in report.partitions})

    def committed(self, report: RunReport, log_starts: Mapping[TP, int]) -> WindowCounts:
        """After a micro-batch committed ``report``, its plan having read ``log_starts``."""
        unrecorded = dict(self.unrecorded)
        for p in report.partitions:
            if p.records:
                key = (p.topic, p.partition)
                unrecorded[key] = unrecorded[key].then(p) if key in unrecorded else p
        return replace(
            self,
            records=self.records + sum(p.records for p in report.partitions),
            bytes=self.bytes + sum(p.bytes for p in report.partitions),
            log_starts={**self.log_starts, **log_starts},
            unrecorded=unrecorded,
            last_batch_id=report.run_id,
        )

    def to_record(self) -> list[PartitionReport]:
        """The metrics history's entries since it was last written: one per partition, summed, with
        the newest micro-batch's lag (also where it copied nothing)."""
        return [replace(p, lag=self.lags.get(tp, p.lag)) for tp, p in self.unrecorded.items()]

    def recorded(self) -> WindowCounts:
        return replace(self, unrecorded={})

    def progress_text(self, earlier: WindowCounts) -> str:
        """``12 micro-batches, 3400 records, lag 5``: since ``earlier``, and the lag now."""
        return (
            f"{self.micro_batches - earlier.micro_batches} micro-batches, "
            f"{self.records - earlier.records} records, lag {sum(self.lags.values())}"
        )
