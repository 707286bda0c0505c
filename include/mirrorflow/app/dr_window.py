"""A DR window: bounded micro-batches back to back inside one long-lived Spark application.

Each micro-batch is a run in small: plan from committed progress to the source's offsets now, copy
(Spark tasks; a plan of heartbeats only in process, an empty plan not at all), commit progress and
the batch log in one transaction. Heartbeats, checkpoints, remote topic refresh and ACL sync happen
at MM2's intervals (``config.dr``). The window's run holds the flow's lock from its start task to its
release task; every micro-batch commits under an id of its own (``<run id>#<n>``) while it does.

Invariants: a micro-batch commits only what the target acknowledged, from exactly the committed
position, so a window killed at any point leaves at most records past the committed position, which
the next plan's copy reads back and skips. No micro-batch starts after the window's end.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime

from mirrorflow.app import runner
from mirrorflow.app.checkpoints import emit_checkpoints
from mirrorflow.app.copy_guard import lock_deadline
from mirrorflow.app.freshness import staleness
from mirrorflow.app.remote_topics import RemoteTopics, ensure_remote_topics
from mirrorflow.config.dr import DrSettings
from mirrorflow.config.keys import MODE
from mirrorflow.config.model import FlowConfig, MirrorConfig
from mirrorflow.config.run_options import DEFAULT_OPTIONS
from mirrorflow.core.plan import CopyResult, Plan, Writer
from mirrorflow.core.recovery import mirrored_as_of
from mirrorflow.core.report import FailedPartition, PartitionReport, build_report
from mirrorflow.core.window import StepTimes, Timers, WindowSummary
from mirrorflow.errors import (
    ConfigError,
    MirrorError,
    PartitionsFailedError,
    SourceDataLostError,
    TransientError,
    error_class,
)
from mirrorflow.kafka.admin import ClusterAdmin
from mirrorflow.kafka.heartbeats import emit_heartbeats, freshness_seconds
from mirrorflow.kafka.internal_topics import InternalTopicWriter
from mirrorflow.store.offsets_store import OffsetsStore
from mirrorflow.store.run_documents import describe, read_document, save_document

log = logging.getLogger(__name__)

Copy = Callable[[Plan], CopyResult]
# After a transient error the window waits this long before planning again, doubling up to the cap.
RETRY_WAIT_S = 1.0
RETRY_WAIT_MAX_S = 30.0
# How often a window logs what it did and where the time went.
PROGRESS_INTERVAL_S = 60.0
# How often micro-batches with nothing to copy record the recovery point they prove (a write to the
# offsets database and the metrics file each): what the page and the metrics show then lags by this.
RECOVERY_INTERVAL_S = 1.0


def dr_settings_of(flow: FlowConfig) -> DrSettings:
    if flow.dr is None:
        raise ConfigError(
            f"flow {flow.name} is not in DR mode; set `{flow.name}.{MODE} = dr` to run it in windows"
        )
    return flow.dr


def take_lock(config: MirrorConfig, flow_name: str, run_id: str) -> None:
    """The window's start: its run takes the flow's lock, held until ``runner.release_run``."""
    flow = config.flow(flow_name)
    dr_settings_of(flow)
    with OffsetsStore(config.offsets_db_url) as store:
        runner.take_flow_lock(store, flow, run_id)


class _Window:
    """One window's loop and its counts."""

    def __init__(
        self,
        config: MirrorConfig,
        flow: FlowConfig,
        run_id: str,
        copy: Copy,
        store: OffsetsStore,
        source: ClusterAdmin,
        target: ClusterAdmin,
        writer: InternalTopicWriter,
        clock: Callable[[], float],
    ) -> None:
        self.config, self.flow, self.run_id, self.copy = config, flow, run_id, copy
        self.store, self.source, self.target, self.writer = store, source, target, writer
        dr = dr_settings_of(flow)
        self.idle_wait_s = dr.idle_wait_ms / 1000
        self.timers = Timers(
            {
                "heartbeats": dr.heartbeats_interval_seconds,
                "checkpoints": dr.checkpoints_interval_seconds,
                "topics": dr.topics_interval_seconds,
                "acls": dr.acls_interval_seconds,
                "heartbeat_age": dr.heartbeats_interval_seconds,
                "progress": PROGRESS_INTERVAL_S,
                "recovery": RECOVERY_INTERVAL_S,
            }
        )
        self.clock = clock
        self.steps = StepTimes(clock)
        self.topics: RemoteTopics | None = None
        self.flow_writer: Writer | None = None
        self.micro_batches = self.spark_jobs = self.records = self.bytes = self.checkpoints = 0
        self.lags: dict[tuple[str, int], int] = {}
        self.age: float | None = None
        # Per partition, the figures of the micro-batches since the metrics history was last written.
        self.unrecorded: dict[tuple[str, int], PartitionReport] = {}
        self.last_batch_id: str | None = None
        # Partitions that failed on their own errors (isolate): left out of the window's later
        # micro-batches, and the window fails at its end.
        self.failed: dict[tuple[str, int], FailedPartition] = {}
        # When progress was last logged, with the step times, micro-batches and records then: the
        # first progress line (and settling) comes a progress interval after the window starts.
        self.progress: tuple[float, dict[str, float], int, int] = (clock(), {}, 0, 0)
        self.timers.ran("progress", self.progress[0])

    def micro_batch(self, now: float) -> int:
        """Plan, copy and commit one micro-batch, with the periodic steps that are due; returns how
        many records it wrote (heartbeats included)."""
        flow, timers, timed = self.flow, self.timers, self.steps.timed
        if flow.emit_heartbeats and timers.due("heartbeats", now):
            with timed("heartbeats"):
                emit_heartbeats(flow, writer=self.writer)
            timers.ran("heartbeats", now)
        if self.topics is None or timers.due("topics", now):
            with timed("topics"):
                self.topics = ensure_remote_topics(flow, self.source, self.target)
            timers.ran("topics", now)
            for remote in self.topics.created:
                log.info("flow %s: remote topic %s created", flow.name, remote)
        if flow.sync_topic_acls and timers.due("acls", now):
            with timed("acls"):
                runner.sync_acls(flow, self.source, self.target, self.topics.remote_names)
            timers.ran("acls", now)
        batch_id = f"{self.run_id}#{self.micro_batches}"
        with timed("plan"):
            planned = runner.plan_for(
                flow,
                batch_id,
                DEFAULT_OPTIONS,
                self.source,
                self.target,
                self.topics,
                self.store,
                holder=self.run_id,
            )
            self.micro_batches += 1
            if planned.anchors or planned.topics:
                self.store.anchor(flow.name, self.run_id, planned.anchors, planned.topics)
        plan = planned.plan
        if self.failed:
            plan = replace(
                plan,
                partitions=tuple(p for p in plan.partitions if (p.topic, p.partition) not in self.failed),
            )
        written = 0
        if plan.partitions or plan.gaps:
            if self.flow_writer is None:
                self.flow_writer = runner.flow_writer(flow, self.target, self.store, self.run_id)
            plan = replace(plan, writer=self.flow_writer)
            with timed("copy"):
                if not plan.partitions:
                    result = CopyResult(flow.name, batch_id, ())
                elif plan.in_process:
                    result = runner.copy_in_process(flow, plan)
                else:
                    self.spark_jobs += 1
                    result = self.copy(plan)
            with timed("commit"):
                report = runner.commit_copied(
                    flow,
                    self.store,
                    plan,
                    result,
                    holder=self.run_id,
                    log_level=logging.DEBUG,
                    writer=self.writer,
                    metrics=False,
                )
                runner.write_source_metrics(self.config, flow, self.store, report, self.heartbeat_age())
            for failed in report.failed:
                log.warning("flow %s: partition left out for the rest of the window: %s", flow.name, failed)
                self.failed[(failed.topic, failed.partition)] = failed
            written = sum(p.written for p in report.partitions)
            self.records += sum(p.records for p in report.partitions)
            self.bytes += sum(p.bytes for p in report.partitions)
            for p in report.partitions:
                if p.records:
                    key = (p.topic, p.partition)
                    self.unrecorded[key] = self.unrecorded[key].then(p) if key in self.unrecorded else p
            self.last_batch_id = batch_id
        else:
            report = build_report(plan, CopyResult(flow.name, batch_id, ()))
            as_of = mirrored_as_of(plan, report)
            if as_of is not None and timers.due("recovery", now):
                with timed("commit"):
                    self.store.advance_recovery_point(flow.name, batch_id, as_of, holder=self.run_id)
                    runner.write_source_metrics(self.config, flow, self.store, report, self.heartbeat_age())
                timers.ran("recovery", now)
        self.lags = {(p.topic, p.partition): p.lag for p in report.partitions}
        if flow.emit_checkpoints and timers.due("checkpoints", now):
            with timed("checkpoints"):
                emitted = emit_checkpoints(self.config, flow.name, self.writer, holder=self.run_id).emitted
                self.checkpoints += len(emitted)
            timers.ran("checkpoints", now)
        if timers.due("progress", now):
            self.settle()
            self.log_progress(now)
            timers.ran("progress", now)
        return written

    def settle(self) -> None:
        """Bound what the window leaves in the offsets table: its micro-batches' batch-log rows
        merged into a row per unbroken stretch of each partition, their metrics summed into one
        history entry per partition (under the last micro-batch's id)."""
        with self.steps.timed("settle"):
            self.store.coalesce_batches(self.flow.name, self.run_id)
            if self.unrecorded and self.last_batch_id is not None:
                # The lag is the latest micro-batch's, also for a partition it copied nothing of.
                summed = [replace(p, lag=self.lags.get(tp, p.lag)) for tp, p in self.unrecorded.items()]
                self.store.record_partition_metrics(
                    self.flow.name, self.last_batch_id, summed, holder=self.run_id
                )
                self.unrecorded.clear()

    def heartbeat_age(self) -> float | None:
        """The newest mirrored heartbeat's age, read at most once per heartbeat interval (it costs a
        consumer's round trips)."""
        now = self.clock()
        if self.flow.emit_heartbeats and self.timers.due("heartbeat_age", now):
            self.age = freshness_seconds(self.flow)
            self.timers.ran("heartbeat_age", now)
        return self.age

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
            ", ".join(f"{k} {v:.1f}" for k, v in spent.items()),
        )
        self.progress = (now, dict(self.steps.totals), self.micro_batches, self.records)

    def loop(self, ends: float, sleep: Callable[[float], None]) -> MirrorError | None:
        """Micro-batches until ``ends``; the error that ended the window, if any."""
        flow, clock = self.flow, self.clock
        error: MirrorError | None = None
        wait = RETRY_WAIT_S
        while True:
            try:
                written = self.micro_batch(clock())
                error, wait = None, RETRY_WAIT_S
            except SourceDataLostError as lost:
                if flow.settings.on_source_data_loss != "skip":
                    return lost
                # The next plan records the lost range as a gap and continues after it.
                log.warning("flow %s: %s; planning again past the lost records", flow.name, lost)
                written = 0
            except TransientError as transient:
                error, written = transient, 0
                log.warning("flow %s: %s; trying again in %.0f s", flow.name, transient, wait)
                sleep(min(wait, max(ends - clock(), 0.0)))
                wait = min(wait * 2, RETRY_WAIT_MAX_S)
            except MirrorError as failed:
                return failed
            if clock() >= ends:
                if error is None and self.failed:
                    return runner.partitions_failed(flow, self.run_id, tuple(self.failed.values()))
                return error
            if not written and error is None:
                with self.steps.timed("idle"):
                    sleep(self.idle_wait_s)

    def summary(self, started: datetime, error: MirrorError | None) -> WindowSummary:
        return WindowSummary(
            flow=self.flow.name,
            run_id=self.run_id,
            started_at=started.isoformat(timespec="seconds"),
            ended_at=datetime.now(UTC).isoformat(timespec="seconds"),
            micro_batches=self.micro_batches,
            spark_jobs=self.spark_jobs,
            records=self.records,
            bytes=self.bytes,
            checkpoints=self.checkpoints,
            lags=tuple((t, p, lag) for (t, p), lag in sorted(self.lags.items())),
            heartbeat_age_s=freshness_seconds(self.flow) if error is None else None,
            error=None if error is None else (type(error).__name__, str(error)),
            step_seconds=self.steps.as_tuple(),
        )


