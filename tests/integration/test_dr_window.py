"""DR windows on real brokers and real Spark: micro-batches back to back while records arrive."""

from __future__ import annotations

import dataclasses
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime

import pytest
from arrivals import Arrivals, Producing
from mirror_helpers import (
    assert_same_records,
    commit_group,
    create_topic,
    delete_records,
    window_run,
    written_end,
)
from pyspark.sql import SparkSession

from mirrorflow.app import batch_run, dr_window
from mirrorflow.app.run_folder import metrics_file
from mirrorflow.config.model import MirrorConfig
from mirrorflow.copy.batch_copy import CopySettings, copy_partitions, copy_result
from mirrorflow.copy.spark_copy import StandingCopy
from mirrorflow.core.plan import CopyResult, Grant, Plan
from mirrorflow.core.progress import PartitionProgress, is_holder_of
from mirrorflow.core.window import WindowSummary
from mirrorflow.errors import FlowLockedError, TransientError
from mirrorflow.store.checkpoint_log import checkpoints
from mirrorflow.store.flow_lock import acquire_lock, force_release_lock, successor_of
from mirrorflow.store.offsets_store import OffsetsStore
from mirrorflow.store.status_reads import failed_partitions, recovery_history, recovery_point, totals
from mirrorflow_dev import sample_data
from mirrorflow_dev.local_kafka import LocalCluster

FLOW = "primary->backup"


def _dr_config(
    write_config: Callable[[str], MirrorConfig],
    topic: str,
    window_s: int,
    extra: str = "",
    handover_wait_s: int = 0,
) -> MirrorConfig:
    """A DR flow of ``topic``; its windows end on time unless ``handover_wait_s`` says otherwise (no
    next window comes in most of these tests)."""
    return write_config(
        f"{FLOW}.enabled = true\n{FLOW}.topics = {topic}\n{FLOW}.mirrorflow.mode = dr\n"
        f"{FLOW}.mirrorflow.dr.window.seconds = {window_s}\n{FLOW}.mirrorflow.dr.idle.wait.ms = 100\n"
        f"{FLOW}.mirrorflow.dr.handover.wait.seconds = {handover_wait_s}\n"
        f"{FLOW}.emit.checkpoints.interval.seconds = 2\n{extra}"
    )


SparkCopy = Callable[[MirrorConfig], StandingCopy]


@pytest.fixture
def spark_copy(spark: SparkSession) -> Iterator[SparkCopy]:
    """The copy a DR window's Spark job uses (standing tasks), up before the window starts as in the
    job, ended after the test: the session's cores are free again for the next one."""
    made: list[StandingCopy] = []

    def make(config: MirrorConfig) -> StandingCopy:
        made.append(StandingCopy(spark.sparkContext, config.flow(FLOW)))
        made[-1].await_tasks()
        return made[-1]

    yield make
    for copy in made:
        copy.close()


def _window_beside(
    config: MirrorConfig, spark_copy: SparkCopy, meanwhile: Callable[[], None]
) -> WindowSummary:
    """Window ``window-1`` run while ``meanwhile`` runs in a thread; its lock released after."""
    during = threading.Thread(target=meanwhile)
    try:
        during.start()
        return dr_window.run_window(config, FLOW, "window-1", spark_copy(config))
    finally:
        during.join()
        batch_run.release_run(config, FLOW, "window-1")


