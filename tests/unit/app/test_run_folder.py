"""The run folder: safe names for any flow and run id, atomic writes, clear errors for missing files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mirrorflow.app.run_folder import RunFolder, flow_runs, prune_runs, read_file, write_atomically
from mirrorflow.errors import PlanError


def test_run_folder_makes_safe_folder_names() -> None:
    folder = RunFolder.of(Path("/state"), "a->b", "manual__2026-01-01T00:00:00+00:00").path

    assert folder.parent == Path("/state/runs/a_to_b")
    assert folder.name.startswith("manual__2026-01-01T00_00_00_00_00-")


def test_run_folder_keeps_distinct_run_ids_apart_and_never_climbs() -> None:
    names = {RunFolder.of(Path("/s"), "a->b", r).path.name for r in ("x:y", "x+y", "x_y", "..", ".")}

    assert len(names) == 5
    assert not any(set(n) <= {"."} for n in names)


def test_run_folder_keeps_dots_dashes_and_equals_and_replaces_separators() -> None:
    folder = RunFolder.of(Path("/state"), "eu.west-1->us", "scheduled__x=1/../y z").path

    assert folder.parent == Path("/state/runs/eu.west-1_to_us")
    assert folder.name.startswith("scheduled__x=1____y_z-")


def test_write_atomically_creates_folders_replaces_and_leaves_no_temp_file(tmp_path: Path) -> None:
    path = tmp_path / "runs" / "a_to_b" / "r1" / "plan.json"

    write_atomically(path, "first")
    write_atomically(path, "second")

    assert path.read_text() == "second"
    assert [p.name for p in path.parent.iterdir()] == ["plan.json"]
    assert read_file(path, "plan file") == "second"


def test_read_file_of_a_missing_file_says_which_task_to_rerun(tmp_path: Path) -> None:
    path = tmp_path / "plan.json"

    with pytest.raises(PlanError) as caught:
        read_file(path, "plan file")

    assert str(caught.value) == f"plan file {path} does not exist; re-run the task that writes it"


# --- runner.batches_for --------------------------------------------------------------------------


def test_a_flow_keeps_its_newest_run_folders_its_reports_and_the_run_releasing(tmp_path: Path) -> None:
    def run(n: int, *files: str) -> Path:
        folder = RunFolder.of(tmp_path, "a->b", f"run-{n:03}")
        for name in ("plan.json", *files):
            write_atomically(folder.path / name, "{}")
        os.utime(folder.path, (1_000_000 + n, 1_000_000 + n))  # run-104 is the newest
        return folder.path

    folders = [run(n) for n in range(105)]
    cutover = run(1, "cutover_report.md")  # among the oldest
    failover = run(2, "failover.md")
    os.utime(cutover, (1_000_001, 1_000_001))
    os.utime(failover, (1_000_002, 1_000_002))

    assert prune_runs(tmp_path, "a->b", keep=100, spare="run-000") == 2  # run-003 and run-004
    left = {p.name for p in flow_runs(tmp_path, "a->b").iterdir()}
    assert left == {f.name for f in folders[5:]} | {"run-000", "run-001", "run-002"}
    assert prune_runs(tmp_path, "a->b", keep=100) == 1  # run-000, no longer spared
    assert prune_runs(tmp_path / "nowhere", "a->b") == 0
