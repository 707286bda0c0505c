"""The contenders of bench/run.py: the copy limit (Kafka's perf tools and a librdkafka producer),
MirrorMaker 2, and mirrorflow.

Each contender copies the workload into a freshly started target cluster and returns a ``Result``. Every
process started here is stopped by its PID (process group for `airflow`, which starts spark-submit),
also on failure.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.schema_registry import SchemaRegistryClient
from workload import (
    PARTITIONS,
    OffsetWatcher,
    PartitionDigest,
    Workload,
    compare,
    create_topics,
    end_offsets,
    fingerprint,
    produce,
    steady_rate,
)

from mirrorflow_dev import kafka_home, paths
from mirrorflow_dev.devenv import airflow_env
from mirrorflow_dev.local_spark import SparkStandalone
from mirrorflow_dev.processes import start_logged, stop_process

AIRFLOW = str(Path(sys.executable).parent / "airflow")
LIMIT = "copy limit (Kafka perf tools, librdkafka producer)"
OURS = "mirrorflow (one DAG run)"
OURS_STANDALONE = "mirrorflow on Spark standalone (1 master, 2 workers)"
# The workload with one header dropped on the way: Connect's DropHeaders, which MM2 and a flow of
# ours both take as the flow's transforms (ours then copies record by record instead of as batches).
DROPPED_HEADER = "origin"


def drop_header_lines(flow: str) -> list[str]:
    return [
        f"{flow}.transforms = dropOrigin",
        f"{flow}.transforms.dropOrigin.type = org.apache.kafka.connect.transforms.DropHeaders",
        f"{flow}.transforms.dropOrigin.headers = {DROPPED_HEADER}",
    ]


LOG4J2 = """\
status = warn
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = ${sys:kafka.logs.dir}/${sys:bench.log.name}.log
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FILE
"""


@dataclass
class Result:
    name: str
    wall_s: float | None = None
    steady_rps: float | None = None
    verified: str = "no"  # "yes", "no", or "count only" (the perf tools write synthetic records)
    detail: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Context:
    work: Path
    source_bootstrap: str
    target_bootstrap: str
    topics: Sequence[str]
    workload: Workload
    records: int
    source_digest: dict[tuple[str, int], PartitionDigest]
    source_ends: dict[tuple[str, int], int]
    heap_mb: int
    tasks_max: int
    timeout: float
    poll_interval: float
    # Whether the contender drops DROPPED_HEADER (``source_digest`` then leaves it out too).
    drop_header: bool = False
    # The source's and the target's schema registry (W1A), when the contender syncs schemas.
    registries: tuple[str, str] | None = None


def java_cmd(work: Path, heap_mb: int, log_name: str, main: str, *args: str) -> list[str]:
    """A Kafka tool's JVM (Kafka's jars) with its log in ``work``/logs/``log_name``.log."""
    config = work / "log4j2-bench.properties"
    if not config.exists():
        config.write_text(LOG4J2)
    return [
        kafka_home.java_executable(),
        f"-Xmx{heap_mb}m",
        f"-Dlog4j2.configurationFile={config}",
        f"-Dkafka.logs.dir={work / 'logs'}",
        f"-Dbench.log.name={log_name}",
        "-cp",
        f"{paths.kafka_libs()}/*",
        main,
        *args,
    ]


def run_logged(cmd: Sequence[str], log: Path, timeout: float, env: dict[str, str] | None = None) -> int:
    """Run a command with ``start_logged``; the whole group is stopped at the end or on timeout."""
    proc = start_logged(cmd, log, env)
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        return -1
    finally:
        stop_process(proc, group=True)


def verify_copy(ctx: Context, result: Result) -> None:
    """The target's records against the source's fingerprint; a contender that synced schemas is
    compared with its target ids mapped back to the source's."""
    remote = {t: f"source.{t}" for t in ctx.topics}
    ids = schema_ids_back(ctx.registries, remote) if ctx.registries else None
    target = fingerprint(ctx.target_bootstrap, list(remote.values()), schema_ids=ids)
    problems = compare(ctx.source_digest, target, remote)
    result.verified = "no" if problems else "yes"
    result.detail.extend(problems[:20])


