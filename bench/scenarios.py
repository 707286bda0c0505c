"""Scale scenarios of bench/run.py (``--scenarios``), each on its own pair of local clusters.

- scale-topics: N topics x 4 partitions x 5 records on the source; wall time of the first
  `airflow dags test` (creates N remote topics, copies everything) and of a second, idle one (which
  must skip the Spark copy task); the copy is checked by end offsets per partition.
- memory: peak RSS of the Spark side of one `airflow dags test` for a W1 backlog of --records and
  one of 4 x --records (each copied whole in one run), and the ratio of the two peaks.

Every process started here is stopped by PID (``airflow`` by its process group), also on failure.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
from confluent_kafka import Consumer, Producer, TopicPartition
from contenders import AIRFLOW, flow_properties, run_logged, start_logged, stop_process, task_seconds
from workload import BASE_TIMESTAMP_MS, PARTITIONS, WORKLOADS, create_topics, produce

from mirrorflow_dev import local_kafka, processes
from mirrorflow_dev.devenv import airflow_env
from mirrorflow_dev.local_kafka import LocalCluster

DAG_ID = "mirror_source_to_target"
SCALE_PARTITIONS = 4
SCALE_RECORDS_PER_PARTITION = 5
SCALE_TOPICS_PER_REQUEST = 100  # topics per CreateTopics request
SAMPLE_INTERVAL_S = 0.2
MIB = 2**20
W1 = WORKLOADS["W1"]  # the scenarios measure scale and memory, not the record shape


@dataclass
class ScenarioResult:
    name: str
    ok: bool = False
    markdown: list[str] = field(default_factory=list)
    detail: list[str] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Options:
    work: Path
    heap_mb: int
    timeout: float
    records: int
    scale_topics: int
    rpo_rates: tuple[int, ...] = (2000,)
    rpo_seconds: float = 180.0
    rpo_contenders: tuple[str, ...] = ("mm2", "ours-scheduler", "ours")
    rpo_window_seconds: int = 120
    soak_micro_batches: int = 10_000
    soak_window_seconds: int = 120
    soak_rate: int = 50
    fan_in_flows: int = 4
    fan_in_rate: int = 500
    fan_in_trigger_ms: int = 200
    txn_minutes: int = 30
    fault_minutes: int = 30
    fault_every_seconds: float = 120.0
    fault_rate: int = 500
    dr_faults: tuple[str, ...] = ("coordinator", "leader", "database", "driver", "compaction")


# ------------------------------------------------------------------------------ Spark RSS sampling


@dataclass
class SparkRss:
    """Every ``interval`` s: the summed RSS of the Spark processes under ``root_pid`` — each java process
    whose cmdline names SparkSubmit, plus all of its descendants (the PySpark driver and workers)."""

    root_pid: int
    interval: float = SAMPLE_INTERVAL_S
    samples: int = 0
    spark_samples: int = 0  # samples in which at least one SparkSubmit JVM was found
    peak_total: int = 0
    peak_jvm: int = 0
    peak_processes: int = 0
    pids_seen: set[int] = field(default_factory=set)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> SparkRss:
        self._thread = threading.Thread(target=self._run, name="spark-rss", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)

    def _sample(self, root: psutil.Process) -> None:
        total = jvm = procs = 0
        for proc in root.children(recursive=True):
            try:
                if proc.name() != "java" or not any("SparkSubmit" in a for a in proc.cmdline()):
                    continue
                tree = [proc, *proc.children(recursive=True)]
                jvm += proc.memory_info().rss
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
            for member in tree:
                try:
                    total += member.memory_info().rss
                except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                    continue
                procs += 1
                self.pids_seen.add(member.pid)
        self.samples += 1
        if procs:
            self.spark_samples += 1
        self.peak_total = max(self.peak_total, total)
        self.peak_jvm = max(self.peak_jvm, jvm)
        self.peak_processes = max(self.peak_processes, procs)

    def _run(self) -> None:
        try:
            root = psutil.Process(self.root_pid)
        except psutil.NoSuchProcess:
            return
        while not self._stop.is_set():
            t0 = time.monotonic()
            try:
                self._sample(root)
            except psutil.NoSuchProcess:  # airflow itself has exited
                return
            self._stop.wait(max(0.0, self.interval - (time.monotonic() - t0)))

    def as_dict(self) -> dict[str, Any]:
        return {
            "interval_s": self.interval,
            "samples": self.samples,
            "samples_with_spark": self.spark_samples,
            "peak_rss_mib": round(self.peak_total / MIB, 1),
            "peak_jvm_rss_mib": round(self.peak_jvm / MIB, 1),
            "peak_processes": self.peak_processes,
            "distinct_pids": len(self.pids_seen),
        }


@dataclass
class DagRun:
    rc: int
    wall_s: float
    log: Path
    rss: SparkRss
    tasks: dict[str, float]
    copy_ran: bool
    short_circuited: bool  # plan's ShortCircuitOperator logged "Condition result is False"


def dags_test(env: dict[str, str], log: Path, timeout: float) -> DagRun:
    """One `airflow dags test` in its own session, timed, with its Spark processes' RSS sampled."""
    start = time.monotonic()
    proc = start_logged([AIRFLOW, "dags", "test", DAG_ID], log, env)
    rss = SparkRss(proc.pid).start()
    try:
        try:
            rc = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            rc = -1
        wall = time.monotonic() - start
    finally:
        rss.stop()
        stop_process(proc, group=True)
    text = log.read_text(errors="replace")
    tasks = task_seconds(text)
    copy_ran = "copy" in tasks or "task_id=copy" in _started(text)
    return DagRun(rc, wall, log, rss, tasks, copy_ran, "Condition result is False" in text)


