"""Test helpers: run a flow in-process (the same steps the DAG runs, with the session's Spark) or
through Airflow, and give the mirror user of secured clusters its least-privilege ACLs."""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from kafka import TopicPartition as KafkaTopicPartition
from kafka.admin import (
    KafkaAdminClient,
)
from kafka.errors import TopicAlreadyExistsError
from pyspark.sql import SparkSession

from mirrorflow.app import batch_run
from mirrorflow.config.model import FlowConfig, MirrorConfig, load_config
from mirrorflow.copy.batch_copy import CopySettings, copy_partitions, copy_result
from mirrorflow.copy.flow_transaction import copied_in_one_transaction
from mirrorflow.copy.spark_copy import copy_plan
from mirrorflow.core.plan import CopyResult, Grant, Plan
from mirrorflow.core.progress import PartitionProgress, run_of
from mirrorflow.core.report import RunReport
from mirrorflow.core.translation import OffsetTranslator
from mirrorflow.kafka.connection import READ_COMMITTED, READ_UNCOMMITTED, end_offsets, kept_open
from mirrorflow.kafka.record_reads import read_records
from mirrorflow.store.offsets_store import OffsetsStore
from mirrorflow_dev import class_sharing, local_kafka, paths, processes, sample_data
from mirrorflow_dev.devenv import airflow_env
from mirrorflow_dev.kafka_security import BrokerSecurity
from mirrorflow_dev.local_airflow import LocalAirflow
from mirrorflow_dev.local_kafka import LocalCluster
from mirrorflow_dev.processes import free_port
from mirrorflow_dev.replicated_kafka import ReplicatedCluster, start_replicated_cluster


def run_flow(config: MirrorConfig, flow_name: str, run_id: str, spark: SparkSession) -> RunReport:
    """plan -> copy -> commit -> release, as one DAG run does."""
    flow = config.flow(flow_name)
    try:
        plan = batch_run.plan_run(config, flow.name, run_id)
        if plan.partitions and not plan.in_process:
            batch_run.execute_copy(
                config,
                flow,
                plan,
                lambda: copy_plan(spark.sparkContext, flow, plan),
            )
        return batch_run.commit_run(config, flow.name, run_id).report
    finally:
        batch_run.release_run(config, flow.name, run_id)


def write_mm2(tmp_path: Path, clusters: Mapping[str, Any], replication: int, extra: str) -> MirrorConfig:
    """An mm2.properties in ``tmp_path`` for ``clusters`` (alias -> a cluster with ``bootstrap``):
    remote and internal topics replicated ``replication`` times, no heartbeats (they would add a
    mirrored topic to every flow on shared clusters), a state dir of the test's own; ``extra`` last."""
    lines = [
        f"clusters = {', '.join(clusters)}",
        *(f"{a}.bootstrap.servers = {c.bootstrap}" for a, c in clusters.items()),
        f"replication.factor = {replication}",
        f"checkpoints.topic.replication.factor = {replication}",
        f"offset-syncs.topic.replication.factor = {replication}",
        "emit.heartbeats.enabled = false",
        f"mirrorflow.state.dir = {tmp_path / 'state'}",
        extra,
    ]
    path = tmp_path / "mm2.properties"
    path.write_text("\n".join(lines) + "\n")
    return load_config(path, env={})


# A copy of a run's plan (config path, flow and run id as arguments), as the copy task copies it, in a
# process of its own: one to freeze (SIGSTOP) and resume after a newer copy took over.
STALE_COPY = """
import sys
from mirrorflow.app import batch_run
from mirrorflow.config.model import load_config
from mirrorflow.copy.batch_copy import CopySettings, copy_partitions, copy_result
from mirrorflow.copy.flow_transaction import copied_in_one_transaction
config = load_config(sys.argv[1])
flow = config.flow(sys.argv[2])
plan = batch_run.load_plan(config, flow, sys.argv[3])
settings = CopySettings.of(flow)
copied_in_one_transaction(
    settings.target,
    plan,
    lambda g: copy_result(plan, copy_partitions(plan.partitions, settings, g, plan.schema_ids)),
)
"""


def in_transaction(
    flow: FlowConfig, copy: Callable[[Plan, Grant], CopyResult]
) -> Callable[[Plan], CopyResult]:
    """``copy`` (a DR window's copy) as one attempt of the flow's writer: fenced, one transaction."""
    settings = CopySettings.of(flow)
    return lambda plan: copied_in_one_transaction(settings.target, plan, lambda g: copy(plan, g))


