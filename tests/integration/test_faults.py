"""Fault injection: the copy job or the commit is SIGKILLed at many points, or a broker is restarted
or unreachable during the copy, then the flow carries on; the target must hold every record exactly
once, in order, per partition.

The copy runs as the Airflow task runs it: ``spark-submit jobs/mirror_copy.py`` with the DAG's own
spec, in its own process group, killed with SIGKILL as a whole (driver JVM and Python workers) at a
point chosen by watching the remote partitions' end offsets. The commit runs in a child process and
is killed after a delay. Recovery alternates between what Airflow does after a failure: a retry that
re-executes the same plan (same run), and a failed run torn down (lock released) followed by a new run
that also picks up records produced meanwhile. Every record carries its sequence number (value and
header); the check reads each remote partition back and compares it with the sequence.

`make test` runs one kill point of each kind (stage, by time or by fraction, retry or new run); the
others are marked ``extended`` (`make test-extended`). ``MIRROR_SOAK_KILLS=<n>`` adds n kill points
at random fractions of the copy (seeded by ``MIRROR_SOAK_SEED``, printed): ``make soak``.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
from confluent_kafka import Consumer, TopicPartition
from mirror_helpers import Process, assert_all_gone, create_topic, live_processes, local_clusters, run_flow
from pyspark.sql import SparkSession

from mirrorflow.app import batch_run
from mirrorflow.app.dag_spec import flow_dag_spec
from mirrorflow.config.model import MirrorConfig, load_config
from mirrorflow.copy.spark_copy import copy_plan
from mirrorflow.core.plan import Plan
from mirrorflow.store.offsets_store import OffsetsStore
from mirrorflow_dev import local_kafka, sample_data
from mirrorflow_dev.local_kafka import LocalCluster
from mirrorflow_dev.sample_data import BASE_TIMESTAMP_MS, Record

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.faults]

FLOW = "primary->backup"
PARTITIONS = 3
RECORDS = 30_000  # per partition: a copy long enough to be killed at a chosen fraction
LATER = 500  # produced after a failed run, before the next one
Clusters = dict[str, LocalCluster]


@dataclass(frozen=True)
class Kill:
    """Where to kill: ``copy`` after ``seconds`` or once ``fraction`` of the planned records are on
    the target (1.0: all written, the job may be finishing); ``commit`` after ``seconds``.
    ``retry``: recover by re-executing the same plan (else: a new run)."""

    name: str
    stage: str
    seconds: float = 0.0
    fraction: float | None = None
    retry: bool = False
    extended: bool = False  # make test keeps one point of each kind (stage, by time or fraction, retry)


KILLS = [
    Kill("at-launch", "copy", seconds=0.0, retry=True),
    Kill("session-start", "copy", seconds=2.0, extended=True),
    Kill("first-records", "copy", fraction=0.01, retry=True, extended=True),
    Kill("quarter", "copy", fraction=0.25),
    Kill("half", "copy", fraction=0.5, retry=True, extended=True),
    Kill("three-quarters", "copy", fraction=0.75, extended=True),
    Kill("last-records", "copy", fraction=0.98, retry=True, extended=True),
    # Everything written, nothing committed: make test keeps the DR window killed before its commit
    # (tests/integration/test_dr_window.py).
    Kill("all-written", "copy", fraction=1.0, extended=True),
    Kill("commit-at-start", "commit", seconds=0.0, retry=True),
    Kill("commit-early", "commit", seconds=0.4),
    Kill("commit-late", "commit", seconds=1.2, retry=True, extended=True),
]


def _soak_kills() -> list[Kill]:
    count = int(os.environ.get("MIRROR_SOAK_KILLS", "0"))
    seed = int(os.environ.get("MIRROR_SOAK_SEED", str(time.time_ns() % 100_000)))
    if count:
        print(f"soak: {count} random kill points, MIRROR_SOAK_SEED={seed}")
    rnd = random.Random(seed)
    return [
        Kill(f"soak-{i}-{f:.3f}", "copy", fraction=f, retry=rnd.random() < 0.5)
        for i, f in enumerate(rnd.uniform(0.005, 1.0) for _ in range(count))
    ]


def _record(partition: int, seq: int) -> Record:
    return Record(
        f"k{seq % 7}".encode(),
        f"{partition}:{seq:09d}:".encode() + b"x" * 80,
        (("seq", str(seq).encode()),),
        BASE_TIMESTAMP_MS + seq,
    )


def _produce(bootstrap: str, topic: str, start: int, count: int) -> None:
    # Java's default batch size, not librdkafka's 1 MB: the copy moves batches whole, and smaller ones
    # let the watcher see a kill point before the copy has passed it.
    p = sample_data.producer(bootstrap, {"batch.size": "16384"})
    for partition in range(PARTITIONS):
        sample_data.produce(p, topic, partition, (_record(partition, s) for s in range(start, start + count)))


def _assert_exactly_once(
    primary: LocalCluster, topic: str, backup: LocalCluster, remote: str, count: int
) -> None:
    """Every source record once, in the source's order (read back from the source)."""
    for partition in range(PARTITIONS):
        got = sample_data.read_partition(backup.bootstrap, remote, partition)
        seqs = [int((r.value or b"").split(b":")[1]) for r in got]
        missing = sorted(set(range(count)) - set(seqs))
        assert len(seqs) == len(set(seqs)) == count and not missing, (
            f"{remote}-{partition}: {len(seqs)} records, {len(seqs) - len(set(seqs))} duplicates, "
            f"missing {missing[:5]}"
        )
        source = sample_data.read_partition(primary.bootstrap, topic, partition)
        assert got == source, f"{remote}-{partition} not in the source's order"


