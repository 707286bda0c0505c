"""The status page's view model: per flow, its recent runs, where each partition stands (committed
position, records copied, lag left), how fresh the mirror is (age of the newest mirrored heartbeat),
throughput per run, its checkpoints, the source gaps it skipped, and what went wrong.

Built from the config, the offsets table (with each run's plan and the copy's failure note) and,
when given, Airflow's record of each flow's DAG runs, passed in as plain ``AirflowRun`` values: this
module never imports airflow.

Invariants:

- Reading changes nothing: every query is a read transaction, and an
  offsets database that does not exist yet (SQLite file absent) is shown as "no run yet" instead of
  being created. (The store's schema check on first use still runs in a write transaction; on a
  database the runs created it finds every table and creates none.)
- A flow whose status cannot be read (offsets database down, a damaged row) is still listed, with the
  error in ``FlowStatus.errors``; the other flows are unaffected.
- Record and byte counts come from the batch log, so they only grow; a partition's lag is the one
  measured by the newest run that committed metrics for it (0 when no run ever left it lagging).
- The heartbeat age is read live from the target with a bounded wait; past the bound or on any
  error it is ``unknown``, never a stale or guessed value. The recovery point is the stored bound
  (``core.recovery_point``), 0 only if the source, read live within the same wait, holds nothing more.

The values it builds, frozen snapshots, and their JSON form are ``app.status_values``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from functools import partial

from mirrorflow.app.cutover import report_files
from mirrorflow.app.live_reads import LiveReads, why_missing
from mirrorflow.app.status_values import (
    HISTORY_LIMIT,
    AirflowRun,
    CheckpointStatus,
    FlowStatus,
    Freshness,
    PartitionStatus,
    RunStatus,
)
from mirrorflow.config.model import FlowConfig, MirrorConfig
from mirrorflow.core.plan import Plan
from mirrorflow.core.progress import as_utc, is_holder_of
from mirrorflow.core.recovery_point import RecoveryPoint
from mirrorflow.core.topic_partitions import TP
from mirrorflow.errors import MirrorError
from mirrorflow.kafka.admin import ClusterAdmin
from mirrorflow.kafka.heartbeats import freshness_seconds
from mirrorflow.store.checkpoint_log import emitted_checkpoints, latest_checkpoint_metrics
from mirrorflow.store.flow_lock import lock_info
from mirrorflow.store.offsets_store import OffsetsStore
from mirrorflow.store.read_model import RunTotals
from mirrorflow.store.run_documents import describe, find_document, recent_documents
from mirrorflow.store.status_reads import (
    failed_partitions,
    newest_lags,
    recovery_history,
    recovery_point,
    run_totals,
    totals,
)

__all__ = ["LIVE_TIMEOUT_SECONDS", "RUN_LIMIT", "flow_statuses"]

RUN_LIMIT = 20
# Live reads (heartbeat age, the source's ends): long enough for a healthy cluster on another
# continent, short enough to keep the page responsive.
LIVE_TIMEOUT_SECONDS = 5.0

HeartbeatReader = Callable[[FlowConfig], float | None]
# Whether the flow's source holds nothing past the committed next source offsets given.
SourceCheck = Callable[[FlowConfig, Mapping[TP, int]], bool]


def caught_up_now(flow: FlowConfig, committed: Mapping[TP, int]) -> bool:
    """The live half of the recovery point (``core.recovery_point``): whether every partition of the
    topics ``flow`` selects on its source ends (last stable offset, as plans read it) at its
    ``committed`` next source offset, or is empty and never mirrored."""
    with ClusterAdmin(flow.source) as source:
        topics = [t for t in source.topics() if flow.should_replicate_topic(t)]
        tps = [(t, p) for t, d in source.describe_topics(topics).items() for p in range(d.partitions)]
        ends = source.latest_offsets(tps)
        starts = source.earliest_offsets([tp for tp in tps if tp not in committed])
    return all(ends[tp] <= committed.get(tp, starts.get(tp, 0)) for tp in tps)


# ---------------------------------------------------------------------------------------- building


def flow_statuses(
    config: MirrorConfig,
    airflow_runs: Mapping[str, Sequence[AirflowRun]] | None = None,
    *,
    flows: Collection[str] | None = None,
    heartbeat: HeartbeatReader | None = freshness_seconds,
    source_check: SourceCheck | None = caught_up_now,
    live_timeout: float = LIVE_TIMEOUT_SECONDS,
    run_limit: int = RUN_LIMIT,
) -> tuple[FlowStatus, ...]:
    """The status of each enabled flow (only those named in ``flows`` if given), in config order.

    ``airflow_runs``: per flow name, its recent DAG runs as Airflow records them. ``heartbeat``
    reads a flow's freshness (``None``: not measured, shown as unknown), ``source_check`` whether
    its source holds anything past committed progress (``None``: not checked); all flows' live
    reads run at once, all within ``live_timeout`` seconds.
    """
    chosen = [f for f in config.flows if flows is None or f.name in flows]
    deadline = time.monotonic() + live_timeout
    # Heartbeats are read while the offsets table is: the page waits for the slower, not both.
    beats = LiveReads(
        {f.name: partial(heartbeat, f) for f in chosen if heartbeat is not None and f.emit_heartbeats},
        deadline,
    )
    statuses = _read_all(config, chosen, airflow_runs or {}, run_limit)
    by_name = {f.name: f for f in chosen}
    checks = LiveReads(
        {
            s.name: partial(
                source_check,
                by_name[s.name],
                {(p.topic, p.partition): p.next_source_offset for p in s.partitions},
            )
            for s in statuses
            if source_check is not None and s.recovery.state != "unknown"
        },
        deadline,
    )
    ages, caught_up = beats.collect(), checks.collect()
    now = datetime.now(UTC)
    reports = {f.name: tuple(p.parent.name for p in report_files(config, f.name)) for f in chosen}
    return tuple(
        replace(
            s,
            freshness=_freshness(by_name[s.name], heartbeat, ages.get(s.name), live_timeout),
            recovery=_recovery(s.recovery, now, source_check, caught_up.get(s.name), live_timeout),
            cutover_reports=reports[s.name],
        )
        for s in statuses
    )


def _read_all(
    config: MirrorConfig,
    chosen: Sequence[FlowConfig],
    runs_of: Mapping[str, Sequence[AirflowRun]],
    run_limit: int,
) -> list[FlowStatus]:
    if OffsetsStore.absent(config.offsets_db_url):
        # Nothing committed yet; opening the store would create the file.
        return [_empty(f, runs_of.get(f.name, ()), None, config, run_limit) for f in chosen]
    try:
        store = OffsetsStore(config.offsets_db_url)
    except MirrorError as error:
        note = f"{type(error).__name__}: {error}"
        return [_empty(f, runs_of.get(f.name, ()), note, config, run_limit) for f in chosen]
    with store:
        return [_flow_status(config, f, store, runs_of.get(f.name, ()), run_limit) for f in chosen]


def _flow_status(
    config: MirrorConfig,
    flow: FlowConfig,
    store: OffsetsStore,
    airflow_runs: Sequence[AirflowRun],
    run_limit: int,
) -> FlowStatus:
    try:
        return _read_flow(config, flow, store, airflow_runs, run_limit)
    except MirrorError as error:
        return _empty(flow, airflow_runs, f"{type(error).__name__}: {error}", config, run_limit)


def _empty(
    flow: FlowConfig,
    airflow_runs: Sequence[AirflowRun],
    error: str | None,
    config: MirrorConfig,
    run_limit: int,
) -> FlowStatus:
    """A flow without offsets table (none yet, or ``error`` reading it): what Airflow tells."""
    runs = _merge_runs(airflow_runs, {}, {}, {}, None, run_limit)
    return FlowStatus(
        name=flow.name,
        dag_id=flow.dag_id,
        source=flow.source.alias,
        target=flow.target.alias,
        locked_by=None,
        partitions=(),
        runs=runs,
        freshness=_NOT_READ,
        checkpoints_enabled=flow.emit_checkpoints,
        checkpoints=(),
        gaps=(),
        errors=(error,) if error else (),
        recovery=RecoveryPoint("unknown") if error else RecoveryPoint("none yet"),
    )


def _read_flow(
    config: MirrorConfig,
    flow: FlowConfig,
    store: OffsetsStore,
    airflow_runs: Sequence[AirflowRun],
    run_limit: int,
) -> FlowStatus:
    name = flow.name
    progress = store.progress(name)
    counted = totals(store, name)
    writes = store.latest_writes(name)
    gaps = tuple(store.gaps(name))
    lock = lock_info(store, name)
    latencies = {
        (c.group, c.remote_topic, c.partition): c.latency_ms for c in latest_checkpoint_metrics(store, name)
    }
    lags = newest_lags(store, name)
    committed = run_totals(store, name, run_limit)
    as_of = recovery_point(store, name)
    history = tuple(recovery_history(store, name, HISTORY_LIMIT))
    emitted = emitted_checkpoints(store, name)
    failed = tuple(failed_partitions(store, name))
    lost: dict[TP, int] = {}
    for g in gaps:
        lost[(g.topic, g.partition)] = lost.get((g.topic, g.partition), 0) + g.source_end - g.source_start
    partitions = []
    for (topic, partition), p in sorted(progress.items()):
        records, size = counted.get((topic, partition), (0, 0))
        newest = lags.get((topic, partition))
        written = writes.get((topic, partition))
        partitions.append(
            PartitionStatus(
                topic=topic,
                partition=partition,
                remote_topic=flow.replication_policy.format_remote_topic(flow.source.alias, topic),
                next_source_offset=p.next_source_offset,
                next_target_offset=p.next_target_offset,
                records=records,
                bytes=size,
                lag=newest.lag if newest else 0,
                lag_run_id=newest.run_id if newest else None,
                replication_latency_max_ms=written.replication_latency.max if written else None,
                lost_offsets=lost.get((topic, partition), 0),
            )
        )
    checkpoints = tuple(
        CheckpointStatus(
            group=c.position.group_id,
            topic=c.position.topic,
            partition=c.position.partition,
            remote_topic=c.position.remote_topic,
            upstream_offset=c.position.upstream_offset,
            downstream_offset=c.position.downstream_offset,
            emitted_at=c.emitted_at,
            latency_ms=latencies.get((c.position.group_id, c.position.remote_topic, c.position.partition)),
        )
        for c in emitted
    )
    gaps_per_run: dict[str, int] = {}
    for g in gaps:
        gaps_per_run[g.run_id] = gaps_per_run.get(g.run_id, 0) + 1
    planned, plan_errors = _recent_plans(store, flow, run_limit)
    runs = _merge_runs(
        airflow_runs, planned, committed, gaps_per_run, lock.run_id if lock else None, run_limit
    )
    return FlowStatus(
        name=name,
        dag_id=flow.dag_id,
        source=flow.source.alias,
        target=flow.target.alias,
        locked_by=lock.run_id if lock else None,
        partitions=tuple(partitions),
        runs=runs,
        freshness=_NOT_READ,
        checkpoints_enabled=flow.emit_checkpoints,
        checkpoints=checkpoints,
        gaps=gaps,
        errors=tuple(plan_errors),
        failed_partitions=failed,
        # Not checked live yet: flow_statuses does, for every flow at once.
        recovery=RecoveryPoint("none yet")
        if as_of is None
        else RecoveryPoint("behind", mirrored_as_of=as_of),
        recovery_history=history,
    )


# ------------------------------------------------------------------------------------------- runs


@dataclass(frozen=True)
class _Planned:
    """What a run's documents tell: its plan, and the failure its copy noted."""

    run_id: str
    created_at: datetime | None
    planned_partitions: int
    copy_failure: str | None


