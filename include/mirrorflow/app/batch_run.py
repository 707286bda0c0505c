"""The batch run of a flow: its steps as plain functions the Airflow tasks and the Spark job call,
each a short driver of a ``FlowSession`` (``app.flow_session``).

turn   -> (before planning, read only) whether earlier runs have finished and the lock is free for it
plan   -> takes the flow's lock, creates remote topics, anchors new partitions, writes the plan
copy   -> (Spark) executes the plan, writes the result (or the source data it found lost)
commit -> checks the result against the plan and commits progress, the batch log and the plan's
          source gaps in one transaction
checkpoint -> translates and emits the flow's consumer groups' positions (``app.checkpoints``)
release-> gives the lock back (always runs, whatever happened before)

Each step is safe to retry: plan re-plans from committed progress, copy re-executes the same plan
without duplicating, commit is idempotent, release only releases this run's lock.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass

from mirrorflow.app.checkpoints import CheckpointReport, emit_checkpoints
from mirrorflow.app.dry_run import DryRun, dry_run_of
from mirrorflow.app.flow_session import FlowSession, check_topic_subset
from mirrorflow.app.remote_topics import remote_topic_changes
from mirrorflow.config.keys import ON_SOURCE_DATA_LOSS
from mirrorflow.config.model import FlowConfig, MirrorConfig
from mirrorflow.config.run_options import DEFAULT_OPTIONS, RunOptions
from mirrorflow.core.plan import CopyResult, Plan, offset_range
from mirrorflow.core.planner import lost_data_choice
from mirrorflow.core.report import RunReport, partitions_failed
from mirrorflow.core.transforms import Chain
from mirrorflow.core.turn import EarlierRun, Turn, turn
from mirrorflow.errors import (
    MirrorError,
    PlanError,
    SourceDataLostError,
    TransientError,
    WriterFencedError,
    error_class,
)
from mirrorflow.store.flow_lock import lock_info, release_lock
from mirrorflow.store.offsets_store import OffsetsStore
from mirrorflow.store.run_documents import describe, find_document, read_document, save_document

log = logging.getLogger(__name__)


def plan_run(
    config: MirrorConfig, flow_name: str, run_id: str, options: RunOptions = DEFAULT_OPTIONS
) -> Plan:
    """Plan the run and save the plan. Holds the flow's lock from here until ``release_run``.
    Invalid options fail before anything is written."""
    with FlowSession(config, flow_name, run_id) as session:
        flow = session.flow
        # The python hooks must import here too: a missing module fails the plan, not the Spark job.
        Chain(flow.transforms)
        check_topic_subset(flow, session.source, options)
        session.take_lock()
        try:
            # Before planning, so that this run mirrors the source's new heartbeat too.
            session.emit_heartbeats()
            topics = session.sync_topics(options.topics)
            if flow.sync_topic_acls:
                session.sync_acls(topics.remote_names)
            planned = session.plan(run_id, options, topics)
            # After the plan read the source's ends (``app.schemas``).
            session.sync_schemas(topics.remote_names)
            plan = session.with_schema_ids(planned.plan)
            # After planning: a plan refused for bad state leaves nothing behind, not even this.
            session.store.anchor(flow.name, run_id, planned.anchors, planned.topics)
            # A retried plan task's earlier copy outcome describes another plan.
            save_document(
                session.store, flow.name, run_id, "plan", plan.to_json(), supersedes=("result", "copy_failed")
            )
            if plan.in_process:
                _copy_and_save(session.store, flow, plan, lambda: session.copy_in_process(plan))
        except BaseException:
            release_lock(session.store, flow.name, run_id)
            raise
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
        return turn(flow.name, run_id, earlier, lock_info(store, flow.name), store.now())


def dry_run(config: MirrorConfig, flow_name: str, run_id: str, options: RunOptions) -> DryRun:
    """What ``plan_run`` with these options would plan and change now; writes nothing."""
    with FlowSession(config, flow_name, run_id) as session:
        flow = session.flow
        check_topic_subset(flow, session.source, options)
        topics = remote_topic_changes(flow, session.source, session.target, options.topics)
        acls = session.missing_acls(topics.remote_names) if flow.sync_topic_acls else []
        planned = session.plan(run_id, options, topics, topics.absent_partitions())
        sizes = session.source.partition_sizes(topics.partitions)
    new = frozenset((a.topic, a.partition) for a in planned.anchors)
    return dry_run_of(planned.plan, topics, new, sizes, [str(a) for a in acls or []])


def load_plan(config: MirrorConfig, flow: FlowConfig, run_id: str) -> Plan:
    """The run's plan, from the offsets database (``store.run_documents``)."""
    with OffsetsStore(config.offsets_db_url) as store:
        return _saved_plan(store, flow, run_id)


