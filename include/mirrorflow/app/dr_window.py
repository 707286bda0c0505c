"""A DR window: micro-batches back to back (``app.micro_batch``) inside one long-lived Spark
application, for ``mirrorflow.dr.window.seconds``, then handed over to the next window.

The window waits its turn (``app.window_lease``: the flow's lock, taken free or handed over by the
window before), holds the lock by a lease while it runs, and past its end, at a micro-batch boundary,
hands the lock to the next window once that one is up (``store.flow_lock.hand_over``).

Invariants: no micro-batch starts after the window handed the flow over, and none while the window
does not hold the lock; a transient error is waited out inside the window, any other ends it at once.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable
from datetime import UTC, datetime

from mirrorflow.app.copy_guard import stop_process
from mirrorflow.app.flow_session import FlowSession
from mirrorflow.app.freshness import staleness
from mirrorflow.app.micro_batch import Copy, MicroBatches, dr_settings_of
from mirrorflow.app.window_lease import LEASE_SECONDS, Lease, await_turn
from mirrorflow.config.keys import DR_HANDOVER_WAIT
from mirrorflow.config.model import MirrorConfig
from mirrorflow.core.progress import attempt_holder
from mirrorflow.core.report import partitions_failed
from mirrorflow.core.window import Periodic, WindowSummary
from mirrorflow.errors import MirrorError, PartitionsFailedError, error_class
from mirrorflow.kafka.faults import WindowAction
from mirrorflow.store.flow_lock import successor_of
from mirrorflow.store.offsets_store import OffsetsStore
from mirrorflow.store.run_documents import describe, read_document, save_document

log = logging.getLogger(__name__)

# After a transient error the window waits this long before planning again, doubling up to the cap.
RETRY_WAIT_S = 1.0
RETRY_WAIT_MAX_S = 30.0


def check_window(config: MirrorConfig, flow_name: str) -> None:
    """The window's start: its flow must be in DR mode (the window itself waits for the lock)."""
    dr_settings_of(config.flow(flow_name))


class _Window:
    """One window's loop of micro-batches, and its handover."""

    def __init__(self, batches: MicroBatches, lease: Lease, sleep: Callable[[float], None]) -> None:
        self.batches, self.lease, self.sleep = batches, lease, sleep
        # The window the flow was handed over to, once it was.
        self.successor: str | None = None

    def loop(self, ends: float) -> MirrorError | None:
        """Micro-batches until ``ends`` and then, at each micro-batch boundary, until the window waiting
        to take over has the lock (``lease.hand_over``) or ``mirrorflow.dr.handover.wait.seconds`` have
        passed too; the error that ended the window, if any."""
        batches, flow, clock, sleep = self.batches, self.batches.flow, self.batches.clock, self.sleep
        error: MirrorError | None = None
        wait = RETRY_WAIT_S
        gives_up = ends + dr_settings_of(flow).handover_wait_seconds
        started = -batches.trigger_interval_s
        while True:
            # Fewer, larger micro-batches when asked: each costs a plan, a copy and a commit however
            # few records it holds, and several flows sharing few cores spend them on that.
            if (pause := started + batches.trigger_interval_s - clock()) > 0:
                with batches.steps.timed("trigger"):
                    sleep(pause)
            started, before = clock(), dict(batches.steps.totals)
            try:
                written = batches.run(started)
                error, wait = None, RETRY_WAIT_S
                batches.log_if_slow(clock() - started, before)
            except MirrorError as failed:
                action, written = batches.policy.in_window(failed), 0
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
            if clock() >= ends and self.ended(clock() >= gives_up):
                if error is None and batches.failed:
                    return partitions_failed(flow.name, batches.run_id, tuple(batches.failed.values()))
                return error
            if not written and error is None:
                with batches.steps.timed("idle"):
                    sleep(batches.idle_wait_s)

    def ended(self, waited_enough: bool) -> bool:
        """Past the window's end: whether the next window took the flow over, or has been waited for
        long enough (saying why the window goes on while it does not)."""
        batches, store = self.batches, self.batches.session.store
        flow, run_id = batches.flow, batches.run_id
        with batches.steps.timed("handover"):
            waiting = successor_of(store, flow.name)
            if waiting is not None and waiting.fresh(store.now()):
                # What the window leaves in the offsets table is settled while it holds the lock.
                batches.settle()
                self.successor = self.lease.hand_over(store)
        if self.successor is not None:
            log.info(
                "flow %s window %s handed the flow over to window %s",
                flow.name,
                run_id,
                self.successor,
            )
            return True
        if waited_enough:
            log.warning(
                "flow %s window %s ends %d s past its end: no next window came up to take the flow over, "
                "so it goes unmirrored until one starts (is the DAG paused, the scheduler down, its "
                "window task failing, or are Airflow's executor slots all taken? Each DR flow needs two "
                "at its handovers: core.parallelism)",
                flow.name,
                run_id,
                dr_settings_of(flow).handover_wait_seconds,
            )
            return True
        if batches.scheduler.due(Periodic.OVERRUN, batches.clock()):
            log.warning(
                "flow %s window %s goes on past its end: no next window is up to take the flow over yet "
                "(its Airflow run may be starting, or the DAG paused, the scheduler down, Airflow's "
                "executor slots all taken: each DR flow needs two at its handovers, core.parallelism); "
                "it waits up to %s = %d s",
                flow.name,
                run_id,
                DR_HANDOVER_WAIT,
                dr_settings_of(flow).handover_wait_seconds,
            )
            batches.scheduler.ran(Periodic.OVERRUN, batches.clock())
        return False


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
        batches = MicroBatches(session, copy, clock)
        successor: str | None = None
        error: MirrorError | None
        try:
            batches.prepare()
            # The window before may have started up to a whole window and its wait earlier.
            await_turn(
                session.store, flow.name, holder, dr.window_seconds + dr.handover_wait_seconds + LEASE_SECONDS
            )
        except MirrorError as locked:
            error = locked
        else:
            session.locked = True
            with Lease(config.offsets_db_url, flow.name, holder, on_lost) as lease:
                window = _Window(batches, lease, sleep)
                error = window.loop(clock() + dr.window_seconds)
                successor = window.successor
            # A window that failed only some partitions ran to its end like a clean one; a window
            # that handed over settled before it did.
            if successor is None and (error is None or isinstance(error, PartitionsFailedError)):
                batches.settle()
        summary = batches.summary(run_id, started, error, successor)
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
