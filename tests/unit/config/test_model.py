"""The config model parsed from mm2.properties: scopes, precedence, defaults and validation."""

from __future__ import annotations

from pathlib import Path
from types import MappingProxyType

import pytest
from config_texts import BASE, KNOWN_SETTINGS, NO_ENV, STATE_ENV

from mirrorflow.config.model import FlowConfig, MirrorSettings, parse_config
from mirrorflow.config.property_view import PropertyView
from mirrorflow.errors import ConfigError
from mirrorflow.mm2.filters import TopicFilter
from mirrorflow.mm2.policy import DefaultReplicationPolicy, IdentityReplicationPolicy


def parse(extra: str = "", base: str = BASE, env: dict[str, str] = NO_ENV) -> FlowConfig:
    """The only enabled flow of BASE plus ``extra``."""
    (flow,) = parse_config(base + extra, env=env).flows
    return flow


def error_key(text: str) -> str | None:
    with pytest.raises(ConfigError) as caught:
        parse_config(text, env=NO_ENV)
    return caught.value.key


# --- scopes and precedence ---------------------------------------------------------------------


def test_client_settings_top_level_then_cluster_then_role() -> None:
    config = parse_config(
        BASE
        + """
security.protocol = SASL_SSL
sasl.mechanism = PLAIN
ssl.truststore.type = PEM
ssl.truststore.location = /top.pem
backup.security.protocol = PLAINTEXT
primary.request.timeout.ms = 5000
primary.consumer.request.timeout.ms = 7000
primary.producer.acks = all
primary.admin.retries = 3
""",
        env=NO_ENV,
    )
    primary, backup = config.clusters["primary"], config.clusters["backup"]
    assert dict(primary.client) == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": "/top.pem",
        "bootstrap.servers": "p1:9092,p2:9092",
        "request.timeout.ms": "5000",
    }
    assert primary.bootstrap_servers == "p1:9092,p2:9092"
    assert primary.consumer["request.timeout.ms"] == "7000"
    assert primary.producer["request.timeout.ms"] == "5000"
    assert primary.producer["acks"] == "all"
    assert "acks" not in primary.consumer
    assert primary.admin["retries"] == "3"
    assert primary.admin["security.protocol"] == "SASL_SSL"
    assert dict(backup.client) == {
        "security.protocol": "PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": "/top.pem",
        "bootstrap.servers": "b1:9092",
    }
    assert backup.consumer == backup.client


def test_flow_overrides_client_settings_of_its_own_clusters_only() -> None:
    config = parse_config(
        BASE
        + """
security.protocol = SASL_SSL
primary.security.protocol = SSL
primary.consumer.fetch.max.bytes = 100
primary->backup.source.cluster.security.protocol = SASL_PLAINTEXT
primary->backup.source.consumer.fetch.max.bytes = 200
primary->backup.target.producer.acks = 1
primary->backup.target.cluster.bootstrap.servers = b2:9092
""",
        env=NO_ENV,
    )
    (flow,) = config.flows
    assert flow.source.client["security.protocol"] == "SASL_PLAINTEXT"
    assert flow.source.consumer["security.protocol"] == "SASL_PLAINTEXT"
    assert flow.source.consumer["fetch.max.bytes"] == "200"
    assert flow.target.producer["acks"] == "1"
    assert flow.target.bootstrap_servers == "b2:9092"
    assert flow.target.consumer["bootstrap.servers"] == "b2:9092"
    # The clusters themselves are unchanged.
    assert config.clusters["primary"].client["security.protocol"] == "SSL"
    assert config.clusters["primary"].consumer["fetch.max.bytes"] == "100"
    assert config.clusters["backup"].bootstrap_servers == "b1:9092"


def test_cluster_role_setting_beats_flow_shared_setting() -> None:
    # As in MM2: <alias>.consumer.x is more specific than <src>-><tgt>.source.cluster.x.
    flow = parse(
        "primary.consumer.security.protocol = SSL\n"
        "primary->backup.source.cluster.security.protocol = SASL_SSL\n"
    )
    assert flow.source.client["security.protocol"] == "SASL_SSL"
    assert flow.source.consumer["security.protocol"] == "SSL"


