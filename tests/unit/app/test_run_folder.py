"""The run folder: safe names for any flow and run id, atomic writes."""

from __future__ import annotations

from pathlib import Path

from mirrorflow.app.run_folder import RunFolder, write_atomically


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
    path = tmp_path / "runs" / "a_to_b" / "r1" / "failover.md"

    write_atomically(path, "first")
    write_atomically(path, "second")

    assert path.read_text() == "second"
    assert [p.name for p in path.parent.iterdir()] == ["failover.md"]