def test_a_window_mirrors_exactly_what_arrives_during_it_in_micro_batches(
    kafka_clusters: dict[str, LocalCluster],
    write_config: Callable[[str], MirrorConfig],
    spark_copy: SparkCopy,
    unique_name: str,
) -> None:
    primary, backup = kafka_clusters["primary"], kafka_clusters["backup"]
    topic, group = unique_name, f"{unique_name}-group"
    create_topic(primary.bootstrap, topic, 3)
    sample_data.produce_samples(primary.bootstrap, topic, 3, 0, 200)
    commit_group(primary.bootstrap, group, {(topic, 1): 150})
    # Micro-batches start at least 0.3 s apart: fewer than the 100 ms idle wait alone would make.
    config = _dr_config(
        write_config, topic, window_s=12, extra=f"{FLOW}.mirrorflow.dr.trigger.interval.ms = 300\n"
    )

    def produce_while_the_window_runs() -> None:
        # Once the window's first micro-batch committed: a window slow to start on a loaded machine
        # would otherwise copy everything in its first one.
        with OffsetsStore(config.offsets_db_url) as store:
            deadline = time.monotonic() + 120
            while not store.batches(FLOW) and time.monotonic() < deadline:
                time.sleep(0.1)
        for step in range(8):
            time.sleep(0.5)
            sample_data.produce_samples(primary.bootstrap, topic, 3, 200 + step * 25, 25)

    producer = threading.Thread(target=produce_while_the_window_runs)
    try:
        producer.start()
        summary = dr_window.run_window(config, FLOW, "window-1", spark_copy(config))
        ended = datetime.now(UTC)
    finally:
        producer.join()
        batch_run.release_run(config, FLOW, "window-1")

    assert summary.error is None
    # Everything produced before the window's last seconds is mirrored, each record once, in order.
    assert assert_same_records(primary.bootstrap, topic, backup.bootstrap, f"primary.{topic}", 3) == 3 * 400
    assert summary.records == 3 * 400
    assert summary.lag_by_partition == {(topic, p): 0 for p in range(3)}
    assert 2 < summary.spark_copies < summary.micro_batches  # idle micro-batches copy nothing in Spark
    assert summary.micro_batches <= 12 / 0.3 + 1
    # The micro-batches' batch-log rows end merged: one per partition, translating as before.
    store = OffsetsStore(config.offsets_db_url)
    batches = store.batches(FLOW)
    assert [(b.partition, b.source_start, b.source_end, b.records) for b in batches] == [
        (p, 0, 400, 400) for p in range(3)
    ]
    assert all(window_run(b.run_id) == "window-1" for b in batches)
    # Their metrics are summed up a minute at a time: a row per partition and minute, not per batch.
    history = store.partition_metrics(FLOW)
    assert len(history) == 3
    assert {(m.partition, m.records, m.lag) for m in history} == {(p, 400, 0) for p in range(3)}
    # The group's position was checkpointed inside the window, exactly.
    (checkpoint,) = checkpoints(OffsetsStore(config.offsets_db_url), FLOW).values()
    assert (checkpoint.group_id, checkpoint.partition, checkpoint.upstream_offset) == (group, 1, 150)
    assert checkpoint.downstream_offset == 150
    assert summary.checkpoints == 1
    report = dr_window.window_report(config, FLOW, "window-1")
    assert (report["records"], report["lag"], report["stale"]) == (1200, 0, None)
    # Micro-batches keep proving the recovery point, idle ones at least once a second: at the
    # window's end it was seconds old, and no minute saw it older than a micro-batch or two.
    as_of = recovery_point(store, FLOW)
    assert as_of is not None and (ended - as_of).total_seconds() < 3
    minutes = recovery_history(store, FLOW, 10)
    assert 1 <= len(minutes) <= 2 and max(m.worst_seconds for m in minutes) < 5
    assert minutes[-1].mirrored_as_of == as_of
    exported = metrics_file(config.state_dir, FLOW, "source").read_text().splitlines()
    name = 'mirrorflow_mirrored_as_of_timestamp_seconds{source="primary",destination="backup"}'
    (gauge,) = [float(line.split()[1]) for line in exported if line.startswith(name)]
    assert gauge == round(as_of.timestamp(), 3)


def test_a_window_prunes_its_batch_log_below_the_sources_log_start(
    kafka_clusters: dict[str, LocalCluster],
    write_config: Callable[[str], MirrorConfig],
    spark_copy: SparkCopy,
    unique_name: str,
) -> None:
    """Records the window mirrored are deleted from the source (retention moving the log start on):
    the window's merge cuts its batch-log row there, the totals stay, and a group still positioned
    below the log start is checkpointed at the copy of the first record kept."""
    primary, backup = kafka_clusters["primary"], kafka_clusters["backup"]
    topic, group = unique_name, f"{unique_name}-group"
    create_topic(primary.bootstrap, topic, 1)
    sample_data.produce_samples(primary.bootstrap, topic, 1, 0, 200)
    config = _dr_config(write_config, topic, window_s=10)

    def delete_what_was_mirrored() -> None:
        store = OffsetsStore(config.offsets_db_url)
        deadline = time.monotonic() + 30
        while (
            store.progress(FLOW).get((topic, 0), PartitionProgress(topic, 0, 0, 0)).next_source_offset < 200
        ):
            assert time.monotonic() < deadline, "the window mirrored nothing"
            time.sleep(0.1)
        delete_records(primary.bootstrap, {(topic, 0): 150})
        commit_group(primary.bootstrap, group, {(topic, 0): 120})
        sample_data.produce_samples(primary.bootstrap, topic, 1, 200, 50)

    summary = _window_beside(config, spark_copy, delete_what_was_mirrored)

    assert summary.error is None
    remote = sample_data.read_partition(backup.bootstrap, f"primary.{topic}", 0)
    assert len(remote) == 250 and remote[150:] == sample_data.read_partition(primary.bootstrap, topic, 0)
    store = OffsetsStore(config.offsets_db_url)
    assert [(b.source_start, b.source_end, b.target_start, b.records) for b in store.batches(FLOW)] == [
        (150, 250, 150, 100)
    ]
    assert totals(store, FLOW)[(topic, 0)][0] == 250
    (checkpoint,) = checkpoints(store, FLOW).values()
    assert (checkpoint.group_id, checkpoint.upstream_offset, checkpoint.downstream_offset) == (
        group,
        120,
        150,
    )


