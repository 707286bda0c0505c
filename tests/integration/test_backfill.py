"""Scheduled and backfill runs through a running Airflow (`airflow standalone`): each run copies
the records before its data interval's end, and re-running intervals already copied copies nothing."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.parse
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from mirror_helpers import AIRFLOW, create_topic, running_airflow, wait_for_dag

from mirrorflow.config.model import MirrorConfig
from mirrorflow.store.flow_lock import lock_holder
from mirrorflow.store.offsets_store import OffsetsStore
from mirrorflow_dev import sample_data
from mirrorflow_dev.local_airflow import LocalAirflow
from mirrorflow_dev.local_kafka import LocalCluster

pytestmark = [pytest.mark.kafka, pytest.mark.airflow]

FLOW = "primary->backup"
DAG = "mirror_primary_to_backup"
# Records per partition produced on each day of March 2025, in day order.
DAYS = {1: 5, 2: 4, 3: 3}


def _produce_days(bootstrap: str, topic: str, partitions: int) -> None:
    producer = sample_data.producer(bootstrap)
    for p in range(partitions):
        records, index = [], 0
        for day, count in DAYS.items():
            for i in range(count):
                at = datetime(2025, 3, day, 6, tzinfo=UTC) + timedelta(minutes=i)
                records.append(
                    replace(sample_data.sample_record(topic, p, index), timestamp=int(at.timestamp() * 1000))
                )
                index += 1
        sample_data.produce(producer, topic, p, records)


def _backfill(airflow: LocalAirflow, *args: str, first: str = "2025-03-02") -> list[dict[str, Any]]:
    """`airflow backfill create` from ``first`` to the 3rd of March, at Airflow's default concurrency
    (its runs start together and wait their turn); waits until the backfill completes and returns the
    DAG's backfill runs, oldest first."""
    for attempt in range(6):
        created = subprocess.run(
            [AIRFLOW, "backfill", "create", "--dag-id", DAG,
             "--from-date", first, "--to-date", "2025-03-03", *args],
            env=airflow.env, cwd=airflow.home, capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        output = created.stdout[-3000:] + created.stderr[-3000:]
        if created.returncode == 0 or "database is locked" not in output or attempt == 5:
            break
        # Airflow's dev metadata DB is SQLite: when the CLI's transaction and the scheduler's deadlock on
        # a lock upgrade, SQLite fails the CLI's at once ("database is locked", no busy wait). Airflow
        # commits the backfill before its runs and cleans it up after a lock error only on PostgreSQL and
        # MySQL: cancel what is left (no runs), then create it again, as an operator would.
        for backfill in airflow.api("GET", f"/api/v2/backfills?dag_id={DAG}")["backfills"]:
            if not backfill["completed_at"]:
                try:
                    airflow.api("PUT", f"/api/v2/backfills/{backfill['id']}/cancel")
                except urllib.error.HTTPError as exc:
                    if exc.code != 409:  # 409: the scheduler completed it meanwhile
                        raise
        time.sleep(1 + attempt)
    assert created.returncode == 0, output
    deadline = time.monotonic() + 600
    while True:
        backfills = airflow.api("GET", f"/api/v2/backfills?dag_id={DAG}")["backfills"]
        if backfills and all(b["completed_at"] for b in backfills):
            break
        assert time.monotonic() < deadline, f"backfill not complete after 600 s: {json.dumps(backfills)}"
        time.sleep(2)
    runs = airflow.api("GET", f"/api/v2/dags/{DAG}/dagRuns?run_type=backfill&order_by=logical_date")
    return list(runs["dag_runs"])


def _failed_tasks(airflow: LocalAirflow, runs: list[dict[str, Any]]) -> str:
    """The end of each failed task's log in ``runs``: what a red run's assertion shows."""
    shown = []
    for run in runs:
        if run["state"] == "success":
            continue
        base = f"/api/v2/dags/{DAG}/dagRuns/{urllib.parse.quote(run['dag_run_id'], safe='')}/taskInstances"
        try:
            for ti in airflow.api("GET", base)["task_instances"]:
                if ti["state"] in ("failed", "upstream_failed"):
                    logs = airflow.api(
                        "GET", f"{base}/{ti['task_id']}/logs/{ti['try_number']}?full_content=true"
                    )
                    text = json.dumps(logs.get("content", logs))[-3000:]
                    shown.append(f"{run['dag_run_id']} {ti['task_id']} ({ti['state']}): {text}")
        except (OSError, KeyError, ValueError) as exc:  # diagnostics only: never hide the failure itself
            shown.append(f"{run['dag_run_id']}: its task logs could not be read ({exc!r})")
    return "\n".join(shown)


def _assert_copied_first(primary: LocalCluster, backup: LocalCluster, topic: str, count: int) -> None:
    """Each remote partition holds exactly the first ``count`` records of its source partition."""
    for p in range(2):
        source = sample_data.read_partition(primary.bootstrap, topic, p)
        assert len(source) == sum(DAYS.values())
        assert sample_data.read_partition(backup.bootstrap, f"primary.{topic}", p) == source[:count]


def test_a_backfill_copies_one_interval_per_run_and_a_rerun_copies_nothing(
    kafka_clusters: dict[str, LocalCluster],
    write_config: Callable[[str], MirrorConfig],
    unique_name: str,
    tmp_path: Path,
) -> None:
    primary, backup = kafka_clusters["primary"], kafka_clusters["backup"]
    topic = unique_name
    create_topic(primary.bootstrap, topic, 2)
    _produce_days(primary.bootstrap, topic, 2)
    config = write_config(
        f"primary->backup.enabled = true\nprimary->backup.topics = {topic}\n"
        "primary->backup.mirrorflow.schedule = @daily\n"
    )
    store = OffsetsStore(config.offsets_db_url)

    # The scheduler creates no scheduled runs of its own here, so every run is the backfill's.
    with running_airflow(
        tmp_path / "airflow", config, AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE="False"
    ) as airflow:
        wait_for_dag(airflow, DAG)

        runs = _backfill(airflow)
        assert [(r["logical_date"][:10], r["state"]) for r in runs] == [
            ("2025-03-02", "success"), ("2025-03-03", "success"),
        ], _failed_tasks(airflow, runs)  # fmt: skip
        by_run = {r["dag_run_id"]: r["logical_date"][:10] for r in runs}
        for p in range(2):
            # Each run copied its own day, in day order: 5 records of the 1st, 4 of the 2nd; the 3
            # of the 3rd lie past the last interval's end.
            assert [
                (by_run[b.run_id], b.source_start, b.source_end) for b in store.batches(FLOW, topic, p)
            ] == [("2025-03-02", 0, 5), ("2025-03-03", 5, 9)]
        _assert_copied_first(primary, backup, topic, 9)

        # The last interval again, though it completed: the run succeeds again and copies nothing.
        again = _backfill(airflow, "--reprocess-behavior", "completed", first="2025-03-03")
        assert [r["state"] for r in again] == ["success"] * 2, _failed_tasks(airflow, again)
        assert again[1]["end_date"] > runs[1]["end_date"]
        assert len(store.batches(FLOW, topic)) == 4
        _assert_copied_first(primary, backup, topic, 9)
        assert lock_holder(store, FLOW) is None


# The same bound as the backfill's runs, from the scheduler's own schedule: make test keeps the backfill.
@pytest.mark.extended
def test_a_scheduled_run_copies_the_records_before_its_time(
    kafka_clusters: dict[str, LocalCluster],
    write_config: Callable[[str], MirrorConfig],
    unique_name: str,
    tmp_path: Path,
) -> None:
    primary, backup = kafka_clusters["primary"], kafka_clusters["backup"]
    topic = unique_name
    create_topic(primary.bootstrap, topic, 1)
    # The scheduler's run of a @daily DAG unpaused today is at today's midnight (UTC): it copies the
    # four records of last night, not the two of this morning.
    midnight = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    times = [midnight - timedelta(minutes=4 - i) for i in range(4)] + [datetime.now(UTC)] * 2
    records = [
        replace(sample_data.sample_record(topic, 0, i), timestamp=int(at.timestamp() * 1000))
        for i, at in enumerate(times)
    ]
    sample_data.produce(sample_data.producer(primary.bootstrap), topic, 0, records)
    config = write_config(
        f"primary->backup.enabled = true\nprimary->backup.topics = {topic}\n"
        "primary->backup.mirrorflow.schedule = @daily\n"
    )
    store = OffsetsStore(config.offsets_db_url)

    with running_airflow(tmp_path / "airflow", config) as airflow:
        wait_for_dag(airflow, DAG)
        deadline = time.monotonic() + 600
        while True:
            runs = airflow.api("GET", f"/api/v2/dags/{DAG}/dagRuns?run_type=scheduled")["dag_runs"]
            if runs and runs[0]["state"] in ("success", "failed"):
                break
            assert time.monotonic() < deadline, f"no scheduled run finished in 600 s: {json.dumps(runs)}"
            time.sleep(2)

    assert [(r["logical_date"][:10], r["state"]) for r in runs] == [(midnight.date().isoformat(), "success")]
    assert [(b.source_start, b.source_end) for b in store.batches(FLOW, topic)] == [(0, 4)]
    assert sample_data.read_partition(backup.bootstrap, f"primary.{topic}", 0) == records[:4]
