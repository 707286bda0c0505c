"""A DR window: bounded micro-batches back to back inside one long-lived Spark application.

Each micro-batch is a run in small: plan from committed progress to the source's offsets now, copy
(Spark tasks; a plan of heartbeats only in process, an empty plan not at all), commit progress and
the batch log in one transaction. Heartbeats, checkpoints, remote topic refresh (with the topics'
schemas, when the flow names registries) and ACL sync happen at MM2's intervals (``config.dr``).
The window's run holds the flow's lock from its start task to its release task; every micro-batch
commits under an id of its own (``<run id>#<n>``) while it does.

Invariants: a micro-batch commits only what the target acknowledged, from exactly the committed
position, so a window killed at any point leaves at most records past the committed position, which
the next plan's copy reads back and skips. No micro-batch starts after the window's end. A record
whose schema id the window's map lacks (a schema registered at the source after the last sync) is
copied only after the schemas were synced again, after its micro-batch's plan: an id still unknown
then is none of the source registry's synced schemas, and fails as in a batch run.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime

from mirrorflow.app.checkpoints import emit_checkpoints
from mirrorflow.app.copy_guard import stop_process
from mirrorflow.app.flow_session import FlowSession
from mirrorflow.app.freshness import staleness
from mirrorflow.app.remote_topics import RemoteTopics
from mirrorflow.app.schemas import sync_schemas
from mirrorflow.app.window_lease import LEASE_SECONDS, Lease, await_turn
from mirrorflow.config.dr import DrSettings
from mirrorflow.config.keys import DR_HANDOVER_WAIT, MODE
from mirrorflow.config.model import FlowConfig, MirrorConfig
from mirrorflow.config.run_options import DEFAULT_OPTIONS
from mirrorflow.core.plan import CopyResult, Grant, Plan
from mirrorflow.core.progress import attempt_holder
from mirrorflow.core.recovery_point import mirrored_as_of
from mirrorflow.core.report import (
    FailedPartition,
    PartitionReport,
    RunReport,
    build_report,
    partitions_failed,
)
from mirrorflow.core.schema_ids import NO_SCHEMA_IDS, SchemaIdMap
from mirrorflow.core.topic_partitions import TP
from mirrorflow.core.window import StepTimes, Timers, WindowSummary, steps_text
from mirrorflow.errors import (
    ConfigError,
    MirrorError,
    PartitionsFailedError,
    SchemaIdError,
    error_class,
)
from mirrorflow.kafka.faults import FaultPolicy, WindowAction
from mirrorflow.store.checkpoint_log import last_emitted_at
from mirrorflow.store.flow_lock import successor_of
from mirrorflow.store.offsets_store import OffsetsStore
from mirrorflow.store.run_documents import describe, read_document, save_document

log = logging.getLogger(__name__)

Copy = Callable[[Plan, Grant], CopyResult]
# After a transient error the window waits this long before planning again, doubling up to the cap.
RETRY_WAIT_S = 1.0
RETRY_WAIT_MAX_S = 30.0
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


def check_window(config: MirrorConfig, flow_name: str) -> None:
    """The window's start: its flow must be in DR mode (the window itself waits for the lock)."""
    dr_settings_of(config.flow(flow_name))


