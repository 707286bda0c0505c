"""The dr-faults scenario of bench/run.py (``--scenarios dr-faults``): a DR flow under the scheduler
through the faults a deployment meets, one after another, each by PID (``dr_fault_injectors``).

1. fault-soak's two three-node clusters and DR flow under `airflow standalone` (600 s windows handing
   over), its offsets database on a throwaway PostgreSQL server (``mirrorflow_dev.local_postgres``);
   the flow mirrors ``rpo`` (rpo's load and watch: --fault-rate records/s for --fault-minutes) and
   ``compacted`` (``bench/compacted.py``: keyed records overwritten and deleted on a source whose
   cleaner is at work all along);
2. from ``FIRST_FAULT_S`` into the load, the --dr-faults in turn, spread evenly over the load, each at
   least ``MIN_SETTLE_S`` after the one before ended:
   - coordinator: the target broker coordinating the flow's transactions (transactional id
     ``mirrorflow.<flow>``) crashed (SIGKILL), down ``DOWN_S``, started again on its data;
   - leader: the target leader of ``source.rpo``-0 frozen (SIGSTOP) ``LEADER_FROZEN_S``, then SIGCONT;
   - database: every process of the PostgreSQL server frozen ``DATABASE_FROZEN_S``: the offsets
     database unreachable, its connections open and answering nothing;
   - driver: the Python driver (``jobs/mirror_dr.py --run-id <run>``) of the window holding the
     flow's lock frozen ``DRIVER_FROZEN_S``;
   - compaction: a session holding the compacted topic's rows of the offsets table (``SELECT ... FOR
     UPDATE``, as a stuck transaction would): each micro-batch then commits its Kafka transaction and
     fails to commit the offsets table (its lock wait times out: a transient error the window waits
     out); meanwhile every key is overwritten (some deleted) on the source, again every
     ``OVERWRITE_EVERY_S``, until the source's cleaner removed records the target holds past the
     committed position (both sides read back), and once more, until a micro-batch planned after
     the cleaning copied that too (it read back what the target holds past the committed position
     against the source as compacted); then the session ends and its offsets commit goes through;
3. per fault: when it was injected and ended; the longest wait of a record produced from then until
   the next fault; how long after it ended the first record waited under ``GOOD_S`` again (the flow
   mirrored again by itself; None: not before the next fault), and every record did (a slow
   micro-batch later counts here too: on a busy machine waits near ``GOOD_S`` come and go); the
   window attempts that failed (Airflow's tries), the windows whose
   summary (in the offsets database) holds an error, and who held the flow's lock at the end of the
   fault's period. A person was needed when the flow did not mirror again by itself, a window's run
   failed for good (its window or report task out of tries), or the lock was left to a run no longer
   running;
4. overall: rpo's lost / duplicated / reordered records (a read_committed consumer), and the
   compacted topic's check (``compacted.check``).

It is ok when nothing was lost, duplicated or reordered, both topics' copies are exact, no fault
needed a person and the flow mirrored again by itself within ``RECOVERY_S`` (a lease and a window's
start) of every fault's end. Every process is stopped by PID.
"""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.parse
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import compacted
from dr_fault_injectors import CLEANED_TIMEOUT_S, COPIED_TIMEOUT_S, FLOW, INJECT, Deployment
from fault_soak import (
    FIRST_FAULT_S,
    GOOD_S,
    WINDOW_S,
    replicated_dr_flow,
    start_cluster,
    waits_after,
)
from rpo import PARTITIONS, TOPIC, Watch, fmt, holders, lock_handovers, measure, scheduler
from scenarios import Options, ScenarioResult
from workload import create_topics

from mirrorflow.app.window_lease import LEASE_SECONDS
from mirrorflow.core.progress import run_of
from mirrorflow.core.window import WindowSummary
from mirrorflow.errors import TransientError
from mirrorflow.store.flow_lock import lock_holder
from mirrorflow.store.offsets_store import OffsetsStore
from mirrorflow.store.run_documents import recent_documents
from mirrorflow_dev import local_postgres, replicated_kafka
from mirrorflow_dev.local_airflow import LocalAirflow
from mirrorflow_dev.local_postgres import LocalPostgres
from mirrorflow_dev.replicated_kafka import ReplicatedCluster

FAULTS = ("coordinator", "leader", "database", "driver", "compaction")
DAG_ID = "mirror_source_to_target"
MIN_SETTLE_S = 60.0
# The flow should mirror again by itself this soon after a fault ended: a window's lease, and the start
# of the window that takes over (a window's start took 17-21 s alone on this machine: README).
WINDOW_START_S = 30.0
RECOVERY_S = LEASE_SECONDS + WINDOW_START_S


