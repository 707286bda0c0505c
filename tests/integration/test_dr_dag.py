"""A DR flow's DAG through real Airflow (`airflow dags test`), real spark-submit and real brokers:
windows of micro-batches while records arrive, and a window killed in the middle."""

from __future__ import annotations

import itertools
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from mirror_helpers import (
    AIRFLOW,
    airflow,
    assert_all_gone,
    assert_same_records,
    create_topic,
    migrated_airflow,
    window_run,
)

from mirrorflow.config.model import MirrorConfig
from mirrorflow.core.window import WindowSummary
from mirrorflow.errors import TransientError
from mirrorflow.store.flow_lock import force_release_lock, lock_holder
from mirrorflow.store.offsets_store import OffsetsStore
from mirrorflow.store.run_documents import recent_documents
from mirrorflow_dev import sample_data
from mirrorflow_dev.local_kafka import LocalCluster

pytestmark = [pytest.mark.kafka, pytest.mark.airflow]

FLOW = "primary->backup"
DAG = "mirror_primary_to_backup"
PARTITIONS = 3


def _dr_config(
    write_config: Callable[[str], MirrorConfig], topic: str, window_s: int, extra: str = ""
) -> MirrorConfig:
    """A DR flow of ``topic`` whose windows end on time: `airflow dags test` starts no next window."""
    return write_config(
        f"{FLOW}.enabled = true\n{FLOW}.topics = {topic}\n{FLOW}.mirrorflow.mode = dr\n"
        f"{FLOW}.mirrorflow.dr.window.seconds = {window_s}\n{FLOW}.mirrorflow.dr.handover.wait.seconds = 0\n"
        + extra
    )


@contextmanager
def _producing(bootstrap: str, topic: str, start: int) -> Iterator[list[int]]:
    """Appends 20 records to every partition every 0.2 s until the block ends; yields the list whose
    one item is the next record index (the count produced per partition once the block ended)."""
    produced = [start]
    stop = threading.Event()

    def produce() -> None:
        while not stop.is_set():
            sample_data.produce_samples(bootstrap, topic, PARTITIONS, produced[0], 20)
            produced[0] += 20
            time.sleep(0.2)

    thread = threading.Thread(target=produce)
    thread.start()
    try:
        yield produced
    finally:
        stop.set()
        thread.join()


def _assert_prefix(primary: LocalCluster, backup: LocalCluster, topic: str, at_least: int) -> None:
    """Every remote partition holds the source partition's first records, each once and in order,
    at least ``at_least`` of them."""
    for p in range(PARTITIONS):
        source = sample_data.read_partition(primary.bootstrap, topic, p)
        target = sample_data.read_partition(backup.bootstrap, f"primary.{topic}", p)
        assert len(target) >= at_least, f"partition {p}: {len(target)} records mirrored"
        assert target == source[: len(target)], f"primary.{topic}-{p} is not a prefix of {topic}-{p}"