def test_a_window_killed_before_its_commit_leaves_nothing_twice(
    kafka_clusters: dict[str, LocalCluster],
    write_config: Callable[[str], MirrorConfig],
    spark_copy: SparkCopy,
    unique_name: str,
) -> None:
    """A window that dies after its copy wrote and before its commit: the next window's first plan
    starts at the committed position again, and its copy reads back and skips what is there."""
    primary, backup = kafka_clusters["primary"], kafka_clusters["backup"]
    topic = unique_name
    create_topic(primary.bootstrap, topic, 2)
    sample_data.produce_samples(primary.bootstrap, topic, 2, 0, 300)
    config = _dr_config(write_config, topic, window_s=3)
    copy = spark_copy(config)

    class Killed(BaseException):
        """Stands for the process dying: no handler of the window sees it."""

    def copy_then_die(plan: Plan, grant: Grant) -> CopyResult:
        copy(plan, grant)
        raise Killed

    with pytest.raises(Killed):
        dr_window.run_window(config, FLOW, "window-1", copy_then_die)
    store = OffsetsStore(config.offsets_db_url)
    assert store.batches(FLOW) == []  # written to the target, its transaction aborted
    # The lock expires with the dead window (here: at once); the next window takes the flow over.
    assert force_release_lock(store, FLOW) is not None
    sample_data.produce_samples(primary.bootstrap, topic, 2, 300, 50)
    summary = dr_window.run_window(config, FLOW, "window-2", copy)
    batch_run.release_run(config, FLOW, "window-2")

    assert summary.error is None
    assert assert_same_records(primary.bootstrap, topic, backup.bootstrap, f"primary.{topic}", 2) == 700
    assert summary.records == 700  # every record copied again: the first window's were aborted
    assert [(b.partition, b.source_start, b.source_end) for b in store.batches(FLOW)] == [
        (0, 0, 350),
        (1, 0, 350),
    ]