@dataclass
class Fault:
    """One injected fault: ``at`` and ``ended`` in s since the epoch; ``what`` it hit."""

    number: int
    name: str
    what: str
    at: float
    ended: float
    longest_wait_s: float | None = None
    # After the fault ended: when the first record produced waited under GOOD_S (the flow mirrored
    # again; None: not before the next fault), and when every record did from then on.
    caught_up_after_s: float | None = None
    settled_after_s: float | None = None
    failed_tries: list[str] = field(default_factory=list)
    window_errors: list[str] = field(default_factory=list)
    runs_failed: list[str] = field(default_factory=list)
    handovers: int = 0
    # Who held the flow's lock at the end of the fault's period, and whether that window ran then.
    lock_after: str | None = None
    holder_running: bool | None = None

    @property
    def needed_a_person(self) -> bool:
        left_held = self.lock_after is not None and self.holder_running is False
        return self.caught_up_after_s is None or bool(self.runs_failed) or left_held


def lock_state(d: Deployment) -> tuple[str | None, bool | None]:
    """Who holds the flow's lock, and whether that run's window task runs."""
    try:
        with OffsetsStore(d.postgres.url) as store:
            holder = lock_holder(store, FLOW)
    except TransientError as away:
        return f"unreadable: {away}", None
    if holder is None:
        return None, None
    run = urllib.parse.quote(run_of(holder), safe="")
    try:
        ti = d.airflow.api("GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{run}/taskInstances/window")
    except urllib.error.HTTPError:
        return holder, None
    return holder, ti.get("state") == "running"


def _injecting(d: Deployment, names: Sequence[str], load_s: float, watch: Watch, done: list[Fault]) -> None:
    """The faults ``names`` in turn from ``FIRST_FAULT_S`` after the load starts (every partition's
    warm-up record is on the target), spread over the ``load_s`` of the load."""
    while watch.count() < PARTITIONS:
        if d.stop.wait(0.5):
            return
    start = time.time()
    slot = (load_s - FIRST_FAULT_S) / len(names)
    for i, name in enumerate(names):
        due = start + FIRST_FAULT_S + i * slot
        if done:
            due = max(due, done[-1].ended + MIN_SETTLE_S)
            if d.stop.wait(max(0.0, due - time.time() - 1)):
                return
            done[-1].lock_after, done[-1].holder_running = lock_state(d)
        if d.stop.wait(max(0.0, due - time.time())):
            return
        at = time.time()
        print(f"  dr-faults: {name} at {at - start:.0f} s into the load", flush=True)
        try:
            what = INJECT[name](d)
        except Exception as exc:  # the next faults still run; the table says why this one did not
            what = f"not injected: {type(exc).__name__}: {exc}"
        done.append(Fault(len(done) + 1, name, what, at, time.time()))
        print(f"  dr-faults: {done[-1]}", flush=True)


@contextmanager
def _faults(d: Deployment, names: Sequence[str], load_s: float, watch: Watch) -> Iterator[list[Fault]]:
    done: list[Fault] = []
    thread = threading.Thread(target=_injecting, args=(d, names, load_s, watch, done), daemon=True)
    thread.start()
    try:
        yield done
    finally:
        d.stop.set()
        thread.join(CLEANED_TIMEOUT_S + COPIED_TIMEOUT_S)


def _stamp(value: str | None) -> float | None:
    return None if value is None else datetime.fromisoformat(value).timestamp()


def _tries(airflow: LocalAirflow) -> list[dict[str, Any]]:
    """Every try of the flow's tasks (task, run, try, state, ended), the current ones and those
    retried."""
    base = f"/api/v2/dags/{DAG_ID}/dagRuns"
    current = airflow.api("GET", f"{base}/~/taskInstances?limit=1000")["task_instances"]
    latest = {(ti["dag_run_id"], ti["task_id"]): ti["try_number"] for ti in current}
    tries = []
    for ti in current:
        if ti["try_number"] > 1:
            run, task = urllib.parse.quote(ti["dag_run_id"], safe=""), ti["task_id"]
            tries += airflow.api("GET", f"{base}/{run}/taskInstances/{task}/tries")["task_instances"]
        else:
            tries.append(ti)
    return [
        {
            "task": t["task_id"],
            "run": t["dag_run_id"],
            "try": t["try_number"],
            "state": t["state"],
            "ended": _stamp(t["end_date"]),
            "final": t["try_number"] == latest[(t["dag_run_id"], t["task_id"])],
        }
        for t in tries
    ]


def _window_errors(url: str) -> list[tuple[float, str]]:
    """(written at, run and error) of every window summary the offsets database holds with an error."""
    with OffsetsStore(url) as store:
        documents = recent_documents(store, FLOW, "window", 1000)
    out = []
    for run_id, written_at, body in documents:
        summary = WindowSummary.from_json(body, f"the window summary of run {run_id}")
        if summary.error is not None:
            out.append((written_at.timestamp(), f"{run_id}: {summary.error[0]}: {summary.error[1]}"))
    return out


