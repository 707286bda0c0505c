"""The soak scenario of bench/run.py (``--scenarios soak``): a flow in DR mode keeps bounded state.

On a fresh source and target cluster:

1. topic ``soak`` (12 partitions) on the source; a producer thread (rpo's ``RateProducer``: idempotent,
   one request in flight, 16-byte key, 1 KiB value) writes --soak-rate records/s round-robin over
   the partitions for the whole scenario;
2. a DR-mode flow (window --soak-window-seconds, idle wait 50 ms, no task retries, so a failed window
   shows) runs windows back to back, each one `airflow dags test` process waited for (at most window +
   300 s), until the micro-batches of their summaries (``window.json`` in each window's run folder) add
   up to --soak-micro-batches; after each window the offsets database's row counts are taken;
3. the producer stops and one last window mirrors the rest: the target's ``source.soak`` must hold
   exactly the source's records, per partition the same count and order-sensitive sha256 over key,
   value, headers and timestamp (every record read on both sides);
4. the state left: rows per table of the SQLite offsets database (read-only) and its size, the state
   folder's run folders, files and bytes, against the bounds of README's "What a flow keeps":
   ``mirror_batches`` <= 13 partitions (12 + ``heartbeats``) x (1 + gap rows + 2 x micro-batches /
   ``ROW_POINTS_MAX``), run folders <= 100,
   ``mirror_recovery_history`` <= elapsed minutes + 2, ``mirror_partition_metrics`` <= (elapsed minutes
   + windows + 2) x 13.

It proves that what a DR flow keeps grows with time and windows, and its batch log by a row per
``ROW_POINTS_MAX`` micro-batches at most, until pruned at the source's log start: the scenario
is ok only if every bound holds, the copy is exact and no window failed. Every process is stopped by
PID (the `airflow` process group), also on failure.
"""

from __future__ import annotations

import math
import sqlite3
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from contenders import AIRFLOW, flow_properties, start_logged, stop_process
from rpo import RateProducer
from scenarios import Options, ScenarioResult, prepare_airflow, start
from workload import compare, create_topics, fingerprint

from mirrorflow.core.window import WindowSummary
from mirrorflow.errors import MirrorError
from mirrorflow.store.offsets_store import ROW_POINTS_MAX, OffsetsStore
from mirrorflow.store.run_documents import RUNS_KEPT, recent_documents
from mirrorflow_dev import local_kafka

TOPIC = "soak"
REMOTE = f"source.{TOPIC}"
PARTITIONS = 12
MIRRORED_PARTITIONS = PARTITIONS + 1  # and the source's single-partition ``heartbeats``
FLOW = "source->target"
DAG_ID = "mirror_source_to_target"
IDLE_WAIT_MS = 50
WINDOW_GRACE_S = 300  # a window's `airflow dags test` may take this long besides the window itself
PRODUCER_SETTINGS = {"max.in.flight": "1"}
MIB = 2**20


@dataclass
class Window:
    """One window's `airflow dags test`: its exit code, wall time, and its summary's counts."""

    index: int
    rc: int
    wall_s: float
    log: str
    micro_batches: int = 0
    spark_copies: int = 0
    records: int = 0
    error: str | None = None
    rows_after: dict[str, int] = field(default_factory=dict)
    # Seconds the window spent in each step, from its summary.
    step_seconds: dict[str, float] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return self.rc != 0 or self.error is not None


@dataclass(frozen=True)
class Bound:
    what: str
    value: int
    bound: int | None  # None: README states none for it

    @property
    def holds(self) -> bool:
        return self.bound is None or self.value <= self.bound


