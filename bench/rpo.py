"""The rpo scenario of bench/run.py (``--scenarios rpo``): how much a DR owner would lose right now.

For each --rpo-rates rate and each contender (MirrorMaker 2 in dedicated mode; mirrorflow in DR mode as
users deploy it, ``ours-scheduler``: `airflow standalone` with the flow's DAG unpaused, windows of
--rpo-window-seconds handing the flow over to the next; and ``ours``: one window through `airflow dags
test`), on a fresh source and target cluster of its own:

1. topic ``rpo`` (12 partitions) on the source; the contender starts; one warm-up record per
   partition must reach the target (so start-up is not counted);
2. a producer writes ``rate`` records/s (16-byte key, 1 KiB value whose first 8 bytes are the
   record's sequence number in its partition) for --rpo-seconds, each stamped with the time of its
   produce call; a consumer group on the source commits the produced positions every second;
3. a consumer on the target reads ``source.rpo`` as it grows: for every record, produce-to-readable
   latency (the time it is read on the target minus its timestamp), and duplicates (a sequence
   number seen twice), reorders (one that arrives after a higher one) and, after a drain of up to
   60 s, lost records (produced, never seen);
4. every second, the age of the newest heartbeat in the target's ``heartbeats`` and of the newest
   checkpoint in ``source.checkpoints.internal``: what a consumer failing over would see;
5. the backlog (produced minus seen) every second: a contender keeps up when it does not grow;
6. for ours-scheduler, who holds the flow's lock, looked at every 0.1 s in the offsets database: each
   handover's time, and the longest any record produced within 5 s of it waited to be readable.

For mirrorflow, the window's own progress lines (seconds per step) say where a micro-batch's time goes.
Every process is stopped by PID (the `airflow` process group), also on failure.
"""

from __future__ import annotations

import itertools
import math
import os
import re
import statistics
import subprocess
import threading
import time
import urllib.error
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from contenders import AIRFLOW, flow_properties, java_cmd
from footprint import Footprint, memory_table
from scenarios import Options, ScenarioResult, prepare_airflow, start
from workload import create_topics

from mirrorflow.errors import TransientError
from mirrorflow.store.flow_lock import lock_holder
from mirrorflow.store.offsets_store import OffsetsStore
from mirrorflow_dev import local_kafka
from mirrorflow_dev.local_airflow import LocalAirflow
from mirrorflow_dev.processes import free_port, start_logged, stop_process

TOPIC = "rpo"
PARTITIONS = 12
VALUE_BYTES = 1024
WARM_UP_TIMEOUT_S = 300.0
DRAIN_TIMEOUT_S = 60.0
GROUP = "rpo-consumers"
_PROGRESS = re.compile(
    r"last (\d+) s: (\d+) micro-batches, (\d+) records, lag (\d+); "
    r"seconds in ([a-z]+ [\d.]+(?:, [a-z]+ [\d.]+)*)"
)


@dataclass
class Watch:
    """What the target's consumer saw: first-sighting latencies (ms), per partition the sequence
    numbers seen, duplicates and reorders; ages and backlog sampled each second."""

    latencies_ms: list[float] = field(default_factory=list)
    # (produce time in s since the epoch, latency in ms) of every measured record.
    timed: list[tuple[float, float]] = field(default_factory=list)
    seen: list[set[int]] = field(default_factory=lambda: [set() for _ in range(PARTITIONS)])
    highest: list[int] = field(default_factory=lambda: [-1] * PARTITIONS)
    duplicates: int = 0
    reordered: int = 0
    # One sample a second each, None while the topic has no record yet.
    heartbeat_ages: list[float | None] = field(default_factory=list)
    checkpoint_ages: list[float | None] = field(default_factory=list)
    backlog: list[int] = field(default_factory=list)

    def count(self) -> int:
        return sum(len(s) for s in self.seen)


