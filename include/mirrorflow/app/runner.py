"""The steps of one run of a flow, as plain functions the Airflow tasks and the Spark job call.

turn   -> (before planning, read only) whether earlier runs have finished and the lock is free for it
plan   -> takes the flow's lock, creates remote topics, anchors new partitions, writes the plan
copy   -> (Spark) executes the plan, writes the result (or the source data it found lost)
commit -> checks the result against the plan and commits progress, the batch log and the plan's
          source gaps in one transaction
release-> gives the lock back (always runs, whatever happened before)

Each step is safe to retry: plan re-plans from committed progress, copy re-executes the same plan
without duplicating, commit is idempotent, release only releases this run's lock.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

from mirrorflow.app.dry_run import DryRun, dry_run_of
from mirrorflow.app.remote_topics import RemoteTopics, ensure_remote_topics, remote_topic_changes
from mirrorflow.app.run_folder import metrics_file, write_atomically
from mirrorflow.config.model import ON_PARTITION_ERROR, ON_SOURCE_DATA_LOSS, FlowConfig, MirrorConfig
from mirrorflow.config.run_options import DEFAULT_OPTIONS, RunOptions
from mirrorflow.copy.batch_copy import CopySettings, copy_partitions, copy_result
from mirrorflow.core.metrics import PartitionMetrics, source_metrics_text
from mirrorflow.core.plan import CopyResult, Plan, SourceGap, Writer, offset_range
from mirrorflow.core.planner import (
    PlannerInput,
    PlannerOutput,
    SourceOffsets,
    count_copied_past_gap,
    find_gaps,
    lost_data_choice,
    make_plan,
)
from mirrorflow.core.progress import Batch
from mirrorflow.core.recovery import mirrored_as_of
from mirrorflow.core.report import FailedPartition, PartitionReport, RunReport, build_report
from mirrorflow.core.transforms import Chain
from mirrorflow.core.turn import EarlierRun, Turn, turn
from mirrorflow.errors import (
    MirrorError,
    ParamError,
    PartitionsFailedError,
    PlanError,
    SourceDataLostError,
    TargetStateError,
    TransientError,
    error_class,
)
from mirrorflow.kafka.admin import ClusterAdmin
from mirrorflow.kafka.heartbeats import emit_heartbeats, freshness_seconds
from mirrorflow.kafka.internal_topics import InternalTopicWriter
from mirrorflow.kafka.offset_syncs import emit_offset_syncs
from mirrorflow.kafka.produce import allocate_writer
from mirrorflow.kafka.record_reads import record_digests
from mirrorflow.mm2.acl_rules import TopicAcl, missing_acls, target_acls
from mirrorflow.store.offsets_store import OffsetsStore
from mirrorflow.store.run_documents import (
    describe,
    find_document,
    prune_documents,
    read_document,
    save_document,
)
from mirrorflow.store.status_reads import recovery_point
from mirrorflow.store.writers import record_writer, writer_of

log = logging.getLogger(__name__)


def plan_run(
    config: MirrorConfig, flow_name: str, run_id: str, options: RunOptions = DEFAULT_OPTIONS
) -> Plan:
    """Plan the run and write the plan file. Holds the flow's lock from here until ``release_run``.
    Invalid options fail before anything is written."""
    flow = config.flow(flow_name)
    # The python hooks must import here too: a missing module fails the plan, not the Spark job.
    Chain(flow.transforms)
    with OffsetsStore(config.offsets_db_url) as store:
        with ClusterAdmin(flow.source) as source, ClusterAdmin(flow.target) as target:
            check_topic_subset(flow, source, options)
            take_flow_lock(store, flow, run_id)
            try:
                # Before planning, so that this run mirrors the source's new heartbeat too.
                emit_heartbeats(flow)
                topics = ensure_remote_topics(flow, source, target, options.topics)
                if flow.sync_topic_acls:
                    sync_acls(flow, source, target, topics.remote_names)
                planned = plan_for(flow, run_id, options, source, target, topics, store, holder=run_id)
                # After planning: a plan refused for bad state leaves nothing behind, not even this.
                planned = replace(
                    planned, plan=replace(planned.plan, writer=flow_writer(flow, target, store, run_id))
                )
                store.anchor(flow.name, run_id, planned.anchors, planned.topics)
                # A retried plan task's earlier copy outcome describes another plan.
                save_document(
                    store,
                    flow.name,
                    run_id,
                    "plan",
                    planned.plan.to_json(),
                    supersedes=("result", "copy_failed"),
                )
                if planned.plan.in_process:
                    execute_copy(config, flow, planned.plan, lambda: copy_in_process(flow, planned.plan))
            except BaseException:
                store.release_lock(flow.name, run_id)
                raise
        plan = planned.plan
        for gap in plan.gaps:
            log.warning(
                "flow %s run %s: source records %s were deleted from the source before they were mirrored; "
                "skipped (%s = skip), recorded as a gap when the run commits",
                flow.name,
                run_id,
                gap,
                ON_SOURCE_DATA_LOSS,
            )
        for remote, changes in sorted(topics.reconfigured.items()):
            log.info(
                "remote topic %s: configs synced from the source: %s",
                remote,
                ", ".join(f"{k}={'(default)' if v is None else v}" for k, v in sorted(changes.items())),
            )
        log.info(
            "flow %s run %s: %d topics selected, %d remote topics created, %d reconfigured, "
            "%d partitions to copy, up to %d records",
            flow.name,
            run_id,
            len(topics.partitions),
            len(topics.created),
            len(topics.reconfigured),
            len(plan.partitions),
            plan.max_records,
        )
        return plan


def run_turn(config: MirrorConfig, flow_name: str, run_id: str, earlier: EarlierRun | None) -> Turn:
    """Whether run ``run_id``'s turn has come, given the latest earlier run of the flow that has not
    finished: reads the flow's lock, judging its expiry by the store's clock as ``acquire_lock`` does.
    Writes nothing."""
    flow = config.flow(flow_name)
    with OffsetsStore(config.offsets_db_url) as store:
        return turn(flow.name, run_id, earlier, store.lock_info(flow.name), store.now())


def take_flow_lock(store: OffsetsStore, flow: FlowConfig, run_id: str) -> None:
    """Take the flow's lock for ``run_id``, waiting up to ``mirrorflow.lock.wait.seconds`` while
    another run holds it (one that took it after ``run_turn`` found it free, or a DR window's
    predecessor still releasing it); a crashed run's lock is taken over once it expires, after every
    copy attempt of that run has timed out."""
    holder = store.lock_holder(flow.name)
    if holder is not None and holder != run_id and flow.settings.lock_wait_seconds:
        log.info(
            "flow %s is locked by run %s; waiting up to %d s for it",
            flow.name,
            holder,
            flow.settings.lock_wait_seconds,
        )
    store.acquire_lock(flow.name, run_id, flow.lock_ttl_seconds, flow.settings.lock_wait_seconds)


def dry_run(config: MirrorConfig, flow_name: str, run_id: str, options: RunOptions) -> DryRun:
    """What ``plan_run`` with these options would plan and change now; writes nothing."""
    flow = config.flow(flow_name)
    with OffsetsStore(config.offsets_db_url) as store:
        with ClusterAdmin(flow.source) as source, ClusterAdmin(flow.target) as target:
            check_topic_subset(flow, source, options)
            topics = remote_topic_changes(flow, source, target, options.topics)
            acls = _missing_acls(flow, source, target, topics.remote_names) if flow.sync_topic_acls else []
            planned = plan_for(
                flow, run_id, options, source, target, topics, store, topics.absent_partitions()
            )
            sizes = source.partition_sizes(topics.partitions)
        new = frozenset((a.topic, a.partition) for a in planned.anchors)
        return dry_run_of(planned.plan, topics, new, sizes, [str(a) for a in acls or []])


def check_topic_subset(flow: FlowConfig, source: ClusterAdmin, options: RunOptions) -> None:
    if not options.topics:
        return
    # The heartbeats topic may not exist yet: the run creates it before it plans.
    names = source.topics() | {flow.replication_policy.heartbeats_topic()}
    selectable = {t for t in names if flow.should_replicate_topic(t)}
    unknown = sorted(options.topics - selectable)
    if unknown:
        raise ParamError(
            "topics",
            f"{', '.join(unknown)} {'is' if len(unknown) == 1 else 'are'} not among the topics flow "
            f"{flow.name} selects on cluster {flow.source.alias} ({_listing(selectable)}); check the "
            "spelling, the flow's topics / topics.exclude, and that the topic exists",
        )


def _listing(names: set[str], limit: int = 20) -> str:
    shown = sorted(names)[:limit]
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return (", ".join(shown) + more) if shown else "none"


def plan_for(
    flow: FlowConfig,
    run_id: str,
    options: RunOptions,
    source: ClusterAdmin,
    target: ClusterAdmin,
    topics: RemoteTopics,
    store: OffsetsStore,
    absent: frozenset[tuple[str, int]] = frozenset(),
    holder: str | None = None,
) -> PlannerOutput:
    """The planner's input read from both clusters and the offsets table, and its output (a plan
    still without its writer: ``flow_writer``). ``absent``: remote partitions that do not exist
    yet (they end at offset 0). ``holder``: the run holding the flow's lock, if planning under it."""
    # Before either cluster's ends: offsets only grow, so a commit made meanwhile (by a run that took
    # a stalled run's lock over) can never look like a recreated source topic or a truncated remote one.
    progress = store.progress(flow.name)
    # Before the source's ends are read: the recovery point a commit of this plan proves (core.recovery).
    created_at = datetime.now(UTC).isoformat(timespec="milliseconds")
    tps = [(t, p) for t, n in topics.partitions.items() for p in range(n)]
    starts = source.earliest_offsets(tps)
    ends = source.latest_offsets(tps)
    remote_tps = [(topics.remote_names[t], p) for t, p in tps]
    target_ends = {
        **{tp: 0 for tp in absent},
        **target.latest_offsets([tp for tp in remote_tps if tp not in absent]),
    }
    new = [tp for tp in tps if tp not in progress]
    inp = PlannerInput(
        flow=flow.name,
        run_id=run_id,
        created_at=created_at,
        source={tp: SourceOffsets(starts[tp], ends[tp]) for tp in tps},
        remote_topics=topics.remote_names,
        target_ends=target_ends,
        progress=progress,
        max_records_per_partition=options.max_records_per_partition
        or flow.settings.max_records_per_partition,
        ride_along=frozenset(t for t in topics.partitions if flow.replication_policy.is_heartbeats_topic(t)),
        skip_lost=flow.settings.on_source_data_loss == "skip",
        topic_ids=topics.topic_ids,
        known_topic_ids=store.topic_ids(flow.name),
        starts=_start_offsets(source, options, new, ends),
        bounds=_bounds(flow, source, options, tps),
    )
    try:
        copied_past_gap = {
            (g.topic, g.partition): _copied_past_gap(flow, g, topics.remote_names[g.topic], ends)
            for g in find_gaps(inp)
            if g.target_end > g.target_start
        }
        planned = make_plan(replace(inp, copied_past_gap=copied_past_gap))
    except TargetStateError:
        # A run whose lock was taken over meanwhile planned on a stale view of progress: the newer
        # run's writes look like a foreign writer's. Say what really happened.
        if holder is not None:
            store.require_lock(flow.name, holder, "plan")
        raise
    return replace(planned, plan=replace(planned.plan, narrowed=bool(options.topics)))