def dr_properties(
    source: str,
    target: str,
    state: Path,
    db: Path,
    window_s: int,
    topic: str = TOPIC,
    more: Mapping[str, object] | None = None,
) -> str:
    """mm2.properties of a DR flow of ``topic`` whose windows run one after the other (`airflow dags
    test`: none waits for a next one, a failed one shows), its offsets in the SQLite file ``db``;
    ``more``: further settings of the flow."""
    flow: str = flow_properties(source, target, topic, state, 1_000_000, {})
    settings = {
        "mirrorflow.mode": "dr",
        "mirrorflow.dr.window.seconds": window_s,
        "mirrorflow.dr.idle.wait.ms": IDLE_WAIT_MS,
        "mirrorflow.dr.handover.wait.seconds": 0,
        "mirrorflow.task.retries": 0,
        **(more or {}),
    }
    return (
        flow
        + "".join(f"{FLOW}.{k} = {v}\n" for k, v in settings.items())
        + f"mirrorflow.offsets.db.url = sqlite:///{db}\n"
    )


def _summaries(db: Path) -> dict[str, str]:
    """Every DR window summary saved in the offsets database, by run id."""
    if not db.exists():
        return {}
    with OffsetsStore(f"sqlite:///{db}") as store:
        return {run: text for run, _, text in recent_documents(store, FLOW, "window", RUNS_KEPT + 10)}


def _run_window(env: dict[str, str], logs: Path, state: Path, index: int, window_s: int) -> Window:
    """One `airflow dags test` of the DR DAG, waited for; its new window summary read."""
    before = _summaries(state / "offsets.db")
    log = logs / f"airflow-dags-test-{index:03d}.out"
    started = time.monotonic()
    proc = start_logged([AIRFLOW, "dags", "test", DAG_ID], log, env)
    try:
        try:
            rc = proc.wait(window_s + WINDOW_GRACE_S)
        except subprocess.TimeoutExpired:
            rc = -1
    finally:
        stop_process(proc, group=True)
    window = Window(index, rc, time.monotonic() - started, str(log))
    new = [(run, text) for run, text in _summaries(state / "offsets.db").items() if run not in before]
    if len(new) != 1:
        window.error = f"{len(new)} new window summaries (expected 1)"
        return window
    try:
        summary = WindowSummary.from_json(new[0][1], f"the window summary of run {new[0][0]}")
    except MirrorError as exc:
        window.error = str(exc)
        return window
    window.micro_batches, window.spark_copies, window.records = (
        summary.micro_batches,
        summary.spark_copies,
        summary.records,
    )
    window.step_seconds = dict(summary.step_seconds)
    if summary.error is not None:
        window.error = f"{summary.error[0]}: {summary.error[1]}"
    return window


@contextmanager
def _producing(producer: RateProducer, rate: int) -> Iterator[threading.Event]:
    """``producer`` writes ``rate`` records/s in a thread until the yielded event is set; all delivered
    when the block ends (an error of the thread is raised then)."""
    stop = threading.Event()
    errors: list[BaseException] = []

    def run() -> None:
        try:
            producer.run(rate, math.inf, stop)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run, name="soak-producer", daemon=True)
    thread.start()
    try:
        yield stop
    finally:
        stop.set()
        thread.join(90)
    if thread.is_alive():
        raise RuntimeError("the soak producer did not stop in 90 s")
    if errors:
        raise errors[0]


def _row_counts(db: Path) -> dict[str, int]:
    """Rows of every table of the SQLite database, opened read-only."""
    conn = sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True)
    try:
        query = "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite%' ORDER BY 1"
        names = [r[0] for r in conn.execute(query)]
        return {n: int(conn.execute(f'SELECT COUNT(*) FROM "{n}"').fetchone()[0]) for n in names}
    finally:
        conn.close()


def _db_bytes(db: Path) -> int:
    """The database file and its journal or write-ahead log, if any."""
    return sum(p.stat().st_size for p in (db, *db.parent.glob(f"{db.name}-*")) if p.is_file())


def _folder(path: Path) -> dict[str, int]:
    files = [p for p in path.rglob("*") if p.is_file()]
    return {"files": len(files), "bytes": sum(p.stat().st_size for p in files)}