class _Targets:
    """Sum of the remote partitions' high watermarks: what the copy wrote, its open transaction's
    records included (a committed read's end stays put until the transaction commits)."""

    def __init__(self, bootstrap: str, remote: str) -> None:
        self._consumer = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": "fault-watch", "isolation.level": "read_uncommitted"}
        )
        self._tps = [TopicPartition(remote, p) for p in range(PARTITIONS)]

    def written(self) -> int:
        return sum(self._consumer.get_watermark_offsets(tp, timeout=10)[1] for tp in self._tps)

    def close(self) -> None:
        self._consumer.close()


def _spark_submit(
    config: MirrorConfig, run_id: str, log: Path, master: str = "local[2]"
) -> subprocess.Popen[bytes]:
    """The copy task's command, as SparkSubmitOperator builds it from the DAG's spec."""
    spec = flow_dag_spec(config, config.flow(FLOW), run_id).copy
    conf = [arg for k, v in spec.conf.items() for arg in ("--conf", f"{k}={v}")]
    cmd = [
        str(Path(sys.executable).parent / "spark-submit"),
        "--master", master, *conf, "--conf", "spark.driver.host=127.0.0.1",
        "--name", spec.name, spec.application, *spec.application_args,
    ]  # fmt: skip
    mark = uuid.uuid4().hex
    env = {**os.environ, **spec.env_vars, "SPARK_LOCAL_IP": "127.0.0.1", _JOB_MARK: mark}
    with log.open("ab") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    _MARKS[proc.pid] = f"{_JOB_MARK}={mark}\0"
    return proc


# In the environment of every process of a copy job started here. PySpark's worker daemon moves
# itself and its workers (which hold the producers) to a process group of their own.
_JOB_MARK = "MIRROR_FAULT_TEST_JOB"
_MARKS: dict[int, str] = {}