def flow_writer(flow: FlowConfig, target: ClusterAdmin, store: OffsetsStore, holder: str) -> Writer:
    """The producer id every copy of ``flow`` writes as (``core.plan.Writer``), made and recorded
    the first time the flow writes to its target cluster, while ``holder`` holds the flow's lock."""
    cluster = target.cluster_id()
    known = writer_of(store, flow.name, cluster)
    if known is not None:
        return known
    writer = allocate_writer(flow.target.producer)
    record_writer(store, flow.name, cluster, writer, holder=holder)
    log.info("flow %s writes to cluster %s as producer id %d", flow.name, cluster, writer.producer_id)
    return writer


def _start_offsets(
    source: ClusterAdmin, options: RunOptions, new: list[tuple[str, int]], ends: Mapping[tuple[str, int], int]
) -> dict[tuple[str, int], int]:
    """Where partitions never mirrored start, unless at the log start (``earliest``)."""
    if options.start == "latest":
        return {tp: ends[tp] for tp in new}
    if options.start_timestamp_ms is not None:
        found = source.offsets_at(new, options.start_timestamp_ms)
        # No record at or after the time yet: start after the last one.
        return {tp: ends[tp] if (o := found[tp]) is None else min(o, ends[tp]) for tp in new}
    return {}


def _bounds(
    flow: FlowConfig, source: ClusterAdmin, options: RunOptions, tps: list[tuple[str, int]]
) -> dict[tuple[str, int], int]:
    """A scheduled or backfill run copies only records before its interval's end: each partition
    up to its first record at or after that time (none yet: no bound but the last stable offset).
    Heartbeats are the mirror's health, not data of an interval: they are always copied up to now,
    so that a scheduled run's freshness is that of the heartbeat it just emitted."""
    if options.until_timestamp_ms is None:
        return {}
    data = [tp for tp in tps if not flow.replication_policy.is_heartbeats_topic(tp[0])]
    found = source.offsets_at(data, options.until_timestamp_ms)
    return {tp: offset for tp, offset in found.items() if offset is not None}