def test_topics_precedence_top_level_then_flow() -> None:
    flow = parse(
        "topics = orders.*\ntopics.exclude = orders-test\nprimary->backup.topics = payments, refunds\n"
    )
    assert flow.topics == ("payments", "refunds")
    assert flow.topics_exclude == ("orders-test",)
    assert flow.topic_filter == TopicFilter(("payments", "refunds"), ("orders-test",))


def test_cluster_scoped_keys_are_not_flow_settings() -> None:
    with pytest.raises(ConfigError, match=r"^primary\.topics: `topics` is a flow setting, not a cluster's"):
        parse("primary.topics = nope\n")


def test_flow_properties_are_top_level_overlaid_by_flow_keys() -> None:
    config = parse_config(
        BASE
        + """
emit.checkpoints.enabled = false
sync.group.offsets.enabled = false
primary->backup.sync.group.offsets.enabled = true
""",
        env=NO_ENV,
    )
    (flow,) = config.flows
    assert dict(flow.properties) == {
        "clusters": "primary, backup",
        "emit.checkpoints.enabled": "false",
        "sync.group.offsets.enabled": "true",
        "enabled": "true",
        "mirrorflow.state.dir": "/var/lib/mirrorflow",
    }
    assert isinstance(flow.properties, PropertyView)
    assert (
        flow.properties.written_as("sync.group.offsets.enabled")
        == "primary->backup.sync.group.offsets.enabled"
    )
    assert flow.properties.written_as("emit.checkpoints.enabled") == "emit.checkpoints.enabled"


def test_defaults() -> None:
    flow = parse()
    assert flow.name == "primary->backup"
    assert flow.dag_id == "mirror_primary_to_backup"
    assert flow.topics == (".*",)
    assert flow.topics_exclude == (r".*[\-\.]internal", r".*\.replica", "__.*")
    assert flow.groups == (".*",)
    assert flow.groups_exclude == ("console-consumer-.*", "connect-.*", "__.*")
    assert flow.replication_policy == DefaultReplicationPolicy(".")
    assert flow.replication_factor == 2
    assert flow.config_properties_exclude == (
        "follower.replication.throttled.replicas",
        "leader.replication.throttled.replicas",
        "message.timestamp.difference.max.ms",
        "message.timestamp.type",
        "unclean.leader.election.enable",
        "min.insync.replicas",
    )
    assert flow.settings == MirrorSettings(None, 1_000_000, "spark_default", "client", MappingProxyType({}))


def test_values_are_trimmed_like_kafka() -> None:
    flow = parse("replication.factor = 3   \nprimary->backup.topics =  a ,b  ,  c  \n")
    assert flow.replication_factor == 3
    assert flow.topics == ("a", "b", "c")


def test_empty_list_selects_nothing() -> None:
    flow = parse("primary->backup.topics =\n")
    assert flow.topics == ()
    assert not flow.should_replicate_topic("orders")


def test_mirrorflow_settings_top_level_and_per_flow() -> None:
    flow = parse(
        """
mirrorflow.schedule = @hourly
mirrorflow.max.records.per.partition = 500
mirrorflow.spark.conn.id = spark_cluster
mirrorflow.spark.conf.spark.executor.memory = 2g
mirrorflow.spark.conf.spark.sql.shuffle.partitions = 8
primary->backup.mirrorflow.schedule = */5 * * * *
primary->backup.mirrorflow.spark.conf.spark.executor.memory = 4g
mirrorflow.copy.timeout.seconds = 600
primary->backup.mirrorflow.task.retries = 0
"""
    )
    assert flow.settings.schedule == "*/5 * * * *"
    assert (flow.settings.copy_timeout_seconds, flow.settings.task_retries) == (600, 0)
    # One attempt of at most 600 s (+ the retry delay), plus an hour for the other tasks.
    assert flow.lock_ttl_seconds == 630 + 3600
    assert flow.settings.max_records_per_partition == 500
    assert flow.settings.spark_conn_id == "spark_cluster"
    assert dict(flow.settings.spark_conf) == {
        "spark.executor.memory": "4g",
        "spark.sql.shuffle.partitions": "8",
    }