# Windows mirroring while records arrive: make test keeps them under the scheduler, handing over
# (tests/integration/test_dr_scheduler.py).
@pytest.mark.extended
def test_dr_windows_through_airflow_mirror_while_records_arrive(
    kafka_clusters: dict[str, LocalCluster],
    write_config: Callable[[str], MirrorConfig],
    unique_name: str,
    tmp_path: Path,
) -> None:
    primary, backup = kafka_clusters["primary"], kafka_clusters["backup"]
    topic = unique_name
    create_topic(primary.bootstrap, topic, PARTITIONS)
    sample_data.produce_samples(primary.bootstrap, topic, PARTITIONS, 0, 300)
    config = _dr_config(write_config, topic, window_s=8)
    env = migrated_airflow(tmp_path / "airflow", config, tmp_path)
    store = OffsetsStore(config.offsets_db_url)

    with _producing(primary.bootstrap, topic, 300):
        first = airflow(env, tmp_path, "dags", "test", DAG)
        assert first.returncode == 0, first.stdout[-5000:] + first.stderr[-5000:]
        _assert_prefix(primary, backup, topic, at_least=300)
    second = airflow(env, tmp_path, "dags", "test", DAG)

    assert second.returncode == 0, second.stdout[-5000:] + second.stderr[-5000:]
    total = assert_same_records(primary.bootstrap, topic, backup.bootstrap, f"primary.{topic}", PARTITIONS)
    assert total > PARTITIONS * 300
    # The summaries the report tasks read: two windows, each of several micro-batches.
    summaries = [WindowSummary.from_json(text) for _, _, text in recent_documents(store, FLOW, "window", 10)]
    assert len(summaries) == 2 and all(s.run_id.startswith("manual__") for s in summaries)
    assert all(s.error is None and s.micro_batches > 1 and s.records > 0 for s in summaries)
    # The micro-batches of both windows end merged: one batch-log row per partition, from offset 0,
    # under the second window's last micro-batch.
    second_id = max(summaries, key=lambda s: s.started_at).run_id
    assert sorted((b.partition, b.source_start, window_run(b.run_id)) for b in store.batches(FLOW)) == [
        (p, 0, second_id) for p in range(PARTITIONS)
    ]
    assert lock_holder(store, FLOW) is None
    # The window's own words reach the task log through spark-submit's output.
    assert f"flow {FLOW} window manual__" in first.stdout + first.stderr