def _copied_past_gap(
    flow: FlowConfig, gap: SourceGap, remote: str, ends: Mapping[tuple[str, int], int]
) -> int:
    """How many of the records an interrupted attempt left on the remote partition past the
    committed target offset copy records after the gap (see ``count_copied_past_gap``)."""
    left = gap.target_end - gap.target_start
    return count_copied_past_gap(
        record_digests(flow.target, remote, gap.partition, gap.target_start, gap.target_end, left),
        record_digests(
            flow.source, gap.topic, gap.partition, gap.source_end, ends[(gap.topic, gap.partition)], left
        ),
    )


def _missing_acls(
    flow: FlowConfig, source: ClusterAdmin, target: ClusterAdmin, remote_names: Mapping[str, str]
) -> list[TopicAcl] | None:
    """The remote topics' ACLs the target lacks; None when the target has no authorizer."""
    acls = source.topic_acls()
    if acls is None:
        return []  # no authorizer on the source: nothing to sync (as MM2)
    wanted = target_acls(acls, remote_names)
    existing = target.topic_acls() if wanted else []
    return None if existing is None else missing_acls(wanted, existing)


def sync_acls(
    flow: FlowConfig, source: ClusterAdmin, target: ClusterAdmin, remote_names: Mapping[str, str]
) -> None:
    created = _missing_acls(flow, source, target, remote_names)
    if created is None:
        log.warning(
            "flow %s: topic ACLs not synced: cluster %s has no authorizer", flow.name, flow.target.alias
        )
        return
    target.create_topic_acls(created)
    for acl in created:
        log.info("ACL synced to %s: %s", flow.target.alias, acl)