def copy_without_spark(flow: FlowConfig, plan: Plan) -> CopyResult:
    """A run's copy as its copy task makes it, in this process (Spark's tasks run the same code)."""
    settings = CopySettings.of(flow)
    return copied_in_one_transaction(
        settings.target,
        plan,
        lambda g: copy_result(plan, copy_partitions(plan.partitions, settings, g, plan.schema_ids)),
    )


def create_topic(
    bootstrap: str,
    name: str,
    partitions: int,
    configs: dict[str, str] | None = None,
    replication_factor: int = 1,
) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics(
            {
                name: {
                    "num_partitions": partitions,
                    "replication_factor": replication_factor,
                    "configs": configs or {},
                }
            },
            wait_for_metadata=True,
        )
    finally:
        admin.close()


def topics(bootstrap: str) -> set[str]:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        return set(admin.list_topics())
    finally:
        admin.close()


def assert_same_records(
    src: str,
    topic: str,
    dst: str,
    remote: str,
    partitions: int,
    client_config: Mapping[str, str] | None = None,
) -> int:
    """Every partition of the remote topic equals the source's, record by record; returns the count.
    ``client_config``: librdkafka settings for reading both clusters (e.g. a SASL login)."""
    total = 0
    for p in range(partitions):
        expected = sample_data.read_partition(src, topic, p, extra=client_config)
        actual = sample_data.read_partition(dst, remote, p, extra=client_config)
        assert actual == expected, f"{remote}-{p} differs from {topic}-{p}"
        total += len(actual)
    return total


def written_end(config: MirrorConfig, flow: str, remote: str, partition: int = 0) -> int:
    """The remote partition's high watermark: what the copy wrote, committed or not (a transaction
    still open holds the last stable offset back)."""
    with kept_open(config.flow(flow).target.consumer, "target", [remote]) as target:
        return end_offsets(target, [(remote, partition)], READ_UNCOMMITTED)[(remote, partition)]


def committed_offsets(config: MirrorConfig, flow: str, remote: str, partition: int = 0) -> list[int]:
    """The offsets of the remote partition's committed records (what a read_committed consumer reads),
    in order: the copy's transaction markers and aborted attempts' records lie between them."""
    with kept_open(config.flow(flow).target.consumer, "target", [remote]) as target:
        end = end_offsets(target, [(remote, partition)], READ_COMMITTED)[(remote, partition)]
        return [r.offset for r in read_records(target, (remote, partition), 0, end, READ_COMMITTED, end)]


def assert_translates_to_copies(
    config: MirrorConfig, flow: str, topic: str, remote: str, records: int, partition: int = 0
) -> None:
    """The flow's batch log and progress of ``topic``-``partition`` (a source partition of ``records``
    records at offsets 0..) map each source offset to the offset of its copy on the target, and end
    past the last."""
    copies = committed_offsets(config, flow, remote, partition)
    with OffsetsStore(config.offsets_db_url) as store:
        batches = [b.as_batch() for b in store.batches(flow, topic=topic, partition=partition)]
        progress = store.progress(flow)[(topic, partition)]
    translator = OffsetTranslator(batches)
    assert [translator.translate(i) for i in range(records)] == copies
    assert sum(b.records for b in batches) == records
    assert progress == PartitionProgress(topic, partition, records, copies[-1] + 1)


def wait_end(bootstrap: str, topic: str, partition: int, end: int) -> None:
    """Wait until the partition's high watermark (transaction markers included) reaches ``end``:
    the coordinator writes markers after commit/abort returns, so the layout below stays exact."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "mirrorflow-test-watermarks",
            "isolation.level": "read_uncommitted",  # the high watermark, not the last stable offset
        }
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            high = c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)[1]
            if high == end:
                return
            assert high < end, f"{topic}-{partition} ends at {high}, past the expected {end}"
            assert time.monotonic() < deadline, f"{topic}-{partition} stuck at {high}, expected {end}"
            time.sleep(0.05)
    finally:
        c.close()


def committed_end(bootstrap: str, topic: str, partition: int) -> int:
    """Where a read_committed consumer at the partition's end stands: its last stable offset, past
    the markers of committed transactions (a consumer's lag is this minus its committed offset)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "mirrorflow-test-ends",
            "isolation.level": "read_committed",
        }
    )
    try:
        return int(consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)[1])
    finally:
        consumer.close()


def transactional_producer(bootstrap: str, txn_id: str) -> Producer:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": "5"})
    p.init_transactions(30)
    return p