def schema_ids_back(registries: tuple[str, str], remote: dict[str, str]) -> dict[int, int]:
    """Each remote topic's value schema id in the target registry -> its topic's at the source."""
    source, target = (SchemaRegistryClient({"url": url, "timeout": 30}) for url in registries)
    ids: dict[int, int] = {}
    for topic, remote_topic in remote.items():
        back, to = (
            target.get_version(f"{remote_topic}-value", 1).schema_id,
            source.get_version(f"{topic}-value", 1).schema_id,
        )
        assert back is not None and to is not None, f"{topic}: no value schema id in a registry"
        ids[back] = to
    return ids


# ---------------------------------------------------------------------------------- copy limit

_PRODUCED = re.compile(r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\)")


def copy_limit(ctx: Context) -> Result:
    """Kafka's ProducerPerformance and a librdkafka producer into the target, Kafka's ConsumerPerformance
    from the source: limit = min(max(the two write rates), the read rate)."""
    result = Result(LIMIT)
    workload = ctx.workload
    partitions = PARTITIONS * len(ctx.topics)
    sink, rdkafka_sink = "limit-sink", "limit-sink-librdkafka"
    create_topics(ctx.target_bootstrap, [sink, rdkafka_sink], partitions)
    # ProducerPerformance sends no key or headers: put the key's bytes in the value.
    record_size = workload.record_bytes
    props = [f"{k}={v}" for k, v in workload.producer.items()]
    log = ctx.work / "logs" / "producer-perf.out"
    start = time.monotonic()
    rc = run_logged(
        java_cmd(
            ctx.work,
            ctx.heap_mb,
            "producer-perf",
            "org.apache.kafka.tools.ProducerPerformance",
            "--bootstrap-server",
            ctx.target_bootstrap,
            "--topic",
            sink,
            "--num-records",
            str(ctx.records),
            "--record-size",
            str(record_size),
            "--throughput",
            "-1",
            "--command-property",
            *props,
        ),
        log,
        ctx.timeout,
    )
    produce_wall = time.monotonic() - start
    out = log.read_text(errors="replace")
    matches = _PRODUCED.findall(out)
    produce_rps = float(matches[-1][1]) if rc == 0 and matches else None
    result.extra["producer"] = {"rc": rc, "wall_s": produce_wall, "records_per_s": produce_rps}
    if produce_rps is None:
        result.detail.append(f"ProducerPerformance failed (rc {rc}); see {log}")

    # ProducerPerformance's values are random capital letters, not the workload's bytes (which decide
    # what compression costs and saves), and the Java client may be slower or faster than librdkafka:
    # so the workload's own records are written too, the way the source was.
    rdkafka_rps: float | None
    try:
        rdkafka_rps = produce(ctx.target_bootstrap, [rdkafka_sink], ctx.records, workload, partitions)
    except (KafkaException, RuntimeError) as exc:
        rdkafka_rps = None
        result.detail.append(f"librdkafka producer failed: {type(exc).__name__}: {exc}")
    rdkafka_wall = None if rdkafka_rps is None else ctx.records / rdkafka_rps
    result.extra["librdkafka_producer"] = {"wall_s": rdkafka_wall, "records_per_s": rdkafka_rps}

    log = ctx.work / "logs" / "consumer-perf.out"
    include = "^(" + "|".join(re.escape(t) for t in ctx.topics) + ")$"
    start = time.monotonic()
    rc = run_logged(
        java_cmd(
            ctx.work,
            ctx.heap_mb,
            "consumer-perf",
            "org.apache.kafka.tools.ConsumerPerformance",
            "--bootstrap-server",
            ctx.source_bootstrap,
            "--include",
            include,
            "--num-records",
            str(ctx.records),
            "--timeout",
            "30000",
        ),
        log,
        ctx.timeout,
    )
    consume_wall = time.monotonic() - start
    consume_rps, consumed = None, None
    for line in log.read_text(errors="replace").splitlines():
        cols = [c.strip() for c in line.split(",")]
        # start.time, end.time, MB, MB.sec, nMsg, nMsg.sec, rebalance.ms, fetch.ms, fetch.MB.sec,
        # fetch.nMsg.sec
        if len(cols) == 10 and re.fullmatch(r"[\d.]+", cols[4]):
            consumed = int(float(cols[4]))
            consume_rps = float(cols[9])
            result.extra["consumer"] = {
                "rc": rc,
                "wall_s": consume_wall,
                "records": consumed,
                "records_per_s_incl_group_join": float(cols[5]),
                "fetch_records_per_s": consume_rps,
            }
    if consume_rps is None:
        result.detail.append(f"ConsumerPerformance failed (rc {rc}); see {log}")

    written = {
        t: sum(end_offsets(ctx.target_bootstrap, [t], partitions).values()) for t in (sink, rdkafka_sink)
    }
    ok = written[sink] == written[rdkafka_sink] == consumed == ctx.records
    result.verified = "count only" if ok else "no"
    if not ok:
        result.detail.append(
            f"ProducerPerformance wrote {written[sink]}, the librdkafka producer {written[rdkafka_sink]}, "
            f"ConsumerPerformance read {consumed}; expected {ctx.records} each"
        )
    result.detail.append(
        f"write: ProducerPerformance {_rate(produce_rps)} rec/s in {produce_wall:.1f} s wall, librdkafka "
        f"producer {_rate(rdkafka_rps)} rec/s in {_seconds(rdkafka_wall)} s (first produce to flush); "
        f"read: ConsumerPerformance {_rate(consume_rps)} rec/s (fetch) in {consume_wall:.1f} s wall"
    )
    if produce_rps is not None and rdkafka_rps is not None and consume_rps is not None:
        write_rps, write_wall, writer = max(
            (produce_rps, produce_wall, "ProducerPerformance"),
            (rdkafka_rps, ctx.records / rdkafka_rps, "librdkafka producer"),
        )
        result.steady_rps = min(write_rps, consume_rps)
        result.wall_s = max(write_wall, consume_wall)
        result.extra["write_side"] = writer
        result.detail.append(
            f"limit = min(write {write_rps:,.0f} rec/s (the faster writer, {writer}), "
            f"read {consume_rps:,.0f} rec/s) = {result.steady_rps:,.0f} rec/s"
        )
    return result


