"""The migration cutover DAG through real Airflow (`airflow dags test`), Spark and brokers: drain,
verify, consumer groups moved exactly, and the report of what happened."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from mirror_helpers import (
    airflow,
    assert_same_records,
    commit_group,
    committed_end,
    create_topic,
    migrated_airflow,
)

from mirrorflow.config.model import MirrorConfig
from mirrorflow.kafka.admin import ClusterAdmin
from mirrorflow_dev import sample_data
from mirrorflow_dev.local_kafka import LocalCluster
from mirrorflow_dev.paths import REPO_ROOT

pytestmark = [pytest.mark.kafka, pytest.mark.airflow]

DAG = "mirror_primary_to_backup_cutover"
ARTIFACTS = REPO_ROOT / ".state" / "test-artifacts"


def _cutover(
    env: dict[str, str], cwd: Path, config: MirrorConfig, conf: dict[str, Any]
) -> tuple[dict[str, Any], str]:
    """Run the cutover; return its JSON report and its Markdown one."""
    before = set(config.state_dir.glob("runs/*/*/cutover_report.json"))
    run = airflow(env, cwd, "dags", "test", DAG, "--conf", json.dumps(conf))
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-6000:]
    (written,) = set(config.state_dir.glob("runs/*/*/cutover_report.json")) - before
    return json.loads(written.read_text()), written.with_suffix(".md").read_text()


class Migration(NamedTuple):
    """A topic of 2 partitions (30 records each), two groups of it committed on the source (billing
    at 10 and 30, audit at 5 of partition 0), a flow with identity naming and an Airflow home."""

    topic: str
    app: str
    audit: str
    config: MirrorConfig
    env: dict[str, str]


def _migration(
    primary: LocalCluster, write_config: Callable[[str], MirrorConfig], unique_name: str, tmp_path: Path
) -> Migration:
    # Short names: the report of a cutover is the example in the docs. The suffix keeps them unique.
    suffix = "-".join(unique_name.rsplit("-", 2)[1:])
    topic, app, audit = f"orders-{suffix}", f"billing-{suffix}", f"audit-{suffix}"
    create_topic(primary.bootstrap, topic, 2)
    sample_data.produce_samples(primary.bootstrap, topic, 2, 0, 30)
    commit_group(primary.bootstrap, app, {(topic, 0): 10, (topic, 1): 30})
    commit_group(primary.bootstrap, audit, {(topic, 0): 5})
    config = write_config(
        "primary->backup.enabled = true\n"
        f"primary->backup.topics = {topic}\n"
        f"primary->backup.groups = .*-{suffix}\n"
        "primary->backup.replication.policy.class = IdentityReplicationPolicy\n"
    )
    return Migration(topic, app, audit, config, migrated_airflow(tmp_path / "airflow", config, tmp_path))


def test_a_cutover_drains_verifies_and_moves_groups_exactly(
    kafka_clusters: dict[str, LocalCluster],
    write_config: Callable[[str], MirrorConfig],
    unique_name: str,
    tmp_path: Path,
) -> None:
    primary, backup = kafka_clusters["primary"], kafka_clusters["backup"]
    topic, app, audit, config, env = _migration(primary, write_config, unique_name, tmp_path)
    # Records produced until the cutover are drained by it; audit read all of partition 1 meanwhile.
    sample_data.produce_samples(primary.bootstrap, topic, 2, 30, 5)
    commit_group(primary.bootstrap, audit, {(topic, 0): 5, (topic, 1): 35})

    # The cutover: both groups resume on the target exactly where they stopped on the source.
    done, done_md = _cutover(env, tmp_path, config, {})
    assert done["steps"]["preflight"]["result"]["lag"] == {f"{topic}-0": 35, f"{topic}-1": 35}
    assert done["steps"]["drain"]["result"]["records"] == 70
    assert done["outcome"] == "complete"
    verified = done["steps"]["verify"]["result"]
    assert (verified["ranges"], verified["mismatches"]) == (2, 0)
    assert [(v["source_records"], v["target_records"], v["matches"]) for v in verified["verdicts"]] == [
        (35, 35, True),
        (35, 35, True),
    ]
    # billing's source offset 30 is its copy's. audit's 35 is the end: past the drain's commit marker
    # at 35, where the target partition ends (no lag).
    assert done["steps"]["groups"]["result"]["committed"] == {
        app: {f"{topic}-0": 10, f"{topic}-1": 30},
        audit: {f"{topic}-0": 5, f"{topic}-1": 36},
    }
    assert committed_end(backup.bootstrap, topic, 1) == 36
    with ClusterAdmin(config.flow("primary->backup").target) as target:
        assert {
            g: {tp: o for tp, (o, _) in offs.items()}
            for g, offs in target.group_offsets([app, audit]).items()
        } == {
            app: {(topic, 0): 10, (topic, 1): 30},
            audit: {(topic, 0): 5, (topic, 1): 36},
        }
    assert assert_same_records(primary.bootstrap, topic, backup.bootstrap, topic, 2) == 70
    # Kept as a test artifact: docs/cutover-report-example.md is one.
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "cutover_report.md").write_text(done_md)
    assert done_md.splitlines()[0] == "# Cutover of flow primary->backup: complete"
    assert "| verify | success |" in done_md
    assert "2 ranges compared, 0 differ." in done_md


# A dry run's report of what it would commit: make test keeps the cutover that commits (above); the
# dry run's report is unit-tested (tests/unit/app/test_cutover.py).
@pytest.mark.extended
def test_a_dry_run_cutover_drains_and_verifies_and_only_shows_the_groups_offsets(
    kafka_clusters: dict[str, LocalCluster],
    write_config: Callable[[str], MirrorConfig],
    unique_name: str,
    tmp_path: Path,
) -> None:
    primary = kafka_clusters["primary"]
    topic, app, audit, config, env = _migration(primary, write_config, unique_name, tmp_path)

    # A dry run of one group: everything runs, the group's offsets are only shown.
    dry, dry_md = _cutover(env, tmp_path, config, {"groups": [audit], "dry_run": True})
    assert dry["outcome"] == "dry run"
    assert {s: o["status"] for s, o in dry["steps"].items()} == dict.fromkeys(
        ("preflight", "drain", "verify", "groups"), "success"
    )
    assert dry["steps"]["preflight"]["result"]["lag"] == {f"{topic}-0": 30, f"{topic}-1": 30}
    assert dry["steps"]["drain"]["result"]["records"] >= 60
    assert dry["steps"]["groups"]["result"]["committed"] == {audit: {f"{topic}-0": 5}}
    assert "Positions would be committed (dry run) on the target:" in dry_md
    with ClusterAdmin(config.flow("primary->backup").target) as target:
        assert target.group_offsets([audit, app]) == {app: {}, audit: {}}