def commit_group(
    bootstrap: str,
    group: str,
    offsets: dict[tuple[str, int], int],
    client_config: Mapping[str, str] | None = None,
) -> None:
    """Commit offsets for ``group`` as a consumer that read up to them would (retrying while the
    group coordinator is still loading on a fresh cluster). ``client_config``: more librdkafka
    settings, e.g. a SASL login."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": "false",
            **(client_config or {}),
        }
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                c.commit(
                    offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()], asynchronous=False
                )
                return
            except KafkaException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    finally:
        c.close()


def group_offsets(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    """``group``'s committed offsets, by (topic, partition)."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        found = admin.list_group_offsets({group: None})[group]
    finally:
        admin.close()
    return {(tp.topic, tp.partition): int(om.offset) for tp, om in found.items() if om.offset >= 0}


def first_records(
    bootstrap: str, group: str, topic: str, partitions: int
) -> dict[int | None, tuple[int | None, bytes | None, bytes | None]]:
    """What ``group`` reads first on each partition of ``topic`` from its committed offsets:
    (offset, key, value); nothing is committed."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": "false",
         "auto.offset.reset": "latest", "session.timeout.ms": "6000"}
    )  # fmt: skip
    first: dict[int | None, tuple[int | None, bytes | None, bytes | None]] = {}
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 60
        while len(first) < partitions:
            assert time.monotonic() < deadline, f"{group} read only {first} within 60 s"
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                first.setdefault(msg.partition(), (msg.offset(), msg.key(), msg.value()))
    finally:
        consumer.close()
    return first


@contextmanager
def local_clusters(
    aliases: Sequence[str],
    root: Path,
    extra_properties: Mapping[str, str] | None = None,
    security: BrokerSecurity | None = None,
) -> Iterator[dict[str, LocalCluster]]:
    """Single-node clusters on free loopback ports, stopped by PID however the block ends.
    With ``security``, every cluster has its SASL users and authorizer (see ``ScramSecurity``)."""
    ports = processes.free_ports(2 * len(aliases))
    specs = [(alias, ports[2 * i], ports[2 * i + 1]) for i, alias in enumerate(aliases)]
    # start_clusters is all-or-nothing: on failure it has already stopped the ones that started.
    clusters = local_kafka.start_clusters(specs, root, extra_properties=extra_properties, security=security)
    try:
        yield clusters
    finally:
        local_kafka.stop_clusters(clusters)


@contextmanager
def replicated_clusters(
    aliases: Sequence[str], root: Path, extra_properties: Mapping[str, str] | None = None
) -> Iterator[dict[str, ReplicatedCluster]]:
    """Three-node clusters on free loopback ports, started in parallel, stopped by PID however the
    block ends: by their homes' PID files, so also the nodes restarted inside the block."""
    ports = processes.free_ports(6 * len(aliases))
    with ThreadPoolExecutor(max_workers=max(len(aliases), 1)) as pool:
        futures = {
            alias: pool.submit(
                start_replicated_cluster,
                alias,
                ports[6 * i : 6 * i + 6],
                root,
                extra_properties=extra_properties,
            )
            for i, alias in enumerate(aliases)
        }
    # Each start is all-or-nothing; the clusters that did start are stopped below if another failed.
    clusters = {alias: f.result() for alias, f in futures.items() if f.exception() is None}
    try:
        for f in futures.values():
            if (error := f.exception()) is not None:
                raise error
        yield clusters
    finally:
        local_kafka.stop_clusters([node.home for c in clusters.values() for node in c.nodes])


