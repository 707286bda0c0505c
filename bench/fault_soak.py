"""The fault-soak scenario of bench/run.py (``--scenarios fault-soak``): a DR flow between three-node
clusters, as users deploy it, while the target's brokers restart one after another.

1. a source and a target cluster of three KRaft nodes each (``mirrorflow_dev.replicated_kafka``:
   replication factor 3, ``min.insync.replicas`` 2, the transaction log too); topic ``rpo`` (12
   partitions) on the source; the flow's remote and internal topics with replication factor 3;
2. the flow in DR mode under `airflow standalone` with the DAG unpaused and the default window
   (``mirrorflow.dr.window.seconds`` 600, handing over to the next window), as the rpo scenario's
   ``ours-scheduler``;
3. the rpo scenario's load and watch (``rpo.measure``: --fault-rate records/s for --fault-minutes,
   every record's produce-to-readable wait on the target, duplicates, reorders, lost records after
   a drain) while a thread restarts a random target node every --fault-every-seconds, from
   ``FIRST_FAULT_S`` into the load: alternately a controlled shutdown (SIGTERM: its leaderships move
   at once) and a crash (SIGKILL: they move once the controller fences it, after
   ``broker.session.timeout.ms``), down ``DOWN_S``, then started again on its data;
4. per restart: the longest any record produced in the ``SETTLE_S`` after it waited, and how long
   after it every record produced until the next restart waited less than ``GOOD_S`` (the recovery
   point back under ``GOOD_S``).

It is ok when nothing was lost, duplicated or reordered and the recovery point was back under
``GOOD_S`` within ``SETTLE_S`` of every restart. Every process is stopped by PID.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rpo import PARTITIONS, TOPIC, Watch, dr_flow_properties, fmt, holders, lock_handovers, measure, scheduler
from scenarios import Options, ScenarioResult
from workload import create_topics

from mirrorflow_dev import local_kafka, replicated_kafka
from mirrorflow_dev.kafka_home import REPLICATED_NODES
from mirrorflow_dev.processes import free_ports
from mirrorflow_dev.replicated_kafka import ReplicatedCluster

FIRST_FAULT_S = 120.0
DOWN_S = 5.0
SETTLE_S = 30.0
GOOD_S = 2.0
WINDOW_S = 600


@dataclass
class Restart:
    """One target node's restart: stopped at ``at`` (s since the epoch), ready again at ``ready``."""

    number: int
    node: int
    how: str
    at: float
    ready: float
    longest_wait_s: float | None = None
    recovered_after_s: float | None = None


def _restarting(
    box: list[ReplicatedCluster], every_s: float, watch: Watch, done: list[Restart], stop: threading.Event
) -> None:
    """From ``FIRST_FAULT_S`` after the load starts (every partition's warm-up record is on the
    target), restart a random node of ``box[0]`` every ``every_s`` until ``stop``; ``box[0]``
    follows the restarted nodes (new PIDs)."""
    rng = random.Random(30)
    while watch.count() < PARTITIONS:
        if stop.wait(0.5):
            return
    if stop.wait(FIRST_FAULT_S):
        return
    while True:
        node_id, how = rng.randint(1, REPLICATED_NODES), ("shutdown", "crash")[len(done) % 2]
        at = time.time()
        node = box[0].node(node_id)
        local_kafka.stop_cluster(node, kill=how == "crash")
        time.sleep(DOWN_S)
        box[0] = box[0].with_node(replicated_kafka.restart_node(node, timeout=120))
        done.append(Restart(len(done) + 1, node_id, how, at, time.time()))
        print(f"  fault-soak: {done[-1]}", flush=True)
        if stop.wait(max(0.0, every_s - (time.time() - at))):
            return


@contextmanager
def _restarts(box: list[ReplicatedCluster], every_s: float, watch: Watch) -> Iterator[list[Restart]]:
    done: list[Restart] = []
    stop = threading.Event()
    thread = threading.Thread(target=_restarting, args=(box, every_s, watch, done, stop), daemon=True)
    thread.start()
    try:
        yield done
    finally:
        stop.set()
        thread.join(180)


def _judge(restarts: list[Restart], watch: Watch, load_end: float) -> None:
    """Each restart's longest wait in the ``SETTLE_S`` after it, and when the waits of the records
    produced after it stayed under ``GOOD_S``: of the records readable before the next restart (a
    record still waiting then is the next one's)."""
    for restart, following in zip(restarts, [*(r.at for r in restarts[1:]), load_end], strict=True):
        restart.longest_wait_s, restart.recovered_after_s = waits_after(
            watch, restart.at, following, restart.at + SETTLE_S, restart.at
        )