class _Window:
    """One window's loop and its counts."""

    def __init__(self, session: FlowSession, copy: Copy, clock: Callable[[], float]) -> None:
        self.session, self.flow, self.run_id, self.copy = session, session.flow, session.run_id, copy
        dr = dr_settings_of(self.flow)
        self.policy = FaultPolicy.of(self.flow)
        self.idle_wait_s = dr.idle_wait_ms / 1000
        self.trigger_interval_s = dr.trigger_interval_ms / 1000
        self.timers = Timers(
            {
                "heartbeats": dr.heartbeats_interval_seconds,
                "checkpoints": dr.checkpoints_interval_seconds,
                "topics": dr.topics_interval_seconds,
                "acls": dr.acls_interval_seconds,
                "heartbeat_age": dr.heartbeats_interval_seconds,
                "progress": PROGRESS_INTERVAL_S,
                "coalesce": COALESCE_INTERVAL_S,
                "overrun": PROGRESS_INTERVAL_S,
                "recovery": RECOVERY_INTERVAL_S,
            }
        )
        self.clock = clock
        self.steps = StepTimes(clock)
        self.topics: RemoteTopics | None = None
        # The schema ids the copy maps, as the newest sync left them (``app.schemas``).
        self.schema_ids: SchemaIdMap = NO_SCHEMA_IDS
        self.micro_batches = self.spark_copies = self.records = self.bytes = self.checkpoints = 0
        self.lags: dict[TP, int] = {}
        # Each source partition's log start as the newest plan read it: the batch log is pruned below.
        self.log_starts: dict[TP, int] = {}
        self.age: float | None = None
        # Per partition, the figures of the micro-batches since the metrics history was last written.
        self.unrecorded: dict[TP, PartitionReport] = {}
        self.last_batch_id: str | None = None
        # The newest micro-batch's report, until the metrics file shows it.
        self.unpublished: RunReport | None = None
        # The window the flow was handed over to, once it was.
        self.successor: str | None = None
        # Partitions that failed on their own errors (isolate): left out of the window's later
        # micro-batches, and the window fails at its end.
        self.failed: dict[TP, FailedPartition] = {}
        # When progress was last logged, with the step times, micro-batches and records then: the
        # first progress line (and settling) comes a progress interval after the window starts.
        self.progress: tuple[float, dict[str, float], int, int] = (clock(), {}, 0, 0)
        self.timers.ran("progress", self.progress[0])
        self.timers.ran("coalesce", self.progress[0])

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
        self.sync(now)
        assert self.topics is not None  # set by sync
        tps = [(t, p) for t, n in self.topics.partitions.items() for p in range(n)]
        session.source.latest_offsets(tps)
        session.target.latest_offsets([(self.topics.remote_names[t], p) for t, p in tps])
        session.open_offset_syncs()
        self.heartbeat_age()
        emitted = last_emitted_at(session.store, self.flow.name)
        if emitted is not None:
            self.timers.ran("checkpoints", now - (session.store.now() - emitted).total_seconds())

    def micro_batch(self, now: float) -> int:
        """Plan, copy and commit one micro-batch, with the periodic steps that are due; returns how
        many records it wrote (heartbeats included)."""
        self.sync(now)
        plan = self.plan()
        if plan.partitions or plan.gaps:
            report = self.copy_and_commit(plan)
            written = sum(p.written for p in report.partitions)
        else:
            report = self.caught_up(plan, now)
            written = 0
        self.lags = {(p.topic, p.partition): p.lag for p in report.partitions}
        if self.flow.emit_checkpoints and self.timers.due("checkpoints", now):
            with self.steps.timed("checkpoints"):
                self.checkpoints += len(emit_checkpoints(self.session).emitted)
            self.timers.ran("checkpoints", now)
        if self.timers.due("coalesce", now):
            self.coalesce()
            self.timers.ran("coalesce", now)
        if self.timers.due("progress", now):
            self.log_progress(now)
            self.record_metrics()
            self.timers.ran("progress", now)
        return written

    def sync(self, now: float) -> None:
        """Heartbeats, remote topics (with their configs and schemas) and ACLs, each when its interval
        is due."""
        flow, timers, timed = self.flow, self.timers, self.steps.timed
        if flow.emit_heartbeats and timers.due("heartbeats", now):
            with timed("heartbeats"):
                self.session.emit_heartbeats()
            timers.ran("heartbeats", now)
        if self.topics is None or timers.due("topics", now):
            with timed("topics"):
                self.topics = self.session.sync_topics()
            timers.ran("topics", now)
            for remote in self.topics.created:
                log.info("flow %s: remote topic %s created", flow.name, remote)
            self.sync_schemas()
        if flow.sync_topic_acls and timers.due("acls", now):
            with timed("acls"):
                self.session.sync_acls(self.topics.remote_names)
            timers.ran("acls", now)

    def sync_schemas(self) -> bool:
        """The remote topics' schemas synced (``app.schemas``), if the flow names registries; whether
        the sync mapped ids the window's map lacked."""
        if self.flow.schemas is None:
            return False
        assert self.topics is not None  # set by sync
        with self.steps.timed("schemas"):
            synced = sync_schemas(self.flow, self.topics.remote_names)
        grew, self.schema_ids = synced.ids != self.schema_ids.ids, synced
        return grew

    def plan(self) -> Plan:
        """The next micro-batch's plan (``<run id>#<n>``) from committed progress to the source's end
        now, new partitions anchored, without the partitions that failed on their own."""
        assert self.topics is not None  # set by sync
        with self.steps.timed("plan"):
            planned = self.session.plan(f"{self.run_id}#{self.micro_batches}", DEFAULT_OPTIONS, self.topics)
            self.micro_batches += 1
            if planned.anchors or planned.topics:
                self.session.store.anchor(self.flow.name, self.run_id, planned.anchors, planned.topics)
        plan = planned.plan
        if self.flow.schemas is not None:
            plan = replace(plan, schema_ids=self.schema_ids)
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
        self.log_starts.update(plan.log_starts)
        self.unpublished = report
        if self.timers.due("recovery", self.clock()):
            self.publish()
        # A partition refused for a schema id its map lacked goes on if a sync now maps more ids: its
        # next plan starts where this one did.
        refused = [f for f in report.failed if self.policy.cured_by_schema_sync(f.failure.kind)]
        goes_on = refused if refused and self.sync_schemas() else []
        for failed in report.failed:
            if failed in goes_on:
                log.info("flow %s: %s; the schemas were synced again, so it goes on", self.flow.name, failed)
                continue
            log.warning("flow %s: partition left out for the rest of the window: %s", self.flow.name, failed)
            self.failed[(failed.topic, failed.partition)] = failed
        self.records += sum(p.records for p in report.partitions)
        self.bytes += sum(p.bytes for p in report.partitions)
        for p in report.partitions:
            if p.records:
                key = (p.topic, p.partition)
                self.unrecorded[key] = self.unrecorded[key].then(p) if key in self.unrecorded else p
        self.last_batch_id = plan.run_id
        return report

    def copy_in_spark(self, plan: Plan) -> tuple[Plan, CopyResult]:
        """The plan copied by the Spark tasks in one transaction: again, with the schemas synced again,
        if a record's schema id was missing from its map and the sync now maps more ids (its
        transaction was aborted: the same plan copies again). The plan copied, and what it copied."""
        self.spark_copies += 1
        try:
            return plan, self.session.copy_in_transaction(plan, lambda grant: self.copy_tasks(plan, grant))
        except SchemaIdError as unknown:
            if not self.sync_schemas():
                raise
            log.info("flow %s: %s; the schemas were synced again, copying again", self.flow.name, unknown)
        plan = replace(plan, schema_ids=self.schema_ids)
        self.spark_copies += 1
        return plan, self.session.copy_in_transaction(plan, lambda grant: self.copy_tasks(plan, grant))

    def copy_tasks(self, plan: Plan, grant: Grant) -> CopyResult:
        """The copy's Spark tasks, timed apart from the transaction around them."""
        with self.steps.timed("copy tasks"):
            return self.copy(plan, grant)

    def caught_up(self, plan: Plan, now: float) -> RunReport:
        """A micro-batch with nothing to copy: the recovery point it proves, recorded at most once per
        recovery interval."""
        report = build_report(plan, CopyResult(plan.flow, plan.run_id, ()))
        as_of = mirrored_as_of(plan, report)
        if as_of is not None and self.timers.due("recovery", now):
            with self.steps.timed("commit"):
                store = self.session.store
                store.advance_recovery_point(self.flow.name, plan.run_id, as_of, holder=self.run_id)
            self.unpublished = report
            self.publish()
        return report

    def publish(self) -> None:
        """The flow's metrics file rewritten with the newest micro-batch's report; the next one is due
        a recovery interval later."""
        if self.unpublished is not None:
            with self.steps.timed("metrics file"):
                self.session.write_metrics(self.unpublished, self.heartbeat_age())
            self.unpublished = None
        self.timers.ran("recovery", self.clock())

    def settle(self) -> None:
        """Bound what the window leaves in the offsets table (``coalesce``, ``record_metrics``), and
        leave the metrics file showing its last micro-batch."""
        self.coalesce()
        self.record_metrics()
        if self.unpublished is not None:
            self.publish()

    def coalesce(self) -> None:
        """The window's micro-batches' batch-log rows merged into a row per unbroken stretch of each
        partition, and the log pruned below the source's log starts its last plans read."""
        with self.steps.timed("coalesce"):
            self.session.store.coalesce_batches(self.flow.name, self.run_id, self.log_starts)

    def record_metrics(self) -> None:
        """The micro-batches' metrics since the last call summed into one history entry per partition
        (under the last micro-batch's id)."""
        with self.steps.timed("metrics"):
            if self.unrecorded and self.last_batch_id is not None:
                # The lag is the latest micro-batch's, also for a partition it copied nothing of.
                summed = [replace(p, lag=self.lags.get(tp, p.lag)) for tp, p in self.unrecorded.items()]
                self.session.store.record_partition_metrics(
                    self.flow.name, self.last_batch_id, summed, holder=self.run_id
                )
                self.unrecorded.clear()

    def heartbeat_age(self) -> float | None:
        """The newest mirrored heartbeat's age, read at most once per heartbeat interval (it costs a
        consumer's round trips)."""
        now = self.clock()
        if self.flow.emit_heartbeats and self.timers.due("heartbeat_age", now):
            self.age = self.session.heartbeat_age()
            self.timers.ran("heartbeat_age", now)
        return self.age

    def log_if_slow(self, took: float, before: dict[str, float]) -> None:
        if took > SLOW_MICRO_BATCH_S:
            log.warning(
                "flow %s: micro-batch %s#%d took %.1f s; seconds in %s",
                self.flow.name,
                self.run_id,
                self.micro_batches - 1,
                took,
                steps_text(self.steps.since(before), at_least=0.05),
            )

    def log_progress(self, now: float) -> None:
        """One line per progress interval: what the window did since the last one, and where the
        time went."""
        since, spent = now - self.progress[0], self.steps.since(self.progress[1])
        batches, records = self.micro_batches - self.progress[2], self.records - self.progress[3]
        log.info(
            "flow %s window %s, last %.0f s: %d micro-batches, %d records, lag %d; seconds in %s",
            self.flow.name,
            self.run_id,
            since,
            batches,
            records,
            sum(self.lags.values()),
            steps_text(spent),
        )
        self.progress = (now, dict(self.steps.totals), self.micro_batches, self.records)

    def loop(self, ends: float, lease: Lease, sleep: Callable[[float], None]) -> MirrorError | None:
        """Micro-batches until ``ends`` and then, at each micro-batch boundary, until the window waiting
        to take over has the lock (``lease.hand_over``) or ``mirrorflow.dr.handover.wait.seconds`` have
        passed too; the error that ended the window, if any."""
        flow, clock = self.flow, self.clock
        error: MirrorError | None = None
        wait = RETRY_WAIT_S
        gives_up = ends + dr_settings_of(flow).handover_wait_seconds
        started = -self.trigger_interval_s
        while True:
            # Fewer, larger micro-batches when asked: each costs a plan, a copy and a commit however
            # few records it holds, and several flows sharing few cores spend them on that.
            if (pause := started + self.trigger_interval_s - clock()) > 0:
                with self.steps.timed("trigger"):
                    sleep(pause)
            started, before = clock(), dict(self.steps.totals)
            try:
                written = self.micro_batch(started)
                error, wait = None, RETRY_WAIT_S
                self.log_if_slow(clock() - started, before)
            except MirrorError as failed:
                action, written = self.policy.in_window(failed), 0
                if action is WindowAction.END:
                    return failed
                if action is WindowAction.GO_ON:
                    # The next plan records the lost range as a gap and continues after it.
                    log.warning("flow %s: %s; planning again past the lost records", flow.name, failed)
                else:
                    error = failed
                    log.warning("flow %s: %s; trying again in %.0f s", flow.name, failed, wait)
                    sleep(min(wait, max(gives_up - clock(), 0.0)))
                    wait = min(wait * 2, RETRY_WAIT_MAX_S)
            if clock() >= ends and self.ended(lease, clock() >= gives_up):
                if error is None and self.failed:
                    return partitions_failed(flow.name, self.run_id, tuple(self.failed.values()))
                return error
            if not written and error is None:
                with self.steps.timed("idle"):
                    sleep(self.idle_wait_s)

    def ended(self, lease: Lease, waited_enough: bool) -> bool:
        """Past the window's end: whether the next window took the flow over, or has been waited for
        long enough (saying why the window goes on while it does not)."""
        store = self.session.store
        with self.steps.timed("handover"):
            waiting = successor_of(store, self.flow.name)
            if waiting is not None and waiting.fresh(store.now()):
                # What the window leaves in the offsets table is settled while it holds the lock.
                self.settle()
                self.successor = lease.hand_over(store)
        if self.successor is not None:
            log.info(
                "flow %s window %s handed the flow over to window %s",
                self.flow.name,
                self.run_id,
                self.successor,
            )
            return True
        if waited_enough:
            log.warning(
                "flow %s window %s ends %d s past its end: no next window came up to take the flow over, "
                "so it goes unmirrored until one starts (is the DAG paused, the scheduler down, its "
                "window task failing, or are Airflow's executor slots all taken? Each DR flow needs two "
                "at its handovers: core.parallelism)",
                self.flow.name,
                self.run_id,
                dr_settings_of(self.flow).handover_wait_seconds,
            )
            return True
        if self.timers.due("overrun", self.clock()):
            log.warning(
                "flow %s window %s goes on past its end: no next window is up to take the flow over yet "
                "(its Airflow run may be starting, or the DAG paused, the scheduler down, Airflow's "
                "executor slots all taken: each DR flow needs two at its handovers, core.parallelism); "
                "it waits up to %s = %d s",
                self.flow.name,
                self.run_id,
                DR_HANDOVER_WAIT,
                dr_settings_of(self.flow).handover_wait_seconds,
            )
            self.timers.ran("overrun", self.clock())
        return False

    def summary(self, run_id: str, started: datetime, error: MirrorError | None) -> WindowSummary:
        return WindowSummary(
            flow=self.flow.name,
            run_id=run_id,
            started_at=started.isoformat(timespec="seconds"),
            ended_at=datetime.now(UTC).isoformat(timespec="seconds"),
            micro_batches=self.micro_batches,
            spark_copies=self.spark_copies,
            records=self.records,
            bytes=self.bytes,
            checkpoints=self.checkpoints,
            lags=tuple((t, p, lag) for (t, p), lag in sorted(self.lags.items())),
            heartbeat_age_s=self.session.heartbeat_age() if error is None else None,
            error=None if error is None else (type(error).__name__, str(error)),
            step_seconds=self.steps.as_tuple(),
            successor=self.successor,
        )