def load_plan(config: MirrorConfig, flow: FlowConfig, run_id: str) -> Plan:
    """The run's plan, from the offsets database (``store.run_documents``)."""
    with OffsetsStore(config.offsets_db_url) as store:
        text = read_document(store, flow.name, run_id, "plan", "plan")
    where = describe(flow.name, run_id, "plan")
    plan = Plan.from_json(text, where)
    plan.check_belongs_to(flow.name, run_id, where)
    return plan


@dataclass(frozen=True)
class Committed:
    report: RunReport
    heartbeat_age_s: float | None


def execute_copy(config: MirrorConfig, flow: FlowConfig, plan: Plan, copy: Callable[[], CopyResult]) -> str:
    """Run ``copy`` and save its outcome for the commit task; returns what happened, in words.

    An error a retry would meet again (planned source records deleted, someone else's records on the
    target, a refused login) is saved as a note instead of a result, and the step itself succeeds,
    so that Airflow does not retry it; the commit task fails the run with the error, which Airflow
    does not retry either. Transient errors propagate, to be retried."""
    try:
        result = copy()
    except TransientError:
        raise
    except MirrorError as failed:
        note = json.dumps({"error": type(failed).__name__, "message": str(failed)})
        with OffsetsStore(config.offsets_db_url) as store:
            save_document(store, flow.name, plan.run_id, "copy_failed", note, supersedes=["result"])
        return f"copy of {flow.name} stopped: {failed}; the commit task fails the run"
    with OffsetsStore(config.offsets_db_url) as store:
        save_document(store, flow.name, plan.run_id, "result", result.to_json(), supersedes=["copy_failed"])
    return f"copied {sum(r.records - r.skipped for r in result.partitions)} records for {flow.name}"