def test_alert_settings() -> None:
    assert (MirrorSettings().alert_lag_max_records, MirrorSettings().alert_heartbeat_age_max_seconds) == (
        None,
        None,
    )
    settings = parse(
        "mirrorflow.alert.lag.max.records = 0\n"
        "primary->backup.mirrorflow.alert.heartbeat.age.max.seconds = 900\n"
        "mirrorflow.alert.notifier = ops.alerts:pager.notify\n"
    ).settings
    assert settings.alert_lag_max_records == 0
    assert settings.alert_heartbeat_age_max_seconds == 900
    assert settings.alert_notifier == "ops.alerts:pager.notify"


def test_flow_can_reset_schedule_to_manual() -> None:
    flow = parse("mirrorflow.schedule = @daily\nprimary->backup.mirrorflow.schedule =\n")
    assert flow.settings.schedule is None


def test_replication_policy_per_flow() -> None:
    flow = parse(
        "replication.policy.class = org.apache.kafka.connect.mirror.IdentityReplicationPolicy\n"
        "primary->backup.replication.policy.separator = _\n"
    )
    assert flow.replication_policy == IdentityReplicationPolicy("_", "primary")
    assert parse("replication.policy.separator = -\n").replication_policy == DefaultReplicationPolicy("-")


def test_should_replicate_topic_uses_policy_filter_and_target() -> None:
    flow = parse("primary->backup.topics = orders.*\n")
    assert flow.should_replicate_topic("orders")
    assert flow.should_replicate_topic("heartbeats")
    assert not flow.should_replicate_topic("payments")
    assert not flow.should_replicate_topic("backup.orders")
    assert not flow.should_replicate_topic("__orders")


# --- flows ---------------------------------------------------------------------------------------


def test_only_enabled_flows_in_clusters_order() -> None:
    config = parse_config(
        """
clusters = a, b, c
a.bootstrap.servers = a:1
b.bootstrap.servers = b:1
c.bootstrap.servers = c:1
c->a.enabled = TRUE
b->a.enabled = true
a->c.enabled = false
a->b.topics = x
""",
        env=STATE_ENV,
    )
    assert [flow.name for flow in config.flows] == ["b->a", "c->a"]
    assert config.flow("c->a").source.alias == "c"
    assert list(config.clusters) == ["a", "b", "c"]


def test_flow_lookup_of_unknown_or_disabled_flow_lists_enabled_ones() -> None:
    config = parse_config(BASE + "backup->primary.enabled = false\n", env=NO_ENV)
    for name in ("backup->primary", "nope"):
        with pytest.raises(ConfigError) as caught:
            config.flow(name)
        assert str(caught.value) == (
            f"no enabled flow {name!r} in the configuration (enabled: primary->backup); "
            "flows are named <source>-><target> and enabled by `<source>-><target>.enabled = true`"
        )


def test_dag_id_replaces_non_identifier_characters() -> None:
    config = parse_config(
        "clusters = us-west.1, eu@2\nus-west.1.bootstrap.servers = a:1\neu@2.bootstrap.servers = b:1\n"
        "us-west.1->eu@2.enabled = true\n",
        env=STATE_ENV,
    )
    assert config.flows[0].dag_id == "mirror_us_west_1_to_eu_2"


def test_aliases_with_dots_longest_alias_wins() -> None:
    config = parse_config(
        "clusters = eu, eu.west\neu.bootstrap.servers = eu:1\neu.west.bootstrap.servers = euw:1\n"
        "eu->eu.west.enabled = true\neu->eu.west.topics = t\n",
        env=STATE_ENV,
    )
    assert config.clusters["eu.west"].bootstrap_servers == "euw:1"
    assert "west.bootstrap.servers" not in config.clusters["eu"].client
    assert config.flow("eu->eu.west").topics == ("t",)


