"""The fan-in scenario of bench/run.py (``--scenarios fan-in``): several DR flows into one target at
once, and what each contender takes to mirror them all.

--fan-in-flows source clusters ``s1`` .. ``sN``, each with topic ``rpo`` (12 partitions), mirror into
one target cluster (remote topics ``s1.rpo`` ..): MirrorMaker 2 in dedicated mode, one process for
every flow (``mm2``), and our DR flows as deployed (``ours-scheduler``): `airflow standalone`, every
flow's DAG unpaused, each flow's windows of --rpo-window-seconds handing it over to the next, their
micro-batches at least --fan-in-trigger-ms apart (``mirrorflow.dr.trigger.interval.ms``). A
producer per source writes --fan-in-rate records/s for --rpo-seconds; each flow is measured as the
rpo scenario measures its one (``rpo.measure``: produce-to-readable latency, lost, duplicated and
reordered records, the longest wait around each handover), all flows at once; the memory of all the
contender's processes, per kind (``footprint``), is sampled while the producers run.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from footprint import memory_table
from rpo import (
    PARTITIONS,
    TOPIC,
    flow_cells,
    handover_cell,
    holders,
    lock_handovers,
    measure,
    scheduler,
    start_mm2,
)
from scenarios import Options, ScenarioResult, start
from workload import create_topics

from mirrorflow_dev import local_kafka
from mirrorflow_dev.local_kafka import LocalCluster
from mirrorflow_dev.processes import stop_process

CONTENDERS = ("mm2", "ours-scheduler")


def fan_in(opts: Options) -> ScenarioResult:
    res = ScenarioResult("fan-in")
    rows: list[dict[str, Any]] = []
    aliases = [f"s{i}" for i in range(1, opts.fan_in_flows + 1)]
    for name in (c for c in opts.rpo_contenders if c in CONTENDERS):
        work = opts.work / name
        started: list[LocalCluster] = []
        try:
            for alias in (*aliases, "target"):
                started.append(start(alias, work / f"kafka-{alias}", opts.heap_mb))
            *sources, target = started
            for source in sources:
                create_topics(source.bootstrap, [TOPIC], PARTITIONS)
            print(
                f"  fan-in: {name}, {len(sources)} flows at {opts.fan_in_rate:,} records/s each for "
                f"{opts.rpo_seconds:.0f} s",
                flush=True,
            )
            flows = {s.alias: s.bootstrap for s in sources}
            row = {"contender": name, **_run_contender(name, opts, work, flows, target.bootstrap)}
        except Exception as exc:
            row = {"contender": name, "failed": f"{type(exc).__name__}: {exc}"}
            res.detail.append(f"{name}: failed: {exc}; logs in {work / 'logs'}")
        finally:
            for cluster in reversed(started):
                local_kafka.stop_cluster(cluster)
        print(f"  {row}", flush=True)
        rows.append(row)
    res.data["runs"] = rows
    res.ok = all(
        "failed" not in r
        and all(f["lost"] == f["duplicated"] == f["reordered"] == 0 for f in r["flows"].values())
        for r in rows
    )
    res.markdown = _table(rows, opts)
    return res


def _run_contender(
    name: str, opts: Options, work: Path, flows: dict[str, str], target: str
) -> dict[str, Any]:
    if name == "mm2":
        proc = start_mm2(work, opts.heap_mb, flows, target)
        try:
            return _measure_all(opts, flows, target, proc.pid)
        finally:
            stop_process(proc, group=False)
    config, state = work / "mm2-ours.properties", work / "state"
    config.write_text(_ours_properties(flows, target, state, opts.rpo_window_seconds, opts.fan_in_trigger_ms))
    with scheduler(work, config, state, list(flows)) as airflow:
        return _measure_all(opts, flows, target, airflow.pid, f"sqlite:///{state / 'offsets.db'}")


def _measure_all(
    opts: Options, flows: dict[str, str], target: str, root_pid: int | None, db_url: str | None = None
) -> dict[str, Any]:
    """Every flow measured at once, each in a thread of its own; the footprint by the first one's
    (all producers run the same seconds); with ``db_url``, each flow's handovers."""
    measured: dict[str, dict[str, Any]] = {}
    failed: list[BaseException] = []

    def one(alias: str, root: int | None) -> None:
        try:
            args = (flows[alias], target, opts.fan_in_rate, opts.rpo_seconds)
            if db_url is None:
                measured[alias] = measure(*args, root_pid=root, alias=alias)
                return
            with holders(db_url, f"{alias}->target") as changes:
                measured[alias] = measure(*args, lambda: lock_handovers(changes), root, alias)
        except BaseException as exc:
            failed.append(exc)

    threads = [
        threading.Thread(target=one, args=(alias, root_pid if n == 0 else None), daemon=True)
        for n, alias in enumerate(flows)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failed:
        raise failed[0]
    first = next(iter(flows))
    return {
        "rate_per_flow": opts.fan_in_rate,
        "trigger_interval_ms": opts.fan_in_trigger_ms,
        "flows": {
            alias: {k: v for k, v in m.items() if k != "footprint_mib"} for alias, m in measured.items()
        },
        "footprint_mib": measured[first]["footprint_mib"],
    }


def _ours_properties(flows: dict[str, str], target: str, state: Path, window_s: int, trigger_ms: int) -> str:
    lines = [
        f"clusters = {', '.join(flows)}, target",
        *(f"{alias}.bootstrap.servers = {bootstrap}" for alias, bootstrap in flows.items()),
        f"target.bootstrap.servers = {target}",
        *(
            f"{alias}->target.{line}"
            for alias in flows
            for line in (
                "enabled = true",
                f"topics = {TOPIC}",
                "mirrorflow.mode = dr",
                f"mirrorflow.dr.window.seconds = {window_s}",
                f"mirrorflow.dr.trigger.interval.ms = {trigger_ms}",
                "mirrorflow.dr.handover.wait.seconds = 600",
            )
        ),
        "replication.factor = 1",
        "checkpoints.topic.replication.factor = 1",
        "heartbeats.topic.replication.factor = 1",
        "offset-syncs.topic.replication.factor = 1",
        f"mirrorflow.state.dir = {state}",
    ]
    return "\n".join(lines) + "\n"


def _table(rows: list[dict[str, Any]], opts: Options) -> list[str]:
    lines = [
        f"## fan-in: {opts.fan_in_flows} flows into one target at once, {opts.fan_in_rate:,} records/s each "
        f"({PARTITIONS} partitions, 1 KiB records), {opts.rpo_seconds:.0f} s; ours: "
        f"{opts.rpo_window_seconds} s windows, trigger interval {opts.fan_in_trigger_ms} ms",
        "",
        "| contender | flow | p50 s | p99 s | max s | lost | dup | reordered | backlog first/last tenth "
        "| handovers: longest wait of a record around each, s |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        if "failed" in r:
            lines.append(f"| {r['contender']} | all | failed: {r['failed']} |||||||")
            continue
        for alias, f in r["flows"].items():
            cells = [r["contender"], f"{alias}->target", *flow_cells(f), handover_cell(f)]
            lines.append(f"| {' | '.join(cells)} |")
    lines += memory_table(
        "the producers", ("contender",), [((r["contender"],), r.get("footprint_mib", {})) for r in rows]
    )
    return lines
