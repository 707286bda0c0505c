"""Freshness alerts through real Airflow (`airflow dags test`): a run that leaves the mirror further
behind than the flow allows fails visibly, naming the partitions, and calls the flow's notifier."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from mirror_helpers import airflow, create_topic, migrated_airflow

from mirrorflow.config.model import MirrorConfig
from mirrorflow.store.flow_lock import lock_holder
from mirrorflow.store.offsets_store import OffsetsStore
from mirrorflow_dev import sample_data
from mirrorflow_dev.local_kafka import LocalCluster

pytestmark = [pytest.mark.kafka, pytest.mark.airflow]

FLOW = "primary->backup"

# An Airflow failure callback, as a user would write one: here it records what it was told.
NOTIFIER = """
import json, os

def notify(context):
    with open(os.environ["ALERT_PROBE_FILE"], "a") as out:
        out.write(json.dumps({"task": context["ti"].task_id, "error": str(context["exception"])}) + "\\n")
"""


def test_a_stale_run_fails_its_freshness_task_and_calls_the_notifier(
    kafka_clusters: dict[str, LocalCluster],
    write_config: Callable[[str], MirrorConfig],
    unique_name: str,
    tmp_path: Path,
) -> None:
    primary = kafka_clusters["primary"]
    topic = unique_name
    create_topic(primary.bootstrap, topic, 2)
    sample_data.produce_samples(primary.bootstrap, topic, 2, 0, 10)
    (tmp_path / "alert_probe.py").write_text(NOTIFIER)
    probe = tmp_path / "alerts.jsonl"
    config = write_config(
        f"primary->backup.enabled = true\nprimary->backup.topics = {topic}\n"
        "mirrorflow.max.records.per.partition = 4\n"
        "primary->backup.mirrorflow.alert.lag.max.records = 5\n"
        "primary->backup.mirrorflow.alert.notifier = alert_probe:notify\n"
    )
    env = migrated_airflow(tmp_path / "airflow", config, tmp_path)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tmp_path), env.get("PYTHONPATH")]))
    env["ALERT_PROBE_FILE"] = str(probe)
    store = OffsetsStore(config.offsets_db_url)

    stale = airflow(env, tmp_path, "dags", "test", "mirror_primary_to_backup")

    message = (
        f"flow primary->backup is stale: 2 partitions lag more than 5 records: {topic}-0 (6), {topic}-1 (6)."
    )
    assert stale.returncode != 0
    assert f"StaleMirrorError: {message}" in stale.stdout + stale.stderr
    alerts = [json.loads(line) for line in probe.read_text().splitlines()]
    assert len(alerts) == 1
    assert alerts[0]["task"] == "freshness"
    assert alerts[0]["error"].startswith(f"StaleMirrorError: {message}")
    # What the run copied is committed all the same, and its lock given back.
    assert {p: pos.next_source_offset for (_, p), pos in store.progress(FLOW).items()} == {0: 4, 1: 4}
    assert lock_holder(store, FLOW) is None
    # A lag within the limit passes the check: every other flow run through Airflow shows it, and the
    # check's bounds are unit-tested (tests/unit/app/test_freshness.py).
