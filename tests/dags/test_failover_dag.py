"""dags/mirror_failover.py as Airflow's DagBag loads it: one manual failover DAG per enabled flow,
one task, typed trigger params, and no network I/O at parse time."""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from dag_parsing import DAGS_FOLDER, dagbag_class, parse_dags

from mirrorflow_dev.processes import free_ports

pytestmark = pytest.mark.airflow  # Airflow's DagBag parses the dags folder

FLOWS = """\
clusters = primary, backup, dr
primary.bootstrap.servers = 127.0.0.1:{0}
backup.bootstrap.servers = 127.0.0.1:{1}
dr.bootstrap.servers = 127.0.0.1:{2}
primary->backup.enabled = true
primary->backup.mirrorflow.schedule = @hourly
backup->primary.enabled = true
backup->primary.mirrorflow.task.retries = 5
primary->dr.enabled = false
"""


@pytest.fixture
def load_dags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[], Any]:
    """Parses the dags folder with FLOWS (loopback ports nothing listens on) as MIRROR_CONFIG; every
    socket connection and name lookup made through Python is refused."""
    dagbag_class()  # Airflow is imported before sockets are watched
    path = tmp_path / "mm2.properties"
    path.write_text(FLOWS.format(*free_ports(3)))

    def refuse(*args: object, **kwargs: object) -> Any:
        raise AssertionError(f"network I/O while parsing DAGs: {args}")

    def load() -> Any:
        for name in ("connect", "connect_ex"):
            monkeypatch.setattr(socket.socket, name, refuse)
        monkeypatch.setattr(socket, "create_connection", refuse)
        monkeypatch.setattr(socket, "getaddrinfo", refuse)
        return parse_dags(path, tmp_path / "state", monkeypatch)

    return load


@pytest.mark.parametrize(
    ("dag_id", "flow", "tags", "retries"),
    [
        (
            "mirror_primary_to_backup_failover",
            "primary->backup",
            ["backup", "failover", "mirror", "primary"],
            2,
        ),
        (
            "mirror_backup_to_primary_failover",
            "backup->primary",
            ["backup", "failover", "mirror", "primary"],
            5,
        ),
    ],
)
def test_one_manual_failover_dag_per_enabled_flow(
    load_dags: Callable[[], Any], tmp_path: Path, dag_id: str, flow: str, tags: list[str], retries: int
) -> None:
    bag = load_dags()

    # Other DAG files are other tests' business.
    assert str(DAGS_FOLDER / "mirror_failover.py") not in bag.import_errors
    assert sorted(d for d in bag.dag_ids if d.endswith("_failover")) == [
        "mirror_backup_to_primary_failover",
        "mirror_primary_to_backup_failover",
    ]
    dag = bag.dags[dag_id]
    assert dag.schedule is None
    assert dag.max_active_runs == 1
    assert dag.catchup is False
    assert sorted(dag.tags) == tags
    assert dag.task_ids == ["failover"]
    (failover,) = dag.tasks
    assert failover.retries == retries
    assert failover.op_args == (flow,)
    assert failover.python_callable.__module__ == "mirrorflow_airflow.failover_tasks"
    assert dag.params.dump() == {"groups": [], "dry_run": False}
    for name, value in dag.params.dump().items():
        param = dag.params.get_param(name)
        assert param.schema["type"] and param.description
        param.resolve(value)
    # Parsing touched neither the state folder nor the offsets database.
    assert not (tmp_path / "state").exists()
