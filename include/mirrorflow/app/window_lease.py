"""A DR window's hold on its flow's lock: its turn, the lease it holds the lock by, and the handover.

A window that is up (its Spark application and connections ready) waits its turn
(``await_turn``): it takes the lock at once when nobody holds it, or when its holder's lease ran out
(that window died); while another window holds it, it offers itself as that window's successor and
waits for the lock to be handed to it. Once it holds the lock, a ``Lease`` keeps it: a thread renews
the lease every ``RENEW_EVERY_S``, and the window hands the lock over (``Lease.hand_over``) at a
micro-batch boundary once its time is up and a successor waits.

Invariants:
- A window copies only while it holds the lock: it takes it only free, lapsed or handed to it, and it
  stops (``on_lost``, by default the end of its process) as soon as the lock is found another's, or
  before a lease it could not renew runs out. A killed or frozen window is taken over once its
  lease lapses (``LEASE_SECONDS``); what it may still send then is refused by the target (the
  flow's writer fences it), and its commit finds the lock gone.
- A handover and a renewal never interleave: once the lock is handed over, nothing renews it.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

from mirrorflow.app.copy_guard import stop_process
from mirrorflow.errors import CommitConflictError, FlowLockedError, TransientError
from mirrorflow.store.flow_lock import (
    acquire_lock,
    hand_over,
    lock_info,
    offer_successor,
    renew_lock,
    withdraw_offer,
)
from mirrorflow.store.offsets_store import OffsetsStore

log = logging.getLogger(__name__)

# How long a window's lock outlives its last renewal: how soon a killed window is taken over.
LEASE_SECONDS = 30
RENEW_EVERY_S = 5.0
# A window stops this long before a lease it could not renew runs out.
MARGIN_S = 5.0
# How often a waiting window looks whether the lock is its, and renews its offer.
LOOK_EVERY_S = 0.05
OFFER_EVERY_S = 1.0


def watch_parent(on_lost: Callable[[str], None], every_s: float = 1.0) -> None:
    """Call ``on_lost`` once this process's parent is gone (it was handed to another parent): a
    window's driver whose spark-submit, and the Airflow task above it, ended (a scheduler stopped, a
    worker killed) must not mirror on out of its scheduler's sight, holding the flow. In cluster
    deploy mode the driver's parent is Spark's, which outlives the task: there the task's kill
    (``SparkSubmitOperator.on_kill``) ends the driver."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(every_s)
        on_lost(
            f"DR window stopped: the process that started it (pid {parent}: its spark-submit, under its "
            "Airflow task) is gone, so nobody would see or end it; the flow's next window takes over once "
            "its lease runs out"
        )

    threading.Thread(target=watch, name="parent watch", daemon=True).start()


def await_turn(
    store: OffsetsStore,
    flow: str,
    run_id: str,
    limit_s: float,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Take ``flow``'s lock for ``run_id``'s window, with a lease, as soon as it may: at once if it is
    free, lapsed or handed to it; meanwhile it offers itself as the holder's successor. After
    ``limit_s`` it gives up with ``FlowLockedError`` naming the holder."""
    deadline = clock() + limit_s
    offered_at = float("-inf")
    try:
        while True:
            lock = lock_info(store, flow)
            if lock is None or lock.free_for(run_id, store.now()):
                try:
                    acquire_lock(store, flow, run_id, LEASE_SECONDS)
                    return
                except FlowLockedError:
                    lock = lock_info(store, flow)  # another window was quicker
            now = clock()
            if now >= deadline and lock is not None:
                raise FlowLockedError(
                    f"flow {flow}: window {run_id} waited {limit_s:.0f} s for the flow's lock, which the "
                    f"window before it did not hand over: {lock.held()} {lock.release_hint()}"
                )
            if now - offered_at >= OFFER_EVERY_S:
                offer_successor(store, flow, run_id)
                offered_at = now
            sleep(LOOK_EVERY_S)
    finally:
        withdraw_offer(store, flow, run_id)


class Lease:
    """``run_id``'s hold on ``flow``'s lock, renewed by a thread of its own (with its own
    connections to the offsets database at ``url``) until ``end`` or a handover; ``on_lost`` is
    called, from that thread, when the window may no longer write."""

    def __init__(
        self, url: str, flow: str, run_id: str, on_lost: Callable[[str], None] = stop_process
    ) -> None:
        self.flow, self.run_id, self._on_lost = flow, run_id, on_lost
        self._store = OffsetsStore(url)
        self._held = threading.Lock()
        self._ended = False
        self._renewed = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._keep, name=f"lease {flow}", daemon=True)

    def __enter__(self) -> Lease:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.end()

    def end(self) -> None:
        with self._held:
            self._ended = True
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        self._store.close()

    def hand_over(self, store: OffsetsStore) -> str | None:
        """The lock passed to the window waiting to take over, if one waits (its run id); the lease
        ends with it."""
        with self._held:
            successor = hand_over(store, self.flow, self.run_id, LEASE_SECONDS)
            if successor is not None:
                self._ended = True
                self._stop.set()
            return successor

    def _keep(self) -> None:
        while not self._stop.wait(RENEW_EVERY_S):
            with self._held:
                if self._ended:
                    return
                try:
                    renew_lock(self._store, self.flow, self.run_id, LEASE_SECONDS)
                    self._renewed = time.monotonic()
                except CommitConflictError as lost:
                    self._ended = True
                    self._on_lost(f"DR window {self.run_id} of flow {self.flow} stopped: {lost}")
                    return
                except TransientError as away:
                    log.warning(
                        "flow %s window %s: its lease was not renewed: %s", self.flow, self.run_id, away
                    )
                unrenewed = time.monotonic() - self._renewed
                if unrenewed > LEASE_SECONDS - MARGIN_S:
                    self._ended = True
                    self._on_lost(
                        f"DR window {self.run_id} of flow {self.flow} stopped: its lease on the flow's lock "
                        f"was not renewed for {unrenewed:.0f} s (the offsets database is away) and runs out "
                        f"in {LEASE_SECONDS - unrenewed:.0f} s, after which another window may take over"
                    )
                    return
