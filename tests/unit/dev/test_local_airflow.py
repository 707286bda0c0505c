"""The local Airflow's executor slots: enough for every DR flow's two windows at a handover."""

from __future__ import annotations

from pathlib import Path

import pytest

from mirrorflow_dev.local_airflow import executor_slots

CLUSTERS = (
    "clusters = a, b, c\na.bootstrap.servers = x:1\nb.bootstrap.servers = x:2\nc.bootstrap.servers = x:3\n"
)


@pytest.mark.parametrize(
    ("flows", "slots"),
    [
        ("a->b.enabled = true\n", 4),  # a batch flow: one task at a time
        ("a->b.enabled = true\na->b.mirrorflow.mode = dr\n", 4),
        (
            "a->b.enabled = true\na->b.mirrorflow.mode = dr\nc->b.enabled = true\nc->b.mirrorflow.mode = dr\n"
            "b->a.enabled = true\nb->a.mirrorflow.mode = dr\n",
            8,
        ),
    ],
)
def test_two_slots_per_dr_flow_and_two_for_the_short_tasks(tmp_path: Path, flows: str, slots: int) -> None:
    config = tmp_path / "mm2.properties"
    config.write_text(CLUSTERS + flows + f"mirrorflow.state.dir = {tmp_path}\n")
    assert executor_slots(config) == slots


def test_a_config_that_does_not_load_gets_the_minimum(tmp_path: Path) -> None:
    assert executor_slots(tmp_path / "absent.properties") == 4