def _rate(records_per_s: float | None) -> str:
    return "n/a" if records_per_s is None else f"{records_per_s:,.0f}"


def _seconds(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{seconds:.1f}"


# ------------------------------------------------------------------------------------- MM2


def mm2_properties(ctx: Context) -> str:
    tuning = ctx.workload.producer
    lines = [
        "clusters = source, target",
        f"source.bootstrap.servers = {ctx.source_bootstrap}",
        f"target.bootstrap.servers = {ctx.target_bootstrap}",
        "source->target.enabled = true",
        f"source->target.topics = {', '.join(ctx.topics)}",
        "target->source.enabled = false",
        "target->source.emit.heartbeats.enabled = false",
        f"tasks.max = {ctx.tasks_max}",
        "replication.factor = 1",
        "checkpoints.topic.replication.factor = 1",
        "heartbeats.topic.replication.factor = 1",
        "offset-syncs.topic.replication.factor = 1",
        "offset.storage.replication.factor = 1",
        "status.storage.replication.factor = 1",
        "config.storage.replication.factor = 1",
        "refresh.topics.interval.seconds = 1",
        "refresh.groups.interval.seconds = 600",
        "sync.topic.acls.enabled = false",
        "emit.checkpoints.enabled = false",
        "sync.group.offsets.enabled = false",
        # The records are written by the Connect worker's producer: <target alias>.producer.* configures
        # it in dedicated mode; <flow>.producer.* is set too, as the MM2 docs show it.
        *(f"target.producer.{k} = {v}" for k, v in tuning.items()),
        *(f"source->target.producer.{k} = {v}" for k, v in tuning.items()),
        *(drop_header_lines("source->target") if ctx.drop_header else []),
    ]
    return "\n".join(lines) + "\n"


def mirror_maker(ctx: Context) -> Result:
    result = Result("MirrorMaker 2 (dedicated mode)")
    config = ctx.work / "mm2-mm2.properties"
    config.write_text(mm2_properties(ctx))
    remote_topics = [f"source.{t}" for t in ctx.topics]
    watcher = OffsetWatcher(ctx.target_bootstrap, remote_topics, ctx.poll_interval)
    log = ctx.work / "logs" / "mm2.out"
    log.parent.mkdir(parents=True, exist_ok=True)
    cmd = java_cmd(ctx.work, ctx.heap_mb, "mm2", "org.apache.kafka.connect.mirror.MirrorMaker", str(config))
    watcher.start()
    with log.open("ab") as out:
        start = time.monotonic()
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )
    try:
        alive = threading.Event()
        alive.set()

        def reap() -> None:
            proc.wait()
            alive.clear()

        threading.Thread(target=reap, daemon=True).start()
        done = None
        deadline = start + ctx.timeout
        while done is None and time.monotonic() < deadline and alive.is_set():
            reached = watcher.wait_for(ctx.records, deadline - time.monotonic(), alive)
            if reached is None:
                break
            ends = end_offsets(ctx.target_bootstrap, remote_topics)
            if all(ends[(f"source.{t}", p)] >= end for (t, p), end in ctx.source_ends.items()):
                done = reached
            else:
                time.sleep(ctx.poll_interval)
        if done is None:
            why = "exited" if not alive.is_set() else f"not caught up after {ctx.timeout:.0f} s"
            result.detail.append(f"MM2 {why} ({watcher.latest()} of {ctx.records} records); see {log}")
        else:
            result.wall_s = done - start
            result.steady_rps = steady_rate(watcher.samples, ctx.records)
    finally:
        watcher.stop()
        stop_process(proc, group=False)
    result.extra["record_producers"] = record_producer_settings(ctx.work / "logs" / "mm2.log")
    if done is not None:
        verify_copy(ctx, result)
    return result