def _of_job(p: Process, proc: subprocess.Popen[bytes]) -> bool:
    mark = _MARKS.get(proc.pid)
    return p.group == proc.pid or (mark is not None and mark in p.environ)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the whole job (JVM, driver, PySpark's daemon and workers) at once, as a machine that
    dies would, and check nothing of it survives: a worker left writing would race the recovery."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    for p in live_processes():
        if _of_job(p, proc):
            with contextlib.suppress(ProcessLookupError):
                os.kill(p.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert_all_gone(lambda p: _of_job(p, proc), "processes of the killed copy")


def _kill_copy(kill: Kill, config: MirrorConfig, plan: Plan, targets: _Targets, log: Path) -> None:
    """Kill the copy where ``kill`` says, and check it was killed there: before its first write, or
    with the planned records only partly written."""
    planned = sum(p.source_end - p.source_start for p in plan.partitions)
    start = targets.written()
    proc = _spark_submit(config, plan.run_id, log)
    began = time.monotonic()
    try:
        while proc.poll() is None and time.monotonic() - began < 300:
            if kill.fraction is None:
                if time.monotonic() - began >= kill.seconds:
                    break
            elif targets.written() - start >= kill.fraction * planned:
                break
            time.sleep(0.02)
    finally:
        _kill_group(proc)
    written = targets.written() - start
    if kill.fraction is None:
        assert written == 0, f"{kill.name}: {written} records written before the kill"
    elif kill.fraction <= 0.5:  # later kills may land after the last record (the invariant still holds)
        assert 0 < written < planned, f"{kill.name}: {written} of {planned} records written at the kill"


def _kill_commit(kill: Kill, config: MirrorConfig, run_id: str) -> None:
    assert config.path is not None
    code = (
        "import sys; from mirrorflow.app import batch_run; from mirrorflow.config.model import load_config; "
        "batch_run.commit_run(load_config(sys.argv[1]), sys.argv[2], sys.argv[3])"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(config.path), FLOW, run_id],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    time.sleep(kill.seconds)
    _kill_group(proc)
    # Killed, or done before the kill; never a commit that failed on its own.
    assert proc.returncode in (0, -signal.SIGKILL), proc.stderr.read() if proc.stderr else proc.returncode


def _assert_progress_all_or_nothing(config: MirrorConfig, plan: Plan) -> None:
    """A killed commit committed every planned partition or none."""
    with OffsetsStore(config.offsets_db_url) as store:
        progress = store.progress(FLOW)
    ends = {(p.topic, p.partition): p.source_end for p in plan.partitions}
    starts = {(p.topic, p.partition): p.source_start for p in plan.partitions}
    at = [progress[tp].next_source_offset for tp in ends]
    assert at in ([ends[tp] for tp in ends], [starts[tp] for tp in ends]), f"partial commit: {at}"


@pytest.mark.parametrize(
    "kill",
    [pytest.param(k, marks=[pytest.mark.extended] if k.extended else []) for k in KILLS + _soak_kills()],
    ids=lambda k: k.name,
)
def test_a_killed_copy_or_commit_then_carrying_on_leaves_every_record_exactly_once(
    kill: Kill,
    kafka_clusters: Clusters,
    write_config: Callable[[str], MirrorConfig],
    spark: SparkSession,
    unique_name: str,
    tmp_path: Path,
) -> None:
    primary, backup = kafka_clusters["primary"], kafka_clusters["backup"]
    topic, remote = unique_name, f"primary.{unique_name}"
    create_topic(primary.bootstrap, topic, PARTITIONS)
    _produce(primary.bootstrap, topic, 0, RECORDS)
    config = write_config(f"primary->backup.enabled = true\nprimary->backup.topics = {topic}\n")
    flow = config.flow(FLOW)
    targets = _Targets(backup.bootstrap, remote)
    try:
        plan = batch_run.plan_run(config, FLOW, "run-1")
        try:
            if kill.stage == "copy":
                _kill_copy(kill, config, plan, targets, tmp_path / "spark-submit.log")
            else:
                result = copy_plan(spark.sparkContext, flow, plan)
                batch_run.execute_copy(config, flow, plan, lambda: result)
                _kill_commit(kill, config, "run-1")
                _assert_progress_all_or_nothing(config, plan)
            if kill.retry:  # Airflow retries the killed task: the same plan, then the commit
                if kill.stage == "copy":
                    batch_run.execute_copy(
                        config,
                        flow,
                        plan,
                        lambda: copy_plan(spark.sparkContext, flow, plan),
                    )
                batch_run.commit_run(config, FLOW, "run-1")
        finally:
            batch_run.release_run(config, FLOW, "run-1")  # the teardown task
        total = RECORDS
        if not kill.retry:  # the run failed; records keep arriving; the next run finishes the job
            _produce(primary.bootstrap, topic, RECORDS, LATER)
            total += LATER
            run_flow(config, FLOW, "run-2", spark)
        assert run_flow(config, FLOW, "run-3", spark).records == 0
    finally:
        targets.close()

    _assert_exactly_once(primary, topic, backup, remote, total)
    with OffsetsStore(config.offsets_db_url) as store:
        assert {tp: p.next_source_offset for tp, p in store.progress(FLOW).items()} == {
            (topic, p): total for p in range(PARTITIONS)
        }
        # The batch log tiles each partition's source range without overlap.
        for p in range(PARTITIONS):
            ranges = [(b.source_start, b.source_end) for b in store.batches(FLOW, topic, p)]
            assert ranges[0][0] == 0 and ranges[-1][1] == total
            assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges)), ranges


def test_a_copy_task_killed_once_is_run_again_by_spark_and_the_job_succeeds(
    kafka_clusters: Clusters,
    write_config: Callable[[str], MirrorConfig],
    unique_name: str,
    tmp_path: Path,
) -> None:
    """The copy job's Python workers SIGKILLed in the middle of their writes, once: Spark runs each
    task again (``local[2,2]``: spark.task.maxFailures = 2), in the job's same open transaction; the
    new run finds what the dead one appended there, goes on after it with the next sequence, and the
    job succeeds, every record once."""
    primary, backup = kafka_clusters["primary"], kafka_clusters["backup"]
    topic, remote = unique_name, f"primary.{unique_name}"
    create_topic(primary.bootstrap, topic, PARTITIONS)
    _produce(primary.bootstrap, topic, 0, RECORDS)
    config = write_config(f"primary->backup.enabled = true\nprimary->backup.topics = {topic}\n")
    targets = _Targets(backup.bootstrap, remote)
    log = tmp_path / "spark-submit.log"
    try:
        plan = batch_run.plan_run(config, FLOW, "run-1")
        planned = sum(p.source_end - p.source_start for p in plan.partitions)
        proc = _spark_submit(config, "run-1", log, master="local[2,2]")
        try:
            deadline = time.monotonic() + 300
            while (written := targets.written()) < planned // 3:
                assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-5000:]
                time.sleep(0.02)
            assert _kill_workers(proc) and written < planned
            assert proc.wait(timeout=300) == 0, log.read_text()[-5000:]
        finally:
            _kill_group(proc)
        assert "Python worker exited unexpectedly" in log.read_text()
        batch_run.commit_run(config, FLOW, "run-1")
    finally:
        batch_run.release_run(config, FLOW, "run-1")
        targets.close()
    _assert_exactly_once(primary, topic, backup, remote, RECORDS)