def waits_after(
    watch: Watch, at: float, following: float, settled: float, since: float
) -> tuple[float | None, float | None]:
    """Of the records produced from ``at`` and readable before ``following``: the longest wait of
    those produced before ``settled``, and how long after ``since`` the last one that waited
    ``GOOD_S`` or more was produced (0 if none did, or it came before ``since``); None when no record
    produced after it was readable in time: the flow did not mirror again before ``following``."""
    timed = [(p, ms / 1000) for p, ms in watch.timed if at <= p and p + ms / 1000 < following]
    longest = max((w for p, w in timed if p < settled), default=None)
    late = max((p for p, w in timed if w >= GOOD_S), default=None)
    if late is None:
        return longest, 0.0
    if not any(p > late for p, _ in timed):
        return longest, None
    return longest, round(max(late - since, 0.0), 1)


def start_cluster(alias: str, root: Path) -> ReplicatedCluster:
    """Cluster ``alias``'s three nodes in ``root``, on free ports."""
    return replicated_kafka.start_replicated_cluster(
        alias, free_ports(2 * REPLICATED_NODES), root, timeout=180
    )


def replicated_dr_flow(source: str, target: str, state: Path, topics: str = TOPIC) -> str:
    """mm2.properties of the DR flow of ``topics`` between three-node clusters: its remote and
    internal topics replicated three times, windows of ``WINDOW_S`` handing over to the next."""
    flow: str = dr_flow_properties(source, target, state, WINDOW_S, handover_wait_s=600, topics=topics)
    return flow.replace("replication.factor = 1", "replication.factor = 3")


def fault_soak(opts: Options) -> ScenarioResult:
    res = ScenarioResult(f"fault-soak ({opts.fault_minutes} minutes)")
    work = opts.work
    config, state = work / "mm2-ours.properties", work / "state"
    src = start_cluster("source", work / "kafka")
    try:
        box = [start_cluster("target", work / "kafka")]
        try:
            create_topics(src.bootstrap, [TOPIC], PARTITIONS, replication_factor=3)
            config.write_text(replicated_dr_flow(src.bootstrap, box[0].bootstrap, state))
            print(
                f"  fault-soak: {opts.fault_rate:,} records/s for {opts.fault_minutes} minutes, a target "
                f"node restarted every {opts.fault_every_seconds:.0f} s",
                flush=True,
            )
            watch = Watch()
            with (
                scheduler(work, config, state, ["source"]) as airflow,
                holders(f"sqlite:///{state / 'offsets.db'}") as changes,
                _restarts(box, opts.fault_every_seconds, watch) as restarts,
            ):
                out = measure(
                    src.bootstrap,
                    box[0].bootstrap,
                    opts.fault_rate,
                    opts.fault_minutes * 60,
                    lambda: lock_handovers(changes),
                    airflow.pid,
                    watch=watch,
                )
                load_end = time.time()
        finally:
            replicated_kafka.stop_replicated_cluster(box[0])
    finally:
        replicated_kafka.stop_replicated_cluster(src)
    _judge(restarts, watch, load_end)
    out["restarts"] = [asdict(r) for r in restarts]
    res.data = out
    exact = out["lost"] == out["duplicated"] == out["reordered"] == 0
    slow = [r for r in restarts if r.recovered_after_s is None or r.recovered_after_s > SETTLE_S]
    res.ok = exact and bool(restarts) and not slow
    if not exact:
        res.detail.append(f"lost {out['lost']}, duplicated {out['duplicated']}, reordered {out['reordered']}")
    res.detail.extend(f"restart {r.number}: recovered after {r.recovered_after_s} s" for r in slow)
    res.markdown = _table(out, restarts, opts)
    return res


def _table(out: dict[str, Any], restarts: list[Restart], opts: Options) -> list[str]:
    return [
        f"## fault-soak: a DR flow between three-node clusters, a target node restarted every "
        f"{opts.fault_every_seconds:.0f} s",
        "",
        f"{opts.fault_rate:,} records/s for {opts.fault_minutes} minutes under `airflow standalone` "
        f"(windows of {WINDOW_S} s): {out['produced']:,} produced, lost {out['lost']}, duplicated "
        f"{out['duplicated']}, reordered {out['reordered']}; wait p50 {fmt(out['latency_p50_s'])} s, "
        f"p99 {fmt(out['latency_p99_s'])} s, max {fmt(out['latency_max_s'])} s; handovers at "
        f"{out['handovers_at_s']} s into the load, longest waits near them {out['handover_waits_s']} s.",
        "",
        f"| restart | node | how | s after the first | down s | longest wait in the {SETTLE_S:.0f} s "
        f"after, s | every wait under {GOOD_S:.0f} s after, s |",
        "|---:|---:|---|---:|---:|---:|---:|",
        *(
            f"| {r.number} | {r.node} | {r.how} | {r.at - restarts[0].at:.0f} | "
            f"{r.ready - r.at:.1f} | {fmt(r.longest_wait_s)} | {fmt(r.recovered_after_s, '.1f')} |"
            for r in restarts
        ),
    ]