# ------------------------------------------------------------------------------------- ours


def flow_properties(
    source: str, target: str, topics: str, state: Path, cap: int, producer: dict[str, str]
) -> str:
    """mm2.properties for our flow source->target, with the workload's producer settings."""
    lines = [
        "clusters = source, target",
        f"source.bootstrap.servers = {source}",
        f"target.bootstrap.servers = {target}",
        "source->target.enabled = true",
        "target->source.enabled = false",
        f"source->target.topics = {topics}",
        "replication.factor = 1",
        "checkpoints.topic.replication.factor = 1",
        "heartbeats.topic.replication.factor = 1",
        "offset-syncs.topic.replication.factor = 1",
        *(f"target.producer.{k} = {v}" for k, v in producer.items()),
        f"mirrorflow.state.dir = {state}",
        f"mirrorflow.max.records.per.partition = {cap}",
    ]
    return "\n".join(lines) + "\n"


def ours_properties(ctx: Context, state: Path) -> str:
    per_partition = max(ctx.source_ends.values()) + 1
    flow = flow_properties(
        ctx.source_bootstrap,
        ctx.target_bootstrap,
        ", ".join(ctx.topics),
        state,
        per_partition,
        ctx.workload.producer,
    )
    if ctx.drop_header:
        flow += "".join(f"{line}\n" for line in drop_header_lines("source->target"))
    if ctx.registries:
        flow += f"source->target.mirrorflow.schema.registry.source.url = {ctx.registries[0]}\n"
        flow += f"source->target.mirrorflow.schema.registry.target.url = {ctx.registries[1]}\n"
        # W1A's values are in the wire format, its keys random bytes.
        flow += "source->target.mirrorflow.schema.registry.framed.value.topics = .*\n"
        flow += "source->target.mirrorflow.schema.registry.plain.key.topics = .*\n"
    return flow