def _state(state: Path, db: Path) -> dict[str, Any]:
    return {"db_bytes": _db_bytes(db), "tables": _row_counts(db), "state_folder": _folder(state)}


def _bounds(state: dict[str, Any], elapsed_min: float, windows: list[Window]) -> list[Bound]:
    """Each table's rows next to README's bound, where it states one."""
    tables: dict[str, int] = state["tables"]
    # Each micro-batch leaves at most two points in a partition's row (its commit marker, a source
    # marker); a full row holds ROW_POINTS_MAX.
    full_rows = math.ceil(2 * sum(w.micro_batches for w in windows) / ROW_POINTS_MAX)
    stated = {
        "mirror_batches": MIRRORED_PARTITIONS * (1 + tables.get("mirror_gaps", 0) + full_rows),
        "mirror_partition_metrics": math.floor((elapsed_min + len(windows) + 2) * MIRRORED_PARTITIONS),
        "mirror_recovery_history": math.floor(elapsed_min + 2),
        # A DR run leaves one document, its window's summary.
        "mirror_run_documents": RUNS_KEPT,
    }
    rows = [Bound(f"`{t}` rows", n, stated.get(t)) for t, n in tables.items()]
    missing = [Bound(f"`{t}` rows", 0, b) for t, b in stated.items() if t not in tables]
    return [*rows, *missing]


def _verify(source: str, target: str) -> list[str]:
    """Every record of ``soak`` and ``source.soak`` read: per partition count and digest compared."""
    want = fingerprint(source, [TOPIC], PARTITIONS)
    got = fingerprint(target, [REMOTE], PARTITIONS)
    problems: list[str] = compare(want, got, {TOPIC: REMOTE})
    return problems


def _windows_until(
    opts: Options, env: dict[str, str], logs: Path, state: Path, db: Path, windows: list[Window]
) -> None:
    """Windows back to back until their micro-batches reach the target, or one fails."""
    while sum(w.micro_batches for w in windows) < opts.soak_micro_batches:
        window = _run_window(env, logs, state, len(windows) + 1, opts.soak_window_seconds)
        window.rows_after = _row_counts(db) if db.exists() else {}
        windows.append(window)
        _print_window(window, windows)
        if window.failed or window.micro_batches == 0:
            return


def _print_window(window: Window, windows: list[Window]) -> None:
    rows = window.rows_after
    print(
        f"  soak window {window.index}: rc {window.rc}, {window.wall_s:.0f} s, "
        f"{window.micro_batches} micro-batches ({sum(w.micro_batches for w in windows)} in all), "
        f"{window.records} records; rows: mirror_batches {rows.get('mirror_batches')}, "
        f"mirror_partition_metrics {rows.get('mirror_partition_metrics')}, "
        f"mirror_recovery_history {rows.get('mirror_recovery_history')}"
        + (f"; error: {window.error}" if window.error else ""),
        flush=True,
    )


