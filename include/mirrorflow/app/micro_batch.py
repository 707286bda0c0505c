"""A DR window's micro-batches: each a run in small, with the control-plane steps between them.

A micro-batch plans from committed progress to the source's offsets now, copies (Spark tasks; a plan
of heartbeats only in process, an empty plan not at all) and commits progress and the batch log in
one transaction. Heartbeats, remote topic refresh (with the topics' schemas, when the flow names
registries), ACL sync and checkpoints are periodic steps (``core.window.Scheduler``) at MM2's
intervals (``config.dr``); the batch log's merge, the metrics history and file, at the window's.
The window (``app.dr_window``) runs them back to back while its run holds the flow's lock; each
commits under an id of its own (``<run id>#<n>``).

Invariants: a micro-batch commits only what the target acknowledged, from exactly the committed
position, so a window killed at any point leaves at most records past the committed position, which
the next plan's copy reads back and skips. A record whose schema id the window's map lacks (a
schema registered at the source after the last sync) is copied only after the schemas were synced
again, after its micro-batch's plan: an id still unknown then is none of the source registry's
synced schemas, and fails as in a batch run.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import UTC, datetime

from mirrorflow.app.checkpoints import emit_checkpoints
from mirrorflow.app.flow_session import FlowSession
from mirrorflow.app.remote_topics import RemoteTopics
from mirrorflow.config.dr import DrSettings
from mirrorflow.config.keys import MODE
from mirrorflow.config.model import FlowConfig
from mirrorflow.config.run_options import DEFAULT_OPTIONS
from mirrorflow.core.plan import CopyResult, Grant, Plan
from mirrorflow.core.recovery_point import mirrored_as_of
from mirrorflow.core.report import FailedPartition, RunReport, build_report
from mirrorflow.core.topic_partitions import TP
from mirrorflow.core.window import Periodic, Scheduler, StepTimes, WindowCounts, WindowSummary, steps_text
from mirrorflow.errors import ConfigError, MirrorError, SchemaIdError
from mirrorflow.kafka.faults import FaultPolicy
from mirrorflow.store.checkpoint_log import last_emitted_at

log = logging.getLogger(__name__)

Copy = Callable[[Plan, Grant], CopyResult]
# How often a window logs what it did and where the time went.
PROGRESS_INTERVAL_S = 60.0
# A micro-batch taking longer is logged with where its time went: the recovery point grows by as
# much (a broker failing over, a slow commit).
SLOW_MICRO_BATCH_S = 2.0
# How often a window merges its micro-batches' batch-log rows: what a handover still has to merge,
# while the next window waits for the lock, is this long's rows (the rpo bench's progress lines show
# up to 0.4 s to merge a minute's rows at 2,000 records/s), and no merge stalls the copy for long.
COALESCE_INTERVAL_S = 5.0
# How often the window rewrites the flow's metrics file (three reads of the offsets database and a
# file: as much as the rest of a small micro-batch's commit), and micro-batches with nothing to copy
# record the recovery point they prove: what the page and the metrics show lags by at most this.
RECOVERY_INTERVAL_S = 1.0


def dr_settings_of(flow: FlowConfig) -> DrSettings:
    if flow.dr is None:
        raise ConfigError(
            f"flow {flow.name} is not in DR mode; set `{flow.name}.{MODE} = dr` to run it in windows"
        )
    return flow.dr


# The periodic steps a micro-batch does before it plans (a topic created meanwhile is in its plan),
# and after it committed.
BEFORE_PLAN = (Periodic.HEARTBEATS, Periodic.TOPICS, Periodic.ACLS)
AFTER_COMMIT = (Periodic.CHECKPOINTS, Periodic.COALESCE, Periodic.PROGRESS)


class MicroBatches:
    """A DR window's micro-batches, the periodic steps between them, and what they did (``counts``)."""

    def __init__(self, session: FlowSession, copy: Copy, clock: Callable[[], float]) -> None:
        self.session, self.flow, self.run_id, self.copy = session, session.flow, session.run_id, copy
        flow, dr = self.flow, dr_settings_of(self.flow)
        self.policy = FaultPolicy.of(flow)
        self.idle_wait_s = dr.idle_wait_ms / 1000
        self.trigger_interval_s = dr.trigger_interval_ms / 1000
        self.clock = clock
        self.steps = StepTimes(clock)
        self.scheduler = Scheduler(
            {
                Periodic.HEARTBEATS: dr.heartbeats_interval_seconds,
                Periodic.TOPICS: dr.topics_interval_seconds,
                Periodic.ACLS: dr.acls_interval_seconds,
                Periodic.CHECKPOINTS: dr.checkpoints_interval_seconds,
                Periodic.COALESCE: COALESCE_INTERVAL_S,
                Periodic.PROGRESS: PROGRESS_INTERVAL_S,
                Periodic.RECOVERY: RECOVERY_INTERVAL_S,
                Periodic.HEARTBEAT_AGE: dr.heartbeats_interval_seconds,
                Periodic.OVERRUN: PROGRESS_INTERVAL_S,
            },
            self.steps,
        )
        if flow.emit_heartbeats:
            self.scheduler.every(Periodic.HEARTBEATS, session.emit_heartbeats)
        self.scheduler.every(Periodic.TOPICS, self.sync_topics)
        if flow.sync_topic_acls:
            self.scheduler.every(Periodic.ACLS, lambda: session.sync_acls(self.remote_names))
        if flow.emit_checkpoints:
            self.scheduler.every(Periodic.CHECKPOINTS, self.emit_checkpoints)
        self.scheduler.every(Periodic.COALESCE, self.coalesce)
        self.scheduler.every(Periodic.PROGRESS, self.log_progress)
        self.counts = WindowCounts()
        self.topics: RemoteTopics | None = None
        self.age: float | None = None
        # The newest micro-batch's report, until the metrics file shows it.
        self.unpublished: RunReport | None = None
        # Partitions that failed on their own errors (isolate): left out of the window's later
        # micro-batches, and the window fails at its end.
        self.failed: dict[TP, FailedPartition] = {}
        # When progress was last logged, with the step times and counts then: the first progress line
        # (and merge) comes an interval after the window starts.
        started = clock()
        self.progress: tuple[float, dict[str, float], WindowCounts] = (started, {}, self.counts)
        self.scheduler.ran(Periodic.PROGRESS, started)
        self.scheduler.ran(Periodic.COALESCE, started)

    @property
    def remote_names(self) -> Mapping[str, str]:
        assert self.topics is not None  # set by the first topic sync, in ``prepare``
        return self.topics.remote_names

    def prepare(self) -> None:
        """What a window does before its turn, so that its first micro-batch after taking over costs
        what the others do: heartbeats (which also opens the internal topics' producers; MM2 emits
        them whoever mirrors), the remote topics and ACLs synced (their intervals count from then, so
        a topic created while the window waits is picked up within one, as MM2's refresh does), both
        clusters' ends read once (the first plan then finds its connections to the leaders open),
        the offset syncs' producer ready, the mirrored heartbeat's age. The checkpoints are next due
        an interval after the flow last emitted one, whichever window did. The flow's writer is
        fenced only after the window took the flow over (``FlowSession.transactions``): a fence
        before would cut off the window still mirroring."""
        session, now = self.session, self.clock()
        self.scheduler.run_due(BEFORE_PLAN, now)
        assert self.topics is not None  # set by the topic sync
        tps = [(t, p) for t, n in self.topics.partitions.items() for p in range(n)]
        session.source.latest_offsets(tps)
        session.target.latest_offsets([(self.topics.remote_names[t], p) for t, p in tps])
        session.open_offset_syncs()
        self.heartbeat_age()
        emitted = last_emitted_at(session.store, self.flow.name) if self.flow.emit_checkpoints else None
        if emitted is not None:
            self.scheduler.ran(Periodic.CHECKPOINTS, now - (session.store.now() - emitted).total_seconds())

    def run(self, now: float) -> int:
        """Plan, copy and commit one micro-batch, with the periodic steps that are due; returns how
        many records it wrote (heartbeats included)."""
        self.scheduler.run_due(BEFORE_PLAN, now)
        plan = self.plan()
        if plan.partitions or plan.gaps:
            report = self.copy_and_commit(plan)
            written = sum(p.written for p in report.partitions)
        else:
            report = self.caught_up(plan, now)
            written = 0
        self.counts = self.counts.lagging(report)
        self.scheduler.run_due(AFTER_COMMIT, now)
        return written

    def sync_topics(self) -> None:
        """The remote topics refreshed (created, configs and partitions synced), with their schemas."""
        self.topics = self.session.sync_topics()
        for remote in self.topics.created:
            log.info("flow %s: remote topic %s created", self.flow.name, remote)
        self.session.sync_schemas(self.topics.remote_names)

    def sync_schemas(self) -> bool:
        """The schemas synced again (``FlowSession.sync_schemas``); whether the id map changed."""
        with self.steps.timed("schemas"):
            return self.session.sync_schemas(self.remote_names)

    def plan(self) -> Plan:
        """The next micro-batch's plan (``<run id>#<n>``) from committed progress to the source's end
        now, new partitions anchored, without the partitions that failed on their own."""
        assert self.topics is not None  # set by the topic sync
        with self.steps.timed("plan"):
            run_id = f"{self.run_id}#{self.counts.micro_batches}"
            planned = self.session.plan(run_id, DEFAULT_OPTIONS, self.topics)
            self.counts = self.counts.planned()
            if planned.anchors or planned.topics:
                self.session.store.anchor(self.flow.name, self.run_id, planned.anchors, planned.topics)
        plan = self.session.with_schema_ids(planned.plan)
        if self.failed:
            kept = tuple(p for p in plan.partitions if (p.topic, p.partition) not in self.failed)
            plan = replace(plan, partitions=kept)
        return plan

    def copy_and_commit(self, plan: Plan) -> RunReport:
        """Copy the plan (in process when it holds heartbeats only, else in Spark) and commit it."""
        timed = self.steps.timed
        with timed("copy"):
            if not plan.partitions:
                result = CopyResult(plan.flow, plan.run_id, ())
            elif plan.in_process:
                result = self.session.copy_in_process(plan)
            else:
                plan, result = self.copy_in_spark(plan)
        with timed("commit"):
            report = self.session.commit(plan, result, micro_batch=True)
        self.counts = self.counts.committed(report, plan.log_starts)
        self.unpublished = report
        if self.scheduler.due(Periodic.RECOVERY, self.clock()):
            self.publish()
        self.leave_out(report.failed)
        return report

    def leave_out(self, failed: tuple[FailedPartition, ...]) -> None:
        """The partitions that failed on their own errors, left out of the window's later
        micro-batches; those refused for a schema id the window's map lacked go on if a sync now maps
        more ids (their next plan starts where this one did)."""
        refused = [f for f in failed if self.policy.cured_by_schema_sync(f.failure.kind)]
        goes_on = refused if refused and self.sync_schemas() else []
        for f in failed:
            if f in goes_on:
                log.info("flow %s: %s; the schemas were synced again, so it goes on", self.flow.name, f)
            else:
                log.warning("flow %s: partition left out for the rest of the window: %s", self.flow.name, f)
                self.failed[(f.topic, f.partition)] = f

    def copy_in_spark(self, plan: Plan) -> tuple[Plan, CopyResult]:
        """The plan copied by the Spark tasks in one transaction; copied again if a record's schema id
        was missing from its map and the schemas synced again cure it (its transaction was aborted:
        the same plan copies again, with the new map). The plan copied, and what it copied."""
        try:
            return plan, self.copy_in_transaction(plan)
        except SchemaIdError as unknown:
            if not self.sync_schemas():
                raise
            log.info("flow %s: %s; the schemas were synced again, copying again", self.flow.name, unknown)
        plan = self.session.with_schema_ids(plan)
        return plan, self.copy_in_transaction(plan)

    def copy_in_transaction(self, plan: Plan) -> CopyResult:
        """The copy's Spark tasks in one transaction, timed apart from the transaction around them."""
        self.counts = self.counts.copied_in_spark()

        def tasks(grant: Grant) -> CopyResult:
            with self.steps.timed("copy tasks"):
                return self.copy(plan, grant)

        return self.session.copy_in_transaction(plan, tasks)

    def caught_up(self, plan: Plan, now: float) -> RunReport:
        """A micro-batch with nothing to copy: the recovery point it proves, recorded at most once per
        recovery interval."""
        report = build_report(plan, CopyResult(plan.flow, plan.run_id, ()))
        as_of = mirrored_as_of(plan, report)
        if as_of is not None and self.scheduler.due(Periodic.RECOVERY, now):
            with self.steps.timed("commit"):
                store = self.session.store
                store.advance_recovery_point(self.flow.name, plan.run_id, as_of, holder=self.run_id)
            self.unpublished = report
            self.publish()
        return report

    def emit_checkpoints(self) -> None:
        self.counts = self.counts.checkpointed(len(emit_checkpoints(self.session).emitted))

    def publish(self) -> None:
        """The flow's metrics file rewritten with the newest micro-batch's report; the next one is due
        a recovery interval later."""
        if self.unpublished is not None:
            with self.steps.timed("metrics file"):
                self.session.write_metrics(self.unpublished, self.heartbeat_age())
            self.unpublished = None
        self.scheduler.ran(Periodic.RECOVERY, self.clock())

    def settle(self) -> None:
        """Bound what the window leaves in the offsets table (``coalesce``, ``record_metrics``), and
        leave the metrics file showing its last micro-batch."""
        with self.steps.timed("coalesce"):
            self.coalesce()
        with self.steps.timed("metrics"):
            self.record_metrics()
        if self.unpublished is not None:
            self.publish()

    def coalesce(self) -> None:
        """The window's micro-batches' batch-log rows merged into a row per unbroken stretch of each
        partition, and the log pruned below the source's log starts its last plans read."""
        self.session.store.coalesce_batches(self.flow.name, self.run_id, self.counts.log_starts)

    def record_metrics(self) -> None:
        """The micro-batches' metrics since the last call summed into one history entry per partition
        (under the last micro-batch's id)."""
        counts = self.counts
        if counts.unrecorded and counts.last_batch_id is not None:
            self.session.store.record_partition_metrics(
                self.flow.name, counts.last_batch_id, counts.to_record(), holder=self.run_id
            )
            self.counts = counts.recorded()

    def heartbeat_age(self) -> float | None:
        """The newest mirrored heartbeat's age, read at most once per heartbeat interval (it costs a
        consumer's round trips)."""
        now = self.clock()
        if self.flow.emit_heartbeats and self.scheduler.due(Periodic.HEARTBEAT_AGE, now):
            self.age = self.session.heartbeat_age()
            self.scheduler.ran(Periodic.HEARTBEAT_AGE, now)
        return self.age

    def log_if_slow(self, took: float, before: dict[str, float]) -> None:
        if took > SLOW_MICRO_BATCH_S:
            log.warning(
                "flow %s: micro-batch %s#%d took %.1f s; seconds in %s",
                self.flow.name,
                self.run_id,
                self.counts.micro_batches - 1,
                took,
                steps_text(self.steps.since(before), at_least=0.05),
            )

    def log_progress(self) -> None:
        """One line per progress interval: what the window did since the last one, and where the
        time went; then the metrics history written."""
        now, (then, spent, counts) = self.clock(), self.progress
        log.info(
            "flow %s window %s, last %.0f s: %s; seconds in %s",
            self.flow.name,
            self.run_id,
            now - then,
            self.counts.progress_text(counts),
            steps_text(self.steps.since(spent)),
        )
        self.progress = (now, dict(self.steps.totals), self.counts)
        self.record_metrics()

    def summary(
        self, run_id: str, started: datetime, error: MirrorError | None, successor: str | None
    ) -> WindowSummary:
        """The window's summary: its counts, where its time went, and how it ended."""
        return WindowSummary(
            flow=self.flow.name,
            run_id=run_id,
            started_at=started.isoformat(timespec="seconds"),
            ended_at=datetime.now(UTC).isoformat(timespec="seconds"),
            micro_batches=self.counts.micro_batches,
            spark_copies=self.counts.spark_copies,
            records=self.counts.records,
            bytes=self.counts.bytes,
            checkpoints=self.counts.checkpoints,
            lags=tuple((t, p, lag) for (t, p), lag in sorted(self.counts.lags.items())),
            heartbeat_age_s=self.session.heartbeat_age() if error is None else None,
            error=None if error is None else (type(error).__name__, str(error)),
            step_seconds=self.steps.as_tuple(),
            successor=successor,
        )