def ours(ctx: Context) -> Result:
    """One DAG run with the default `spark_default` connection: local[*] in the spark-submit JVM."""
    result = Result(OURS)
    result.extra["spark"] = {"master": "local[*]"}
    return run_ours(ctx, result, {})


def ours_standalone(ctx: Context) -> Result:
    """The same DAG run against a Spark standalone cluster on loopback: 1 master, 2 workers of 1 core,
    1 GiB each; spark-submit runs the driver in client mode, the workers' executors run the job."""
    result = Result(OURS_STANDALONE)
    with SparkStandalone(ctx.work / "spark-standalone", workers=2, timeout=min(ctx.timeout, 120)) as cluster:
        spark: dict[str, Any] = {
            "master": cluster.url,
            "deploy_mode": "client",
            "workers": len(cluster.workers),
            "worker_cores": SparkStandalone.CORES,
            "worker_memory": SparkStandalone.MEMORY,
            "alive_workers_at_start": cluster.alive_workers(),
        }
        result.extra["spark"] = spark
        conn = json.dumps({"conn_type": "spark", "host": cluster.url})
        run_ours(ctx, result, {"AIRFLOW_CONN_SPARK_DEFAULT": conn})
        apps = cluster.applications()
    spark["applications"] = apps
    completed = [a for a in apps if a.get("state") == "FINISHED"]
    log = ctx.work / "logs" / "airflow-dags-test-1.out"
    text = log.read_text(errors="replace") if log.exists() else ""
    connected = _STANDALONE_CONNECTED.search(text)
    executors = sorted(set(_STANDALONE_EXECUTOR.findall(text)))
    spark["driver_connected_app_id"] = connected.group(1) if connected else None
    spark["executors_granted_run_1"] = executors
    # Each executor's stderr lives in <worker dir>/work/<app id>/<executor id>/ (kept until stop).
    finished = {
        f"{log.parent.parent.name}/{log.parent.name}": log.read_text(errors="replace").count("Finished task")
        for log in sorted((ctx.work / "spark-standalone").glob("worker-*/work/app-*/*/stderr"))
    }
    spark["executor_tasks_finished"] = finished
    result.detail.append(
        f"Spark standalone master {cluster.url}, {len(cluster.workers)} workers x "
        f"{SparkStandalone.CORES} core / {SparkStandalone.MEMORY}, client deploy mode; "
        f"{spark['alive_workers_at_start']} ALIVE at start; master lists {len(completed)} completed "
        f"application(s); run 1 driver connected as {spark['driver_connected_app_id']} with "
        f"{len(executors)} executor(s) granted; tasks finished per executor {finished}"
    )
    ran_on_cluster = connected is not None and len(completed) > 0 and sum(finished.values()) > 0
    spark["ran_on_cluster"] = ran_on_cluster
    if result.verified == "yes" and not ran_on_cluster:
        result.verified = "no"
        result.detail.append("the copy was verified but did not provably run on the standalone cluster")
    return result