def _copy_failure(flow: FlowConfig, plan: Plan, note: str) -> MirrorError:
    """The error a copy saved, as raised by the commit task: lost source data with the ranges the
    source no longer holds now."""
    try:
        saved = json.loads(note)
        kind = error_class(saved["error"])
        message = str(saved["message"])
        if kind is None:
            raise TypeError(f"no error class {saved['error']!r}")
    except (ValueError, KeyError, TypeError) as exc:
        return PlanError(
            f"the copy's failure note of run {plan.run_id} is unreadable ({exc}); re-run the copy task"
        )
    if kind is SourceDataLostError:
        return _lost_during_copy(flow, plan, message)
    return kind.from_message(message)


def commit_run(config: MirrorConfig, flow_name: str, run_id: str) -> Committed:
    """Commit what the copy acknowledged, the plan's source gaps and the run's metrics, in one
    transaction; export the flow's metrics; report records, bytes, latency, lag left and gaps, and
    the mirrored heartbeat's age. A copy that stopped on an error a retry would meet again fails the
    run here with that error (lost source records: with the exact lost ranges), committing nothing."""
    flow = config.flow(flow_name)
    plan = load_plan(config, flow, run_id)
    with OffsetsStore(config.offsets_db_url) as store:
        failed = find_document(store, flow.name, run_id, "copy_failed") if plan.partitions else None
        if failed is not None:
            raise _copy_failure(flow, plan, failed)
        result = (
            CopyResult.from_json(
                read_document(store, flow.name, run_id, "result", "copy result"),
                describe(flow.name, run_id, "copy result"),
            )
            if plan.partitions
            else CopyResult(flow.name, run_id, ())
        )
        report = commit_copied(flow, store, plan, result)
        age = freshness_seconds(flow)
        log.info(
            "flow %s: newest mirrored heartbeat is %s old",
            flow.name,
            "none yet" if age is None else f"{age:.1f} s",
        )
        path = write_source_metrics(config, flow, store, report, age)
        log.info("metrics of flow %s in %s", flow.name, path)
    if report.failed:
        raise partitions_failed(flow, run_id, report.failed)
    return Committed(report, age)


def partitions_failed(
    flow: FlowConfig, run_id: str, failed: Sequence[FailedPartition]
) -> PartitionsFailedError:
    """The error of a run that committed all but the ``failed`` partitions."""
    listed = "; ".join(str(f) for f in failed)
    return PartitionsFailedError(
        f"flow {flow.name} run {run_id}: {len(failed)} partitions failed and were left for the next "
        f"run ({ON_PARTITION_ERROR} = isolate), every other partition was committed. {listed}. Fix what "
        "each error names; the next run copies the failed partitions' records again, nothing twice"
    )


def commit_copied(
    flow: FlowConfig,
    store: OffsetsStore,
    plan: Plan,
    result: CopyResult,
    *,
    holder: str | None = None,
    log_level: int = logging.INFO,
    writer: InternalTopicWriter | None = None,
    metrics: bool = True,
) -> RunReport:
    """Commit ``result`` of ``plan`` (progress, batch log, gaps, partition metrics: one transaction)
    while ``holder`` (default: the plan's run) holds the flow's lock, then write its offset syncs;
    the report is logged at ``log_level`` (a DR window's micro-batches: DEBUG); ``writer``: an open
    producer for the offset syncs; ``metrics``: whether the report goes to the metrics history now
    (a DR window records its micro-batches summed up, a minute at a time)."""
    batches = batches_for(plan, result)
    report = build_report(plan, result)
    store.commit(
        flow.name,
        plan.run_id,
        batches,
        [p for p in report.partitions if p.records or p.lag] if metrics else [],
        plan.gaps,
        holder=holder,
        mirrored_as_of=mirrored_as_of(plan, report),
        failed=report.failed,
    )
    # After the commit: a retried commit task commits nothing twice and rewrites the same syncs.
    syncs = emit_offset_syncs(flow, batches, writer)
    log.log(
        log_level,
        "flow %s run %s committed, %d offset syncs written\n%s",
        flow.name,
        plan.run_id,
        syncs,
        report.table(),
    )
    return report


def write_source_metrics(
    config: MirrorConfig, flow: FlowConfig, store: OffsetsStore, report: RunReport, age: float | None
) -> Path:
    """Rewrite the flow's metrics file from the offsets table and ``report``; returns its path."""
    path = metrics_file(config.state_dir, flow.name, "source")
    write_atomically(path, _source_metrics(flow, store, report, age))
    return path