def soak(opts: Options) -> ScenarioResult:
    res = ScenarioResult(f"soak ({opts.soak_micro_batches:,} micro-batches)")
    work, logs = opts.work, opts.work / "logs"
    state, config = work / "state", work / "mm2-soak.properties"
    db = state / "offsets.db"
    windows: list[Window] = []
    src = start("source", work / "kafka-source", opts.heap_mb)
    try:
        dst = start("target", work / "kafka-target", opts.heap_mb)
        try:
            create_topics(src.bootstrap, [TOPIC], PARTITIONS)
            config.write_text(
                dr_properties(src.bootstrap, dst.bootstrap, state, db, opts.soak_window_seconds)
            )
            env = prepare_airflow(work / "airflow", config, state, logs)
            env.pop("MIRROR_OFFSETS_DB_URL", None)  # it would win over the config's database
            producer = RateProducer(src.bootstrap, TOPIC, PARTITIONS, PRODUCER_SETTINGS)
            print(
                f"  soak: {opts.soak_rate} records/s into {PARTITIONS} partitions, "
                f"{opts.soak_window_seconds} s windows until {opts.soak_micro_batches:,} micro-batches",
                flush=True,
            )
            started = time.monotonic()
            with _producing(producer, opts.soak_rate):
                _windows_until(opts, env, logs, state, db, windows)
            produced = sum(producer.next_seq)
            last = _run_window(env, logs, state, len(windows) + 1, opts.soak_window_seconds)
            last.rows_after = _row_counts(db) if db.exists() else {}
            windows.append(last)
            _print_window(last, windows)
            elapsed_min = (time.monotonic() - started) / 60
            problems = _verify(src.bootstrap, dst.bootstrap)
        finally:
            local_kafka.stop_cluster(dst)
    finally:
        local_kafka.stop_cluster(src)
    measured = _state(state, db)
    bounds = _bounds(measured, elapsed_min, windows)
    failed = [w for w in windows if w.failed]
    micro_batches = sum(w.micro_batches for w in windows)
    soaked = micro_batches - windows[-1].micro_batches >= opts.soak_micro_batches
    res.ok = soaked and not problems and not failed and all(b.holds for b in bounds)
    if not soaked:
        res.detail.append(f"the windows stopped short of {opts.soak_micro_batches} micro-batches")
    res.detail.extend(problems[:20])
    res.detail.extend(f"window {w.index} failed (rc {w.rc}): {w.error}; see {w.log}" for w in failed)
    res.detail.extend(f"{b.what}: {b.value} > bound {b.bound}" for b in bounds if not b.holds)
    res.data = {
        "partitions": PARTITIONS,
        "rate": opts.soak_rate,
        "window_seconds": opts.soak_window_seconds,
        "idle_wait_ms": IDLE_WAIT_MS,
        "micro_batches_wanted": opts.soak_micro_batches,
        "micro_batches": micro_batches,
        "windows": [asdict(w) for w in windows],
        "elapsed_minutes": elapsed_min,
        "records_produced": produced,
        "records_mirrored": sum(w.records for w in windows),
        "copy_problems": problems,
        "state": measured,
        "bounds": [{**asdict(b), "holds": b.holds} for b in bounds],
    }
    res.markdown = _table(res.data, bounds, not problems, failed)
    return res


def _table(data: dict[str, Any], bounds: list[Bound], exact: bool, failed: list[Window]) -> list[str]:
    st = data["state"]
    lines = [
        f"## soak: DR windows of {data['window_seconds']} s, {data['rate']} records/s into "
        f"{data['partitions']} partitions, idle wait {data['idle_wait_ms']} ms",
        "",
        "| measure | value | bound (README) | holds |",
        "|---|---:|---:|---|",
        f"| micro-batches | {data['micro_batches']:,} | | |",
        f"| windows (failed) | {len(data['windows'])} ({len(failed)}) | | |",
        f"| elapsed minutes | {data['elapsed_minutes']:.1f} | | |",
        f"| records produced (mirrored, heartbeats included) | {data['records_produced']:,} "
        f"({data['records_mirrored']:,}) "
        f"| | copy exact: {'yes' if exact else 'NO'} |",
    ]
    for b in bounds:
        bound = "" if b.bound is None else f"{b.bound:,}"
        holds = "" if b.bound is None else ("yes" if b.holds else "NO")
        lines.append(f"| {b.what} | {b.value:,} | {bound} | {holds} |")
    lines += [
        f"| offsets DB size | {st['db_bytes'] / MIB:.2f} MiB | | |",
        f"| state folder | {st['state_folder']['bytes'] / MIB:.2f} MiB in {st['state_folder']['files']} "
        "files | | |",
        "",
        "Copy exact = every record of `soak` and `source.soak` read: per partition the same count and "
        "order-sensitive sha256 over key, value, headers and timestamp. Rows are counted read-only in "
        "the SQLite offsets database after the last window; partitions mirrored = 12 + `heartbeats`.",
    ]
    return lines