def run_ours(ctx: Context, result: Result, env_overrides: dict[str, str]) -> Result:
    """`airflow dags test` over the backlog (timed, watched, verified), then once more idle."""
    home, state = ctx.work / "airflow", ctx.work / "state-ours"
    config = ctx.work / "mm2-ours.properties"
    config.write_text(ours_properties(ctx, state))
    env = airflow_env(home, config, state, base={**os.environ, **env_overrides})
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    result.extra["spark_conn_spark_default"] = env["AIRFLOW_CONN_SPARK_DEFAULT"]
    logs = ctx.work / "logs"
    rc = run_logged([AIRFLOW, "db", "migrate"], logs / "airflow-db-migrate.out", 600, env)
    if rc != 0:
        result.detail.append(f"airflow db migrate failed (rc {rc}); see {logs / 'airflow-db-migrate.out'}")
        return result

    watcher = OffsetWatcher(ctx.target_bootstrap, [f"source.{t}" for t in ctx.topics], ctx.poll_interval)
    watcher.start()
    try:
        start = time.monotonic()
        log = logs / "airflow-dags-test-1.out"
        rc = run_logged([AIRFLOW, "dags", "test", "mirror_source_to_target"], log, ctx.timeout, env)
        wall = time.monotonic() - start
    finally:
        watcher.stop()
    if rc != 0:
        result.detail.append(f"airflow dags test failed (rc {rc}); see {log}")
        return result
    result.wall_s = wall
    result.steady_rps = steady_rate(watcher.samples, ctx.records)
    text = log.read_text(errors="replace")
    tasks = task_seconds(text)
    result.extra["task_seconds"] = tasks
    job = _SPARK_JOB.search(text)
    if job:
        job_s = float(job.group(1)) / 1000
        result.extra["spark_copy_job_s"] = job_s
        result.extra["spark_copy_job_records_per_s"] = ctx.records / job_s
        result.detail.append(
            f"tasks {', '.join(f'{k} {v:.1f} s' for k, v in tasks.items())}; Spark copy job "
            f"{job_s:.1f} s = {ctx.records / job_s:,.0f} records/s"
        )
    first = crossing_time(watcher.samples)
    if first is not None:
        result.extra["first_record_on_target_after_s"] = first - start
    verify_copy(ctx, result)

    log = logs / "airflow-dags-test-2.out"
    start = time.monotonic()
    rc = run_logged([AIRFLOW, "dags", "test", "mirror_source_to_target"], log, ctx.timeout, env)
    idle = time.monotonic() - start
    result.extra["idle_run"] = {"rc": rc, "wall_s": idle}
    if rc != 0:
        result.detail.append(f"second (idle) airflow dags test failed (rc {rc}); see {log}")
    else:
        result.detail.append(f"idle run (nothing new): {idle:.1f} s wall")
    return result


_STANDALONE_CONNECTED = re.compile(r"Connected to Spark cluster with app ID (app-[\w-]+)")
_STANDALONE_EXECUTOR = re.compile(r"Granted executor ID (app-[\w-]+/\d+)")
_SPARK_JOB = re.compile(r"Job 0 finished: collect at \S*spark_copy\.py:\d+, took ([\d.]+) ms")
_DAG_TEST = re.compile(r"^(\S+Z) .*\[DAG TEST\] (starting|end task) task_id=(\w+)")


def task_seconds(log_text: str) -> dict[str, float]:
    """Per task of an `airflow dags test` log: seconds from its start to its end line."""
    starts: dict[str, datetime] = {}
    out: dict[str, float] = {}
    for line in log_text.splitlines():
        m = _DAG_TEST.match(line)
        if not m:
            continue
        when = datetime.fromisoformat(m.group(1).replace("Z", "+00:00"))
        if m.group(2) == "starting":
            starts[m.group(3)] = when
        elif m.group(3) in starts:
            out[m.group(3)] = (when - starts[m.group(3)]).total_seconds()
    return out


def record_producer_settings(log: Path) -> dict[str, dict[str, str]]:
    """batch.size / linger.ms / compression / acks of MM2's producers, by client.id, from its log."""
    wanted = ("client.id", "linger.ms", "batch.size", "compression.type", "acks")
    out: dict[str, dict[str, str]] = {}
    block: dict[str, str] | None = None
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return out
    for line in lines:
        if "ProducerConfig values:" in line:
            block = {}
        elif block is not None and line.startswith("\t"):
            key, _, value = line.strip().partition(" = ")
            if key in wanted:
                block[key] = value
        elif block is not None:
            out[block.pop("client.id", "?")] = block
            block = None
    return out


def crossing_time(samples: Sequence[tuple[float, int]]) -> float | None:
    return next((t for t, n in samples if n > 0), None)