def test_a_window_whose_predecessor_never_hands_over_gives_up_naming_it(
    kafka_clusters: dict[str, LocalCluster],
    write_config: Callable[[str], MirrorConfig],
    unique_name: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    create_topic(kafka_clusters["primary"].bootstrap, unique_name, 1)
    config = _dr_config(write_config, unique_name, window_s=1)
    acquire_lock(OffsetsStore(config.offsets_db_url), FLOW, "window-1", 3600)
    # It waits a window, the wait for a handover and a lease (here shortened) before giving up.
    monkeypatch.setattr(dr_window, "LEASE_SECONDS", 1)

    def copy(plan: Plan, grant: Grant) -> CopyResult:
        pytest.fail("a window without the lock copied")

    summary = dr_window.run_window(config, FLOW, "window-2", copy)

    assert summary.error is not None and summary.error[0] == "FlowLockedError"
    assert re.search(
        r"window window-2 attempt \w+ waited 2 s for the flow's lock, which the window before it did not "
        f"hand over: flow {re.escape(FLOW)} is locked by run window-1",
        summary.error[1],
    )
    assert summary.micro_batches == 0
    with pytest.raises(FlowLockedError, match="window window-2 ended after 0 micro-batches"):
        dr_window.window_report(config, FLOW, "window-2")
    store = OffsetsStore(config.offsets_db_url)
    assert store.progress(FLOW) == {}  # nothing was anchored either
    assert successor_of(store, FLOW) is None  # its offer went with it


def test_the_next_window_takes_over_at_a_micro_batch_boundary_without_a_gap(
    kafka_clusters: dict[str, LocalCluster],
    write_config: Callable[[str], MirrorConfig],
    spark_copy: SparkCopy,
    unique_name: str,
) -> None:
    """Two windows overlap as the scheduler runs them: the second is up while the first still
    mirrors, the first hands the flow over at its end, the second plans from exactly its commit."""
    primary, backup = kafka_clusters["primary"], kafka_clusters["backup"]
    topic = unique_name
    create_topic(primary.bootstrap, topic, 2)
    config = _dr_config(write_config, topic, window_s=8, handover_wait_s=1)
    copy = spark_copy(config)
    taken_over: dict[str, float] = {}  # when each window's first Spark copy started
    summaries: dict[str, WindowSummary] = {}

    def window(run_id: str) -> None:
        def noted(plan: Plan, grant: Grant) -> CopyResult:
            taken_over.setdefault(run_id, time.monotonic())
            return copy(plan, grant)

        summaries[run_id] = dr_window.run_window(config, FLOW, run_id, noted)

    first, second = (threading.Thread(target=window, args=(r,)) for r in ("window-1", "window-2"))
    with Arrivals(backup.bootstrap, f"primary.{topic}", 2) as arrivals:
        with Producing(primary.bootstrap, topic, 2) as producing:
            first.start()
            time.sleep(3)
            second.start()  # up and waiting well before the first window's end
            time.sleep(9)
        stopped = time.monotonic()
        first.join()
        second.join()
        # From the first window's first copy on, through the handover, no record the source had
        # waited 2 s or more to reach the target.
        assert arrivals.times[0] < taken_over["window-2"] < stopped
        assert arrivals.longest_wait(producing, arrivals.times[0], stopped) < 2.0
    each = producing.count

    one, two = summaries["window-1"], summaries["window-2"]
    assert (one.error, two.error, two.successor) == (None, None, None)
    assert one.successor is not None and is_holder_of(one.successor, "window-2")
    for run_id in ("window-1", "window-2"):
        batch_run.release_run(config, FLOW, run_id)
    # Every record once, in order, both windows' share of them committed: the second planned from
    # exactly the first's last commit (a gap or an overlap would show in the records, and would keep
    # the second window's rows from merging with the first's into one unbroken row per partition).
    assert assert_same_records(primary.bootstrap, topic, backup.bootstrap, f"primary.{topic}", 2) == 2 * each
    assert one.records > 0 and two.records > 0 and one.records + two.records == 2 * each
    batches = OffsetsStore(config.offsets_db_url).batches(FLOW)
    assert [(b.partition, b.source_start, b.source_end, b.records) for b in batches] == [
        (p, 0, each, each) for p in range(2)
    ]


def test_a_window_leaves_a_failed_partition_out_mirrors_the_others_and_fails_at_its_end(
    kafka_clusters: dict[str, LocalCluster],
    write_config: Callable[[str], MirrorConfig],
    spark_copy: SparkCopy,
    unique_name: str,
) -> None:
    primary, backup = kafka_clusters["primary"], kafka_clusters["backup"]
    topic = unique_name
    create_topic(primary.bootstrap, topic, 2)
    sample_data.produce_samples(primary.bootstrap, topic, 2, 0, 20)
    producer = sample_data.producer(primary.bootstrap)
    sample_data.produce(
        producer, topic, 1, [dataclasses.replace(sample_data.sample_record(topic, 1, 20), value=b"poison")]
    )
    config = _dr_config(
        write_config,
        topic,
        window_s=6,
        extra=f"{FLOW}.mirrorflow.on.partition.error = isolate\n{FLOW}.transforms = parse\n"
        f"{FLOW}.transforms.parse.type = python\n"
        f"{FLOW}.transforms.parse.function = mirrorflow_dev.sample_hooks:reject_poison\n",
    )

    def produce_while_the_window_runs() -> None:
        time.sleep(2)
        sample_data.produce_samples(primary.bootstrap, topic, 1, 20, 10)

    summary = _window_beside(config, spark_copy, produce_while_the_window_runs)

    assert summary.error is not None and summary.error[0] == "PartitionsFailedError"
    assert f"{topic}-1: TransformError: transform parse" in summary.error[1]
    assert f"failed on {topic}-1 offset 20" in summary.error[1]
    # Partition 0 went on mirroring what arrived during the window; partition 1 committed nothing.
    source = sample_data.read_partition(primary.bootstrap, topic, 0)
    assert len(source) == 30
    assert sample_data.read_partition(backup.bootstrap, f"primary.{topic}", 0) == source
    store = OffsetsStore(config.offsets_db_url)
    assert [(b.partition, b.source_end) for b in store.batches(FLOW)] == [(0, 30)]
    assert [(f.topic, f.partition, window_run(f.run_id)) for f in failed_partitions(store, FLOW)] == [
        (topic, 1, "window-1")
    ]


# A DR window in a process of its own, copying without Spark (the same copy code its Spark tasks run).
# Its lease keeper only says so when it finds the lock another's, instead of ending the process: what
# is tested is that the window's own steps, woken up, never fence the flow's writer back.
WINDOW_PROCESS = """
import sys
from mirrorflow.app import dr_window
from mirrorflow.config.model import load_config
from mirrorflow.copy.batch_copy import CopySettings, copy_partitions, copy_result
config = load_config(sys.argv[1])
settings = CopySettings.of(config.flow(sys.argv[2]))
def copy(plan, grant):
    return copy_result(plan, copy_partitions(plan.partitions, settings, grant, plan.schema_ids))
def say(why):
    print(why, flush=True)
summary = dr_window.run_window(config, sys.argv[2], sys.argv[3], copy, on_lost=say)
print("ended by", summary.error, flush=True)
"""


def test_a_window_frozen_mid_transaction_and_woken_while_the_next_one_mirrors_leaves_it_unharmed(
    kafka_clusters: dict[str, LocalCluster],
    write_config: Callable[[str], MirrorConfig],
    unique_name: str,
) -> None:
    """A window stopped (SIGSTOP) in the middle of a micro-batch's writes loses the flow; the next
    window takes it over and mirrors. Woken up (SIGCONT) while the next one is in its micro-batches,
    the old one finds its writer fenced: it ends, and never fences back (which would abort the live
    window's transaction and end it)."""
    primary, backup = kafka_clusters["primary"], kafka_clusters["backup"]
    topic, remote = unique_name, f"primary.{unique_name}"
    create_topic(primary.bootstrap, topic, 1)
    # A backlog of one batch per record: the old window's first micro-batch writes for seconds.
    producer = sample_data.producer(primary.bootstrap, {"batch.num.messages": "1", "linger.ms": "0"})
    sample_data.produce(producer, topic, 0, (sample_data.sample_record(topic, 0, i) for i in range(3000)))
    config = _dr_config(write_config, topic, window_s=300)
    assert config.path is not None
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    old = subprocess.Popen(
        [sys.executable, "-c", WINDOW_PROCESS, str(config.path), FLOW, "window-1"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while _written(config, remote) < 200:
            assert old.poll() is None, f"the old window ended before it was stopped: {old.communicate()}"
            assert time.monotonic() < deadline, "the old window wrote nothing"
            time.sleep(0.01)
        # Stopped mid-write, as a frozen worker (outside an offsets-database transaction, which would
        # hold every other writer back), its lock taken from it as its lease lapsing would.
        store = OffsetsStore(config.offsets_db_url, busy_timeout_seconds=0.5)
        while True:
            os.killpg(old.pid, signal.SIGSTOP)
            try:
                taken = force_release_lock(store, FLOW)
                break
            except TransientError:
                os.killpg(old.pid, signal.SIGCONT)
                time.sleep(0.01)
        assert taken is not None and is_holder_of(taken.run_id, "window-1")
        assert _written(config, remote) < 3000

        # Long enough to outlast its first micro-batch (the old window's backlog, one batch per record:
        # 17 s on a loaded machine), the old window's wake-up and end, and the producer after them.
        newer = _dr_config(write_config, topic, window_s=40)
        settings = CopySettings.of(newer.flow(FLOW))
        summaries: list[WindowSummary] = []

        def copy(plan: Plan, grant: Grant) -> CopyResult:
            return copy_result(plan, copy_partitions(plan.partitions, settings, grant, plan.schema_ids))

        window = threading.Thread(
            target=lambda: summaries.append(dr_window.run_window(newer, FLOW, "window-2", copy))
        )
        with Producing(primary.bootstrap, topic, 1) as producing:
            window.start()
            while len({b.run_id for b in store.batches(FLOW)}) < 3:
                assert window.is_alive() and time.monotonic() < deadline, "the next window mirrors nothing"
                time.sleep(0.05)
            os.killpg(old.pid, signal.SIGCONT)
            out, _ = old.communicate(timeout=120)
            time.sleep(1)  # the live window's micro-batches go on past the old one's end
        window.join(60)
    finally:
        if old.poll() is None:
            os.killpg(old.pid, signal.SIGCONT)
            old.kill()
    assert "ended by" in out and "ended by None" not in out, out[-3000:]
    (summary,) = summaries
    assert summary.error is None, summary.error
    assert (
        assert_same_records(primary.bootstrap, topic, backup.bootstrap, remote, 1) == 3000 + producing.count
    )


def _written(config: MirrorConfig, remote: str) -> int:
    """What the copy wrote to the remote topic's partition 0 so far; 0 before the window created it."""
    try:
        return written_end(config, FLOW, remote)
    except TransientError:
        return 0