def _merge_runs(
    airflow_runs: Sequence[AirflowRun],
    planned: Mapping[str, _Planned],
    committed: Mapping[str, RunTotals],
    gaps_per_run: Mapping[str, int],
    lock_holder: str | None,
    limit: int,
) -> tuple[RunStatus, ...]:
    """Every run any source knows, newest first (by start, else plan, else commit time), at most
    ``limit``. Airflow's state wins; without it the state is derived from what the run left."""
    by_id = {r.run_id: r for r in airflow_runs}
    runs = []
    for run_id in {*by_id, *planned, *committed}:
        af, plan, done = by_id.get(run_id), planned.get(run_id), committed.get(run_id)
        started = (af.started_at if af else None) or (plan.created_at if plan else None)
        failed_tasks = af.failed_tasks if af else ()
        error = plan.copy_failure if plan else None
        if error is None and failed_tasks:
            error = f"failed task{'s' if len(failed_tasks) > 1 else ''}: {', '.join(failed_tasks)}"
        elif error is None and af is not None and af.state == "failed":
            error = "the DAG run failed"
        runs.append(
            RunStatus(
                run_id=run_id,
                state=af.state if af else _derived_state(run_id, plan, done, lock_holder),
                started_at=started,
                committed_at=done.committed_at if done else None,
                planned_partitions=plan.planned_partitions if plan else None,
                records=done.records if done else 0,
                bytes=done.bytes if done else 0,
                skipped=done.skipped if done else 0,
                write_ms=done.write_ms if done else 0,
                lag=done.lag if done else None,
                gaps=gaps_per_run.get(run_id, 0),
                error=error,
                failed_tasks=failed_tasks,
            )
        )
    oldest = datetime.min.replace(tzinfo=UTC)
    runs.sort(key=lambda r: (r.started_at or r.committed_at or oldest, r.run_id), reverse=True)
    return tuple(runs[:limit])


