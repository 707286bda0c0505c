"""Memory of a contender while it mirrors: the resident set (RSS) of its process tree, per kind of
process, sampled once a second; per kind, the median of the samples' sums and their peak.

Kinds, by command line (Airflow titles its processes): the Spark driver's JVM (``SparkSubmit``), the
window's Python driver (``jobs/mirror_*.py``), Spark's Python workers (``pyspark.daemon`` and the
workers it forks), Airflow's task processes (``airflow supervisor:``, ``airflow worker --``: a
running task and the process supervising it), Airflow's services (scheduler, API server, DAG
processor, triggerer, executor pool) and MM2's JVM.
"""

from __future__ import annotations

import statistics
import threading
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import psutil

KINDS = (
    "Spark driver JVM",
    "Python driver",
    "Python workers",
    "Airflow task processes",
    "Airflow services",
    "MM2 JVM",
)


def kind_of(cmdline: str) -> str:
    if "SparkSubmit" in cmdline:
        return KINDS[0]
    if "pyspark.daemon" in cmdline:
        return KINDS[2]
    if "jobs/mirror_" in cmdline:
        return KINDS[1]
    if "airflow supervisor:" in cmdline or "airflow worker --" in cmdline:
        return KINDS[3]
    if "MirrorMaker" in cmdline:
        return KINDS[5]
    return KINDS[4]


class Footprint:
    """Samples the tree under ``root_pid`` (none: nothing) while the context is open."""

    def __init__(self, root_pid: int | None, every_s: float = 1.0) -> None:
        self.root_pid, self.every_s = root_pid, every_s
        self.samples: list[dict[str, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="footprint", daemon=True)

    def __enter__(self) -> Footprint:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        if self.root_pid is None:
            return
        try:
            root = psutil.Process(self.root_pid)
        except psutil.NoSuchProcess:
            return
        while not self._stop.wait(self.every_s):
            sample: dict[str, int] = defaultdict(int)
            try:
                tree = [root, *root.children(recursive=True)]
            except psutil.NoSuchProcess:
                return
            for proc in tree:
                try:
                    sample[kind_of(" ".join(proc.cmdline()))] += proc.memory_info().rss
                except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                    continue
            self.samples.append(dict(sample))

    def summary(self) -> dict[str, Any]:
        """Per kind present, MiB: the median and the peak of its samples; and of their total."""
        mib = 1 << 20
        found: dict[str, Any] = {}
        for kind in (*KINDS, "total"):
            values = [sum(s.values()) if kind == "total" else s.get(kind, 0) for s in self.samples]
            if any(values):
                found[kind] = {"median_mib": statistics.median(values) / mib, "peak_mib": max(values) / mib}
        return found


def memory_table(
    what: str, leading: Sequence[str], rows: Sequence[tuple[Sequence[str], Mapping[str, Any]]]
) -> list[str]:
    """Markdown lines: a table of ``summary()`` results, a row per (leading cells, summary), the
    ``leading`` columns first and then a column per kind of process any row has; nothing without
    one. ``what``: what ran while the memory was sampled."""
    kinds = [k for k in (*KINDS, "total") if any(k in mem for _, mem in rows)]
    if not kinds:
        return []
    lines = [
        "",
        f"Memory while {what} ran, RSS MiB per kind of process: median of per-second samples (peak)",
        "",
        f"| {' | '.join((*leading, *kinds))} |",
        f"|{'---|' * len(leading)}{'---:|' * len(kinds)}",
    ]
    for cells, mem in rows:
        sizes = [
            f"{mem[k]['median_mib']:,.0f} ({mem[k]['peak_mib']:,.0f})" if k in mem else "-" for k in kinds
        ]
        lines.append(f"| {' | '.join((*cells, *sizes))} |")
    return lines
