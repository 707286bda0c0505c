"""A DR window: what its micro-batches did, and when the control-plane steps inside it are due.

``WindowSummary`` is the window's JSON document (the Airflow run's counts); ``Timers`` decides, from
MM2's intervals, which periodic steps a micro-batch does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from mirrorflow.core.documents import Document
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


@dataclass
class Timers:
    """Which periodic steps are due at ``now`` (seconds on a monotonic clock). A step is due at the
    first call and then once its interval has passed since it last ran; ``ran`` records a run."""

    intervals: Mapping[str, float]
    last: dict[str, float] = field(default_factory=dict)

    def due(self, step: str, now: float) -> bool:
        last = self.last.get(step)
        return last is None or now - last >= self.intervals[step]

    def ran(self, step: str, now: float) -> None:
        self.last[step] = now