def _saved_plan(store: OffsetsStore, flow: FlowConfig, run_id: str) -> Plan:
    where = describe(flow.name, run_id, "plan")
    plan = Plan.from_json(read_document(store, flow.name, run_id, "plan", "plan"), where)
    plan.check_belongs_to(flow.name, run_id, where)
    return plan


@dataclass(frozen=True)
class Committed:
    report: RunReport
    heartbeat_age_s: float | None


def execute_copy(config: MirrorConfig, flow: FlowConfig, plan: Plan, copy: Callable[[], CopyResult]) -> str:
    """Run ``copy`` and save its outcome for the commit task; returns what happened, in words."""
    with OffsetsStore(config.offsets_db_url) as store:
        return _copy_and_save(store, flow, plan, copy)


def _copy_and_save(store: OffsetsStore, flow: FlowConfig, plan: Plan, copy: Callable[[], CopyResult]) -> str:
    """An error a retry would meet again (planned source records deleted, someone else's records on
    the target, a refused login) is saved as a note instead of a result, and the step itself
    succeeds, so that Airflow does not retry it; the commit task fails the run with the error, which
    Airflow does not retry either. Transient errors propagate, to be retried. So does a fence: a newer
    attempt of the run's copy took over, and this one's outcome must not replace that one's result
    (an attempt that is still the task's own is retried, and fences anew)."""
    try:
        result = copy()
    except (TransientError, WriterFencedError):
        raise
    except MirrorError as failed:
        note = json.dumps({"error": type(failed).__name__, "message": str(failed)})
        save_document(store, flow.name, plan.run_id, "copy_failed", note, supersedes=["result"])
        return f"copy of {flow.name} stopped: {failed}; the commit task fails the run"
    save_document(store, flow.name, plan.run_id, "result", result.to_json(), supersedes=["copy_failed"])
    return f"copied {sum(r.records - r.skipped for r in result.partitions)} records for {flow.name}"


def commit_run(config: MirrorConfig, flow_name: str, run_id: str) -> Committed:
    """Commit what the copy acknowledged, the plan's source gaps and the run's metrics, in one
    transaction; export the flow's metrics; report records, bytes, latency, lag left and gaps, and
    the mirrored heartbeat's age. A copy that stopped on an error a retry would meet again fails the
    run here with that error (lost source records: with the exact lost ranges), committing nothing."""
    with FlowSession(config, flow_name, run_id) as session:
        flow, store = session.flow, session.store
        plan = _saved_plan(store, flow, run_id)
        failed = find_document(store, flow.name, run_id, "copy_failed") if plan.partitions else None
        if failed is not None:
            raise _copy_failure(session, plan, failed)
        result = (
            CopyResult.from_json(
                read_document(store, flow.name, run_id, "result", "copy result"),
                describe(flow.name, run_id, "copy result"),
            )
            if plan.partitions
            else CopyResult(flow.name, run_id, ())
        )
        report = session.commit(plan, result)
        age = session.heartbeat_age()
        log.info(
            "flow %s: newest mirrored heartbeat is %s old",
            flow.name,
            "none yet" if age is None else f"{age:.1f} s",
        )
        path = session.write_metrics(report, age)
        log.info("metrics of flow %s in %s", flow.name, path)
    if report.failed:
        raise partitions_failed(flow.name, run_id, report.failed)
    return Committed(report, age)


def _copy_failure(session: FlowSession, plan: Plan, note: str) -> MirrorError:
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
        return _lost_during_copy(session, plan, message)
    return kind.from_message(message)


def _lost_during_copy(session: FlowSession, plan: Plan, reported: str) -> SourceDataLostError:
    """The error naming every planned range whose start the source no longer holds (its log start
    now), with what the copy reported."""
    flow = session.flow
    tps = [(p.topic, p.partition) for p in plan.partitions]
    try:
        starts = session.source.earliest_offsets(tps)
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


def checkpoint_run(config: MirrorConfig, flow_name: str, run_id: str) -> CheckpointReport:
    """The checkpoint task: the flow's consumer groups' positions translated and emitted."""
    with FlowSession(config, flow_name, run_id) as session:
        return emit_checkpoints(session)


def release_run(config: MirrorConfig, flow_name: str, run_id: str) -> bool:
    """Give the flow's lock back if ``run_id`` holds it (whether it did is returned), then bound
    what the flow keeps (``FlowSession.release``)."""
    with FlowSession(config, flow_name, run_id) as session:
        return session.release()
