"""DR sync as users deploy it: a DR flow's DAG unpaused under Airflow's real scheduler (`airflow
standalone`), its windows handing the flow over to the next one while records arrive, a window
killed on the way, and Airflow stopped as a service manager stops it, with real spark-submit and
real brokers."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from arrivals import Arrivals, Producing
from mirror_helpers import (
    assert_all_gone,
    assert_same_records,
    create_topic,
    live_processes,
    running_airflow,
    wait_for_dag,
)

from mirrorflow.app.window_lease import LEASE_SECONDS
from mirrorflow.config.model import MirrorConfig
from mirrorflow.core.progress import run_of
from mirrorflow.core.window import WindowSummary
from mirrorflow.store.flow_lock import lock_holder
from mirrorflow.store.offsets_store import OffsetsStore
from mirrorflow.store.run_documents import describe, read_document
from mirrorflow_dev.local_kafka import LocalCluster

pytestmark = [pytest.mark.kafka, pytest.mark.airflow]

FLOW = "primary->backup"
DAG = "mirror_primary_to_backup"
PARTITIONS = 2
WINDOW_S = 20


class Holders:
    """Who holds the flow's lock, looked at every 0.1 s in a thread of its own: ``changes`` holds
    (when, run id) each time another run holds it (None: nobody)."""

    def __init__(self, store: OffsetsStore) -> None:
        self.changes: list[tuple[float, str | None]] = []
        self._store = store
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> Holders:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _watch(self) -> None:
        while not self._stop.wait(0.1):
            holder = lock_holder(self._store, FLOW)
            if not self.changes or self.changes[-1][1] != holder:
                self.changes.append((time.monotonic(), holder))

    def runs(self) -> list[str]:
        return [run for _, run in self.changes if run is not None]

    def wait_for(self, count: int, timeout: float) -> None:
        """Until ``count`` runs have held the lock in turn."""
        deadline = time.monotonic() + timeout
        while len(self.runs()) < count:
            assert time.monotonic() < deadline, f"only {self.runs()} held the lock in {timeout:.0f} s"
            time.sleep(0.2)


def _kill_window(holder: str) -> int:
    """SIGKILL the Python driver of the window holding the lock as ``holder`` (found by its run's id
    among its arguments), as a worker dies."""
    run_id = run_of(holder)
    (driver,) = [p for p in live_processes() if "mirror_dr.py" in p.cmdline and run_id in p.cmdline.split()
                 and "python" in p.cmdline.split()[0]]  # fmt: skip
    os.kill(driver.pid, signal.SIGKILL)
    return driver.pid


def test_dr_windows_under_the_scheduler_hand_over_without_a_gap_and_survive_a_killed_one(
    kafka_clusters: dict[str, LocalCluster],
    write_config: Callable[[str], MirrorConfig],
    unique_name: str,
    tmp_path: Path,
) -> None:
    primary, backup = kafka_clusters["primary"], kafka_clusters["backup"]
    topic, remote = unique_name, f"primary.{unique_name}"
    create_topic(primary.bootstrap, topic, PARTITIONS)
    config = write_config(
        f"{FLOW}.enabled = true\n{FLOW}.topics = {topic}\n{FLOW}.mirrorflow.mode = dr\n"
        f"{FLOW}.mirrorflow.dr.window.seconds = {WINDOW_S}\n{FLOW}.mirrorflow.dr.idle.wait.ms = 100\n"
        f"{FLOW}.mirrorflow.dr.handover.wait.seconds = 120\n"
    )
    store = OffsetsStore(config.offsets_db_url)

    with (
        running_airflow(tmp_path / "airflow", config) as airflow,
        Holders(store) as holders,
        Arrivals(backup.bootstrap, remote, PARTITIONS) as arrivals,
    ):
        with Producing(primary.bootstrap, topic, PARTITIONS) as producing:
            wait_for_dag(airflow, DAG)  # unpaused: the scheduler runs a window every WINDOW_S seconds
            holders.wait_for(3, timeout=300)  # two handovers
            handovers = [
                at
                for (at, run), (_, before) in zip(holders.changes[1:], holders.changes, strict=False)
                if run is not None and before is not None
            ]
            time.sleep(8)  # the third window mirrors for a while
            killed = holders.runs()[-1]
            _kill_window(killed)
            # The window after it takes over once the killed one's lease has run out.
            holders.wait_for(4, timeout=180)
            time.sleep(5)
        # The window running catches up with everything produced, the killed window's share too.
        arrivals.wait_for_all(producing)
        # Airflow stopped as a service manager stops it (SIGTERM to its process group, then SIGKILL):
        # no window mirrors on out of its sight; the last one ends itself.
        airflow.stop(timeout=10, whole_tree=False)
        assert_all_gone(lambda p: "mirror_dr.py" in p.cmdline and str(config.path) in p.cmdline,
                        "DR windows of the stopped Airflow", timeout=LEASE_SECONDS)  # fmt: skip

    assert holders.runs()[3] != killed
    assert len(handovers) == 2, holders.changes  # handed over, never released in between
    # Every record once, in order.
    assert assert_same_records(primary.bootstrap, topic, backup.bootstrap, remote, PARTITIONS) == (
        PARTITIONS * producing.count
    )
    # The first two windows handed the flow over to the window after them, each at a micro-batch
    # boundary (not lost to a lease running out).
    for before, after in zip(holders.runs()[:2], holders.runs()[1:3], strict=True):
        assert _summary(store, run_of(before)).successor == after
    # No handover left the target without a record the source had for 3 s or more: a gap (a lease run
    # out, a window started anew) is 30 s; a micro-batch beside a suite that keeps both cores busy
    # waits up to about 2 s (the recovery point as users run it is the bench's, bench/rpo.py).
    for at in handovers:
        assert arrivals.longest_wait(producing, at - 5, at + 5) < 3.0, holders.changes


def _summary(store: OffsetsStore, run_id: str) -> WindowSummary:
    text = read_document(store, FLOW, run_id, "window", "DR window summary")
    return WindowSummary.from_json(text, describe(FLOW, run_id, "DR window summary"))
