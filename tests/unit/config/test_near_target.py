"""Near the target: a flow's Airflow queue and pool, the MIRROR_CLUSTERS filter of the DAG files, and
identity naming refused where it would loop; reverse checkpoints only where the opposite flow runs."""

from __future__ import annotations

import pytest
from config_texts import ONE_FLOW

from mirrorflow.app.dag_spec import task_defaults
from mirrorflow.config.model import flows_for_dags, parse_config
from mirrorflow.errors import ConfigError

BOTH_WAYS = ONE_FLOW + "backup->primary.enabled = true\n"
IDENTITY = "org.apache.kafka.connect.mirror.IdentityReplicationPolicy"


def test_a_flows_queue_and_pool_are_every_tasks_defaults() -> None:
    config = parse_config(
        BOTH_WAYS
        + "mirrorflow.airflow.pool = mirrors\nprimary->backup.mirrorflow.airflow.queue = near-backup\n",
        env={},
    )

    assert task_defaults(config.flow("primary->backup"))["queue"] == "near-backup"
    assert task_defaults(config.flow("primary->backup"))["pool"] == "mirrors"
    assert "queue" not in task_defaults(config.flow("backup->primary"))


def test_mirror_clusters_keeps_the_flows_writing_to_the_listed_clusters() -> None:
    config = parse_config(BOTH_WAYS, env={})

    assert [f.name for f in flows_for_dags(config, {"MIRROR_CLUSTERS": "backup"})] == ["primary->backup"]
    assert [f.name for f in flows_for_dags(config, {"MIRROR_CLUSTERS": " primary , backup "})] == [
        "primary->backup",
        "backup->primary",
    ]
    assert flows_for_dags(config, {}) == config.flows
    with pytest.raises(ConfigError) as unknown:
        flows_for_dags(config, {"MIRROR_CLUSTERS": "backup, bakup"})
    assert str(unknown.value) == (
        "env MIRROR_CLUSTERS: bakup is not a cluster of the configuration (clusters: primary, backup); list "
        "target cluster aliases, e.g. MIRROR_CLUSTERS=backup"
    )


@pytest.mark.parametrize(
    "policy",
    [f"replication.policy.class = {IDENTITY}\n", f"backup->primary.replication.policy.class = {IDENTITY}\n"],
)
def test_identity_naming_with_a_flow_each_way_is_refused_naming_both_flows(policy: str) -> None:
    with pytest.raises(ConfigError) as refused:
        parse_config(BOTH_WAYS + policy, env={})

    assert str(refused.value).startswith(
        f"{policy.split(' = ')[0]}: flows primary->backup and backup->primary are both enabled, and "
    )
    assert "use IdentityReplicationPolicy: remote topics keep their names, so each flow would mirror" in str(
        refused.value
    )


def test_identity_naming_one_way_is_accepted() -> None:
    config = parse_config(ONE_FLOW + f"replication.policy.class = {IDENTITY}\n", env={})

    assert [f.name for f in config.flows] == ["primary->backup"]


def test_reverse_checkpoints_are_off_by_default_and_on_by_the_flow_key() -> None:
    config = parse_config(
        BOTH_WAYS + "backup->primary.mirrorflow.reverse.checkpoints.enabled = true\n", env={}
    )

    assert config.flow("backup->primary").settings.reverse_checkpoints
    assert not config.flow("primary->backup").settings.reverse_checkpoints
    assert config.flow("backup->primary").opposite == "primary->backup"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            ONE_FLOW + "primary->backup.mirrorflow.reverse.checkpoints.enabled = true\n",
            "primary->backup.mirrorflow.reverse.checkpoints.enabled: flow primary->backup asks for reverse "
            "checkpoints, but flow backup->primary is not enabled: they translate positions on "
            "backup->primary's remote topics through its batch log. Enable backup->primary "
            "(`backup->primary.enabled = true`) or turn the key off",
        ),
        (
            BOTH_WAYS + "mirrorflow.reverse.checkpoints.enabled = true\nemit.checkpoints.enabled = false\n",
            "mirrorflow.reverse.checkpoints.enabled: flow primary->backup asks for reverse checkpoints but "
            "has emit.checkpoints.enabled = false; reverse checkpoints are written by the checkpoint task: "
            "turn one of the two keys around",
        ),
    ],
)
def test_reverse_checkpoints_without_the_opposite_flow_or_checkpoints_are_refused(
    text: str, message: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        parse_config(text, env={})

    assert str(refused.value) == message
