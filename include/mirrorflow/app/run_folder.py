"""The run folder: every file the runs of a flow keep in the state folder, named in this one place.

    <state dir>/runs/<flow>/<run id>/   plan.json          the plan task's plan (read by the copy)
                                        result.json        the copy's result (read by the commit)
                                        copy_failed.json   or the error a retry would meet again
                                        verify_plan.json   a cutover's verification: what to compare
                                        verify_result.json and what the comparison found
                                        cutover_report.md, cutover_report.json
                                        failover.md, failover.json
    <state dir>/metrics/<flow>.source.prom, <flow>.checkpoint.prom   (node_exporter's textfile collector)

Invariants: names are safe on any file system and distinct names stay distinct; every write is
atomic (a reader sees the old file or the whole new one, never half of one). A flow keeps the
folders of its ``RUNS_KEPT`` newest runs, and every folder holding a cutover or failover report
(``prune_runs``, at each run's release).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from mirrorflow.errors import PlanError

CUTOVER_REPORT = "cutover_report"
# Run folders a flow keeps besides its reports: the status page reads the newest 20; a failed run
# cleared in Airflow long after finds its plan gone and re-plans.
RUNS_KEPT = 100


def flow_runs(state_dir: Path, flow: str) -> Path:
    """The folder holding every run folder of ``flow``."""
    return state_dir / "runs" / _safe(flow)


@dataclass(frozen=True)
class RunFolder:
    """The files of one run of a flow."""

    path: Path

    @classmethod
    def of(cls, state_dir: Path, flow: str, run_id: str) -> RunFolder:
        return cls(flow_runs(state_dir, flow) / _safe(run_id))

    @property
    def plan(self) -> Path:
        return self.path / "plan.json"

    @property
    def result(self) -> Path:
        return self.path / "result.json"

    @property
    def copy_failed(self) -> Path:
        return self.path / "copy_failed.json"

    @property
    def window(self) -> Path:
        """A DR window's summary (``core.window``), written when the window ends."""
        return self.path / "window.json"

    @property
    def verify_plan(self) -> Path:
        return self.path / "verify_plan.json"

    @property
    def verify_result(self) -> Path:
        return self.path / "verify_result.json"

    @property
    def cutover_report(self) -> tuple[Path, Path]:
        """The cutover's report as JSON and as Markdown."""
        return self.path / f"{CUTOVER_REPORT}.json", self.path / f"{CUTOVER_REPORT}.md"

    @property
    def failover_report(self) -> tuple[Path, Path]:
        """The failover's report as Markdown and as JSON."""
        return self.path / "failover.md", self.path / "failover.json"


def prune_runs(state_dir: Path, flow: str, keep: int = RUNS_KEPT, spare: str | None = None) -> int:
    """Delete the folders of ``flow``'s runs older than its ``keep`` newest (by last change),
    except those holding a cutover or failover report and run ``spare``'s; returns how many went."""
    base = flow_runs(state_dir, flow)
    try:
        folders = sorted(
            (p for p in base.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime, reverse=True
        )
    except FileNotFoundError:
        return 0
    kept = {RunFolder.of(state_dir, flow, spare).path} if spare is not None else set()
    removed = 0
    for folder in folders[keep:]:
        reports = (*RunFolder(folder).cutover_report, *RunFolder(folder).failover_report)
        if folder in kept or any(p.exists() for p in reports):
            continue
        shutil.rmtree(folder, ignore_errors=True)
        removed += 1
    return removed


def metrics_file(state_dir: Path, flow: str, kind: str) -> Path:
    """A flow's Prometheus text file of one ``kind`` (``source`` or ``checkpoint``): one folder for
    every flow, as node_exporter's textfile collector reads it."""
    return state_dir / "metrics" / f"{_safe(flow)}.{kind}.prom"


def write_atomically(path: Path, text: str) -> None:
    """Readers see the old file or the whole new one, never a half-written file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def read_file(path: Path, what: str) -> str:
    try:
        return path.read_text()
    except FileNotFoundError as exc:
        raise PlanError(f"{what} {path} does not exist; re-run the task that writes it") from exc


def _safe(name: str) -> str:
    """A folder name for ``name``; where characters had to be replaced, a digest of the original keeps
    distinct names apart (``x:y`` and ``x+y``), and a name of dots alone never means a parent folder."""
    arrows = name.replace("->", "_to_")
    readable = re.sub(r"[^A-Za-z0-9._=-]", "_", arrows)
    if readable == arrows and readable.strip("."):
        return readable
    return f"{readable.replace('.', '_')}-{hashlib.sha256(name.encode()).hexdigest()[:10]}"