def test_clashing_dag_ids() -> None:
    text = (
        "clusters = a-b, a_b, c\na-b.bootstrap.servers = x:1\na_b.bootstrap.servers = y:1\n"
        "c.bootstrap.servers = z:1\na-b->c.enabled = true\na_b->c.enabled = true\n"
    )
    assert error_key(text) == "clusters"


def test_a_run_dag_may_not_clash_with_another_flows_failover_dag() -> None:
    text = (
        "clusters = a, b, b_failover\na.bootstrap.servers = x:1\nb.bootstrap.servers = y:1\n"
        "b_failover.bootstrap.servers = z:1\na->b.enabled = true\na->b_failover.enabled = true\n"
        "mirrorflow.state.dir = /state\n"
    )
    with pytest.raises(ConfigError) as caught:
        parse_config(text, env=NO_ENV)
    assert str(caught.value) == (
        "clusters: flows a->b and a->b_failover would both be Airflow DAG mirror_a_to_b_failover; "
        "rename one of the aliases"
    )


# --- validation: each error names the key as written ---------------------------------------------


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("primary.bootstrap.servers = p:1\n", "clusters"),
        ("clusters =\n", "clusters"),
        ("clusters = a, , b\n", "clusters"),
        ("clusters = a, b, a\n", "clusters"),
        ("clusters = primary, backup\nprimary.bootstrap.servers = p:1\n", "backup.bootstrap.servers"),
        ("clusters = primary\nprimary.bootstrap.servers =\n", "primary.bootstrap.servers"),
        (
            BASE + "primary->backup.target.cluster.bootstrap.servers =\n",
            "primary->backup.target.cluster.bootstrap.servers",
        ),
        (BASE + "primary->dr.enabled = true\n", "primary->dr.enabled"),
        (BASE + "dr->backup.topics = x\n", "dr->backup.topics"),
        (BASE + "primary->backup\n", "primary->backup"),
        (BASE + "primary->primary.enabled = true\n", "primary->primary.enabled"),
        (BASE + "backup->primary.enabled = yes\n", "backup->primary.enabled"),
        (BASE + "primary->backup.topics = ok, bad(\n", "primary->backup.topics"),
        (BASE + "topics.exclude = [\n", "topics.exclude"),
        (BASE + "groups = *\n", "groups"),
        (BASE + "primary->backup.groups.exclude = (?\n", "primary->backup.groups.exclude"),
        (BASE + "config.properties.exclude = +\n", "config.properties.exclude"),
        (BASE + "replication.factor = two\n", "replication.factor"),
        (BASE + "replication.factor = 0\n", "replication.factor"),
        (BASE + "primary->backup.replication.factor = -2\n", "primary->backup.replication.factor"),
        (BASE + "checkpoints.topic.replication.factor = 0\n", "checkpoints.topic.replication.factor"),
        (BASE + "replication.factor = 1.5\n", "replication.factor"),
        (BASE + "mirrorflow.max.records.per.partition = 1_000\n", "mirrorflow.max.records.per.partition"),
        (
            BASE + "primary->backup.mirrorflow.max.records.per.partition = 0\n",
            "primary->backup.mirrorflow.max.records.per.partition",
        ),
        (BASE + "mirrorflow.spark.conn.id =\n", "mirrorflow.spark.conn.id"),
        (BASE + "mirrorflow.copy.timeout.seconds = 0\n", "mirrorflow.copy.timeout.seconds"),
        (BASE + "primary->backup.mirrorflow.task.retries = -1\n", "primary->backup.mirrorflow.task.retries"),
        (BASE + "replication.policy.class = com.example.Custom\n", "replication.policy.class"),
        (
            BASE + "primary->backup.replication.policy.class = Identity\n",
            "primary->backup.replication.policy.class",
        ),
        (
            BASE + "primary->backup.replication.policy.separator =\n",
            "primary->backup.replication.policy.separator",
        ),
        (BASE + "mirrorflow.max.records = 5\n", "mirrorflow.max.records"),
        (BASE + "primary->backup.mirrorflow.shedule = @daily\n", "primary->backup.mirrorflow.shedule"),
        (BASE + "mirrorflow.spark.conf. = x\n", "mirrorflow.spark.conf."),
        (BASE + "primary->backup.mirrorflow.state.dir = /x\n", "primary->backup.mirrorflow.state.dir"),
        (BASE + "primary.mirrorflow.schedule = @daily\n", "primary.mirrorflow.schedule"),
        (BASE + "clusters = again\n", "clusters"),
        (BASE + "mirrorflow.alert.lag.max.records = -1\n", "mirrorflow.alert.lag.max.records"),
        (
            BASE + "primary->backup.mirrorflow.alert.heartbeat.age.max.seconds = 0\n",
            "primary->backup.mirrorflow.alert.heartbeat.age.max.seconds",
        ),
        (BASE + "mirrorflow.alert.notifier = alerts.notify\n", "mirrorflow.alert.notifier"),
    ],
)
def test_validation_names_the_key(text: str, key: str) -> None:
    assert error_key(text) == key


