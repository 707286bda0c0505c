"""The status page's values: per flow, its recent runs, where each partition stands, how fresh it is,
its checkpoints, gaps, failed partitions and recovery point, and the whole as JSON-ready values.
``app.status`` builds them; the status page renders them.

Invariant: every value is frozen: a ``FlowStatus`` is a snapshot, safe to render from any thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from mirrorflow.core.progress import RecordedGap
from mirrorflow.core.recovery_point import RecoveryPoint, RecoveryStep
from mirrorflow.store.read_model import PartitionErrorRecord

# Minutes of recovery point history shown: a day of a DR flow's.
HISTORY_LIMIT = 1440

# ------------------------------------------------------------------------------------------ values


@dataclass(frozen=True)
class AirflowRun:
    """One DAG run of a flow as Airflow records it. ``started_at``: when it started, or was queued
    if it has not started; ``failed_tasks``: its tasks in state failed, in task order."""

    run_id: str
    state: str
    started_at: datetime | None = None
    ended_at: datetime | None = None
    failed_tasks: tuple[str, ...] = ()


@dataclass(frozen=True)
class Freshness:
    """Age of the newest heartbeat mirrored to the target (``<source>.heartbeats``), read when the
    status was built. ``age_seconds`` is set exactly when ``state`` is ``measured``."""

    state: str  # measured | none yet | disabled | unknown
    age_seconds: float | None = None
    detail: str = ""

    @property
    def text(self) -> str:
        if self.state == "measured" and self.age_seconds is not None:
            return f"{self.age_seconds:.1f} s"
        if self.state == "none yet":
            return "no heartbeat mirrored yet"
        if self.state == "disabled":
            return "heartbeats disabled (emit.heartbeats.enabled = false)"
        return f"unknown ({self.detail})" if self.detail else "unknown"


@dataclass(frozen=True)
class PartitionStatus:
    """One source partition the flow mirrors. ``next_*_offset``: committed progress; ``records`` and
    ``bytes``: everything committed so far; ``lag``: offsets left to copy as measured by run
    ``lag_run_id`` (``None`` when no run left metrics for it: it never lagged); latency: of the last
    run that wrote to it, ``None`` if none did."""

    topic: str
    partition: int
    remote_topic: str
    next_source_offset: int
    next_target_offset: int
    records: int
    bytes: int
    lag: int
    lag_run_id: str | None
    replication_latency_max_ms: int | None
    lost_offsets: int


@dataclass(frozen=True)
class RunStatus:
    """One run, newest first in ``FlowStatus.runs``. ``records``, ``bytes``, ``skipped``: what it
    committed (0 if it committed nothing); ``write_ms``: its longest partition write; ``lag``: offsets
    left after it on the partitions it measured (``None`` if it committed no metrics); ``error``:
    the failure its copy noted or the Airflow tasks that failed."""

    run_id: str
    state: str
    started_at: datetime | None
    committed_at: datetime | None
    planned_partitions: int | None
    records: int
    bytes: int
    skipped: int
    write_ms: int
    lag: int | None
    gaps: int
    error: str | None = None
    failed_tasks: tuple[str, ...] = ()

    @property
    def records_per_second(self) -> float | None:
        """Records written per second: partitions are written in parallel, so the run's written
        records over its longest partition write time."""
        written = self.records - self.skipped
        return written * 1000.0 / self.write_ms if self.write_ms > 0 else None


@dataclass(frozen=True)
class CheckpointStatus:
    """The last checkpoint emitted for a consumer group on one source partition: the group's
    committed ``upstream_offset`` and where it resumes on the remote topic."""

    group: str
    topic: str
    partition: int
    remote_topic: str
    upstream_offset: int
    downstream_offset: int
    emitted_at: datetime
    latency_ms: int | None


@dataclass(frozen=True)
class FlowStatus:
    """Everything the status page shows of one flow."""

    name: str
    dag_id: str
    source: str
    target: str
    locked_by: str | None
    partitions: tuple[PartitionStatus, ...]
    runs: tuple[RunStatus, ...]
    freshness: Freshness
    checkpoints_enabled: bool
    checkpoints: tuple[CheckpointStatus, ...]
    gaps: tuple[RecordedGap, ...]
    errors: tuple[str, ...] = field(default=())
    # Partitions the newest run left uncommitted on their own errors (isolate).
    failed_partitions: tuple[PartitionErrorRecord, ...] = field(default=())
    # Run folders holding a cutover report, newest first.
    cutover_reports: tuple[str, ...] = field(default=())
    recovery: RecoveryPoint = field(default=RecoveryPoint("unknown"))
    # Per minute, oldest first, at most ``HISTORY_LIMIT``.
    recovery_history: tuple[RecoveryStep, ...] = field(default=())

    @property
    def records(self) -> int:
        return sum(p.records for p in self.partitions)

    @property
    def bytes(self) -> int:
        return sum(p.bytes for p in self.partitions)

    @property
    def lag(self) -> int:
        return sum(p.lag for p in self.partitions)

    @property
    def topics(self) -> tuple[tuple[str, str], ...]:
        """(source topic, remote topic) of every mirrored topic, by source topic."""
        return tuple(sorted({(p.topic, p.remote_topic) for p in self.partitions}))

    @property
    def failed_runs(self) -> tuple[RunStatus, ...]:
        return tuple(r for r in self.runs if r.error is not None)


# ------------------------------------------------------------------------------------------- JSON


def as_json(statuses: Sequence[FlowStatus]) -> dict[str, Any]:
    """The statuses as JSON-ready values (times as ISO 8601 UTC), with the derived figures spelled
    out: per flow its totals and the freshness as shown, per run its records per second."""
    return {
        "flows": [
            {
                **_jsonable(asdict(s)),
                "records": s.records,
                "bytes": s.bytes,
                "lag": s.lag,
                "freshness": {**_jsonable(asdict(s.freshness)), "text": s.freshness.text},
                "recovery": {**_jsonable(asdict(s.recovery)), "text": s.recovery.text},
                "runs": [
                    {**_jsonable(asdict(r)), "records_per_second": r.records_per_second} for r in s.runs
                ],
            }
            for s in statuses
        ]
    }


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value