def _started(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if "[DAG TEST] starting" in line)


def prepare_airflow(home: Path, config: Path, state: Path, logs: Path) -> dict[str, str]:
    env = airflow_env(home, config, state)
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    log = logs / "airflow-db-migrate.out"
    rc = run_logged([AIRFLOW, "db", "migrate"], log, 600, env)
    if rc != 0:
        raise RuntimeError(f"airflow db migrate failed (rc {rc}); see {log}")
    return env


def partition_ends(
    bootstrap: str, topics: Sequence[str], partitions: int
) -> dict[tuple[str, int], int | None]:
    """End offset per partition (None where the topic or partition does not exist)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-scale-offsets"})
    try:
        md = consumer.list_topics(timeout=30)
        out: dict[tuple[str, int], int | None] = {}
        for t in topics:
            meta = md.topics.get(t)
            present = set(meta.partitions) if meta is not None and meta.error is None else set()
            for p in range(partitions):
                out[(t, p)] = (
                    consumer.get_watermark_offsets(TopicPartition(t, p), timeout=30, cached=False)[1]
                    if p in present
                    else None
                )
        return out
    finally:
        consumer.close()


def compare_counts(
    source: dict[tuple[str, int], int | None], target: dict[tuple[str, int], int | None]
) -> list[str]:
    problems = []
    for (t, p), want in sorted(source.items()):
        got = target.get((f"source.{t}", p))
        if got != want:
            problems.append(f"source.{t}-{p}: end offset {got}, source {want}")
    return problems


def start(
    alias: str, home: Path, heap_mb: int, extra_properties: Mapping[str, str] | None = None
) -> LocalCluster:
    """A bench cluster: its broker compiles with the full JIT, as production brokers do."""
    port, controller = processes.free_ports(2)
    return local_kafka.start_cluster(
        alias,
        port,
        controller,
        home,
        heap_mb=heap_mb,
        timeout=120,
        full_jit=True,
        extra_properties=extra_properties,
    )


# --------------------------------------------------------------------------------- scale-topics


def produce_small(bootstrap: str, topics: Sequence[str], partitions: int, per_partition: int) -> float:
    """``per_partition`` W1-shaped records (16-byte key, 1 KiB value, 2 headers) into every partition."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": "true", **W1.producer})
    payload = os.urandom(W1.record_bytes)
    start_t = time.monotonic()
    i = 0
    for t in topics:
        for p in range(partitions):
            for _ in range(per_partition):
                while True:
                    try:
                        producer.produce(
                            t,
                            key=payload[: W1.key_size],
                            value=payload[W1.key_size :],
                            partition=p,
                            timestamp=BASE_TIMESTAMP_MS + i,
                            headers=[("seq", i.to_bytes(8, "big")), ("origin", b"bench-scale")],
                        )
                        break
                    except BufferError:
                        producer.poll(0.05)
                i += 1
    if producer.flush(300):
        raise RuntimeError("scale-topics records were not all delivered")
    return time.monotonic() - start_t