def _kill_workers(proc: subprocess.Popen[bytes]) -> list[int]:
    """SIGKILL the job's PySpark workers (the processes its PySpark daemon forked for its tasks), as
    a worker dies; their PIDs."""
    pyspark = {p.pid for p in live_processes() if _of_job(p, proc) and "pyspark.daemon" in p.cmdline}
    workers = [pid for pid in pyspark if psutil.Process(pid).ppid() in pyspark]
    for pid in workers:
        os.kill(pid, signal.SIGKILL)
    return workers


# ------------------------------------------------------------------------------ broker faults
# Clusters of their own: these tests stop, restart and pause brokers.


@pytest.fixture(scope="module")
def own_clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Clusters]:
    with local_clusters(("primary", "backup"), tmp_path_factory.mktemp("faults")) as clusters:
        try:
            yield clusters
        finally:
            for cluster in clusters.values():  # a restarted broker has a new PID: stop by home
                local_kafka.stop_cluster(cluster.home)


def _own_config(clusters: Clusters, folder: Path, topic: str) -> MirrorConfig:
    path = folder / "mm2.properties"
    path.write_text(
        "clusters = primary, backup\n"
        f"primary.bootstrap.servers = {clusters['primary'].bootstrap}\n"
        f"backup.bootstrap.servers = {clusters['backup'].bootstrap}\n"
        "replication.factor = 1\noffset-syncs.topic.replication.factor = 1\n"
        "checkpoints.topic.replication.factor = 1\nemit.heartbeats.enabled = false\n"
        f"mirrorflow.state.dir = {folder / 'state'}\n"
        f"{FLOW}.enabled = true\n{FLOW}.topics = {topic}\n"
    )
    return load_config(path, env={})


def _restart(cluster: LocalCluster) -> None:
    local_kafka.stop_cluster(cluster.home)
    time.sleep(2)
    local_kafka.start_cluster(cluster.alias, cluster.port, cluster.controller_port, cluster.home)


def _pause(cluster: LocalCluster) -> None:
    pid = local_kafka.running_pid(cluster.home)
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)  # unreachable: connections hang, nothing is refused
    try:
        time.sleep(8)
    finally:
        os.kill(pid, signal.SIGCONT)


@pytest.mark.parametrize(
    ("side", "fault"),
    [
        pytest.param(
            "backup",
            _restart,
            id="target-restarted",
        ),
        pytest.param(
            "primary",
            _pause,
            id="source-unreachable",
        ),
    ],
)
def test_a_broker_fault_during_the_copy_loses_and_duplicates_nothing(
    side: str,
    fault: Callable[[LocalCluster], None],
    own_clusters: Clusters,
    spark: SparkSession,
    unique_name: str,
    tmp_path: Path,
) -> None:
    primary, backup = own_clusters["primary"], own_clusters["backup"]
    topic, remote = unique_name, f"primary.{unique_name}"
    create_topic(primary.bootstrap, topic, PARTITIONS)
    _produce(primary.bootstrap, topic, 0, RECORDS)
    config = _own_config(own_clusters, tmp_path, topic)
    flow = config.flow(FLOW)
    planned = PARTITIONS * RECORDS
    targets = _Targets(backup.bootstrap, remote)
    faulted: list[int] = []

    def inject() -> None:
        deadline = time.monotonic() + 300
        while targets.written() < planned // 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        faulted.append(targets.written())
        fault(own_clusters[side])

    plan = batch_run.plan_run(config, FLOW, "run-1")
    try:
        injector = threading.Thread(target=inject)
        injector.start()
        try:
            result = copy_plan(spark.sparkContext, flow, plan)
        except Exception:  # the attempt failed: Airflow retries the same plan
            injector.join()
            result = copy_plan(spark.sparkContext, flow, plan)
        injector.join()
        batch_run.execute_copy(config, flow, plan, lambda: result)
        batch_run.commit_run(config, FLOW, "run-1")
    finally:
        batch_run.release_run(config, FLOW, "run-1")
        targets.close()

    assert faulted and 0 < faulted[0] < planned, f"the fault hit after {faulted} of {planned} records"
    _assert_exactly_once(primary, topic, backup, remote, RECORDS)