def run_window(
    config: MirrorConfig,
    flow_name: str,
    run_id: str,
    copy: Copy,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    on_lost: Callable[[str], None] = stop_process,
) -> WindowSummary:
    """The window's turn (``window_lease.await_turn``: the flow's lock, taken free or handed over by
    the window before), micro-batches back to back for ``mirrorflow.dr.window.seconds`` and until
    the next window takes over, then the window's summary, saved in the offsets database for its
    report task (``store.run_documents``). A transient error (a broker or the offsets database away
    for a while) is waited out inside the window; the last one is the summary's error if the window
    ends before a micro-batch succeeds again (an offsets database still away then fails the job, and
    Airflow retries it). Any other error ends the window at once as its error. ``on_lost``: what
    happens when the window finds it may no longer write (``window_lease.Lease``)."""
    flow = config.flow(flow_name)
    dr = dr_settings_of(flow)
    started = datetime.now(UTC)
    # The window holds the flow as this attempt of its run: a retry of it started beside it is
    # another holder, which waits its turn instead of sharing the lock.
    holder = attempt_holder(run_id, secrets.token_hex(3))
    with FlowSession(config, flow_name, holder) as session:
        # Everything at the start: an unreachable cluster fails the job (Airflow retries it), and a
        # window taking over starts its first micro-batch with its connections open.
        session.connect()
        window = _Window(session, copy, clock)
        error: MirrorError | None
        try:
            window.prepare()
            # The window before may have started up to a whole window and its wait earlier.
            await_turn(
                session.store, flow.name, holder, dr.window_seconds + dr.handover_wait_seconds + LEASE_SECONDS
            )
        except MirrorError as locked:
            error = locked
        else:
            session.locked = True
            with Lease(config.offsets_db_url, flow.name, holder, on_lost) as lease:
                error = window.loop(clock() + dr.window_seconds, lease, sleep)
            # A window that failed only some partitions ran to its end like a clean one; a window
            # that handed over settled before it did.
            if window.successor is None and (error is None or isinstance(error, PartitionsFailedError)):
                window.settle()
        summary = window.summary(run_id, started, error)
        save_document(session.store, flow.name, run_id, "window", summary.to_json())
    log.info(
        "flow %s window %s: %d micro-batches (%d copied in Spark), %d records, %d checkpoints%s%s",
        flow.name,
        run_id,
        summary.micro_batches,
        summary.spark_copies,
        summary.records,
        summary.checkpoints,
        f"; handed over to {summary.successor}" if summary.successor else "",
        f"; ended by {summary.error[0]}: {summary.error[1]}" if summary.error else "",
    )
    return summary


def window_report(config: MirrorConfig, flow_name: str, run_id: str) -> dict[str, object]:
    """The window's counts for Airflow, with how stale it left the flow (``stale``: None when fresh);
    the error that ended the window, raised again (a transient one is retried by Airflow)."""
    flow = config.flow(flow_name)
    with OffsetsStore(config.offsets_db_url) as store:
        text = read_document(store, flow.name, run_id, "window", "DR window summary")
    summary = WindowSummary.from_json(text, describe(flow.name, run_id, "DR window summary"))
    if summary.error is not None:
        kind = error_class(summary.error[0]) or MirrorError
        raise kind.from_message(
            f"flow {flow.name} window {run_id} ended after {summary.micro_batches} micro-batches "
            f"({summary.records} records committed): {summary.error[1]}"
        )
    stale = staleness(flow.name, flow.settings, summary.lag_by_partition, summary.heartbeat_age_s)
    return {**summary.as_dict(), "stale": stale}
