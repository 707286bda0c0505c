"""Machine facts, versions and the Markdown/JSON report of bench/run.py."""

from __future__ import annotations

import json
import os
import platform
import subprocess
from dataclasses import asdict
from importlib import metadata
from pathlib import Path
from typing import Any

from contenders import LIMIT, OURS, OURS_STANDALONE, Result
from scenarios import ScenarioResult
from workload import HEADERS, Workload

from mirrorflow_dev import kafka_home, paths

PACKAGES = [
    "apache-airflow",
    "apache-airflow-providers-apache-spark",
    "pyspark",
    "confluent-kafka",
    "kafka-python",
    "pyarrow",
    "SQLAlchemy",
]


def machine() -> dict[str, Any]:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_kb = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_kb = int(line.split()[1])
    except OSError:
        pass
    return {
        "nproc": os.cpu_count(),
        "memory_gib": round(mem_kb / 2**20, 1),
        "cpu_model": model,
        "kernel": platform.release(),
    }


def versions() -> dict[str, str]:
    out = {"kafka (jars)": paths.KAFKA_VERSION, "python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    try:
        import confluent_kafka

        out["librdkafka"] = confluent_kafka.libversion()[0]
    except ImportError:
        pass
    try:
        res = subprocess.run(
            [kafka_home.java_executable(), "-version"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        out["java"] = (res.stderr or res.stdout).splitlines()[0]
    except (OSError, RuntimeError, subprocess.SubprocessError, IndexError):
        out["java"] = "unknown"
    return out


def mib_per_s(records_per_s: float | None, workload: Workload) -> float | None:
    return None if records_per_s is None else records_per_s * workload.record_bytes / 2**20


def ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b


def _fmt(v: float | None, spec: str) -> str:
    return "n/a" if v is None else format(v, spec)


def render(
    results: list[Result],
    settings: dict[str, Any],
    info: dict[str, Any],
    vers: dict[str, str],
    workload: Workload,
) -> tuple[str, dict[str, Any]]:
    by_name = {r.name: r for r in results}
    ours, standalone = by_name.get(OURS), by_name.get(OURS_STANDALONE)
    mm2, limit = by_name.get("MirrorMaker 2 (dedicated mode)"), by_name.get(LIMIT)

    def rate(r: Result | None) -> float | None:
        return None if r is None else r.steady_rps

    def wall(r: Result | None) -> float | None:
        return None if r is None else r.wall_s

    ratios = {
        "ours/mm2 steady records/s": ratio(rate(ours), rate(mm2)),
        "ours/mm2 wall": ratio(wall(ours), wall(mm2)),
        "ours/limit steady records/s": ratio(rate(ours), rate(limit)),
        "ours-standalone/ours steady records/s": ratio(rate(standalone), rate(ours)),
        "ours-standalone/ours wall": ratio(wall(standalone), wall(ours)),
    }
    lines = [
        f"# mirrorflow benchmark: {workload.name} ({workload.shape}), {settings['records']:,} records",
        "",
        f"Machine: {info['nproc']} CPUs ({info['cpu_model']}), {info['memory_gib']} GiB; "
        f"versions: {', '.join(f'{k} {v}' for k, v in vers.items())}.",
        "",
        f"{workload.name}: {len(settings['topics'])} topics x {settings['partitions']} partitions, "
        f"{workload.description}, {HEADERS} headers, explicit timestamps, "
        f"compression {workload.compression}; "
        f"producer settings {settings['producer']}; broker heap {settings['broker_heap_mb']} MB, "
        f"MM2 tasks.max {settings['tasks_max']}.",
        "",
        "| contender | wall s | steady records/s | MiB/s | verified |",
        "|---|---:|---:|---:|---|",
    ]
    for r in results:
        lines.append(
            f"| {r.name} | {_fmt(r.wall_s, '.1f')} | {_fmt(r.steady_rps, ',.0f')} | "
            f"{_fmt(mib_per_s(r.steady_rps, workload), '.1f')} | {r.verified} |"
        )
    lines += ["", "| ratio | value |", "|---|---:|"]
    lines += [f"| {k} | {_fmt(v, '.2f')} |" for k, v in ratios.items()]
    notes = [f"- {r.name}: {d}" for r in results for d in r.detail]
    if notes:
        lines += ["", "Notes:", *notes]
    lines += [
        "",
        "Wall: copy limit = the longer of the faster writer and ConsumerPerformance; MM2 = process start "
        "until every remote partition reached the source end offset; mirrorflow = the whole `airflow "
        "dags test` (local[*] Spark, or for the standalone row a Spark standalone master with 2 workers "
        "of 1 core / 1 GiB on loopback, started before the timer and not counted). Steady: "
        "MM2 and mirrorflow = records/s between 10% and 90% of the total on the target (end offsets "
        f"polled every {settings['poll_interval_s']} s); copy limit = min(max(ProducerPerformance, "
        "librdkafka producer), ConsumerPerformance fetch rate). Both writers write --records records "
        "into a fresh target topic with the workload's producer settings: ProducerPerformance values of "
        "random capital letters the size of key + value (no key, no headers), the idempotent librdkafka "
        "producer the workload's own records (timed from the first produce to the end of the flush). "
        "ConsumerPerformance reads the source. MiB/s counts key + value bytes.",
    ]
    data = {
        "settings": settings,
        "machine": info,
        "versions": vers,
        "results": [{**asdict(r), "mib_per_s": mib_per_s(r.steady_rps, workload)} for r in results],
        "ratios": ratios,
    }
    return "\n".join(lines) + "\n", data


def write(out_dir: Path, stamp: str, markdown: str, data: dict[str, Any]) -> tuple[Path, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    md, js = out_dir / f"{stamp}.md", out_dir / f"{stamp}.json"
    md.write_text(markdown)
    js.write_text(json.dumps(data, indent=2, default=str) + "\n")
    return md, js


def render_scenarios(
    done: list[ScenarioResult], info: dict[str, Any], vers: dict[str, str], standalone: bool
) -> tuple[str, dict[str, Any]]:
    """Markdown sections and JSON of the scale scenarios (with a machine/versions header if alone)."""
    lines: list[str] = []
    if standalone:
        lines += [
            f"# mirrorflow scale scenarios: {', '.join(s.name for s in done)}",
            "",
            f"Machine: {info['nproc']} CPUs ({info['cpu_model']}), {info['memory_gib']} GiB; "
            f"versions: {', '.join(f'{k} {v}' for k, v in vers.items())}.",
            "",
        ]
    for s in done:
        lines += [*s.markdown, ""]
        if s.detail:
            lines += ["Notes:", *(f"- {d}" for d in s.detail), ""]
    data: dict[str, Any] = {"scenarios": [asdict(s) for s in done]}
    if standalone:
        data = {"machine": info, "versions": vers, **data}
    return "\n".join(lines), data