def run_window(
    config: MirrorConfig,
    flow_name: str,
    run_id: str,
    copy: Copy,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> WindowSummary:
    """Micro-batches back to back for the flow's window, then the window's summary, saved in the
    offsets database for its report task (``store.run_documents``). A transient error (a broker or
    the offsets database away for a while) is waited out inside the window; the last one is the
    summary's error if the window ends before a micro-batch succeeds again (an offsets database
    still away then fails the job, and Airflow retries it). Any other error ends the window at once
    as its error."""
    flow = config.flow(flow_name)
    dr = dr_settings_of(flow)
    started = datetime.now(UTC)
    with (
        OffsetsStore(config.offsets_db_url) as store,
        ClusterAdmin(flow.source) as source,
        ClusterAdmin(flow.target) as target,
        InternalTopicWriter() as writer,
    ):
        window = _Window(config, flow, run_id, copy, store, source, target, writer, clock)
        error: MirrorError | None
        try:
            # The window ends before its run's lock would expire, whatever its length says.
            left = (lock_deadline(config.offsets_db_url, flow.name, run_id) - started).total_seconds()
        except MirrorError as locked:
            error = locked
        else:
            error = window.loop(clock() + min(dr.window_seconds, left), sleep)
            # A window that failed only some partitions ran to its end like a clean one.
            if error is None or isinstance(error, PartitionsFailedError):
                window.settle()
        summary = window.summary(started, error)
        save_document(store, flow.name, run_id, "window", summary.to_json())
    log.info(
        "flow %s window %s: %d micro-batches (%d Spark jobs), %d records, %d checkpoints%s",
        flow.name,
        run_id,
        summary.micro_batches,
        summary.spark_jobs,
        summary.records,
        summary.checkpoints,
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
