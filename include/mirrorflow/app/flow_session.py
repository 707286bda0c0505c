"""FlowSession: what one task of a batch run, or one DR window, works with, and the steps that use it.

A session holds a flow's offsets store, both clusters' admin connections, the producers of MM2's
internal topics (heartbeats, offset syncs, checkpoints) and the flow's writer, each opened the first
time a step needs it and closed with the session: nothing is opened twice within a run's task or a
window. The steps take the session: the flow's lock (take, release), heartbeats, remote topic, ACL and
schema sync, the plan, the copy of a plan of heartbeats only, the commit and the metrics files. The
batch run (``app.batch_run``) and the DR window (``app.dr_window``) are drivers of these steps; the
checkpoint step is ``app.checkpoints.emit_checkpoints``.

Invariants:
- The session's ``run_id`` is the run that holds, or is about to take, the flow's lock. A session
  that holds it (``locked``: it took the lock, or its run's start task did) writes under it: a plan
  refused for bad state first checks the run still holds the lock, a commit requires it, and so do
  anchors, the writer's record, the recovery point and checkpoints.
- A plan starts at exactly the committed progress, read before either cluster's offsets (offsets
  only grow, so a commit made meanwhile can never look like a recreated source or a truncated
  remote topic), and ends at or before each partition's last stable offset.
- Progress moves only in ``commit``, only from the plan's start, in one transaction with the batch
  log, gaps, metrics and the recovery point; offset syncs are written after it (a retried commit
  commits nothing twice and rewrites the same syncs).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from dataclasses import replace
from datetime import UTC, datetime
from functools import cached_property
from pathlib import Path

from mirrorflow.app.remote_topics import RemoteTopics, ensure_remote_topics
from mirrorflow.app.run_folder import metrics_file, write_atomically
from mirrorflow.app.schemas import sync_schemas
from mirrorflow.config.clients import transaction_timeout_ms
from mirrorflow.config.model import FlowConfig, MirrorConfig
from mirrorflow.config.run_options import RunOptions
from mirrorflow.copy.batch_copy import CopySettings, copy_partitions, copy_result
from mirrorflow.copy.flow_transaction import WINDOW_TRANSACTION_TIMEOUT_MS, FlowTransactions
from mirrorflow.core.metrics import PartitionMetrics, checkpoint_metrics_text, source_metrics_text
from mirrorflow.core.plan import CopyResult, Grant, Plan, SourceGap, transactional_id
from mirrorflow.core.planner import (
    PlannerInput,
    PlannerOutput,
    SourceOffsets,
    count_copied_past_gap,
    find_gaps,
    make_plan,
)
from mirrorflow.core.recovery_point import mirrored_as_of
from mirrorflow.core.report import PartitionReport, RunReport, batches_for, build_report
from mirrorflow.core.schema_ids import NO_SCHEMA_IDS, SchemaIdMap
from mirrorflow.core.topic_partitions import TP
from mirrorflow.errors import ParamError, TargetStateError
from mirrorflow.kafka.admin import ClusterAdmin
from mirrorflow.kafka.heartbeats import HeartbeatAges, emit_heartbeats
from mirrorflow.kafka.internal_topics import InternalTopicWriter
from mirrorflow.kafka.offset_syncs import emit_offset_syncs, open_offset_syncs
from mirrorflow.kafka.record_reads import record_digests
from mirrorflow.mm2.acl_rules import TopicAcl, missing_acls, target_acls
from mirrorflow.store.checkpoint_log import latest_checkpoint_metrics
from mirrorflow.store.flow_lock import acquire_lock, lock_holder, release_lock, require_lock
from mirrorflow.store.offsets_store import OffsetsStore
from mirrorflow.store.run_documents import prune_documents
from mirrorflow.store.status_reads import recovery_point, totals

log = logging.getLogger(__name__)


class FlowSession:
    """One flow's connections and state for one run's task or one DR window; a context manager.
    ``locked``: the run already holds the flow's lock (a DR window's start task took it)."""

    def __init__(self, config: MirrorConfig, flow_name: str, run_id: str, *, locked: bool = False) -> None:
        self.config = config
        self.flow: FlowConfig = config.flow(flow_name)
        self.run_id = run_id
        self.locked = locked
        # The schema ids a plan's copy maps, as the session's newest schema sync left them.
        self.schema_ids: SchemaIdMap = NO_SCHEMA_IDS
        self._opened = ExitStack()

    def __enter__(self) -> FlowSession:
        return self

    def __exit__(self, *_: object) -> None:
        self._opened.close()

    @cached_property
    def store(self) -> OffsetsStore:
        return self._opened.enter_context(OffsetsStore(self.config.offsets_db_url))

    @cached_property
    def source(self) -> ClusterAdmin:
        return self._opened.enter_context(ClusterAdmin(self.flow.source))

    @cached_property
    def target(self) -> ClusterAdmin:
        return self._opened.enter_context(ClusterAdmin(self.flow.target))

    @cached_property
    def internal(self) -> InternalTopicWriter:
        """The producers of MM2's internal topics, one per cluster, open until the session ends."""
        return self._opened.enter_context(InternalTopicWriter())

    def connect(self) -> None:
        """Open the store, both clusters' connections and the internal topics' producers now."""
        # Each opens on its first access: read here, not in an assert (python -O drops those).
        _ = (self.store, self.source, self.target, self.internal)

    @property
    def holder(self) -> str | None:
        """The run whose lock the session's writes require, if it holds it."""
        return self.run_id if self.locked else None

    # ---------------------------------------------------------------------------------- the lock

    def take_lock(self) -> None:
        """Take the flow's lock for the session's run, waiting up to ``mirrorflow.lock.wait.seconds``
        while another run holds it (one that took it after the run's turn found it free, or a DR
        window's predecessor still releasing it); a crashed run's lock is taken over once it expires,
        after every copy attempt of that run has timed out."""
        flow, store = self.flow, self.store
        holder = lock_holder(store, flow.name)
        if holder is not None and holder != self.run_id and flow.settings.lock_wait_seconds:
            log.info(
                "flow %s is locked by run %s; waiting up to %d s for it",
                flow.name,
                holder,
                flow.settings.lock_wait_seconds,
            )
        acquire_lock(store, flow.name, self.run_id, flow.lock_ttl_seconds, flow.settings.lock_wait_seconds)
        self.locked = True

    def release(self) -> bool:
        """Give the flow's lock back if the session's run holds it (whether it did is returned), then
        bound what the flow keeps: its metrics history (a week), its runs' documents (the newest 100)."""
        flow, store = self.flow, self.store
        released = release_lock(store, flow.name, self.run_id)
        self.locked = False
        rows = store.prune_history(flow.name)
        runs = prune_documents(store, flow.name, spare=self.run_id)
        if rows or runs:
            log.info(
                "flow %s: pruned %d metrics history rows and the documents of %d runs", flow.name, rows, runs
            )
        return released

    # ----------------------------------------------------------------- heartbeats, topics and ACLs

    def emit_heartbeats(self) -> None:
        emit_heartbeats(self.flow, writer=self.internal)

    def open_offset_syncs(self) -> None:
        """The producer of the flow's offset syncs made ready for the first commit."""
        open_offset_syncs(self.flow, self.internal)

    def sync_topics(self, only: frozenset[str] = frozenset()) -> RemoteTopics:
        """The target made to match the selected source topics (``only``: just those)."""
        return ensure_remote_topics(self.flow, self.source, self.target, only)

    def missing_acls(self, remote_names: Mapping[str, str]) -> list[TopicAcl] | None:
        """The remote topics' ACLs the target lacks; None when the target has no authorizer."""
        acls = self.source.topic_acls()
        if acls is None:
            return []  # no authorizer on the source: nothing to sync (as MM2)
        wanted = target_acls(acls, remote_names)
        existing = self.target.topic_acls() if wanted else []
        return None if existing is None else missing_acls(wanted, existing)

    def sync_acls(self, remote_names: Mapping[str, str]) -> None:
        flow = self.flow
        created = self.missing_acls(remote_names)
        if created is None:
            log.warning(
                "flow %s: topic ACLs not synced: cluster %s has no authorizer", flow.name, flow.target.alias
            )
            return
        self.target.create_topic_acls(created)
        for acl in created:
            log.info("ACL synced to %s: %s", flow.target.alias, acl)

    def sync_schemas(self, remote_names: Mapping[str, str]) -> bool:
        """The schemas of ``remote_names``' topics synced (``app.schemas``: after a plan read the
        source's ends), if the flow names registries; whether the sync's map of ids differs from the
        session's (a record refused for an unknown id may then go on)."""
        if self.flow.schemas is None:
            return False
        synced = sync_schemas(self.flow, remote_names)
        grew, self.schema_ids = synced.ids != self.schema_ids.ids, synced
        return grew

    def with_schema_ids(self, plan: Plan) -> Plan:
        """``plan`` mapping the ids of the session's newest schema sync (as it is without registries)."""
        return plan if self.flow.schemas is None else replace(plan, schema_ids=self.schema_ids)

    # -------------------------------------------------------------------------------------- plan

    def plan(
        self,
        run_id: str,
        options: RunOptions,
        topics: RemoteTopics,
        absent: frozenset[TP] = frozenset(),
    ) -> PlannerOutput:
        """The planner's input read from both clusters and the offsets table, and its output.
        ``run_id``: the plan's (a DR window's micro-batch
        has one of its own); ``absent``: remote partitions that do not exist yet (they end at 0)."""
        flow, source, store = self.flow, self.source, self.store
        # Before either cluster's ends (see the module's invariants).
        progress = store.progress(flow.name)
        # Before the source's ends are read: the recovery point a commit of this plan proves.
        created_at = datetime.now(UTC).isoformat(timespec="milliseconds")
        tps = [(t, p) for t, n in topics.partitions.items() for p in range(n)]
        starts = source.earliest_offsets(tps)
        ends = source.latest_offsets(tps)
        remote_tps = [(topics.remote_names[t], p) for t, p in tps]
        # The high watermark: the last stable offset lags the copy's last commit until its markers
        # are written, and would look like a truncated remote partition.
        target_ends = {
            **{tp: 0 for tp in absent},
            **self.target.written_offsets([tp for tp in remote_tps if tp not in absent]),
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
            ride_along=frozenset(filter(flow.replication_policy.is_heartbeats_topic, topics.partitions)),
            skip_lost=flow.settings.on_source_data_loss == "skip",
            topic_ids=topics.topic_ids,
            known_topic_ids=store.topic_ids(flow.name),
            starts=self._start_offsets(options, new, ends),
            bounds=self._bounds(options, tps),
        )
        try:
            copied_past_gap = {
                (g.topic, g.partition): self._copied_past_gap(g, topics.remote_names[g.topic], ends)
                for g in find_gaps(inp)
                if g.target_end > g.target_start
            }
            planned = make_plan(replace(inp, copied_past_gap=copied_past_gap))
        except TargetStateError:
            # A run whose lock was taken over meanwhile planned on a stale view of progress: the newer
            # run's writes look like a foreign writer's. Say what really happened.
            if self.holder is not None:
                require_lock(store, flow.name, self.holder, "plan")
            raise
        return replace(planned, plan=replace(planned.plan, narrowed=bool(options.topics)))

    def _start_offsets(self, options: RunOptions, new: list[TP], ends: Mapping[TP, int]) -> dict[TP, int]:
        """Where partitions never mirrored start, unless at the log start (``earliest``)."""
        if options.start == "latest":
            return {tp: ends[tp] for tp in new}
        if options.start_timestamp_ms is not None:
            found = self.source.offsets_at(new, options.start_timestamp_ms)
            # No record at or after the time yet: start after the last one.
            return {tp: ends[tp] if (o := found[tp]) is None else min(o, ends[tp]) for tp in new}
        return {}

    def _bounds(self, options: RunOptions, tps: list[TP]) -> dict[TP, int]:
        """A scheduled or backfill run copies only records before its interval's end: each partition
        up to its first record at or after that time (none yet: no bound but the last stable offset).
        Heartbeats are the mirror's health, not data of an interval: they are always copied up to now,
        so that a scheduled run's freshness is that of the heartbeat it just emitted."""
        if options.until_timestamp_ms is None:
            return {}
        data = [tp for tp in tps if not self.flow.replication_policy.is_heartbeats_topic(tp[0])]
        found = self.source.offsets_at(data, options.until_timestamp_ms)
        return {tp: offset for tp, offset in found.items() if offset is not None}

    def _copied_past_gap(self, gap: SourceGap, remote: str, ends: Mapping[TP, int]) -> int:
        """Where the gap ends on the target: where the records an interrupted attempt committed on
        the remote partition past the committed target offset begin to copy records after the gap
        (see ``count_copied_past_gap``); if none does, right after its last copy of a lost record,
        or at the gap's target start if there is none (the commit markers that follow are the next
        batch's)."""
        flow = self.flow
        left = gap.target_end - gap.target_start
        target = record_digests(flow.target, remote, gap.partition, gap.target_start, gap.target_end, left)
        source = record_digests(
            flow.source, gap.topic, gap.partition, gap.source_end, ends[(gap.topic, gap.partition)], left
        )
        copied = count_copied_past_gap([d for _, d in target], [d for _, d in source])
        if copied:
            return target[-copied][0]
        return target[-1][0] + 1 if target else gap.target_start

    # ----------------------------------------------------------------------------- copy, commit

    @cached_property
    def transactions(self) -> FlowTransactions:
        """The flow's writer on its target, fenced the first time the session writes there (under
        its run's lock: a DR window's, after it took the flow over), until the session ends; fenced
        again (after a transaction that did not commit) only while the run still holds the lock."""
        settings = CopySettings.of(self.flow)
        flow, store = self.flow.name, self.store
        return self._opened.enter_context(
            FlowTransactions.fenced(
                settings.target,
                transactional_id(flow),
                min(WINDOW_TRANSACTION_TIMEOUT_MS, transaction_timeout_ms(settings.target)),
                lambda: require_lock(store, flow, self.run_id, "fence the flow's writer"),
            )
        )

    def copy_in_transaction(self, plan: Plan, copy: Callable[[Grant], CopyResult]) -> CopyResult:
        """``copy`` of ``plan`` in one transaction of the flow's writer, committed once it returns; a
        failed one is aborted (``FlowTransactions.aborted``: the next one fences anew)."""
        transactions = self.transactions
        grant = transactions.begin(plan.partitions)
        with transactions.aborting():
            result = copy(grant)
        transactions.commit(result, plan.partitions)
        return result

    def copy_in_process(self, plan: Plan) -> CopyResult:
        """A plan of heartbeats only, copied here as the Spark job would copy it, in a transaction:
        starting Spark costs seconds, and a run whose only new records are the heartbeat it just
        emitted would pay that."""
        settings = CopySettings.of(self.flow)
        return self.copy_in_transaction(
            plan,
            lambda grant: copy_result(
                plan, copy_partitions(plan.partitions, settings, grant, plan.schema_ids)
            ),
        )

    def commit(self, plan: Plan, result: CopyResult, *, micro_batch: bool = False) -> RunReport:
        """Commit ``result`` of ``plan`` (progress, batch log, gaps, partition metrics, recovery point,
        the older batch log pruned below the plan's source log starts: one transaction) while the
        session's run holds the flow's lock, then write its offset syncs and log the report. A DR
        window's ``micro_batch`` is logged at DEBUG, and leaves the metrics history and the pruning
        to the window, which records its micro-batches' metrics summed up, a minute at a time, and
        prunes as it merges their rows."""
        flow = self.flow
        batches = batches_for(plan, result)
        report = build_report(plan, result)
        self.store.commit(
            flow.name,
            plan.run_id,
            batches,
            [] if micro_batch else [p for p in report.partitions if p.records or p.lag],
            plan.gaps,
            holder=self.run_id,
            mirrored_as_of=mirrored_as_of(plan, report),
            failed=report.failed,
            log_starts=None if micro_batch else plan.log_starts,
        )
        results = {(r.topic, r.partition): r for r in result.partitions}
        left = [p.source_end - results[(p.topic, p.partition)].copied_to(p) for p in plan.partitions]
        short = [n for n in left if n]
        if short:
            log.warning(
                "flow %s run %s: the copy stopped at its transaction's deadline (two thirds of the "
                "target's producer transaction.timeout.ms) in %d partitions, %d planned offsets short; "
                "what it copied is committed, the next run goes on from there",
                flow.name,
                plan.run_id,
                len(short),
                sum(short),
            )
        syncs = emit_offset_syncs(flow, batches, self.internal)
        log.log(
            logging.DEBUG if micro_batch else logging.INFO,
            "flow %s run %s committed, %d offset syncs written\n%s",
            flow.name,
            plan.run_id,
            syncs,
            report.table(),
        )
        return report

    def heartbeat_age(self) -> float | None:
        """The newest mirrored heartbeat's age (a consumer's round trips)."""
        return self._heartbeat_ages.newest()

    @cached_property
    def _heartbeat_ages(self) -> HeartbeatAges:
        return self._opened.enter_context(HeartbeatAges(self.flow))

    def write_checkpoint_metrics(self) -> Path:
        """Rewrite the flow's checkpoint metrics file: the latency of each group and partition's
        newest checkpoint."""
        flow = self.flow
        latencies = latest_checkpoint_metrics(self.store, flow.name)
        text = checkpoint_metrics_text(flow.source.alias, flow.target.alias, latencies)
        path = metrics_file(self.config.state_dir, flow.name, "checkpoint")
        write_atomically(path, text)
        return path

    def write_metrics(self, report: RunReport, heartbeat_age: float | None) -> Path:
        """Rewrite the flow's source metrics file from the offsets table and ``report``: counts from the
        batch log, lag from this run, rates and times from the last run that wrote to each partition."""
        flow, store = self.flow, self.store
        counted = totals(store, flow.name)
        writes = store.latest_writes(flow.name)
        partitions = []
        for p in report.partitions:
            key = (p.topic, p.partition)
            last: PartitionReport = writes.get(key, p)
            records, size = counted.get(key, (0, 0))
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
        # Prometheus gets the recovery point as time() - this (core.recovery_point).
        as_of_s = None if as_of is None else round(as_of.timestamp(), 3)
        path = metrics_file(self.config.state_dir, flow.name, "source")
        write_atomically(
            path,
            source_metrics_text(
                flow.source.alias,
                flow.target.alias,
                partitions,
                {
                    "heartbeat_age_seconds": heartbeat_age,
                    "last_commit_timestamp_seconds": round(time.time()),
                    "mirrored_as_of_timestamp_seconds": as_of_s,
                },
            ),
        )
        return path


def check_topic_subset(flow: FlowConfig, source: ClusterAdmin, options: RunOptions) -> None:
    """Refuses a run narrowed to topics the flow does not select on its source."""
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