def _derived_state(
    run_id: str, plan: _Planned | None, done: RunTotals | None, lock_holder: str | None
) -> str:
    if lock_holder is not None and is_holder_of(lock_holder, run_id):
        return "running"
    if done is not None:
        return "committed"
    if plan is not None and plan.copy_failure is not None:
        return "failed"
    if plan is not None and plan.planned_partitions == 0:
        return "nothing to copy"
    return "not committed"


def _recent_plans(store: OffsetsStore, flow: FlowConfig, limit: int) -> tuple[dict[str, _Planned], list[str]]:
    """The ``limit`` newest plans of the flow's runs (``store.run_documents``), with the failure each
    copy noted, and what could not be read."""
    planned: dict[str, _Planned] = {}
    errors: list[str] = []
    for run_id, _, text in recent_documents(store, flow.name, "plan", limit):
        try:
            plan = Plan.from_json(text, describe(flow.name, run_id, "plan"))
        except MirrorError as error:
            errors.append(str(error))
            continue
        planned[plan.run_id] = _Planned(
            plan.run_id,
            _parse_time(plan.created_at),
            len(plan.partitions),
            _copy_failure(store, flow, run_id),
        )
    return planned, errors


def _copy_failure(store: OffsetsStore, flow: FlowConfig, run_id: str) -> str | None:
    """The error the copy noted (see ``batch_run.execute_copy``)."""
    note = find_document(store, flow.name, run_id, "copy_failed")
    if note is None:
        return None
    try:
        saved = json.loads(note)
        return f"{saved['error']}: {saved['message']}"
    except (ValueError, KeyError, TypeError) as error:
        where = describe(flow.name, run_id, "copy failure note")
        return f"the copy failed; {where} is unreadable ({error})"