def scale_topics(opts: Options) -> ScenarioResult:
    n = opts.scale_topics
    res = ScenarioResult(f"scale-topics ({n} topics)")
    topics = [f"scale-{i:05d}" for i in range(n)]
    records = n * SCALE_PARTITIONS * SCALE_RECORDS_PER_PARTITION
    data: dict[str, Any] = {
        "topics": n,
        "partitions_per_topic": SCALE_PARTITIONS,
        "records_per_partition": SCALE_RECORDS_PER_PARTITION,
        "records": records,
    }
    res.data = data
    source = start("source", opts.work / "kafka" / "source", opts.heap_mb)
    try:
        t0 = time.monotonic()
        for i in range(0, n, SCALE_TOPICS_PER_REQUEST):
            create_topics(source.bootstrap, topics[i : i + SCALE_TOPICS_PER_REQUEST], SCALE_PARTITIONS)
        data["create_source_topics_s"] = time.monotonic() - t0
        data["produce_s"] = produce_small(
            source.bootstrap, topics, SCALE_PARTITIONS, SCALE_RECORDS_PER_PARTITION
        )
        src = partition_ends(source.bootstrap, topics, SCALE_PARTITIONS)
        if sum(v or 0 for v in src.values()) != records:
            raise RuntimeError(
                f"source holds {sum(v or 0 for v in src.values())} records, expected {records}"
            )
        print(
            f"scale-topics: {n} x {SCALE_PARTITIONS} partitions, {records:,} records on the source "
            f"(topics {data['create_source_topics_s']:.1f} s, produce {data['produce_s']:.1f} s)",
            flush=True,
        )
        target = start("target", opts.work / "kafka" / "target", opts.heap_mb)
        try:
            state = opts.work / "state"
            config = opts.work / "mm2-scale.properties"
            config.write_text(
                flow_properties(
                    source.bootstrap,
                    target.bootstrap,
                    "scale-.*",
                    state,
                    SCALE_RECORDS_PER_PARTITION + 1,
                    W1.producer,
                )
            )
            logs = opts.work / "logs"
            env = prepare_airflow(opts.work / "airflow", config, state, logs)
            first = dags_test(env, logs / "airflow-dags-test-1.out", opts.timeout)
            print(f"scale-topics run 1: rc {first.rc}, {first.wall_s:.1f} s", flush=True)
            t0 = time.monotonic()
            dst = partition_ends(target.bootstrap, [f"source.{t}" for t in topics], SCALE_PARTITIONS)
            data["verify_s"] = time.monotonic() - t0
            problems = compare_counts(src, dst)
            second = dags_test(env, logs / "airflow-dags-test-2.out", opts.timeout)
            print(f"scale-topics run 2: rc {second.rc}, {second.wall_s:.1f} s", flush=True)
        finally:
            local_kafka.stop_cluster(target)
    finally:
        local_kafka.stop_cluster(source)

    remote_present = sum(1 for (t, p), v in dst.items() if p == 0 and v is not None)
    idle_skipped = (
        second.rc == 0 and second.short_circuited and not second.copy_ran and second.rss.spark_samples == 0
    )
    data["run_1"] = {
        "rc": first.rc,
        "wall_s": first.wall_s,
        "tasks_s": first.tasks,
        "spark": first.rss.as_dict(),
    }
    data["run_2"] = {
        "rc": second.rc,
        "wall_s": second.wall_s,
        "tasks_s": second.tasks,
        "copy_task_ran": second.copy_ran,
        "plan_short_circuited": second.short_circuited,
        "spark": second.rss.as_dict(),
    }
    data["remote_topics_present"] = remote_present
    data["partitions_mismatched"] = len(problems)
    res.ok = first.rc == 0 and not problems and idle_skipped
    res.detail.extend(problems[:20])
    if first.rc != 0:
        res.detail.append(f"run 1 failed (rc {first.rc}); see {first.log}")
    if not idle_skipped:
        res.detail.append(
            f"run 2 did not skip the copy (rc {second.rc}, plan short-circuited {second.short_circuited}, "
            f"copy task ran {second.copy_ran}, "
            f"{second.rss.spark_samples} samples saw a SparkSubmit JVM); see {second.log}"
        )
    verified = "yes (end offsets)" if not problems else f"no ({len(problems)} partitions differ)"
    res.markdown = [
        f"## scale-topics: {n} topics x {SCALE_PARTITIONS} partitions x "
        f"{SCALE_RECORDS_PER_PARTITION} records",
        "",
        "| run | wall s | tasks (s) | Spark copy | result |",
        "|---|---:|---|---|---|",
        f"| 1 (backlog) | {first.wall_s:.1f} | {_tasks(first.tasks)} | "
        f"{'ran' if first.copy_ran else 'did not run'} | rc {first.rc}; {remote_present} of {n} remote "
        f"topics; {records:,} records, copy verified: {verified} |",
        f"| 2 (nothing new) | {second.wall_s:.1f} | {_tasks(second.tasks)} | "
        f"{'ran' if second.copy_ran else 'skipped'} ({second.rss.spark_samples} of {second.rss.samples} "
        f"samples saw a SparkSubmit JVM) | rc {second.rc} |",
        "",
        "Wall = the whole `airflow dags test` process (Airflow start-up and DAG parsing included), "
        "local[*] Spark. Verified = every remote partition's end offset equals its source partition's "
        "(records are not read back). Skipped = plan logged `Condition result is False` (short "
        "circuit), no `[DAG TEST] starting task_id=copy` line in the log and no java process with "
        "SparkSubmit in its cmdline under `airflow` in any 0.2 s sample.",
    ]
    return res