def delete_records(bootstrap: str, before: Mapping[tuple[str, int], int]) -> None:
    """Delete every record before the given offset of each partition (kafka-rm-records' request):
    the partition's log start offset becomes that offset."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.delete_records({KafkaTopicPartition(t, p): offset for (t, p), offset in before.items()})
    finally:
        admin.close()


def topic_id(bootstrap: str, name: str) -> str:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        (described,) = admin.describe_topics([name])
        return str(described["topic_id"])
    finally:
        admin.close()


def recreate_topic(bootstrap: str, name: str, partitions: int) -> None:
    """Delete the topic and create it again under the same name (a new topic id, offsets from 0)."""
    old_id = topic_id(bootstrap, name)
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.delete_topics([name])
        deadline = time.monotonic() + 30
        while True:  # the deletion completes asynchronously
            try:
                create_topic(bootstrap, name, partitions)
                if topic_id(bootstrap, name) != old_id:
                    return
            except TopicAlreadyExistsError:
                pass
            assert time.monotonic() < deadline, f"topic {name} was not recreated within 30 s"
            time.sleep(0.2)
    finally:
        admin.close()


# --- MM2's own client

JAVA_CHECK = Path(__file__).resolve().parent / "java" / "MirrorClientCheck.java"


def mirror_client(cluster: LocalCluster, source: str, group: str, *hops: str) -> list[str]:
    """MM2's MirrorClient and RemoteClusterUtils, run as a single-file Java program on ``cluster``:
    its upstream clusters, the hops to each of ``hops``, and ``group``'s offsets translated from
    ``source`` ("-": none), each with its lag (a read_committed consumer's end offset minus it)."""
    classpath = os.pathsep.join(str(j) for j in sorted(paths.kafka_libs().glob("*.jar")))
    # A one-shot program: the JIT's first tier only, as the local brokers run.
    java = ["java", class_sharing.QUICK_JIT, "-cp", classpath, str(JAVA_CHECK)]
    done = subprocess.run(
        [*java, cluster.bootstrap, source, group, *hops],
        capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    facts = ("upstream", "hops", "offset", "lag")
    return [line for line in done.stdout.splitlines() if line.split(" ")[0] in facts]


# --- Airflow

AIRFLOW = str(Path(sys.executable).parent / "airflow")


def airflow(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [AIRFLOW, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=420, check=False
    )


def migrated_airflow(home: Path, config: MirrorConfig, cwd: Path) -> dict[str, str]:
    """Env for `airflow` commands with a fresh Airflow home and metadata DB in ``home``, wired to this
    repo's DAGs and ``config``. The DB is a copy of one migrated once per session: each test still
    starts from an empty, fully migrated database, without paying for the migration again."""
    assert config.path is not None
    env = airflow_env(home, config.path, config.state_dir)
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    home.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(_migrated_metadata_db(), home / "airflow.db")
    return env


@functools.cache
def _migrated_metadata_db() -> Path:
    """An Airflow metadata DB (SQLite) that `airflow db migrate` made, in a folder removed at exit."""
    home = Path(tempfile.mkdtemp(prefix="mirrorflow-airflow-template-"))
    atexit.register(shutil.rmtree, home, ignore_errors=True)
    env = airflow_env(home, home / "absent.properties", home / "state")
    migrated = airflow(env, home, "db", "migrate")
    assert migrated.returncode == 0, migrated.stderr[-3000:]
    return home / "airflow.db"


@contextmanager
def running_airflow(home: Path, config: MirrorConfig, **env: str) -> Iterator[LocalAirflow]:
    """`airflow standalone` (API server, scheduler, DAG processor, triggerer) on a free port, wired to
    ``config``, with ``env`` overriding Airflow settings; stopped, with every process of it, after."""
    assert config.path is not None
    airflow = LocalAirflow(home, config.path, config.state_dir, free_port(), {**os.environ, **env})
    airflow.env["SPARK_LOCAL_IP"] = "127.0.0.1"
    home.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(_migrated_metadata_db(), home / "airflow.db")  # standalone then finds nothing to migrate
    airflow.start()
    try:
        yield airflow
    finally:
        airflow.stop()
        assert_all_gone(lambda p: str(home) in p.cmdline, "Airflow processes")


def wait_for_dag(airflow: LocalAirflow, dag_id: str, timeout: float = 120.0) -> None:
    """Until the DAG processor has parsed the DAG; then unpause it (new DAGs start paused)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            airflow.api("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})
            return
        except urllib.error.HTTPError as exc:
            if exc.code != 404 or time.monotonic() > deadline:
                raise
        time.sleep(1)


class Process(NamedTuple):
    pid: int
    group: int
    cmdline: str
    environ: str


def window_run(micro_batch: str) -> str:
    """The DR window run a micro-batch's id (``<the window's attempt>#<n>``) belongs to."""
    return run_of(micro_batch.rpartition("#")[0])


def live_processes() -> list[Process]:
    """Every process of this machine that has not exited (zombies left out)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            # Fields after the parenthesised command name: state, parent, process group.
            state, _parent, group = (entry / "stat").read_text().rsplit(")", 1)[1].split()[:3]
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            environ = (entry / "environ").read_bytes().decode(errors="replace")
        except OSError:
            continue  # exited meanwhile
        if state != "Z":
            found.append(Process(int(entry.name), int(group), cmdline, environ))
    return found


def assert_all_gone(select: Callable[[Process], bool], what: str, timeout: float = 20.0) -> None:
    """No live process matches ``select`` once ``timeout`` seconds have passed (they may be exiting)."""
    deadline = time.monotonic() + timeout
    while (left := [p for p in live_processes() if select(p)]) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left, f"{what} survive: {[f'{p.pid}: {p.cmdline[:200]}' for p in left]}"
