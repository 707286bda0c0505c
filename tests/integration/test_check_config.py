"""``python -m mirrorflow check-config``: a config checked against the real session clusters (two flows
that would write one remote topic found), and a config with a typo refused, without a run."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from mirror_helpers import create_topic

from mirrorflow.config.model import MirrorConfig
from mirrorflow_dev.local_kafka import LocalCluster

pytestmark = pytest.mark.kafka


def _check(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mirrorflow", "check-config", str(path)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_check_config_lists_the_topics_each_flow_would_mirror_now(
    kafka_clusters: dict[str, LocalCluster],
    write_config: Callable[[str], MirrorConfig],
    unique_name: str,
) -> None:
    create_topic(kafka_clusters["primary"].bootstrap, unique_name, 3)
    create_topic(kafka_clusters["primary"].bootstrap, f"{unique_name}-skipped", 1)
    config = write_config(
        f"primary->backup.enabled = true\nprimary->backup.topics = {unique_name}\ntasks.max = 4"
    )
    assert config.path is not None

    checked = _check(config.path)

    assert checked.returncode == 0, checked.stderr
    # The shared clusters may hold heartbeats topics, which every flow mirrors whatever `topics` says.
    (listed,) = [
        line for line in checked.stdout.splitlines() if line.startswith("  topics it would mirror now: ")
    ]
    assert f"{unique_name} (3 partitions)" in listed.split(": ", 1)[1].split(", ")
    assert f"{unique_name}-skipped" not in listed
    assert "  reverse checkpoints: off" in checked.stdout.splitlines()
    assert "  no effect  tasks.max: parallelism comes from Spark" in checked.stdout
    assert "  honoured   primary->backup.topics: include regexes" in checked.stdout


def test_check_config_finds_two_flows_that_would_write_one_remote_topic(
    three_clusters: dict[str, LocalCluster],
    write_config_of_three: Callable[[str], MirrorConfig],
    unique_name: str,
) -> None:
    """Two sources aggregated into one cluster by identity naming, each holding a topic of one name
    that both flows' patterns select (the load cannot know it: the sources' topics show it)."""
    for source in ("primary", "dr"):
        create_topic(three_clusters[source].bootstrap, unique_name, 1)
    config = write_config_of_three(
        "replication.policy.class = IdentityReplicationPolicy\n"
        f"primary->backup.enabled = true\nprimary->backup.topics = {unique_name}.*\n"
        f"dr->backup.enabled = true\ndr->backup.topics = {unique_name}.*\n"
    )
    assert config.path is not None

    checked = _check(config.path)

    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert (
        f"error: flows primary->backup and dr->backup would all write topic {unique_name} on cluster backup"
    ) in checked.stdout


def test_check_config_refuses_a_typo_naming_the_key_and_the_suggestion(
    write_config: Callable[[str], MirrorConfig],
) -> None:
    config = write_config("primary->backup.enabled = true")
    assert config.path is not None
    config.path.write_text(config.path.read_text() + "primary->backup.topcis = orders\n")

    checked = _check(config.path)

    assert (checked.returncode, checked.stdout) == (1, "")
    assert checked.stderr == (
        "invalid config: primary->backup.topcis: unknown key: not an MM2 flow setting that MM2 or this "
        "product knows; did you mean `primary->backup.topics`?\n"
    )