def _tasks(tasks: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:.1f}" for k, v in tasks.items()) or "n/a"


# --------------------------------------------------------------------------------------- memory


def memory(opts: Options) -> ScenarioResult:
    res = ScenarioResult("memory")
    sizes = {"1x": opts.records, "4x": 4 * opts.records}
    topics = {k: [f"mem{k}-orders", f"mem{k}-payments"] for k in sizes}
    runs: dict[str, DagRun] = {}
    problems: dict[str, list[str]] = {}
    cap = -(-sizes["4x"] // (2 * PARTITIONS)) + 1  # every backlog is copied whole in one run
    res.data = {"records": sizes, "max_records_per_partition": cap, "runs": {}}
    source = start("source", opts.work / "kafka" / "source", opts.heap_mb)
    try:
        src: dict[str, dict[tuple[str, int], int | None]] = {}
        for k, n in sizes.items():
            create_topics(source.bootstrap, topics[k])
            rate = produce(source.bootstrap, topics[k], n, W1)
            src[k] = partition_ends(source.bootstrap, topics[k], PARTITIONS)
            print(f"memory: W1 {k} = {n:,} records produced at {rate:,.0f} records/s", flush=True)
        target = start("target", opts.work / "kafka" / "target", opts.heap_mb)
        try:
            logs = opts.work / "logs"
            env: dict[str, str] | None = None
            for k in sizes:
                state = opts.work / f"state-{k}"
                config = opts.work / f"mm2-memory-{k}.properties"
                config.write_text(
                    flow_properties(source.bootstrap, target.bootstrap, f"mem{k}-.*", state, cap, W1.producer)
                )
                if env is None:
                    env = prepare_airflow(opts.work / "airflow", config, state, logs)
                env = {**env, "MIRROR_CONFIG": str(config), "MIRROR_STATE_DIR": str(state)}
                run = dags_test(env, logs / f"airflow-dags-test-{k}.out", opts.timeout)
                runs[k] = run
                dst = partition_ends(target.bootstrap, [f"source.{t}" for t in topics[k]], PARTITIONS)
                problems[k] = compare_counts(src[k], dst)
                print(
                    f"memory {k}: rc {run.rc}, {run.wall_s:.1f} s, peak Spark RSS "
                    f"{run.rss.peak_total / MIB:,.0f} MiB",
                    flush=True,
                )
        finally:
            local_kafka.stop_cluster(target)
    finally:
        local_kafka.stop_cluster(source)

    ok = True
    lines = [
        f"## memory: peak RSS of the Spark copy, W1 backlog {sizes['1x']:,} vs {sizes['4x']:,} records",
        "",
        "| backlog | records | wall s | copy task s | peak Spark RSS MiB | of which SparkSubmit JVM | "
        "processes | samples | verified |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for k, run in runs.items():
        verified = "yes (end offsets)" if not problems[k] else f"no ({len(problems[k])} partitions differ)"
        ok = ok and run.rc == 0 and not problems[k] and run.copy_ran and run.rss.spark_samples > 0
        res.detail.extend(problems[k][:10])
        if run.rc != 0:
            res.detail.append(f"{k} run failed (rc {run.rc}); see {run.log}")
        copy_s = run.tasks.get("copy")
        lines.append(
            f"| {k} | {sizes[k]:,} | {run.wall_s:.1f} | {'n/a' if copy_s is None else f'{copy_s:.1f}'} | "
            f"{run.rss.peak_total / MIB:,.0f} | {run.rss.peak_jvm / MIB:,.0f} | {run.rss.peak_processes} | "
            f"{run.rss.spark_samples} | {verified} |"
        )
        res.data["runs"][k] = {
            "rc": run.rc,
            "wall_s": run.wall_s,
            "tasks_s": run.tasks,
            "copy_task_ran": run.copy_ran,
            "spark": run.rss.as_dict(),
            "partitions_mismatched": len(problems[k]),
        }
    peaks = [runs[k].rss.peak_total for k in sizes if k in runs]
    ratio = peaks[1] / peaks[0] if len(peaks) == 2 and peaks[0] else None
    res.data["peak_ratio_4x_over_1x"] = ratio
    res.data["within_20_percent"] = None if ratio is None else ratio <= 1.2
    verdict = "n/a" if ratio is None else ("met" if ratio <= 1.2 else "NOT met")
    lines += [
        "",
        f"Peak RSS 4x / 1x: {'n/a' if ratio is None else f'{ratio:.2f}'} "
        f"(target: within 20%, i.e. <= 1.20: {verdict}).",
        "",
        f"Sampled every {SAMPLE_INTERVAL_S} s with psutil during each `airflow dags test`: among all "
        "descendants of the `airflow` process, each `java` process with SparkSubmit in its cmdline and "
        "all of its descendants (the PySpark driver script and Python workers); the sum of their RSS per "
        "sample, peak over the run. The Airflow processes themselves are not counted. RSS counts pages "
        "shared between processes (e.g. forked pyspark.daemon workers) once per process. Spark local[*] "
        f"(the default `spark_default`); both runs use mirrorflow.max.records.per.partition = {cap:,}, "
        "so each backlog is copied whole in one run. Verified = end offsets per partition.",
    ]
    res.ok = ok
    res.markdown = lines
    return res


SCENARIOS: dict[str, Callable[[Options], ScenarioResult]] = {
    "scale-topics": scale_topics,
    "memory": memory,
}