def _consumer(bootstrap: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-rpo-watch",
            "enable.auto.commit": "false",
            "fetch.wait.max.ms": "10",
            "fetch.min.bytes": "1",
            # A topic created after the consumer first looked (a contender's checkpoints topic) is
            # otherwise unknown to it for librdkafka's default 5 minutes.
            "topic.metadata.refresh.interval.ms": "1000",
        }
    )


def _read_target(
    bootstrap: str, remote: str, watch: Watch, measured_from: list[int], stop: threading.Event
) -> None:
    """Reads ``remote`` from its start until ``stop``; latencies only for records with a sequence
    number at or above ``measured_from`` of their partition (the warm-up ones are not)."""
    consumer = _consumer(bootstrap)
    try:
        while remote not in consumer.list_topics(timeout=10).topics and not stop.is_set():
            time.sleep(0.1)
        consumer.assign([TopicPartition(remote, p, 0) for p in range(PARTITIONS)])
        while not stop.is_set():
            for msg in consumer.consume(1000, 0.1):
                if msg.error() is not None:
                    continue
                now_ms = time.time() * 1000
                p, seq = msg.partition() or 0, int.from_bytes((msg.value() or b"")[:8], "big")
                if seq in watch.seen[p]:
                    watch.duplicates += 1
                    continue
                if seq < watch.highest[p]:
                    watch.reordered += 1
                watch.seen[p].add(seq)
                watch.highest[p] = max(watch.highest[p], seq)
                if seq >= measured_from[p]:
                    watch.latencies_ms.append(now_ms - msg.timestamp()[1])
                    watch.timed.append((msg.timestamp()[1] / 1000, now_ms - msg.timestamp()[1]))
    finally:
        consumer.close()


def _newest_age(consumer: Consumer, topic: str) -> float | None:
    """Seconds since the timestamp of the newest record of ``topic``-0, None if it has none."""
    try:
        high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=5, cached=False)[1]
    except KafkaException:
        return None
    if high <= 0:
        return None
    consumer.assign([TopicPartition(topic, 0, high - 1)])
    msg = consumer.poll(5)
    if msg is None or msg.error() is not None:
        return None
    return time.time() - msg.timestamp()[1] / 1000


def _sample_ages(
    bootstrap: str, alias: str, watch: Watch, produced: Callable[[], int], stop: threading.Event
) -> None:
    consumer = _consumer(bootstrap)
    try:
        while not stop.wait(1.0):
            watch.backlog.append(produced() - watch.count())
            watch.heartbeat_ages.append(_newest_age(consumer, "heartbeats"))
            watch.checkpoint_ages.append(_newest_age(consumer, f"{alias}.checkpoints.internal"))
    finally:
        consumer.close()


class RateProducer:
    """``rate`` records/s round-robin over the partitions of ``topic``, timestamped at the produce
    call; ``settings`` adds to (or overrides) the producer's."""

    def __init__(
        self,
        bootstrap: str,
        topic: str = TOPIC,
        partitions: int = PARTITIONS,
        settings: Mapping[str, str] | None = None,
    ) -> None:
        self.topic = topic
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "enable.idempotence": "true",
                "linger.ms": "5",
                "acks": "all",
                **(settings or {}),
            }
        )
        self.next_seq = [0] * partitions
        self.padding = os.urandom(VALUE_BYTES - 8)
        self.key = os.urandom(16)

    def one(self, partition: int) -> None:
        seq = self.next_seq[partition]
        while True:
            try:
                self.producer.produce(
                    self.topic,
                    key=self.key,
                    value=seq.to_bytes(8, "big") + self.padding,
                    partition=partition,
                    timestamp=int(time.time() * 1000),
                )
                break
            except BufferError:
                self.producer.poll(0.01)
        self.next_seq[partition] = seq + 1

    def run(self, rate: int, seconds: float, stop: threading.Event | None = None) -> None:
        """``rate`` records/s for ``seconds`` or until ``stop`` is set, then every record delivered."""
        start, sent = time.monotonic(), 0
        while (elapsed := time.monotonic() - start) < seconds and not (stop and stop.is_set()):
            while sent < rate * elapsed:
                self.one(sent % len(self.next_seq))
                sent += 1
            self.producer.poll(0)
            time.sleep(0.005)
        if self.producer.flush(60):
            raise RuntimeError(f"{self.topic} records were not all delivered")

    def commit_positions(self, consumer: Consumer) -> None:
        consumer.commit(
            offsets=[TopicPartition(self.topic, p, n) for p, n in enumerate(self.next_seq) if n],
            asynchronous=False,
        )


