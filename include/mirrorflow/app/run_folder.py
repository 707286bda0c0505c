"""The run folder: every file the runs of a flow keep in the state folder, named in this one place.
They are reports for people and collectors, written by Airflow tasks; what a run's steps hand each
other (plan, copy result, window summary, verification) is in the offsets database
(``mirrorflow.store.run_documents``), so that a Spark driver needs no disk shared with Airflow.

    <state dir>/runs/<flow>/<run id>/   cutover_report.md, cutover_report.json
                                        failover.md, failover.json
    <state dir>/metrics/<flow>.source.prom, <flow>.checkpoint.prom   (node_exporter's textfile collector)

Invariants: names are safe on any file system and distinct names stay distinct; every write is
atomic (a reader sees the old file or the whole new one, never half of one). A run folder exists
only for a cutover or failover, and is kept.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

CUTOVER_REPORT = "cutover_report"


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
    def cutover_report(self) -> tuple[Path, Path]:
        """The cutover's report as JSON and as Markdown."""
        return self.path / f"{CUTOVER_REPORT}.json", self.path / f"{CUTOVER_REPORT}.md"

    @property
    def failover_report(self) -> tuple[Path, Path]:
        """The failover's report as Markdown and as JSON."""
        return self.path / "failover.md", self.path / "failover.json"


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


def _safe(name: str) -> str:
    """A folder name for ``name``; where characters had to be replaced, a digest of the original keeps
    distinct names apart (``x:y`` and ``x+y``), and a name of dots alone never means a parent folder."""
    arrows = name.replace("->", "_to_")
    readable = re.sub(r"[^A-Za-z0-9._=-]", "_", arrows)
    if readable == arrows and readable.strip("."):
        return readable
    return f"{readable.replace('.', '_')}-{hashlib.sha256(name.encode()).hexdigest()[:10]}"
