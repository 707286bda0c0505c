"""Selection, naming and topologies on real brokers: what gets mirrored where, and what never does."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from kafka.admin import AlterConfigOp, ConfigResource, ConfigResourceType, KafkaAdminClient
from mirror_helpers import assert_same_records, create_topic, run_flow, topics
from pyspark.sql import SparkSession

from mirrorflow.app import batch_run
from mirrorflow.config.model import MirrorConfig
from mirrorflow.errors import TargetStateError
from mirrorflow.store.flow_lock import lock_holder
from mirrorflow.store.offsets_store import OffsetsStore
from mirrorflow_dev import sample_data
from mirrorflow_dev.local_kafka import LocalCluster

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

Clusters = dict[str, LocalCluster]
WriteConfig = Callable[[str], MirrorConfig]


@pytest.fixture
def write_config(write_config_of_three: WriteConfig) -> WriteConfig:
    """Chains and fan-in need a third cluster ("dr"): this module's configs name all three."""
    return write_config_of_three


def seed(cluster: LocalCluster, topic: str, partitions: int = 2, count: int = 30) -> None:
    create_topic(cluster.bootstrap, topic, partitions)
    sample_data.produce_samples(cluster.bootstrap, topic, partitions, 0, count)


def mine(cluster: LocalCluster, name: str) -> set[str]:
    return {t for t in topics(cluster.bootstrap) if name in t}


def test_excluded_internal_and_cyclic_topics_are_not_mirrored(
    three_clusters: Clusters, write_config: WriteConfig, spark: SparkSession, unique_name: str
) -> None:
    primary, backup = three_clusters["primary"], three_clusters["backup"]
    u = unique_name
    for name in (f"{u}-keep", f"{u}-skip", f"{u}-internal", f"__{u}", f"backup.{u}", f"dr.backup.{u}"):
        seed(primary, name, partitions=1, count=3)
    config = write_config(
        f"primary->backup.enabled = true\nprimary->backup.topics = .*{u}.*\n"
        f"primary->backup.topics.exclude = .*-skip, .*[\\-\\.]internal, __.*\n"
    )

    report = run_flow(config, "primary->backup", "run-1", spark)

    # dr.backup.<u> came from backup through dr: sending it to backup would close a loop.
    assert mine(backup, u) == {f"primary.{u}-keep"}
    assert [t.topic for t in report.topics] == [f"{u}-keep"]
    assert_same_records(primary.bootstrap, f"{u}-keep", backup.bootstrap, f"primary.{u}-keep", 1)


def test_active_active_makes_no_loops(
    three_clusters: Clusters, write_config: WriteConfig, spark: SparkSession, unique_name: str
) -> None:
    primary, backup = three_clusters["primary"], three_clusters["backup"]
    u = unique_name
    seed(primary, u)
    seed(backup, u, count=20)
    config = write_config(
        f"primary->backup.enabled = true\nbackup->primary.enabled = true\ntopics = .*{u}.*\n"
    )

    for i, flow in enumerate(("primary->backup", "backup->primary", "primary->backup", "backup->primary")):
        run_flow(config, flow, f"run-{i}", spark)

    assert mine(primary, u) == {u, f"backup.{u}"}
    assert mine(backup, u) == {u, f"primary.{u}"}
    assert assert_same_records(primary.bootstrap, u, backup.bootstrap, f"primary.{u}", 2) == 60
    assert assert_same_records(backup.bootstrap, u, primary.bootstrap, f"backup.{u}", 2) == 40


def test_chain_prefixes_every_hop(
    three_clusters: Clusters, write_config: WriteConfig, spark: SparkSession, unique_name: str
) -> None:
    primary, dr = three_clusters["primary"], three_clusters["dr"]
    u = unique_name
    seed(primary, u)
    config = write_config(f"primary->backup.enabled = true\nbackup->dr.enabled = true\ntopics = .*{u}.*\n")

    run_flow(config, "primary->backup", "run-1", spark)
    run_flow(config, "backup->dr", "run-1", spark)

    assert mine(dr, u) == {f"backup.primary.{u}"}
    assert assert_same_records(primary.bootstrap, u, dr.bootstrap, f"backup.primary.{u}", 2) == 60