@contextmanager
def _running(target: Callable[..., None], *args: Any) -> Iterator[threading.Event]:
    stop = threading.Event()
    thread = threading.Thread(target=target, args=(*args, stop), daemon=True)
    thread.start()
    try:
        yield stop
    finally:
        stop.set()
        thread.join(30)


def measure(
    source: str,
    target: str,
    rate: int,
    seconds: float,
    handovers: Callable[[], list[float]] = list,
    root_pid: int | None = None,
    alias: str = "source",
    watch: Watch | None = None,
) -> dict[str, Any]:
    """Steps 1-5 (and 6, with ``handovers``: the times, s since the epoch, the flow changed hands) of
    the module's doc for the flow from the cluster ``alias`` at ``source``, with the contender already
    started; with ``root_pid``, the memory of the contender's processes under it while the producer
    runs (``footprint``). ``watch``: where what the target's consumer sees goes, for the caller to
    read as it fills and after."""
    watch, producer = watch or Watch(), RateProducer(source)
    measured_from = [1] * PARTITIONS  # sequence 0 of each partition is its warm-up record
    group = Consumer({"bootstrap.servers": source, "group.id": GROUP, "enable.auto.commit": "false"})
    with (
        _running(_read_target, target, f"{alias}.{TOPIC}", watch, measured_from),
        _running(_sample_ages, target, alias, watch, lambda: sum(producer.next_seq)),
    ):
        for p in range(PARTITIONS):
            producer.one(p)
        producer.producer.flush(30)
        deadline = time.monotonic() + WARM_UP_TIMEOUT_S
        while watch.count() < PARTITIONS:
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"the warm-up records did not reach the target in {WARM_UP_TIMEOUT_S:.0f} s"
                )
            time.sleep(0.1)
        warm_at, load_from = len(watch.backlog), time.time()
        with Footprint(root_pid) as footprint, _running(_commit_every_second, producer, group):
            producer.run(rate, seconds)
        produced_at = len(watch.backlog)
        deadline = time.monotonic() + DRAIN_TIMEOUT_S
        while watch.count() < sum(producer.next_seq) and time.monotonic() < deadline:
            time.sleep(0.1)
    group.close()
    produced = sum(producer.next_seq)
    lat = sorted(watch.latencies_ms)
    handed_over = handovers()
    backlog = watch.backlog[warm_at:produced_at]
    tenth = max(len(backlog) // 10, 1)
    return {
        "rate": rate,
        "seconds": seconds,
        "produced": produced,
        "lost": produced - watch.count(),
        "duplicated": watch.duplicates,
        "reordered": watch.reordered,
        "latency_p50_s": _quantile(lat, 0.50),
        "latency_p99_s": _quantile(lat, 0.99),
        "latency_max_s": lat[-1] / 1000 if lat else None,
        "heartbeat_age_max_s": _max(watch.heartbeat_ages[warm_at:produced_at]),
        # From the first checkpoint on: before it, there is none to be old.
        "checkpoint_age_max_s": _max(watch.checkpoint_ages[warm_at:produced_at]),
        "backlog_first_tenth": statistics.mean(backlog[:tenth]) if backlog else None,
        "backlog_last_tenth": statistics.mean(backlog[-tenth:]) if backlog else None,
        "backlog_max": max(backlog, default=None),
        "handover_waits_s": [_longest_wait(watch, at) for at in handed_over],
        # Where the tail comes from: the seconds into the load each handover came at, and the
        # longest wait of the records produced in each 10 s of it.
        "handovers_at_s": [round(at - load_from, 1) for at in handed_over],
        "longest_wait_by_10s_s": _longest_waits(watch, load_from, seconds, 10.0),
        "footprint_mib": footprint.summary(),
    }


def _longest_waits(watch: Watch, start: float, seconds: float, span: float) -> list[float | None]:
    """The longest any record produced in each ``span`` of ``seconds`` from ``start`` waited."""
    longest: list[float | None] = [None] * math.ceil(seconds / span)
    for produced, ms in watch.timed:
        i = int((produced - start) // span)
        if 0 <= i < len(longest):
            longest[i] = max(longest[i] or 0.0, round(ms / 1000, 2))
    return longest


def _longest_wait(watch: Watch, at: float) -> float | None:
    """The longest any record produced within 5 s of ``at`` waited to be readable on the target."""
    waits = [ms for produced, ms in watch.timed if abs(produced - at) <= 5.0]
    return max(waits) / 1000 if waits else None


def _commit_every_second(producer: RateProducer, group: Consumer, stop: threading.Event) -> None:
    while not stop.wait(1.0):
        try:
            producer.commit_positions(group)
        except KafkaException:
            continue  # the coordinator may still be loading: the next second tries again


def _max(samples: list[float | None]) -> float | None:
    return max((s for s in samples if s is not None), default=None)


def _quantile(sorted_ms: list[float], q: float) -> float | None:
    if not sorted_ms:
        return None
    return sorted_ms[min(int(q * len(sorted_ms)), len(sorted_ms) - 1)] / 1000


def mm2_properties(sources: Mapping[str, str], target: str) -> str:
    """MM2's config for a flow from each of ``sources`` (alias: bootstrap) into ``target``: heartbeats
    only where a flow is (MM2 would otherwise emit them between every two clusters)."""
    return (
        "\n".join(
            [
                f"clusters = {', '.join(sources)}, target",
                *(f"{alias}.bootstrap.servers = {bootstrap}" for alias, bootstrap in sources.items()),
                f"target.bootstrap.servers = {target}",
                "emit.heartbeats.enabled = false",
                *(
                    line
                    for alias in sources
                    for line in (
                        f"{alias}->target.enabled = true",
                        f"{alias}->target.topics = {TOPIC}",
                        f"{alias}->target.emit.heartbeats.enabled = true",
                    )
                ),
                "tasks.max = 2",
                *(
                    f"{k}.replication.factor = 1"
                    for k in (
                        "checkpoints.topic",
                        "heartbeats.topic",
                        "offset-syncs.topic",
                        "offset.storage",
                        "status.storage",
                        "config.storage",
                    )
                ),
                "replication.factor = 1",
                # MM2 looks for new consumer groups every 10 minutes by default: the bench's group is new.
                "refresh.groups.interval.seconds = 10",
                "sync.topic.acls.enabled = false",
            ]
        )
        + "\n"
    )


def dr_flow_properties(
    source: str, target: str, state: Path, window_s: int, handover_wait_s: int, topics: str = TOPIC
) -> str:
    """mm2.properties of the DR flow source->target of ``topics`` (``rpo``), windows of ``window_s``."""
    flow: str = flow_properties(source, target, topics, state, 1_000_000, {})
    return flow + (
        f"source->target.mirrorflow.mode = dr\nsource->target.mirrorflow.dr.window.seconds = {window_s}\n"
        f"source->target.mirrorflow.dr.handover.wait.seconds = {handover_wait_s}\n"
    )


def _run_contender(
    name: str, opts: Options, work: Path, source: str, target: str, rate: int
) -> dict[str, Any]:
    logs = work / "logs"
    if name == "mm2":
        proc, group = start_mm2(work, opts.heap_mb, {"source": source}, target), False
    elif name == "ours-scheduler":
        return _under_the_scheduler(opts, work, source, target, rate)
    else:
        config, state = work / "mm2-ours.properties", work / "state"
        window = int(WARM_UP_TIMEOUT_S + opts.rpo_seconds + DRAIN_TIMEOUT_S)
        config.write_text(dr_flow_properties(source, target, state, window, handover_wait_s=0))
        env = prepare_airflow(work / "airflow", config, state, logs)
        proc, group = (
            start_logged([AIRFLOW, "dags", "test", "mirror_source_to_target"], logs / "dags-test.out", env),
            True,
        )
    try:
        out = measure(source, target, rate, opts.rpo_seconds, root_pid=proc.pid)
    finally:
        stop_process(proc, group=group)
    if name == "ours":
        out["seconds_per_step"] = _progress(logs / "dags-test.out")
    return out


def _under_the_scheduler(opts: Options, work: Path, source: str, target: str, rate: int) -> dict[str, Any]:
    """Our DR flow as the README tells users to run it: `airflow standalone`, the DAG unpaused, a
    window every --rpo-window-seconds handing the flow over to the next."""
    config, state = work / "mm2-ours.properties", work / "state"
    config.write_text(dr_flow_properties(source, target, state, opts.rpo_window_seconds, handover_wait_s=600))
    with (
        scheduler(work, config, state, ["source"]) as airflow,
        holders(f"sqlite:///{state / 'offsets.db'}") as changes,
    ):
        out = measure(source, target, rate, opts.rpo_seconds, lambda: lock_handovers(changes), airflow.pid)
    out["window_seconds"] = opts.rpo_window_seconds
    return out


def start_mm2(work: Path, heap_mb: int, sources: Mapping[str, str], target: str) -> subprocess.Popen[bytes]:
    """MM2 in dedicated mode mirroring each of ``sources`` into ``target`` (``mm2_properties``)."""
    config = work / "mm2.properties"
    config.write_text(mm2_properties(sources, target))
    cmd = java_cmd(work, heap_mb, "mm2", "org.apache.kafka.connect.mirror.MirrorMaker", str(config))
    return start_logged(cmd, work / "logs" / "mm2.out")


@contextmanager
def scheduler(work: Path, config: Path, state: Path, sources: Sequence[str]) -> Iterator[LocalAirflow]:
    """`airflow standalone` on ``config`` with the DAG of each flow from ``sources`` into ``target``
    unpaused, stopped when the block ends."""
    airflow = LocalAirflow(work / "airflow", config, state, free_port())
    airflow.env["SPARK_LOCAL_IP"] = "127.0.0.1"
    airflow.start(timeout=600)
    try:
        for alias in sources:
            unpause(airflow, f"mirror_{alias}_to_target")
        yield airflow
    finally:
        airflow.stop()


def unpause(airflow: LocalAirflow, dag_id: str, timeout: float = 180.0) -> None:
    """Once the DAG processor has parsed the DAG (new DAGs start paused)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            airflow.api("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})
            return
        except urllib.error.HTTPError as exc:
            if exc.code != 404 or time.monotonic() > deadline:
                raise
        time.sleep(1)


@contextmanager
def holders(db_url: str, flow: str = "source->target") -> Iterator[list[tuple[float, str | None]]]:
    """Who holds ``flow``'s lock, every 0.1 s: (time since the epoch, run id) at each change."""
    changes: list[tuple[float, str | None]] = []
    stop = threading.Event()

    def watch() -> None:
        with OffsetsStore(db_url) as store:
            while not stop.wait(0.1):
                try:
                    holder = lock_holder(store, flow)
                except TransientError:
                    continue  # the database not created yet, or busy
                if not changes or changes[-1][1] != holder:
                    changes.append((time.time(), holder))

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    try:
        yield changes
    finally:
        stop.set()
        thread.join(30)


def lock_handovers(changes: list[tuple[float, str | None]]) -> list[float]:
    """When the lock passed from one window straight to another."""
    return [at for (_, before), (at, run) in itertools.pairwise(changes) if run and before]


def _progress(log: Path) -> list[dict[str, Any]]:
    """The DR window's progress lines: per minute, micro-batches, records and seconds per step."""
    found = []
    for line in log.read_text(errors="replace").splitlines():
        m = _PROGRESS.search(line)
        if m:
            steps = dict(part.rsplit(" ", 1) for part in m.group(5).split(", "))
            found.append(
                {
                    "seconds": int(m.group(1)),
                    "micro_batches": int(m.group(2)),
                    "records": int(m.group(3)),
                    "steps": {k: float(v) for k, v in steps.items()},
                }
            )
    return found


def rpo(opts: Options) -> ScenarioResult:
    res = ScenarioResult("rpo")
    rows: list[dict[str, Any]] = []
    for rate in opts.rpo_rates:
        for name in opts.rpo_contenders:
            work = opts.work / f"{name}-{rate}"
            src = start("source", work / "kafka-source", opts.heap_mb)
            dst = start("target", work / "kafka-target", opts.heap_mb)
            try:
                create_topics(src.bootstrap, [TOPIC], PARTITIONS)
                print(f"  rpo: {name} at {rate:,} records/s for {opts.rpo_seconds:.0f} s", flush=True)
                row = {
                    "contender": name,
                    **_run_contender(name, opts, work, src.bootstrap, dst.bootstrap, rate),
                }
            except Exception as exc:
                row = {"contender": name, "rate": rate, "failed": f"{type(exc).__name__}: {exc}"}
                res.detail.append(f"{name} at {rate}: failed: {exc}; logs in {work / 'logs'}")
            finally:
                local_kafka.stop_cluster(dst)
                local_kafka.stop_cluster(src)
            print(f"  {row}", flush=True)
            rows.append(row)
    res.data["runs"] = rows
    res.ok = all("failed" not in r and r["lost"] == r["duplicated"] == r["reordered"] == 0 for r in rows)
    res.markdown = _table(rows, opts)
    return res


def fmt(value: Any, spec: str = ".2f") -> str:
    return "n/a" if value is None else format(value, spec)


def flow_cells(measured: Mapping[str, Any]) -> list[str]:
    """A flow's ``measure`` as table cells: p50, p99 and max latency, lost, duplicated, reordered,
    backlog in the first / last tenth."""
    m = measured
    return [
        *(fmt(m[k]) for k in ("latency_p50_s", "latency_p99_s", "latency_max_s")),
        *(str(m[k]) for k in ("lost", "duplicated", "reordered")),
        f"{fmt(m['backlog_first_tenth'], '.0f')} / {fmt(m['backlog_last_tenth'], '.0f')}",
    ]


def handover_cell(measured: Mapping[str, Any]) -> str:
    return ", ".join(fmt(w) for w in measured["handover_waits_s"]) or "-"


def _table(rows: list[dict[str, Any]], opts: Options) -> list[str]:
    lines = [
        f"## rpo: produce-to-readable latency on the target, {PARTITIONS} partitions, 1 KiB records, "
        f"{opts.rpo_seconds:.0f} s per run",
        "",
        "| contender | rate rec/s | p50 s | p99 s | max s | lost | dup | reordered "
        "| backlog first/last tenth | heartbeat age max s | checkpoint age max s "
        "| handovers: longest wait of a record around each, s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        if "failed" in r:
            lines.append(f"| {r['contender']} | {r['rate']:,} | failed: {r['failed']} ||||||||||")
            continue
        ages = [fmt(r["heartbeat_age_max_s"], ".1f"), fmt(r["checkpoint_age_max_s"], ".1f")]
        cells = [r["contender"], f"{r['rate']:,}", *flow_cells(r)]
        lines.append(f"| {' | '.join([*cells, *ages, handover_cell(r)])} |")
    lines += memory_table(
        "the producer",
        ("contender", "rate rec/s"),
        [((r["contender"], f"{r['rate']:,}"), r.get("footprint_mib", {})) for r in rows],
    )
    return lines
