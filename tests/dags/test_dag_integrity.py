"""dags/mirror_flows.py as Airflow's DagBag loads it: one DAG per enabled flow, wired as designed,
import errors naming the bad key, and no network I/O at parse time.

Parsing needs no metadata database: these tests never run ``airflow db migrate``.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from dag_parsing import dagbag_class, import_error_line, parse_dags

from mirrorflow_dev.paths import REPO_ROOT
from mirrorflow_dev.processes import free_ports

pytestmark = pytest.mark.airflow  # Airflow's DagBag parses the dags folder

FLOWS = """\
clusters = primary, backup, dr
primary.bootstrap.servers = {primary}
backup.bootstrap.servers = {backup}
dr.bootstrap.servers = {dr}
replication.factor = 1
primary->backup.enabled = true
primary->backup.mirrorflow.schedule = @hourly
backup->primary.enabled = true
backup->primary.mirrorflow.spark.conn.id = spark_yarn
primary->dr.enabled = false
"""


@pytest.fixture
def load_dags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[str], Any]:
    """Writes ``text`` as the config named by MIRROR_CONFIG and parses the dags folder. Airflow is
    imported before the test starts: its import is neither timed nor watched for network I/O."""
    dagbag_class()

    def load(text: str) -> Any:
        path = tmp_path / "mm2.properties"
        path.write_text(text)
        return parse_dags(path, tmp_path / "state", monkeypatch)

    return load


@pytest.fixture
def closed_ports() -> dict[str, str]:
    """Bootstrap servers on loopback ports nothing listens on."""
    ports = free_ports(3)
    return {
        alias: f"127.0.0.1:{port}" for alias, port in zip(("primary", "backup", "dr"), ports, strict=True)
    }


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[object]]:
    """Records (and refuses) every socket connection and name lookup made through Python."""
    attempts: list[object] = []

    def refuse(*args: object, **kwargs: object) -> Any:
        attempts.append(args)
        raise OSError("network I/O while parsing DAGs")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    yield attempts


def test_a_mirror_cutover_and_failover_dag_per_enabled_flow(
    load_dags: Callable[[str], Any], closed_ports: dict[str, str]
) -> None:
    bag = load_dags(FLOWS.format(**closed_ports))

    assert bag.import_errors == {}
    assert sorted(bag.dag_ids) == [
        f"mirror_{flow}{kind}"
        for flow in ("backup_to_primary", "primary_to_backup")
        for kind in ("", "_cutover", "_failover")
    ]


def test_cutover_dag_wiring(load_dags: Callable[[str], Any], closed_ports: dict[str, str]) -> None:
    dag = load_dags(FLOWS.format(**closed_ports)).dags["mirror_primary_to_backup_cutover"]

    assert dag.schedule is None
    assert dag.max_active_runs == 1
    assert {t.task_id: sorted(t.downstream_task_ids) for t in dag.tasks} == {
        "preflight": ["drain"],
        "drain": ["verify"],
        "verify": ["groups"],
        "groups": ["report"],
        "report": [],
    }
    assert {t.retries for t in dag.tasks} == {0}
    assert dag.get_task("report").trigger_rule == "all_done"
    assert dag.params.dump() == {"topics": [], "groups": [], "drain_timeout_seconds": 1800, "dry_run": False}


@pytest.mark.parametrize(
    ("dag_id", "flow", "conn_id", "schedule"),
    [
        ("mirror_primary_to_backup", "primary->backup", "spark_default", "@hourly"),
        ("mirror_backup_to_primary", "backup->primary", "spark_yarn", None),
    ],
)
def test_dag_wiring(
    load_dags: Callable[[str], Any],
    closed_ports: dict[str, str],
    tmp_path: Path,
    dag_id: str,
    flow: str,
    conn_id: str,
    schedule: str | None,
) -> None:
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    dag = load_dags(FLOWS.format(**closed_ports)).dags[dag_id]

    assert dag.schedule == schedule
    # Scheduled and manual runs one at a time (a slow run is followed by one run, not a queue); a
    # backfill's runs are counted apart by Airflow and wait their turn in wait_for_turn.
    assert dag.max_active_runs == 1
    assert {t.retries for t in dag.tasks} == {2}
    assert dag.catchup is False
    assert sorted(dag.task_ids) == [
        "checkpoint", "commit", "copy", "freshness", "plan", "release", "wait_for_turn",
    ]  # fmt: skip
    wait, plan, copy, commit, checkpoint, freshness, release = (
        dag.get_task(t)
        for t in ("wait_for_turn", "plan", "copy", "commit", "checkpoint", "freshness", "release")
    )

    # wait_for_turn >> plan >> copy >> commit >> checkpoint >> freshness >> release; release is
    # plan's teardown.
    assert wait.upstream_task_ids == set()
    assert wait.downstream_task_ids == {"plan"}
    assert plan.upstream_task_ids == {"wait_for_turn"}
    assert plan.downstream_task_ids == {"copy", "release"}
    assert copy.upstream_task_ids == {"plan"}
    assert copy.downstream_task_ids == {"commit"}
    assert commit.upstream_task_ids == {"copy"}
    assert commit.downstream_task_ids == {"checkpoint"}
    assert checkpoint.upstream_task_ids == {"commit"}
    assert checkpoint.downstream_task_ids == {"freshness"}
    assert freshness.upstream_task_ids == {"checkpoint"}
    assert freshness.downstream_task_ids == {"release"}
    assert release.upstream_task_ids == {"freshness", "plan"}
    assert release.downstream_task_ids == set()
    assert plan.is_setup is True
    assert plan.is_teardown is False
    # The wait holds no worker slot between looks, and its own limit (the trigger param, at most a
    # week) fails it before Airflow's sensor timeout could.
    assert wait.mode == "reschedule"
    assert wait.poke_interval == 15
    assert wait.timeout > 7 * 24 * 3600
    assert wait.is_setup is False
    assert release.is_teardown is True
    assert release.trigger_rule == "all_done_setup_success"
    # Nothing to copy skips copy only: commit still runs (none_failed), so do checkpoints (consumer
    # groups move without new records), and release always does.
    assert plan.ignore_downstream_trigger_rules is False
    assert commit.trigger_rule == "none_failed"
    assert checkpoint.trigger_rule == "all_success"

    # The trigger form: every param typed, described, and valid at its default.
    params = dag.params.dump()
    assert params == {
        "topics": [],
        "max_records_per_partition": None,
        "dry_run": False,
        "start": "earliest",
        "start_timestamp": None,
        "lock_wait_timeout_seconds": 6 * 3600,
    }
    for name in params:
        param = dag.params.get_param(name)
        assert param.schema["type"] and param.description
        param.resolve(params[name])

    assert isinstance(copy, SparkSubmitOperator)
    assert copy._conn_id == conn_id
    assert copy.execution_timeout == timedelta(hours=6)
    assert copy.application == str(REPO_ROOT / "jobs" / "mirror_copy.py")
    assert copy.application_args == [
        "--config",
        str(tmp_path / "mm2.properties"),
        "--flow",
        flow,
        "--run-id",
        "{{ run_id }}",
    ]


def test_dr_flow_dag_wiring(load_dags: Callable[[str], Any], closed_ports: dict[str, str]) -> None:
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    text = FLOWS.format(**closed_ports).replace("mirrorflow.schedule = @hourly", "mirrorflow.schedule =") + (
        "primary->backup.mirrorflow.mode = dr\nprimary->backup.mirrorflow.dr.window.seconds = 300\n"
    )
    bag = load_dags(text)
    dag = bag.dags["mirror_primary_to_backup"]

    # A window every window.seconds, two runs at a time: the next window is up before this one ends.
    assert dag.schedule == timedelta(seconds=300)
    assert dag.max_active_runs == 2
    assert "dr" in dag.tags
    # start >> window >> report >> freshness >> release; release is start's teardown.
    assert {t.task_id: sorted(t.downstream_task_ids) for t in dag.tasks} == {
        "start": ["release", "window"],
        "window": ["report"],
        "report": ["freshness"],
        "freshness": ["release"],
        "release": [],
    }
    assert dag.get_task("start").is_setup is True
    assert dag.get_task("release").is_teardown is True
    assert dag.params.dump() == {}  # a window always mirrors up to now: no trigger form to ignore
    window = dag.get_task("window")
    assert isinstance(window, SparkSubmitOperator)
    assert window.application == str(REPO_ROOT / "jobs" / "mirror_dr.py")
    # A window's attempt: the window, its wait for the next one (600 s by default) and the copy that
    # may end it.
    assert window.execution_timeout == timedelta(hours=6, seconds=300 + 600)
    # The other flow stays in batch mode.
    assert "copy" in bag.dags["mirror_backup_to_primary"].task_ids


def test_schedule_from_top_level_applies_to_every_flow_unless_overridden(
    load_dags: Callable[[str], Any], closed_ports: dict[str, str]
) -> None:
    bag = load_dags(FLOWS.format(**closed_ports) + "mirrorflow.schedule = @daily\n")

    assert bag.import_errors == {}
    assert bag.dags["mirror_primary_to_backup"].schedule == "@hourly"
    assert bag.dags["mirror_backup_to_primary"].schedule == "@daily"


def test_mirror_clusters_makes_dags_only_of_the_flows_writing_to_the_listed_clusters(
    load_dags: Callable[[str], Any], closed_ports: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MIRROR_CLUSTERS", "backup")

    bag = load_dags(FLOWS.format(**closed_ports))

    assert bag.import_errors == {}
    kinds = ("", "_cutover", "_failover")
    assert sorted(bag.dag_ids) == [f"mirror_primary_to_backup{kind}" for kind in kinds]


def test_a_flows_queue_and_pool_are_on_every_task_of_its_dags(
    load_dags: Callable[[str], Any], closed_ports: dict[str, str]
) -> None:
    text = FLOWS.format(**closed_ports) + (
        "primary->backup.mirrorflow.airflow.queue = near-backup\nmirrorflow.airflow.pool = mirrors\n"
    )

    bag = load_dags(text)

    assert bag.import_errors == {}
    for kind in ("", "_cutover", "_failover"):
        tasks = bag.dags[f"mirror_primary_to_backup{kind}"].tasks
        assert {(t.queue, t.pool) for t in tasks} == {("near-backup", "mirrors")}
    assert {t.queue for t in bag.dags["mirror_backup_to_primary"].tasks} == {"default"}


def test_no_enabled_flow_gives_no_dag_and_no_error(
    load_dags: Callable[[str], Any], closed_ports: dict[str, str]
) -> None:
    text = FLOWS.format(**closed_ports).replace(".enabled = true", ".enabled = false")

    bag = load_dags(text)

    assert bag.import_errors == {}
    assert bag.dag_ids == []


@pytest.mark.parametrize(
    ("line", "error_line"),
    [
        (
            "primary->nowhere.enabled = true",
            "mirrorflow.errors.ConfigError: primary->nowhere.enabled: flow keys look like "
            "`<source>-><target>.<setting>` with both aliases listed in clusters (primary, backup, dr), "
            "but 'nowhere' is not; add it to clusters or fix the alias",
        ),
        (
            "backup->primary.mirrorflow.max.records.per.partition = 0",
            "mirrorflow.errors.ConfigError: backup->primary.mirrorflow.max.records.per.partition: "
            "expected a positive whole number, got '0'; set e.g. 1000000",
        ),
        (
            "primary->backup.topcis = orders",
            "mirrorflow.errors.ConfigError: primary->backup.topcis: unknown key: not an MM2 flow setting "
            "that MM2 or this product knows; did you mean `primary->backup.topics`?",
        ),
    ],
    ids=["unknown-alias", "bad-value", "typo-in-topics"],
)
def test_invalid_config_is_an_import_error_naming_the_key(
    load_dags: Callable[[str], Any], closed_ports: dict[str, str], line: str, error_line: str
) -> None:
    bag = load_dags(FLOWS.format(**closed_ports) + line + "\n")

    assert import_error_line(bag) == error_line


def test_parsing_does_no_network_or_state_io(
    load_dags: Callable[[str], Any],
    closed_ports: dict[str, str],
    no_network: list[object],
    tmp_path: Path,
) -> None:
    bag = load_dags(FLOWS.format(**closed_ports))

    assert bag.import_errors == {}
    assert len(bag.dag_ids) == 6
    assert no_network == []
    # Neither the state folder nor the offsets database is touched at parse time.
    assert not (tmp_path / "state").exists()