def test_fan_in_and_fan_out(
    three_clusters: Clusters, write_config: WriteConfig, spark: SparkSession, unique_name: str
) -> None:
    primary, backup, dr = three_clusters["primary"], three_clusters["backup"], three_clusters["dr"]
    u = unique_name
    seed(primary, f"{u}-a")
    seed(backup, f"{u}-b", count=10)
    config = write_config(
        "primary->backup.enabled = true\nprimary->dr.enabled = true\nbackup->dr.enabled = true\n"
        f"primary->backup.topics = {u}-a\nprimary->dr.topics = {u}-a\nbackup->dr.topics = {u}-b\n"
    )

    for flow in ("primary->backup", "primary->dr", "backup->dr"):
        run_flow(config, flow, "run-1", spark)

    assert mine(dr, u) == {f"primary.{u}-a", f"backup.{u}-b"}
    assert mine(backup, u) == {f"{u}-b", f"primary.{u}-a"}
    assert_same_records(primary.bootstrap, f"{u}-a", dr.bootstrap, f"primary.{u}-a", 2)
    assert_same_records(primary.bootstrap, f"{u}-a", backup.bootstrap, f"primary.{u}-a", 2)
    assert_same_records(backup.bootstrap, f"{u}-b", dr.bootstrap, f"backup.{u}-b", 2)


def test_identity_policy_keeps_names(
    three_clusters: Clusters, write_config: WriteConfig, spark: SparkSession, unique_name: str
) -> None:
    primary, dr = three_clusters["primary"], three_clusters["dr"]
    u = unique_name
    seed(primary, u)
    config = write_config(
        f"primary->dr.enabled = true\nprimary->dr.topics = {u}\n"
        "primary->dr.replication.policy.class = IdentityReplicationPolicy\n"
    )

    run_flow(config, "primary->dr", "run-1", spark)

    assert mine(dr, u) == {u}
    assert_same_records(primary.bootstrap, u, dr.bootstrap, u, 2)


def test_remote_topic_gets_partitions_and_synced_configs(
    three_clusters: Clusters, write_config: WriteConfig, spark: SparkSession, unique_name: str
) -> None:
    primary, backup = three_clusters["primary"], three_clusters["backup"]
    u = unique_name
    configs = {"retention.ms": "123456789", "cleanup.policy": "compact", "min.insync.replicas": "1"}
    create_topic(primary.bootstrap, u, 5, configs)
    config = write_config(f"primary->backup.enabled = true\nprimary->backup.topics = {u}\n")

    run_flow(config, "primary->backup", "run-1", spark)

    admin = KafkaAdminClient(bootstrap_servers=backup.bootstrap)
    try:
        (described,) = admin.describe_topics([f"primary.{u}"])
        remote = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, f"primary.{u}")])
    finally:
        admin.close()
    assert len(described["partitions"]) == 5
    set_on_remote = {k: v["value"] for k, v in remote["topic"][f"primary.{u}"].items()}
    # min.insync.replicas is on MM2's config.properties.exclude list: never synced.
    assert set_on_remote == {"retention.ms": "123456789", "cleanup.policy": "compact"}


def _topic_configs(cluster: LocalCluster, topic: str) -> dict[str, str]:
    """The configs set on the topic itself (what the broker reports as modified)."""
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
    finally:
        admin.close()
    return {k: v["value"] for k, v in described["topic"][topic].items()}


def _alter(cluster: LocalCluster, topic: str, configs: dict[str, tuple[AlterConfigOp, str | None]]) -> None:
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        result = admin.alter_configs(
            [ConfigResource(ConfigResourceType.TOPIC, topic, configs=configs)], incremental=True
        )
        assert result == {"topic": {topic: "OK"}}
    finally:
        admin.close()