def test_validation_messages_say_what_to_do() -> None:
    cases = {
        "clusters = primary\n": (
            "primary.bootstrap.servers: cluster 'primary' has no bootstrap servers; "
            "add `primary.bootstrap.servers = host:9092`"
        ),
        BASE + "primary->dr.enabled = true\n": (
            "primary->dr.enabled: flow keys look like `<source>-><target>.<setting>` with both aliases "
            "listed in clusters (primary, backup), but 'dr' is not; add it to clusters or fix the alias"
        ),
        BASE
        + "backup->primary.enabled = yes\n": "backup->primary.enabled: expected true or false, got 'yes'",
        BASE + "replication.factor = 0\n": (
            "replication.factor: expected a positive whole number, or -1 for the brokers' "
            "default.replication.factor, got '0'; set e.g. 2"
        ),
        BASE + "mirrorflow.max.records = 5\n": (
            "mirrorflow.max.records: unknown mirrorflow setting; known settings: " + KNOWN_SETTINGS
        ),
        BASE + "backup.producer.transaction.timeout.ms = 0\n": (
            "backup.producer.transaction.timeout.ms: expected a positive whole number, got '0'; set e.g. "
            "900000"
        ),
        BASE + "mirrorflow.task.retries = many\n": (
            "mirrorflow.task.retries: expected a whole number of at least 0, got 'many'; set e.g. 2"
        ),
        BASE + "primary->backup.mirrorflow.offsets.db.url = sqlite://\n": (
            "primary->backup.mirrorflow.offsets.db.url: mirrorflow.offsets.db.url applies to all flows; "
            "set it at top level, without a flow prefix"
        ),
        "": "clusters: no clusters; list the cluster aliases, e.g. `clusters = primary, backup`",
    }
    for text, message in cases.items():
        with pytest.raises(ConfigError) as caught:
            parse_config(text, env=NO_ENV)
        assert str(caught.value) == message


def test_replication_factor_minus_one_is_the_brokers_default() -> None:
    # As MM2 takes it, and Strimzi's examples write it: each topic created without a factor.
    flow = parse(
        "replication.factor = -1\noffset-syncs.topic.replication.factor = -1\n"
        "primary->backup.checkpoints.topic.replication.factor = -1\nheartbeats.topic.replication.factor = 2\n"
    )
    assert (
        flow.replication_factor,
        flow.offset_syncs_topic_replication_factor,
        flow.checkpoints_topic_replication_factor,
        flow.heartbeats_topic_replication_factor,
    ) == (-1, -1, -1, 2)


def test_disabled_flows_are_not_validated_beyond_their_keys() -> None:
    # MM2 builds no connector for a disabled flow, so its settings cannot break anything.
    config = parse_config(BASE + "backup->primary.replication.factor = 0\n", env=NO_ENV)
    assert [flow.name for flow in config.flows] == ["primary->backup"]


def test_duplicate_key_names_the_file() -> None:
    with pytest.raises(ConfigError, match=r"duplicate key in /x/mm2\.properties: line 1 and line 6"):
        parse_config(BASE + "clusters = a\n", path=Path("/x/mm2.properties"), env=NO_ENV)


