"""The steps of one run of a flow, as plain functions the Airflow tasks and the Spark job call.

plan   -> takes the flow's lock, creates remote topics, anchors new partitions, writes the plan
copy   -> (Spark) executes the plan, writes the result
commit -> checks the result against the plan and commits progress and the batch log in one transaction
release-> gives the lock back (always runs, whatever happened before)

Each step is safe to retry: plan re-plans from committed progress, copy re-executes the same plan
without duplicating, commit is idempotent, release only releases this run's lock.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from kafka.admin import OffsetSpec

from mirrorflow.acl_sync import missing_acls, target_acls
from mirrorflow.cluster_admin import ClusterAdmin
from mirrorflow.config import FlowConfig, MirrorConfig
from mirrorflow.errors import PlanError
from mirrorflow.metrics import PartitionMetrics, source_metrics_text
from mirrorflow.mirror_heartbeat import emit_heartbeats, freshness_seconds
from mirrorflow.mirror_offset_sync import emit_offset_syncs
from mirrorflow.offsets_store import Batch, OffsetsStore
from mirrorflow.plan import CopyResult, Plan, metrics_file, read_file, run_dir, write_atomically
from mirrorflow.planner import PlannerInput, SourceOffsets, make_plan
from mirrorflow.remote_topics import ensure_remote_topics
from mirrorflow.report import PartitionReport, RunReport, build_report

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunFiles:
    plan: Path
    result: Path


def run_files(config: MirrorConfig, flow: FlowConfig, run_id: str) -> RunFiles:
    folder = run_dir(config.state_dir, flow.name, run_id)
    return RunFiles(folder / "plan.json", folder / "result.json")


def plan_run(config: MirrorConfig, flow_name: str, run_id: str) -> Plan:
    """Plan the run and write the plan file. Holds the flow's lock from here until ``release_run``."""
    flow = config.flow(flow_name)
    store = OffsetsStore(config.offsets_db_url)
    # A crashed run's lock is taken over once it expires: after every copy attempt has timed out.
    store.acquire_lock(flow.name, run_id, flow.settings.lock_ttl_seconds)
    try:
        # Before planning, so that this run mirrors the source's new heartbeat too.
        emit_heartbeats(flow)
        with ClusterAdmin(flow.source) as source, ClusterAdmin(flow.target) as target:
            topics = ensure_remote_topics(flow, source, target)
            if flow.sync_topic_acls:
                _sync_acls(flow, source, target, topics.remote_names)
            tps = [(t, p) for t, n in topics.partitions.items() for p in range(n)]
            starts = source.offsets(tps, OffsetSpec.EARLIEST)
            ends = source.offsets(tps, OffsetSpec.LATEST)
            remote_tps = [(topics.remote_names[t], p) for t, p in tps]
            target_ends = target.offsets(remote_tps, OffsetSpec.LATEST)
        planned = make_plan(
            PlannerInput(
                flow=flow.name,
                run_id=run_id,
                created_at=datetime.now(UTC).isoformat(timespec="seconds"),
                source={tp: SourceOffsets(starts[tp], ends[tp]) for tp in tps},
                remote_topics=topics.remote_names,
                target_ends=target_ends,
                progress=store.progress(flow.name),
                max_records_per_partition=flow.settings.max_records_per_partition,
                ride_along=frozenset(
                    t for t in topics.partitions if flow.replication_policy.is_heartbeats_topic(t)
                ),
            )
        )
        store.anchor(flow.name, run_id, planned.anchors)
        write_atomically(run_files(config, flow, run_id).plan, planned.plan.to_json())
    except BaseException:
        store.release_lock(flow.name, run_id)
        raise
    plan = planned.plan
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


def _sync_acls(
    flow: FlowConfig, source: ClusterAdmin, target: ClusterAdmin, remote_names: Mapping[str, str]
) -> None:
    acls = source.topic_acls()
    if acls is None:
        return  # no authorizer on the source: nothing to sync (as MM2)
    wanted = target_acls(acls, remote_names)
    existing = target.topic_acls() if wanted else []
    if existing is None:
        log.warning(
            "flow %s: %d topic ACLs not synced: cluster %s has no authorizer",
            flow.name,
            len(wanted),
            flow.target.alias,
        )
        return
    created = missing_acls(wanted, existing)
    target.create_topic_acls(created)
    for acl in created:
        log.info("ACL synced to %s: %s", flow.target.alias, acl)


def load_plan(config: MirrorConfig, flow: FlowConfig, run_id: str) -> Plan:
    path = run_files(config, flow, run_id).plan
    plan = Plan.from_json(read_file(path, "plan file"), str(path))
    plan.check_belongs_to(flow.name, run_id, str(path))
    return plan


@dataclass(frozen=True)
class Committed:
    report: RunReport
    heartbeat_age_s: float | None


def commit_run(config: MirrorConfig, flow_name: str, run_id: str) -> Committed:
    """Commit what the copy acknowledged and the run's metrics, in one transaction; export the flow's
    metrics; report records, bytes, latency and lag left, and the mirrored heartbeat's age."""
    flow = config.flow(flow_name)
    plan = load_plan(config, flow, run_id)
    files = run_files(config, flow, run_id)
    result = (
        CopyResult.from_json(read_file(files.result, "copy result"), str(files.result))
        if plan.partitions
        else CopyResult(flow.name, run_id, ())
    )
    batches = batches_for(plan, result)
    report = build_report(plan, result)
    store = OffsetsStore(config.offsets_db_url)
    store.commit(flow.name, run_id, batches, [p for p in report.partitions if p.records or p.lag])
    # After the commit: a retried commit task commits nothing twice and rewrites the same syncs.
    syncs = emit_offset_syncs(flow, batches)
    log.info(
        "flow %s run %s committed, %d offset syncs written\n%s", flow.name, run_id, syncs, report.table()
    )
    age = freshness_seconds(flow)
    log.info(
        "flow %s: newest mirrored heartbeat is %s old",
        flow.name,
        "none yet" if age is None else f"{age:.1f} s",
    )
    path = metrics_file(config.state_dir, flow.name, "source")
    write_atomically(path, _source_metrics(flow, store, report, age))
    log.info("metrics of flow %s in %s", flow.name, path)
    return Committed(report, age)


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
    return source_metrics_text(
        flow.source.alias,
        flow.target.alias,
        partitions,
        {"heartbeat_age_seconds": heartbeat_age, "last_commit_timestamp_seconds": round(time.time())},
    )


def batches_for(plan: Plan, result: CopyResult) -> list[Batch]:
    """The batch log rows for a result; refuses a result that does not match its plan exactly."""
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
    flow = config.flow(flow_name)
    return OffsetsStore(config.offsets_db_url).release_lock(flow.name, run_id)
