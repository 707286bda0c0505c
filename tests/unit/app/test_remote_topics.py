"""Which source topic configs a remote topic gets, at creation and on each sync: MM2's rules."""

from __future__ import annotations

import pytest
from config_texts import ONE_FLOW

from mirrorflow.app.remote_topics import config_changes, synced_configs
from mirrorflow.config.model import FlowConfig, parse_config
from mirrorflow.errors import ConfigError

SOURCE_CONFIGS = {
    "cleanup.policy": "compact",
    "retention.ms": "604800000",
    "retention.bytes": "-1",
    "segment.bytes": "1073741824",
    "max.message.bytes": "2097152",
    "min.insync.replicas": "2",
    "unclean.leader.election.enable": "true",
    "message.timestamp.type": "LogAppendTime",
    "message.timestamp.difference.max.ms": "1000",
    "leader.replication.throttled.replicas": "*",
    "follower.replication.throttled.replicas": "*",
    "compression.type": "zstd",
}


def flow(extra: str = "") -> FlowConfig:
    (only,) = parse_config(ONE_FLOW + extra, env={}).flows
    return only


def test_default_excludes_drop_mm2s_default_keys_and_keep_the_rest() -> None:
    assert synced_configs(flow(), SOURCE_CONFIGS) == {
        "cleanup.policy": "compact",
        "retention.ms": "604800000",
        "retention.bytes": "-1",
        "segment.bytes": "1073741824",
        "max.message.bytes": "2097152",
        "compression.type": "zstd",
    }


def test_configured_excludes_are_full_match_regexes() -> None:
    # Properties syntax: `\\.` in the file is the regex `\.` (a literal dot).
    configured = flow("primary->backup.config.properties.exclude = retention\\\\..*, segment\\\\.bytes\n")
    assert configured.config_properties_exclude == (r"retention\..*", r"segment\.bytes")

    synced = synced_configs(
        configured,
        {
            **SOURCE_CONFIGS,
            # Only the whole key counts: a pattern matching a prefix or a suffix does not exclude.
            "segment.bytes.extra": "1",
            "x.retention.ms": "2",
            "retention": "3",
        },
    )

    assert synced == {
        "cleanup.policy": "compact",
        "max.message.bytes": "2097152",
        # Setting the list replaces MM2's defaults: these are synced again.
        "min.insync.replicas": "2",
        "unclean.leader.election.enable": "true",
        "message.timestamp.type": "LogAppendTime",
        "message.timestamp.difference.max.ms": "1000",
        "leader.replication.throttled.replicas": "*",
        "follower.replication.throttled.replicas": "*",
        "compression.type": "zstd",
        "segment.bytes.extra": "1",
        "x.retention.ms": "2",
        "retention": "3",
    }


def test_an_empty_exclude_list_syncs_everything() -> None:
    configured = flow("config.properties.exclude =\n")

    assert configured.config_properties_exclude == ()
    assert synced_configs(configured, SOURCE_CONFIGS) == SOURCE_CONFIGS


def test_no_source_configs_give_no_synced_configs() -> None:
    assert synced_configs(flow(), {}) == {}


# --- config sync of existing remote topics (MM2's incremental sync) ------------------------------


def test_config_changes_set_what_differs_and_revert_what_the_source_leaves_default() -> None:
    source = {"cleanup.policy": "compact", "retention.ms": "1000", "segment.ms": "60000"}
    remote = {"cleanup.policy": "compact", "retention.ms": "999", "max.message.bytes": "2000000"}

    assert config_changes(flow(), source, remote) == {
        "retention.ms": "1000",
        "segment.ms": "60000",
        "max.message.bytes": None,
    }


def test_config_changes_never_touch_excluded_keys_on_either_side() -> None:
    source = {"min.insync.replicas": "2", "message.timestamp.type": "LogAppendTime"}
    remote = {"min.insync.replicas": "1", "unclean.leader.election.enable": "true"}

    assert config_changes(flow(), source, remote) == {}


def test_config_changes_of_a_topic_in_sync_are_empty() -> None:
    assert config_changes(flow(), SOURCE_CONFIGS, synced_configs(flow(), SOURCE_CONFIGS)) == {}


@pytest.mark.parametrize(("written", "expected"), [("", True), ("false", False), ("TRUE", True)])
def test_config_sync_follows_sync_topic_configs_enabled(written: str, expected: bool) -> None:
    extra = f"sync.topic.configs.enabled = {written}\n" if written else ""
    assert flow(extra).sync_topic_configs is expected


def test_a_non_boolean_sync_switch_is_named() -> None:
    with pytest.raises(ConfigError, match=r"primary->backup\.sync\.topic\.configs\.enabled.*'yes'"):
        flow("primary->backup.sync.topic.configs.enabled = yes\n")