def _parse_time(text: str) -> datetime | None:
    try:
        return as_utc(datetime.fromisoformat(text))
    except ValueError:
        return None


# ------------------------------------------------------------------------------------ live reads


_NOT_READ = Freshness("unknown", detail="not read")


def _freshness(flow: FlowConfig, read: HeartbeatReader | None, value: object, timeout: float) -> Freshness:
    if not flow.emit_heartbeats:
        return Freshness("disabled")
    if read is None:
        return Freshness("unknown", detail="not measured")
    failed = why_missing(value, timeout)
    if failed is not None:
        return Freshness("unknown", detail=failed)
    if isinstance(value, int | float):
        return Freshness("measured", age_seconds=float(value))
    return Freshness("none yet")


def _recovery(
    stored: RecoveryPoint, now: datetime, check: SourceCheck | None, value: object, timeout: float
) -> RecoveryPoint:
    """The recovery point read from the offsets table, completed by the live check of the source."""
    if stored.state == "unknown":  # the offsets table could not be read
        return stored
    if check is None:
        return RecoveryPoint.of(stored.mirrored_as_of, now, None, "not checked")
    failed = why_missing(value, timeout)
    if failed is not None:
        return RecoveryPoint.of(stored.mirrored_as_of, now, None, f"source not read: {failed}")
    return RecoveryPoint.of(stored.mirrored_as_of, now, bool(value))
