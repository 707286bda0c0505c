"""The txn-log scenario of bench/run.py (``--scenarios txn-log``): a DR flow whose source commits a
transaction every 100 ms keeps a batch log bounded by the source's retention.

Every source transaction leaves a commit marker in each partition it wrote, an offset without a
record: a sync point of the batch log (about 860,000 a day per partition at 10 transactions a
second). On a fresh source and target cluster:

1. topic ``txn`` (12 partitions) on the source, kept 5 minutes (``retention.ms``) in one-minute
   segments, retention enforced every 30 s, so its log start moves on as the scenario runs; a
   transactional producer commits a transaction every 100 ms with one 1 KiB record per partition;
   a consumer group reads it (read_committed) and commits its position every second, so that every
   checkpoint pass has positions to translate;
2. a DR-mode flow (checkpoints every 5 s) runs windows back to back, each one `airflow dags test`
   process waited for, for --txn-minutes; after each window: the batch log's rows and the sync
   points they hold, the pruned partitions (``mirror_pruned``), the offsets database's size, and the
   seconds the window spent on checkpoints (its summary's step times) per pass.

It is ok when no window failed and the sync points the batch log holds at the end are no more than
1.5 times what it held at the end of the scenario's first half: past the retention, pruning keeps
them flat while the source adds the same number every minute.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic
from scenarios import Options, ScenarioResult, prepare_airflow, start
from soak import MIB, Window, _db_bytes, _run_window, dr_properties

from mirrorflow_dev import local_kafka

TOPIC = "txn"
PARTITIONS = 12
TXN_EVERY_S = 0.1
RETENTION_MS = 300_000
SEGMENT_MS = 60_000
CHECKPOINT_EVERY_S = 5
VALUE = b"x" * 1024


@dataclass
class Sample:
    """The offsets database after one window."""

    window: int
    minutes: float
    # Commit markers the source's transactions left so far, one per partition each: the sync points
    # a batch log that is never pruned would hold.
    source_markers: int
    batch_rows: int
    sync_points: int
    pruned_partitions: int
    db_bytes: int
    checkpoint_s_per_pass: float
    failed: str | None


def _create_topic(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    configs = {"retention.ms": str(RETENTION_MS), "segment.ms": str(SEGMENT_MS)}
    for future in admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1, config=configs)]).values():
        future.result(timeout=60)


@contextmanager
def _transactions(bootstrap: str) -> Iterator[list[int]]:
    """A transaction every ``TXN_EVERY_S`` with a record per partition, and a group reading the
    topic that commits every second, until the block ends; yields the count of transactions."""
    stop, count, errors = threading.Event(), [0], []
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "txn-log", "linger.ms": "5"})
    producer.init_transactions(30)

    def produce() -> None:
        try:
            while not stop.is_set():
                due = time.monotonic() + TXN_EVERY_S
                producer.begin_transaction()
                for partition in range(PARTITIONS):
                    producer.produce(TOPIC, VALUE, partition=partition)
                producer.commit_transaction(30)
                count[0] += 1
                time.sleep(max(0.0, due - time.monotonic()))
        except BaseException as exc:
            errors.append(exc)

    def consume() -> None:
        consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "txn-log-readers",
                "isolation.level": "read_committed",
                "auto.offset.reset": "earliest",
                "auto.commit.interval.ms": "1000",
            }
        )
        consumer.subscribe([TOPIC])
        try:
            while not stop.is_set():
                consumer.poll(0.2)
        finally:
            consumer.close()

    threads = [threading.Thread(target=produce, daemon=True), threading.Thread(target=consume, daemon=True)]
    for thread in threads:
        thread.start()
    try:
        yield count
    finally:
        stop.set()
        for thread in threads:
            thread.join(60)
    if errors:
        raise errors[0]


def _log(db: Path) -> tuple[int, int, int]:
    """Batch-log rows, the sync points they hold, and pruned partitions (read-only)."""
    conn = sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True)
    try:
        points = [r[0] for r in conn.execute("SELECT sync_points FROM mirror_batches")]
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        pruned = (
            conn.execute("SELECT COUNT(*) FROM mirror_pruned").fetchone()[0]
            if "mirror_pruned" in tables
            else 0
        )
        return len(points), sum(len(json.loads(p)) for p in points), int(pruned)
    finally:
        conn.close()


def txn_log(opts: Options) -> ScenarioResult:
    minutes = opts.txn_minutes
    res = ScenarioResult(f"txn-log ({minutes} minutes)")
    work, logs = opts.work, opts.work / "logs"
    state, config, db = work / "state", work / "mm2-txn.properties", work / "state" / "offsets.db"
    samples: list[Sample] = []
    # Retention is enforced every 30 s, not every 5 minutes: the log start follows the retention closely.
    src = start("source", work / "kafka-source", opts.heap_mb, {"log.retention.check.interval.ms": "30000"})
    try:
        dst = start("target", work / "kafka-target", opts.heap_mb)
        try:
            _create_topic(src.bootstrap)
            more = {"emit.checkpoints.interval.seconds": CHECKPOINT_EVERY_S}
            config.write_text(
                dr_properties(src.bootstrap, dst.bootstrap, state, db, opts.soak_window_seconds, TOPIC, more)
            )
            env = prepare_airflow(work / "airflow", config, state, logs)
            env.pop("MIRROR_OFFSETS_DB_URL", None)  # it would win over the config's database
            print(
                f"  txn-log: a transaction every {TXN_EVERY_S * 1000:.0f} ms for {minutes} minutes",
                flush=True,
            )
            started = time.monotonic()
            with _transactions(src.bootstrap) as transactions:
                while time.monotonic() - started < minutes * 60:
                    window: Window = _run_window(env, logs, state, len(samples) + 1, opts.soak_window_seconds)
                    rows, points, pruned = _log(db)
                    samples.append(
                        Sample(
                            window.index,
                            (time.monotonic() - started) / 60,
                            transactions[0] * PARTITIONS,
                            rows,
                            points,
                            pruned,
                            _db_bytes(db),
                            # The window's checkpoint time over the passes it made.
                            window.step_seconds.get("checkpoints", 0.0)
                            / max(1, opts.soak_window_seconds // CHECKPOINT_EVERY_S),
                            window.error if window.failed else None,
                        )
                    )
                    print(f"  txn-log window {window.index}: {asdict(samples[-1])}", flush=True)
                    if window.failed:
                        break
        finally:
            local_kafka.stop_cluster(dst)
    finally:
        local_kafka.stop_cluster(src)
    half = [s for s in samples if s.minutes <= minutes / 2]
    failed = [s for s in samples if s.failed]
    flat = bool(half) and samples[-1].sync_points <= 1.5 * half[-1].sync_points
    res.ok = not failed and flat
    res.detail.extend(f"window {s.window} failed: {s.failed}" for s in failed)
    if not flat:
        res.detail.append("the batch log's sync points kept growing past the source's retention")
    res.data = {"transactions": transactions[0], "samples": [asdict(s) for s in samples]}
    res.markdown = _table(samples, transactions[0], opts.soak_window_seconds)
    return res


def _table(samples: list[Sample], transactions: int, window_s: int) -> list[str]:
    lines = [
        f"## txn-log: a source transaction every {TXN_EVERY_S * 1000:.0f} ms on {PARTITIONS} partitions "
        f"(retention {RETENTION_MS // 60_000} min), DR windows of {window_s} s, checkpoints every "
        f"{CHECKPOINT_EVERY_S} s",
        "",
        "| window | minutes | source markers | batch-log rows | sync points held | pruned partitions "
        "| checkpoint pass s | offsets DB MiB |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
        *(
            f"| {s.window} | {s.minutes:.1f} | {s.source_markers:,} | {s.batch_rows} | {s.sync_points:,} | "
            f"{s.pruned_partitions} | {s.checkpoint_s_per_pass:.3f} | {s.db_bytes / MIB:.2f} |"
            for s in samples
        ),
        "",
        f"{transactions:,} source transactions. Source markers: the commit markers the source's "
        "transactions left so far (one per partition each), what an unpruned batch log would hold as sync "
        "points; sync points held: the batch log's, read after each window.",
    ]
    return lines