# A window's Airflow process group killed whole, the lock released by hand: make test keeps the window
# killed under the scheduler, whose successor takes over with nobody's help and copies exactly once
# (tests/integration/test_dr_scheduler.py), the release-lock command (tests/offsets_store_cases.py),
# and a copy job killed whole (tests/integration/test_faults.py).
@pytest.mark.extended
def test_a_dr_window_killed_in_the_middle_loses_and_duplicates_nothing(
    kafka_clusters: dict[str, LocalCluster],
    write_config: Callable[[str], MirrorConfig],
    unique_name: str,
    tmp_path: Path,
) -> None:
    primary, backup = kafka_clusters["primary"], kafka_clusters["backup"]
    topic = unique_name
    create_topic(primary.bootstrap, topic, PARTITIONS)
    config = _dr_config(write_config, topic, window_s=120)
    assert config.path is not None
    env = migrated_airflow(tmp_path / "airflow", config, tmp_path)
    store = OffsetsStore(config.offsets_db_url)

    with _producing(primary.bootstrap, topic, 0):
        # The worker running the window dies while micro-batches go on: its process group is SIGKILLed.
        run = subprocess.Popen(
            [AIRFLOW, "dags", "test", DAG],
            env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + 240
        while len({b.run_id for b in store.batches(FLOW)}) < 4:
            assert run.poll() is None, "the window ended before it was killed"
            assert time.monotonic() < deadline, "no micro-batches committed"
            time.sleep(0.05)
        os.killpg(run.pid, signal.SIGKILL)
        run.wait(timeout=30)
    marker = f"MIRROR_CONFIG={config.path}"  # inherited by everything the run started
    assert_all_gone(lambda p: marker in p.cmdline or marker in p.environ, "processes of the window")
    dead = lock_holder(store, FLOW)
    assert dead is not None  # its teardown never ran
    released = subprocess.run(
        [sys.executable, "-m", "mirrorflow.store", "release-lock", "--flow", FLOW,
         "--db", config.offsets_db_url],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert released.returncode == 0, released.stderr
    config.path.write_text(config.path.read_text().replace("window.seconds = 120", "window.seconds = 3"))

    again = airflow(env, tmp_path, "dags", "test", DAG)

    assert again.returncode == 0, again.stdout[-5000:] + again.stderr[-5000:]
    total = assert_same_records(primary.bootstrap, topic, backup.bootstrap, f"primary.{topic}", PARTITIONS)
    # The batch log covers each partition's source offsets once, from 0 to its end, without a hole.
    ends = []
    for p in range(PARTITIONS):
        spans = sorted((b.source_start, b.source_end) for b in store.batches(FLOW) if b.partition == p)
        assert spans[0][0] == 0 and all(a[1] == b[0] for a, b in itertools.pairwise(spans)), spans
        ends.append(spans[-1][1])
    assert sum(ends) == total


def _freeze_outside_a_transaction(run: subprocess.Popen[str], config: MirrorConfig) -> str:
    """SIGSTOP the run's process group at a moment it holds no offsets-database transaction, and
    take the flow's lock from it; returns the run it was taken from. A process frozen inside a
    SQLite write transaction blocks every other writer until it is killed (on PostgreSQL, until
    ``idle_in_transaction_session_timeout``): no newer run could start, which is not this test."""
    quick = OffsetsStore(config.offsets_db_url, busy_timeout_seconds=0.5)
    for _ in range(50):
        os.killpg(run.pid, signal.SIGSTOP)
        try:
            taken = force_release_lock(quick, FLOW)
        except TransientError:
            os.killpg(run.pid, signal.SIGCONT)
            time.sleep(0.05)
            continue
        assert taken is not None
        return taken.run_id
    raise AssertionError("the window was inside a database transaction at every try")


# A window frozen and woken after the next one took over: make test keeps the case frozen inside its
# transaction (tests/integration/test_dr_window.py); this one freezes the whole Airflow task.
@pytest.mark.extended
def test_a_stopped_dr_window_resumed_after_the_next_one_took_over_writes_nothing_twice(
    kafka_clusters: dict[str, LocalCluster],
    write_config: Callable[[str], MirrorConfig],
    unique_name: str,
    tmp_path: Path,
) -> None:
    primary, backup = kafka_clusters["primary"], kafka_clusters["backup"]
    topic = unique_name
    create_topic(primary.bootstrap, topic, PARTITIONS)
    # No retry of the old window's task once it stopped: its attempt's own end is what is checked.
    config = _dr_config(write_config, topic, window_s=120, extra=f"{FLOW}.mirrorflow.task.retries = 0\n")
    assert config.path is not None
    env = migrated_airflow(tmp_path / "airflow", config, tmp_path)
    store = OffsetsStore(config.offsets_db_url)

    # The old window's whole process group (Airflow, spark-submit, the driver, Python workers) is
    # stopped in the middle of its micro-batches while records arrive: a worker frozen, not dead.
    old = subprocess.Popen(
        [AIRFLOW, "dags", "test", DAG],
        env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        with _producing(primary.bootstrap, topic, 0):
            deadline = time.monotonic() + 240
            while len({b.run_id for b in store.batches(FLOW)}) < 4:
                assert old.poll() is None, "the window ended before it was stopped"
                assert time.monotonic() < deadline, "no micro-batches committed"
                time.sleep(0.05)
            stopped = _freeze_outside_a_transaction(old, config)
        # Its lock was taken from it, as an operator does; the next window mirrors everything.
        config.path.write_text(config.path.read_text().replace("window.seconds = 120", "window.seconds = 5"))
        newer = airflow(env, tmp_path, "dags", "test", DAG)
        assert newer.returncode == 0, newer.stdout[-5000:] + newer.stderr[-5000:]
    finally:
        os.killpg(old.pid, signal.SIGCONT)
    # Woken up, the old window's stale batches are refused by the target's broker and its next
    # write to the offsets table by the lock (or, woken inside planning, its plan on a stale view of
    # progress is refused; or its lease keeper finds the lock another's first and ends its process):
    # it ends with an error, having added nothing.
    out, _ = old.communicate(timeout=300)

    assert old.returncode != 0
    refused = rf"run {re.escape(stopped)} cannot (plan|commit|record its recovery point|renew its lease)"
    assert re.search(refused, out), out[-5000:]
    total = assert_same_records(primary.bootstrap, topic, backup.bootstrap, f"primary.{topic}", PARTITIONS)
    assert total >= PARTITIONS * 20