def _caught_up_after(watch: Watch, ended: float, following: float) -> float | None:
    """How long after ``ended`` the first record produced then that waited under ``GOOD_S`` was
    produced: the flow had caught up with what waited (later records may wait longer again, for other
    reasons: a slow micro-batch, a window's start); None if none did before ``following``."""
    good = [p for p, ms in watch.timed if ended <= p and p + ms / 1000 < following and ms / 1000 < GOOD_S]
    return round(min(good) - ended, 1) if good else None


def _baseline(watch: Watch, first: float) -> list[float]:
    """The longest wait in each 10 s of the ``FIRST_FAULT_S`` before the ``first`` fault, of the
    records readable before it: how long records wait here without a fault."""
    longest: dict[int, float] = {}
    for p, ms in watch.timed:
        if first - FIRST_FAULT_S <= p and p + ms / 1000 < first:
            i = int((p - first) // 10)
            longest[i] = max(longest.get(i, 0.0), round(ms / 1000, 2))
    return list(longest.values())


def _judge(
    faults: list[Fault],
    watch: Watch,
    load_end: float,
    tries: list[dict[str, Any]],
    errors: list[tuple[float, str]],
    handovers: list[float],
) -> None:
    """Each fault's waits, and what failed in its period (from its injection to the next's)."""
    for fault, following in zip(faults, [*(f.at for f in faults[1:]), load_end], strict=True):
        fault.longest_wait_s, fault.settled_after_s = waits_after(
            watch, fault.at, following, following, fault.ended
        )
        fault.caught_up_after_s = _caught_up_after(watch, fault.ended, following)

        def within(at: float | None, _from: float = fault.at, _to: float = following) -> bool:
            return at is not None and _from <= at < _to

        failed = [t for t in tries if t["state"] in ("failed", "up_for_retry") and within(t["ended"])]
        fault.failed_tries = [f"{t['task']} try {t['try']} of {t['run']}" for t in failed]
        fault.runs_failed = [
            f"{t['task']} of {t['run']}"
            for t in failed
            if t["final"] and t["state"] == "failed" and t["task"] in ("window", "report")
        ]
        fault.window_errors = [e for at, e in errors if within(at)]
        fault.handovers = sum(within(at) for at in handovers)


def dr_faults(opts: Options) -> ScenarioResult:
    names = opts.dr_faults
    res = ScenarioResult(f"dr-faults ({opts.fault_minutes} minutes: {', '.join(names)})")
    work = opts.work
    config, state = work / "mm2-ours.properties", work / "state"
    postgres = local_postgres.start_postgres()
    try:
        src = start_cluster("source", work / "kafka")
        try:
            box = [start_cluster("target", work / "kafka")]
            try:
                create_topics(src.bootstrap, [TOPIC], PARTITIONS, replication_factor=3)
                create_topics(
                    src.bootstrap, [compacted.TOPIC], compacted.PARTITIONS, 3, config=compacted.CONFIG
                )
                flow = replicated_dr_flow(
                    src.bootstrap, box[0].bootstrap, state, f"{TOPIC}, {compacted.TOPIC}"
                )
                config.write_text(f"{flow}mirrorflow.offsets.db.url = {postgres.url}\n")
                print(
                    f"  dr-faults: {opts.fault_rate:,} records/s for {opts.fault_minutes} minutes, faults "
                    f"{', '.join(names)}",
                    flush=True,
                )
                out = _run(opts, src.bootstrap, box, postgres, config, state)
            finally:
                replicated_kafka.stop_replicated_cluster(box[0])
        finally:
            replicated_kafka.stop_replicated_cluster(src)
    finally:
        local_postgres.stop_postgres(postgres)
    faults = [Fault(**f) for f in out["faults"]]
    res.data = out
    check = out["compacted"]
    exact = out["lost"] == out["duplicated"] == out["reordered"] == 0 and all(
        check[k] == 0
        for k in ("lost", "duplicated", "reordered", "last value differs", "unexplained on the target")
    )
    slow = [f for f in faults if f.caught_up_after_s is None or f.caught_up_after_s > RECOVERY_S]
    res.ok = exact and len(faults) == len(names) and not slow and not any(f.needed_a_person for f in faults)
    if not exact:
        res.detail.append(
            f"rpo: lost {out['lost']}, duplicated {out['duplicated']}, reordered {out['reordered']}; "
            f"{compacted.TOPIC}: {check}"
        )
    res.detail.extend(
        f"fault {f.number} ({f.name}): mirrored again after {f.caught_up_after_s} s" for f in slow
    )
    res.detail.extend(f"fault {f.number} ({f.name}): needed a person" for f in faults if f.needed_a_person)
    res.markdown = _table(out, faults, opts)
    return res


def _run(
    opts: Options,
    source: str,
    box: list[ReplicatedCluster],
    postgres: LocalPostgres,
    config: Path,
    state: Path,
) -> dict[str, Any]:
    watch, keyed = Watch(), compacted.KeyedProducer(source)
    trickling = threading.Event()
    trickle = threading.Thread(target=keyed.run, args=(trickling,), daemon=True)
    with scheduler(opts.work, config, state, ["source"]) as airflow, holders(postgres.url) as changes:
        d = Deployment(box, postgres, airflow, keyed, source)
        trickle.start()
        try:
            with _faults(d, opts.dr_faults, opts.fault_minutes * 60, watch) as faults:
                out: dict[str, Any] = measure(
                    source,
                    box[0].bootstrap,
                    opts.fault_rate,
                    opts.fault_minutes * 60,
                    lambda: lock_handovers(changes),
                    airflow.pid,
                    watch=watch,
                )
                load_end = time.time()
        finally:
            trickling.set()
            trickle.join(120)
        if faults:
            faults[-1].lock_after, faults[-1].holder_running = lock_state(d)
        out["compacted"] = compacted.check(source, box[0].bootstrap, keyed.produced)
        tries = _tries(airflow)
    _judge(faults, watch, load_end, tries, _window_errors(postgres.url), lock_handovers(changes))
    out["faults"] = [asdict(f) for f in faults]
    out["baseline_waits_s"] = _baseline(watch, faults[0].at) if faults else []
    out["failed_tries"] = [t for t in tries if t["state"] in ("failed", "up_for_retry")]
    return out


def _table(out: dict[str, Any], faults: list[Fault], opts: Options) -> list[str]:
    check, before = out["compacted"], sorted(out["baseline_waits_s"])
    start = faults[0].at if faults else 0.0
    baseline = f"median {fmt(before[len(before) // 2])} s, at most {fmt(before[-1])} s" if before else "n/a"
    return [
        f"## dr-faults: a DR flow between three-node clusters under `airflow standalone`, "
        f"{len(faults)} faults",
        "",
        f"{opts.fault_rate:,} records/s for {opts.fault_minutes} minutes (windows of {WINDOW_S} s, offsets "
        f"in PostgreSQL): {out['produced']:,} produced, lost (not on the target after the drain) "
        f"{out['lost']}, duplicated {out['duplicated']}, "
        f"reordered {out['reordered']}; wait p50 {fmt(out['latency_p50_s'])} s, p99 "
        f"{fmt(out['latency_p99_s'])} s, max {fmt(out['latency_max_s'])} s; handovers at "
        f"{out['handovers_at_s']} s into the load; before the first fault, the longest wait of each 10 s: "
        f"{baseline}. `{compacted.TOPIC}`: {check['produced']:,} produced, "
        f"the source holds {check['source holds']:,}, the target {check['target holds']:,}; lost "
        f"{check['lost']}, duplicated {check['duplicated']}, reordered {check['reordered']}, last value "
        f"differs for {check['last value differs']} keys, {check['compacted away after copied']} copied "
        f"and then compacted away on the source, {check['compacted on the target']} compacted on the "
        f"target, {check['unexplained on the target']} unexplained.",
        "",
        f"| fault | what | s after the first | lasted s | longest wait after, s | mirrored again (a "
        f"record under {GOOD_S:.0f} s), s after it ended | every wait under {GOOD_S:.0f} s again, s after "
        "it ended | handovers | failed tries | window errors | lock after | a person needed |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|---|---|---|",
        *(_row(f, start) for f in faults),
    ]


def _row(f: Fault, start: float) -> str:
    caught_up = "not by itself" if f.caught_up_after_s is None else fmt(f.caught_up_after_s, ".1f")
    # Without a record readable again, the waits never settled: there is no figure to give.
    settled = "-" if f.caught_up_after_s is None else fmt(f.settled_after_s, ".1f")
    cells = [
        f"{f.number}: {f.name}",
        f.what,
        f"{f.at - start:.0f}",
        f"{f.ended - f.at:.0f}",
        fmt(f.longest_wait_s),
        caught_up,
        settled,
        str(f.handovers),
        "; ".join(f.failed_tries) or "-",
        "; ".join(f.window_errors) or "-",
        _lock_cell(f),
        "yes" if f.needed_a_person else "no",
    ]
    return f"| {' | '.join(cells)} |"


def _lock_cell(fault: Fault) -> str:
    if fault.lock_after is None:
        return "free"
    running = {True: "its window running", False: "its window not running", None: "?"}[fault.holder_running]
    return f"{run_of(fault.lock_after)} ({running})"