def test_model_is_immutable() -> None:
    config = parse_config(BASE + "primary.consumer.max.poll.records = 1\n", env=NO_ENV)
    flow = config.flows[0]
    with pytest.raises(AttributeError):
        flow.replication_factor = 5  # type: ignore[misc]
    with pytest.raises(TypeError):
        config.clusters["x"] = config.clusters["primary"]  # type: ignore[index]
    with pytest.raises(TypeError):
        flow.source.consumer["max.poll.records"] = "2"  # type: ignore[index]
    properties = flow.properties
    assert isinstance(properties, PropertyView)
    with pytest.raises(AttributeError):
        properties._entries = {}


def test_flows_are_hashable_and_compare_by_value() -> None:
    first, second = (parse_config(BASE, env=NO_ENV).flows[0] for _ in range(2))
    assert first == second
    assert hash(first) == hash(second)


def test_secrets_are_masked_in_repr() -> None:
    flow = parse('primary.sasl.jaas.config = PlainLoginModule required password="s3cret";\n')
    assert flow.source.client["sasl.jaas.config"].endswith('password="s3cret";')
    assert "s3cret" not in repr(flow)


@pytest.mark.parametrize(
    ("written", "expected"), [("", "source"), ("target", "target"), (" Source ", "source")]
)
def test_offset_syncs_topic_location(written: str, expected: str) -> None:
    extra = f"offset-syncs.topic.location = {written}\n" if written else ""
    assert parse(extra).offset_syncs_topic_location == expected


def test_an_unknown_offset_syncs_location_is_named() -> None:
    with pytest.raises(ConfigError, match=r"primary->backup\.offset-syncs\.topic\.location.*'middle'"):
        parse("primary->backup.offset-syncs.topic.location = middle\n")


def test_producer_tuning_the_record_copy_does_not_apply_is_warned_about_by_name(
    caplog: pytest.LogCaptureFixture,
) -> None:
    text = (
        "clusters = a, b\na.bootstrap.servers = a:9092\nb.bootstrap.servers = b:9092\n"
        "a->b.enabled = true\nb.producer.linger.ms = 50\nb.compression.type = lz4\nb.client.id = m\n"
        "mirrorflow.state.dir = /tmp/s\n"
    )
    with caplog.at_level("WARNING", logger="mirrorflow.config.model"):
        parse_config(text, env={})
    warned = [r.getMessage() for r in caplog.records if "not applied to the record copy" in r.getMessage()]
    assert warned and warned[0].startswith("b.compression.type, b.producer.linger.ms: not applied")


FAN_IN = """
clusters = a, b, c
a.bootstrap.servers = a:1
b.bootstrap.servers = b:1
c.bootstrap.servers = c:1
a->c.enabled = true
b->c.enabled = true
"""


@pytest.mark.parametrize(
    "extra",
    [
        # Identity naming, the same topic on both sources.
        "replication.policy.class = IdentityReplicationPolicy\na->c.topics = orders\nb->c.topics = ord.*\n",
        # Identity naming on one flow, a topic named as the other's remote topic.
        "a->c.replication.policy.class = IdentityReplicationPolicy\n"
        "a->c.topics = b.orders\nb->c.topics = orders\n",
    ],
)
def test_two_flows_that_would_write_one_remote_topic_are_refused_naming_both(extra: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(FAN_IN + extra, env=STATE_ENV)
    assert "flows a->c and b->c would both write topic" in str(caught.value)
    assert "Exclude the topic from one of them" in str(caught.value)


@pytest.mark.parametrize(
    "extra",
    [
        "a->c.topics = orders\nb->c.topics = orders\n",  # remote topics a.orders and b.orders
        "replication.policy.class = IdentityReplicationPolicy\n"
        "a->c.topics = orders\nb->c.topics = payments\n",
        # Patterns only: what they select is the sources' to show (check-config).
        "replication.policy.class = IdentityReplicationPolicy\na->c.topics = .*\nb->c.topics = .*\n",
    ],
)
def test_flows_into_one_cluster_writing_their_own_remote_topics_load(extra: str) -> None:
    assert [f.name for f in parse_config(FAN_IN + extra, env=STATE_ENV).flows] == ["a->c", "b->c"]