def test_source_config_changes_and_new_partitions_reach_the_remote_topic_on_the_next_run(
    three_clusters: Clusters, write_config: WriteConfig, spark: SparkSession, unique_name: str
) -> None:
    primary, backup = three_clusters["primary"], three_clusters["backup"]
    u, remote = unique_name, f"primary.{unique_name}"
    # Sizes, not times: sample records carry 2001 timestamps, which any retention.ms would delete.
    create_topic(primary.bootstrap, u, 2, {"retention.bytes": "1000000000", "cleanup.policy": "delete"})
    sample_data.produce_samples(primary.bootstrap, u, 2, 0, 10)
    config = write_config(f"primary->backup.enabled = true\nprimary->backup.topics = {u}\n")
    run_flow(config, "primary->backup", "run-1", spark)
    assert _topic_configs(backup, remote) == {"retention.bytes": "1000000000", "cleanup.policy": "delete"}

    # On the source: one key changed, one added, one back to its default, one excluded key set.
    set_, delete = AlterConfigOp.SET, AlterConfigOp.DELETE
    _alter(
        primary,
        u,
        {
            "retention.bytes": (set_, "2000000000"),
            "segment.ms": (set_, "3600000"),
            "cleanup.policy": (delete, None),
            "min.insync.replicas": (set_, "1"),
        },
    )
    # On the target, by hand: a key the source does not set (reverted) and an excluded one (kept).
    _alter(backup, remote, {"max.message.bytes": (set_, "2000000"), "min.insync.replicas": (set_, "1")})
    admin = KafkaAdminClient(bootstrap_servers=primary.bootstrap)
    try:
        admin.create_partitions({u: 4})
    finally:
        admin.close()
    sample_data.produce_samples(primary.bootstrap, u, 4, 10, 15)  # 15 more per partition, new ones too

    report = run_flow(config, "primary->backup", "run-2", spark)

    assert _topic_configs(backup, remote) == {
        "retention.bytes": "2000000000",
        "segment.ms": "3600000",
        "min.insync.replicas": "1",  # excluded: the target's own value, never synced nor reverted
    }
    # Each record is unique to its partition: a record in the wrong partition would differ.
    assert assert_same_records(primary.bootstrap, u, backup.bootstrap, remote, 4) == 2 * 25 + 2 * 15
    assert report.records == 4 * 15


def test_config_sync_can_be_turned_off(
    three_clusters: Clusters, write_config: WriteConfig, unique_name: str
) -> None:
    primary, backup = three_clusters["primary"], three_clusters["backup"]
    u, remote = unique_name, f"primary.{unique_name}"
    create_topic(primary.bootstrap, u, 1, {"retention.bytes": "1000000000"})
    config = write_config(
        f"primary->backup.enabled = true\nprimary->backup.topics = {u}\n"
        "primary->backup.sync.topic.configs.enabled = false\n"
    )
    batch_run.plan_run(config, "primary->backup", "run-1")
    batch_run.release_run(config, "primary->backup", "run-1")
    _alter(primary, u, {"retention.bytes": (AlterConfigOp.SET, "2000000000")})

    batch_run.plan_run(config, "primary->backup", "run-2")
    batch_run.release_run(config, "primary->backup", "run-2")

    # Created with the source's configs, then left alone.
    assert _topic_configs(backup, remote) == {"retention.bytes": "1000000000"}


def test_refused_remote_topic_creation_names_the_topic_and_plans_nothing(
    three_clusters: Clusters, write_config: WriteConfig, unique_name: str
) -> None:
    primary = three_clusters["primary"]
    seed(primary, unique_name, partitions=1, count=3)
    # Three replicas cannot be placed on a single-broker cluster.
    config = write_config(
        f"primary->backup.enabled = true\nprimary->backup.topics = {unique_name}\n"
        "primary->backup.replication.factor = 3\n"
    )

    with pytest.raises(
        TargetStateError, match=f"cluster backup refused to create topics: .*primary.{unique_name}"
    ):
        batch_run.plan_run(config, "primary->backup", "run-1")

    store = OffsetsStore(config.offsets_db_url)
    assert store.progress("primary->backup") == {}
    assert lock_holder(store, "primary->backup") is None