def _lost_during_copy(flow: FlowConfig, plan: Plan, reported: str) -> SourceDataLostError:
    """The error naming every planned range whose start the source no longer holds (its log start
    now), with what the copy reported."""
    tps = [(p.topic, p.partition) for p in plan.partitions]
    try:
        with ClusterAdmin(flow.source) as source:
            starts = source.earliest_offsets(tps)
        lost = (
            ", ".join(
                offset_range(p.topic, p.partition, p.source_start, starts[(p.topic, p.partition)])
                for p in plan.partitions
                if starts[(p.topic, p.partition)] > p.source_start
            )
            or "(each planned range still starts at or after its partition's log start)"
        )
    except TransientError as exc:  # e.g. the topic was deleted: Spark's words must do
        lost = f"(the source's log start offsets could not be read: {exc})"
    then = (
        f"The next run continues after the lost records and records the gaps ({ON_SOURCE_DATA_LOSS} = skip)."
        if flow.settings.on_source_data_loss == "skip"
        else lost_data_choice(flow.name)
    )
    return SourceDataLostError(
        f"flow {flow.name} run {plan.run_id}: source records were deleted from the source after the run "
        f"was planned, before they were copied: {lost}. Nothing was committed. {then} (The copy "
        f"reported: {reported})"
    )


def _source_metrics(
    flow: FlowConfig, store: OffsetsStore, report: RunReport, heartbeat_age: float | None
) -> str:
    """Every partition of the flow: counts from the batch log, lag from this run, rates and times
    from the last run that wrote to the partition."""
    totals = store.totals(flow.name)
    writes = store.latest_writes(flow.name)
    partitions = []
    for p in report.partitions:
        key = (p.topic, p.partition)
        last: PartitionReport = writes.get(key, p)
        records, size = totals.get(key, (0, 0))
        partitions.append(
            PartitionMetrics(
                p.topic,
                p.partition,
                p.remote_topic,
                records,
                size,
                p.lag,
                last.replication_latency,
                last.record_age,
                last.record_rate,
                last.byte_rate,
            )
        )
    as_of = recovery_point(store, flow.name)
    return source_metrics_text(
        flow.source.alias,
        flow.target.alias,
        partitions,
        {
            "heartbeat_age_seconds": heartbeat_age,
            "last_commit_timestamp_seconds": round(time.time()),
            # Prometheus gets the recovery point as time() - this (core.recovery).
            "mirrored_as_of_timestamp_seconds": None if as_of is None else round(as_of.timestamp(), 3),
        },
    )


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
        if r is None or r.target_start != p.target_start:
            raise PlanError(
                f"copy result does not match the plan for {p.topic}-{p.partition}; re-run the copy task"
            )
        if r.failure is not None:
            continue
        batches.append(
            Batch(
                topic=p.topic,
                partition=p.partition,
                remote_topic=p.remote_topic,
                source_start=p.source_start,
                source_end=p.source_end,
                target_start=p.target_start,
                target_end=r.target_end,
                records=r.records,
                bytes=r.bytes,
                sync_points=r.sync_points,
            )
        )
    if len(by_tp) != len(plan.partitions):
        raise PlanError("copy result holds partitions the plan does not; re-run the copy task")
    return batches


def release_run(config: MirrorConfig, flow_name: str, run_id: str) -> bool:
    """Give the flow's lock back if ``run_id`` holds it (whether it did is returned), then bound
    what the flow keeps: its metrics history (a week, ``OffsetsStore.prune_history``), its runs'
    documents (``store.run_documents``)."""
    flow = config.flow(flow_name)
    with OffsetsStore(config.offsets_db_url) as store:
        released = store.release_lock(flow.name, run_id)
        rows = store.prune_history(flow.name)
        runs = prune_documents(store, flow.name, spare=run_id)
    if rows or runs:
        log.info(
            "flow %s: pruned %d metrics history rows and the documents of %d runs", flow.name, rows, runs
        )
    return released


def copy_in_process(flow: FlowConfig, plan: Plan) -> CopyResult:
    """A plan of heartbeats only, copied here as the Spark job would copy it: starting Spark costs
    seconds, and a run whose only new records are the heartbeat it just emitted would pay that."""
    return copy_result(plan, copy_partitions(plan.partitions, CopySettings.of(flow), plan.writer))
