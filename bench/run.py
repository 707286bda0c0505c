"""mirrorflow vs MirrorMaker 2 vs Kafka's copy limit, on two local clusters started here.

    .venv/bin/python bench/run.py [--workload W1|W2|W3|W1A] [--records N]
                                  [--contenders limit,mm2,ours,ours-standalone,
                                   mm2-drop-header,ours-drop-header,ours-schemas]
    (or: make bench)
    .venv/bin/python bench/run.py --scenarios scale-topics,memory [--scale-topics 500] [--records N]

1. starts a source cluster (local KRaft, free loopback ports, temp dir) and writes the --workload to it:
   2 topics x 6 partitions, --records in total, 16-byte random keys, 2 headers, explicit timestamps, and
   - W1 (default): 1 KiB random values, compression none, 1,000,000 records by default;
   - W2: 1 KiB values, half random bytes and half a repeated fixed pattern, lz4, 1,000,000 records;
   - W3: 100-byte random values, compression none, 10,000,000 records;
   - W1A: W1 in Avro, 1,000,000 records: each 1 KiB value in Confluent's wire format (the id of its
     topic's value subject in the source's schema registry, then a record of one bytes field); one
     Apicurio Registry per cluster is started for it;
   fingerprints every source partition (count + order-sensitive sha256). The workload's producer
   settings (compression included) are those of every writer: the source's, MM2's, ours, and the
   copy limit's;
2. runs each contender against a freshly started target cluster (the previous one is stopped first):
   - limit: Kafka's ProducerPerformance and a librdkafka producer (the workload's records) into the
            target, Kafka's ConsumerPerformance from the source; the copy limit is
            min(max(the two write rates), the read rate);
   - mm2:   the real MirrorMaker 2, dedicated mode, source->target only;
   - ours:  `airflow dags test mirror_source_to_target` over the whole backlog, then once more idle,
            with Spark in local[*] mode (the default `spark_default` connection);
   - ours-standalone: the same DAG runs against a Spark standalone cluster started here on loopback
            (1 master, 2 workers x 1 core / 1 GiB, from pyspark's spark-class; client deploy mode);
   - mm2-drop-header, ours-drop-header (only when named): mm2 and ours with Connect's DropHeaders of the
            workload's `origin` header as the flow's transforms (ours then copies record by record);
            verified against the source fingerprint without that header;
   - ours-schemas (only when named, W1A only): ours with both registries named and every topic's values
            declared framed (keys plain), so the flow syncs the schemas and rewrites each value's schema
            id (record by record); verified against the source
            fingerprint with the target's ids mapped back to the source's. mm2 and ours copy W1A's
            values as they are (ids unchanged);
   every copy is verified partition by partition against the source fingerprint;
3. writes bench/results/<timestamp>.md and .json and prints the Markdown table.

Scale scenarios (bench/scenarios.py), only with --scenarios (not run by default; with --scenarios and
no --contenders, no contender runs). Each starts its own source and target cluster:
   - scale-topics: --scale-topics topics (500) x 4 partitions x 5 records (1 KiB values) on the
            source, topics created 100 per CreateTopics request; times the first `airflow dags test`
            (creates every remote topic and copies everything) and a second one with nothing new,
            which must skip the copy task (plan short-circuits, no `[DAG TEST] starting task_id=copy`
            log line, no SparkSubmit JVM seen); the copy is checked by end offsets per partition
            (target == source);
   - memory: W1 backlogs of --records and 4 x --records on the source (separate topics); one
            `airflow dags test` per backlog copies it whole (the same mirrorflow.max.records.per.partition
            cap, large enough for the 4x backlog); every 0.2 s psutil sums the RSS of each java process
            under `airflow` with SparkSubmit in its cmdline plus all its descendants (PySpark driver and
            workers); reports both peaks and their ratio (target: 4x within 20% of 1x); checked by end
            offsets per partition.

   - rpo (bench/rpo.py): the recovery point in DR mode: per --rpo-rates rate, MM2, our DR flow as
            deployed (airflow standalone, the DAG unpaused, --rpo-window-seconds windows handing over)
            and one DR window through `airflow dags test` each mirror a producer's steady stream (12
            partitions, 1 KiB records, --rpo-seconds); produce-to-readable latency per record
            (p50/p99/max), the longest wait of a record produced around each handover,
            lost/duplicated/reordered records, the backlog, and the ages of the newest heartbeat and
            checkpoint on the target.
   - fan-in (bench/fan_in.py): --fan-in-flows DR flows into one target at once, --fan-in-rate records/s
            each, mirrored by MM2 (one process) and by our DR flows as deployed (airflow standalone, every
            flow's DAG unpaused; --rpo-window-seconds windows): per flow what the rpo scenario measures of
            its one, and the memory of all the contender's processes per kind.
   - soak (bench/soak.py): bounded state in DR mode: DR windows (--soak-window-seconds) back to back
            until --soak-micro-batches micro-batches have run, under a steady producer (--soak-rate
            records/s, 12 partitions); the copy is checked record by record, then the offsets
            database's rows per table and the state folder are checked against README's bounds.
   - txn-log (bench/txn_log.py): the batch log under a transactional source (a transaction every
            100 ms, 5 minutes' retention): DR windows (--soak-window-seconds) back to back for
            --txn-minutes; after each, the batch log's rows and sync points, the checkpoint pass's
            time and the offsets database's size.
   - fault-soak (bench/fault_soak.py): a DR flow between three-node clusters under `airflow
            standalone` while a random target node restarts every --fault-every-seconds (a controlled
            shutdown, then a crash, in turn): lost, duplicated and reordered records, and how soon
            after each restart the recovery point is back under 2 s (--fault-rate records/s for
            --fault-minutes).
   - dr-faults (bench/dr_faults.py): the same DR flow, its offsets in PostgreSQL, mirroring rpo's load
            and a compacted topic through five faults in turn (--dr-faults, spread over
            --fault-minutes): the transaction coordinator's broker crashed and restarted, a remote
            leader frozen 70 s, the offsets database frozen 40 s, the window's driver frozen 90 s, the
            compacted topic cleaned between a Kafka commit and the offsets table; per fault the
            longest wait, how soon the flow mirrored again by itself, what failed and whether a person
            was needed; lost, duplicated and reordered records of both topics.

Every process started here is stopped by PID, also on failure; the temp dir is removed unless
--keep-work is given or a contender or scenario failed (its logs are kept then and the path is printed).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path

import contenders
import dr_faults
import fan_in
import fault_soak
import report
import rpo
import scenarios
import soak
import txn_log
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from contenders import Context, Result
from scenarios import start
from workload import (
    PARTITIONS,
    WORKLOADS,
    Workload,
    avro_header,
    create_topics,
    end_offsets,
    fingerprint,
    produce,
)

from mirrorflow_dev import local_kafka
from mirrorflow_dev.local_registry import running_registries

SCENARIOS: dict[str, Callable[[scenarios.Options], scenarios.ScenarioResult]] = {
    **scenarios.SCENARIOS,
    "rpo": rpo.rpo,
    "fan-in": fan_in.fan_in,
    "soak": soak.soak,
    "txn-log": txn_log.txn_log,
    "fault-soak": fault_soak.fault_soak,
    "dr-faults": dr_faults.dr_faults,
}
CONTENDERS: dict[str, tuple[str, Callable[[Context], Result]]] = {
    "limit": (contenders.LIMIT, contenders.copy_limit),
    "mm2": ("MirrorMaker 2 (dedicated mode)", contenders.mirror_maker),
    "ours": (contenders.OURS, contenders.ours),
    "ours-standalone": (contenders.OURS_STANDALONE, contenders.ours_standalone),
    "mm2-drop-header": (f"MirrorMaker 2, DropHeaders {contenders.DROPPED_HEADER}", contenders.mirror_maker),
    "ours-drop-header": (f"mirrorflow, DropHeaders {contenders.DROPPED_HEADER}", contenders.ours),
    "ours-schemas": ("mirrorflow, schemas synced (ids mapped)", contenders.ours),
}
# Run only when named: they copy the workload with one header dropped (a flow with transforms).
DROP_HEADER = ("mm2-drop-header", "ours-drop-header")
# Run only when named, on W1A: a flow naming both clusters' schema registries.
SCHEMAS = ("ours-schemas",)


def split(value: str, known: Sequence[str], what: str) -> list[str]:
    names = [n.strip() for n in value.split(",") if n.strip()]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SystemExit(f"unknown {what} {unknown}; choose from {list(known)}")
    return names


def run(
    args: argparse.Namespace, work: Path, names: list[str], workload: Workload, records: int
) -> tuple[list[Result], dict[str, object]]:
    topics = tuple(f"{workload.name.lower()}-{t}" for t in ("orders", "payments"))
    settings: dict[str, object] = {
        "workload": asdict(workload),
        "records": records,
        "topics": list(topics),
        "partitions": PARTITIONS,
        "producer": workload.producer,
        "broker_heap_mb": args.heap_mb,
        "jvm_tool_heap_mb": args.heap_mb,
        "tasks_max": args.tasks_max,
        "poll_interval_s": args.poll_interval,
        "spark_master": {
            "ours": "local[*] (airflow_env default)",
            "ours-standalone": "Spark standalone on loopback: 1 master, 2 workers x 1 core / 1g, client mode",
        },
        "contenders": names,
    }
    results: list[Result] = []
    stack = contextlib.ExitStack()
    source = start("source", work / "kafka" / "source", args.heap_mb)
    try:
        create_topics(source.bootstrap, topics)
        registries: tuple[str, str] | None = None
        value_headers: dict[str, bytes] = {}
        if workload.value_schema is not None:
            # One Apicurio Registry per cluster; each topic's value subject registered at the source.
            source_sr, target_sr = stack.enter_context(running_registries(work / "registries", 2))
            registries = (source_sr.url, target_sr.url)
            client = SchemaRegistryClient({"url": source_sr.url, "timeout": 30})
            schema = Schema(workload.value_schema, "AVRO")
            value_headers = {t: avro_header(client.register_schema(f"{t}-value", schema)) for t in topics}
            settings["schema_registries"] = "Apicurio Registry 3.3.3, one per cluster"
        rate = produce(source.bootstrap, topics, records, workload, value_headers=value_headers)
        print(f"{workload.name}: {records:,} records produced at {rate:,.0f} records/s", flush=True)
        settings["source_produce_records_per_s"] = round(rate)
        t0 = time.monotonic()
        digest = fingerprint(source.bootstrap, topics)
        print(f"source fingerprinted in {time.monotonic() - t0:.1f} s", flush=True)
        ends = end_offsets(source.bootstrap, topics)
        if sum(ends.values()) != records:
            raise RuntimeError(f"source holds {sum(ends.values())} records, expected {records}")
        dropped = (
            fingerprint(source.bootstrap, topics, without_headers=frozenset({contenders.DROPPED_HEADER}))
            if any(n in DROP_HEADER for n in names)
            else {}
        )
        for name in names:
            label, contender = CONTENDERS[name]
            print(f"--- {label}", flush=True)
            target = start("target", work / "kafka" / f"target-{name}", args.heap_mb)
            try:
                ctx = Context(
                    work=work / name,
                    source_bootstrap=source.bootstrap,
                    target_bootstrap=target.bootstrap,
                    topics=topics,
                    workload=workload,
                    records=records,
                    source_digest=dropped if name in DROP_HEADER else digest,
                    source_ends=ends,
                    heap_mb=args.heap_mb,
                    tasks_max=args.tasks_max,
                    timeout=args.timeout,
                    poll_interval=args.poll_interval,
                    drop_header=name in DROP_HEADER,
                    registries=registries if name in SCHEMAS else None,
                )
                ctx.work.mkdir(parents=True, exist_ok=True)
                result = contender(ctx)
                result.name = label
            except Exception as exc:
                traceback.print_exc()
                result = Result(label, detail=[f"failed: {type(exc).__name__}: {exc}"])
            finally:
                local_kafka.stop_cluster(target)
            print(
                f"{label}: wall {result.wall_s if result.wall_s is None else round(result.wall_s, 1)} s, "
                f"steady {result.steady_rps if result.steady_rps is None else round(result.steady_rps)}"
                f" records/s, verified {result.verified}",
                flush=True,
            )
            for line in result.detail:
                print(f"  {line}", flush=True)
            results.append(result)
    finally:
        local_kafka.stop_cluster(source)
        stack.close()
    return results, settings


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument(
        "--workload",
        choices=list(WORKLOADS),
        default="W1",
        help="what the contenders copy: "
        + "; ".join(f"{w.name}: {w.description}, compression {w.compression}" for w in WORKLOADS.values()),
    )
    parser.add_argument(
        "--records",
        type=int,
        default=None,
        help="records in total (default: the workload's, "
        + ", ".join(f"{w.name} {w.default_records:,}" for w in WORKLOADS.values())
        + "; W1's for the scenarios)",
    )
    parser.add_argument(
        "--contenders",
        default=None,
        help=f"comma-separated: {','.join(CONTENDERS)} (default: all but {', '.join(DROP_HEADER)}, or none "
        "if --scenarios is given)",
    )
    parser.add_argument(
        "--scenarios", default="", help=f"comma-separated: {','.join(SCENARIOS)} (default: none)"
    )
    parser.add_argument("--scale-topics", type=int, default=500, help="topics of the scale-topics scenario")
    parser.add_argument(
        "--rpo-rates", default="2000", help="comma-separated records/s of the rpo scenario (default: 2000)"
    )
    parser.add_argument("--rpo-seconds", type=float, default=180, help="seconds of production per rpo run")
    parser.add_argument(
        "--rpo-contenders",
        default="mm2,ours-scheduler,ours",
        help="who the rpo scenario runs: mm2, ours-scheduler (DR windows under airflow standalone), ours "
        "(one window through airflow dags test)",
    )
    parser.add_argument(
        "--rpo-window-seconds",
        type=int,
        default=120,
        help="DR window length of the rpo scenario's ours-scheduler",
    )
    parser.add_argument(
        "--soak-micro-batches",
        type=int,
        default=10_000,
        help="micro-batches the soak scenario's DR windows run in all before its last window",
    )
    parser.add_argument(
        "--soak-window-seconds", type=int, default=120, help="DR window length of the soak scenario"
    )
    parser.add_argument("--soak-rate", type=int, default=50, help="records/s produced during the soak")
    parser.add_argument("--txn-minutes", type=int, default=30, help="how long the txn-log scenario runs")
    parser.add_argument("--fault-minutes", type=int, default=30, help="how long the fault-soak load runs")
    parser.add_argument(
        "--fault-every-seconds",
        type=float,
        default=120.0,
        help="fault-soak: a target node restart every so often",
    )
    parser.add_argument(
        "--fault-rate", type=int, default=500, help="records/s produced during the fault-soak"
    )
    parser.add_argument(
        "--dr-faults",
        default=",".join(dr_faults.FAULTS),
        help=f"the dr-faults scenario's faults, in the order given (default: {','.join(dr_faults.FAULTS)})",
    )
    parser.add_argument("--fan-in-flows", type=int, default=4, help="source clusters of the fan-in scenario")
    parser.add_argument(
        "--fan-in-rate", type=int, default=500, help="records/s produced to each fan-in source (default: 500)"
    )
    parser.add_argument(
        "--fan-in-trigger-ms",
        type=int,
        default=200,
        help="mirrorflow.dr.trigger.interval.ms of the fan-in scenario's flows (default: 200)",
    )
    parser.add_argument("--heap-mb", type=int, default=1024, help="heap of each broker and Kafka tool JVM")
    parser.add_argument("--tasks-max", type=int, default=os.cpu_count() or 1, help="MM2 tasks.max")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per contender step")
    parser.add_argument("--poll-interval", type=float, default=0.5, help="end-offset polling, seconds")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    parser.add_argument("--keep-work", action="store_true", help="keep the temp dir (logs, configs)")
    args = parser.parse_args()
    picked = split(args.scenarios, list(SCENARIOS), "scenarios")
    default = "" if picked else ",".join(n for n in CONTENDERS if n not in (*DROP_HEADER, *SCHEMAS))
    names = split(default if args.contenders is None else args.contenders, list(CONTENDERS), "contenders")
    workload = WORKLOADS[args.workload]
    if workload.value_schema is None and any(n in SCHEMAS for n in names):
        raise SystemExit(f"{', '.join(SCHEMAS)} copies values with schemas: use --workload W1A")
    logging.basicConfig(level=logging.WARNING)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    work = Path(tempfile.mkdtemp(prefix="mirrorflow-bench-run-"))
    keep = args.keep_work
    results: list[Result] = []
    settings: dict[str, object] = {}
    done: list[scenarios.ScenarioResult] = []
    try:
        if names:
            records = workload.default_records if args.records is None else args.records
            results, settings = run(args, work, names, workload, records)
        done = run_scenarios(args, work, picked)
        keep = keep or any(r.verified == "no" for r in results) or any(not s.ok for s in done)
    except BaseException:
        keep = True
        raise
    finally:
        if keep:
            print(f"work dir kept: {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    info, vers = report.machine(), report.versions()
    markdown, data = report.render(results, settings, info, vers, workload) if names else ("", {})
    if done:
        extra_md, extra = report.render_scenarios(done, info, vers, standalone=not names)
        markdown = f"{markdown}\n{extra_md}" if markdown else extra_md
        data = {**data, **extra} if data else extra
    md, js = report.write(args.out, stamp, markdown, data)
    print(f"\n{markdown}\nwritten: {md} and {js}")
    return 0 if all(r.verified != "no" for r in results) and all(s.ok for s in done) else 1


def run_scenarios(args: argparse.Namespace, work: Path, picked: list[str]) -> list[scenarios.ScenarioResult]:
    out = []
    for name in picked:
        print(f"--- scenario {name}", flush=True)
        # The scenarios write W1 whatever --workload says.
        records = scenarios.W1.default_records if args.records is None else args.records
        opts = scenarios.Options(
            work / f"scenario-{name}",
            args.heap_mb,
            args.timeout,
            records,
            args.scale_topics,
            tuple(int(r) for r in args.rpo_rates.split(",")),
            args.rpo_seconds,
            tuple(split(args.rpo_contenders, ["mm2", "ours-scheduler", "ours"], "rpo contenders")),
            args.rpo_window_seconds,
            args.soak_micro_batches,
            args.soak_window_seconds,
            args.soak_rate,
            args.fan_in_flows,
            args.fan_in_rate,
            args.fan_in_trigger_ms,
            args.txn_minutes,
            args.fault_minutes,
            args.fault_every_seconds,
            args.fault_rate,
            tuple(split(args.dr_faults, dr_faults.FAULTS, "dr faults")),
        )
        opts.work.mkdir(parents=True, exist_ok=True)
        try:
            res = SCENARIOS[name](opts)
        except Exception as exc:
            traceback.print_exc()
            res = scenarios.ScenarioResult(name, detail=[f"failed: {type(exc).__name__}: {exc}"])
            res.markdown = [f"## {name}", "", f"failed: {type(exc).__name__}: {exc}"]
        for line in res.detail:
            print(f"  {line}", flush=True)
        out.append(res)
    return out


if __name__ == "__main__":
    sys.exit(main())
