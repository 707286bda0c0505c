"""Which source topic configs a remote topic is created with: MM2's ``config.properties.exclude``."""

from __future__ import annotations

from mirrorflow.config import FlowConfig, parse_config
from mirrorflow.remote_topics import synced_configs

BASE = """\
clusters = primary, backup
primary.bootstrap.servers = p1:9092
backup.bootstrap.servers = b1:9092
primary->backup.enabled = true
"""

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
    (only,) = parse_config(BASE + extra, env={}).flows
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
