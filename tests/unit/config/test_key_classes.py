"""Every MM2 key is honoured, has no effect (warned about by name) or is refused (an error naming it);
unknown keys suggest the closest known one; deprecated names behave as in MM2 3.x; the README's key
table is the loader's."""

from __future__ import annotations

import io
import logging

import pytest
from config_texts import ONE_FLOW

from mirrorflow.app.check_config import describe
from mirrorflow.config.keys import Treatment
from mirrorflow.config.model import MirrorConfig, parse_config
from mirrorflow.errors import ConfigError
from mirrorflow_dev.readme_keys import README, with_table

H, N = Treatment.HONOURED, Treatment.NO_EFFECT


def load(line: str) -> MirrorConfig:
    return parse_config(ONE_FLOW + line + "\n", env={})


ACCEPTED = [
    # flow keys, at top level and per flow
    ("topics = orders", H),
    ("primary->backup.topics = orders", H),
    ("topics.exclude = tmp.*", H),
    ("groups = app.*", H),
    ("primary->backup.groups.exclude = test.*", H),
    ("config.properties.exclude = retention.ms", H),
    ("replication.policy.class = org.apache.kafka.connect.mirror.IdentityReplicationPolicy", H),
    ("replication.policy.separator = _", H),
    ("replication.factor = 3", H),
    ("sync.topic.configs.enabled = false", H),
    ("sync.topic.acls.enabled = FALSE", H),
    ("emit.checkpoints.enabled = true", H),
    ("sync.group.offsets.enabled = true", H),
    ("emit.heartbeats.enabled = false", H),
    ("emit.offset-syncs.enabled = false", H),
    ("offset-syncs.topic.location = target", H),
    ("offset-syncs.topic.replication.factor = 1", H),
    ("heartbeats.topic.replication.factor = 1", H),
    ("checkpoints.topic.replication.factor = 1", H),
    ("primary->backup.emit.heartbeats.interval.seconds = 5", H),
    ("emit.checkpoints.interval.seconds = 10", H),
    ("refresh.topics.interval.seconds = 30", H),
    ("sync.topic.configs.interval.seconds = 30", H),
    ("sync.topic.acls.interval.seconds = 30", H),
    ("topics.blacklist = tmp.*", H),
    ("groups.blacklist = test.*", H),
    ("config.properties.blacklist = retention.ms", H),
    ("topic.filter.class = org.apache.kafka.connect.mirror.DefaultTopicFilter", Treatment.REFUSED),
    ("heartbeats.replication.enabled = true", Treatment.REFUSED),
    ("key.converter = org.apache.kafka.connect.converters.ByteArrayConverter", Treatment.REFUSED),
    # client keys
    ("primary.client.id = mirror", H),
    ("primary.security.protocol = ssl", H),
    ("sasl.mechanism = SCRAM-SHA-512", H),
    ("ssl.truststore.type = PEM", H),
    ("primary.ssl.keystore.type = PKCS12", H),
    ("backup.ssl.key.password = k3y", H),
    ("primary.admin.request.timeout.ms = 5000", H),
    ("backup.producer.linger.ms = 5", H),
    ("backup.producer.transaction.timeout.ms = 60000", H),
    ("primary->backup.target.producer.compression.type = zstd", H),
    ("primary->backup.source.cluster.client.id = reader", H),
    # no effect
    ("tasks.max = 8", N),
    ("primary->backup.tasks.max = 4", N),
    ("refresh.topics.enabled = false", N),
    ("refresh.groups.enabled = true", N),
    ("refresh.groups.interval.seconds = 60", N),
    ("sync.group.offsets.interval.seconds = 10", N),
    ("offset.lag.max = 0", N),
    ("consumer.poll.timeout.ms = 500", N),
    ("admin.timeout.ms = 1000", N),
    ("exactly.once.support = required", N),
    ("exactly.once.source.support = enabled", N),
    ("errors.tolerance = all", N),
    ("errors.retry.timeout = -1", N),  # Connect: retry without limit
    ("metric.reporters = com.example.Reporter", N),
    ("metrics.num.samples = 3", N),
    ("add.source.alias.to.metrics = true", N),
    ("use.incremental.alter.configs = required", Treatment.REFUSED),
    ("primary.producer.auto.include.jmx.reporter = false", N),
    ("dedicated.mode.enable.internal.rest = true", N),
    ("offset.storage.replication.factor = 1", N),
    ("backup.config.storage.replication.factor = 1", N),
    ("backup.status.storage.replication.factor = 1", N),
    ("listeners = http://localhost:8083", N),
    ("primary.consumer.max.poll.records = 5000", N),
    ("primary.consumer.isolation.level = read_committed", N),
    ("primary.consumer.group.id = mm2", N),
    ("backup.producer.enable.idempotence = true", N),
    ("backup.producer.max.request.size = 5242880", H),
    ("backup.producer.buffer.memory = 1000", N),
    ("ssl.enabled.protocols = TLSv1.2", N),
    ("primary.ssl.truststore.password = changeit", N),
    ("primary->backup.source.consumer.fetch.max.bytes = 1000", N),
]


@pytest.mark.parametrize(("line", "treatment"), ACCEPTED, ids=[line for line, _ in ACCEPTED])
def test_an_accepted_key_is_classified(line: str, treatment: Treatment) -> None:
    written = line.split(" = ")[0]
    (use,) = [u for u in load(line).keys if u.written == written]

    assert use.treatment is treatment


REFUSED = [
    ("topic.filter.class = com.example.Filter", "topic.filter.class: only MM2's default filter (`topics`, "
     "`topics.exclude`) is supported; remove the key"),
    ("primary->backup.group.filter.class = com.example.Filter", "primary->backup.group.filter.class: only "
     "MM2's default filter (`groups`, `groups.exclude`) is supported; remove the key"),
    ("value.converter = org.apache.kafka.connect.json.JsonConverter", "value.converter: records are copied "
     "as bytes (MM2's default); remove the key"),
    ("replication.policy.internal.topic.separator.enabled = false", "replication.policy.internal.topic."
     "separator.enabled: internal topics always use the separator (MM2's default); remove the key"),
    ("source.cluster.alias = primary", "source.cluster.alias: the flow's name `<source>-><target>` sets it; "
     "remove the key"),
    ("forwarding.admin.class = com.example.Admin", "forwarding.admin.class: the Python clients cannot load "
     "Java classes; remove the key"),
    ("primary.ssl.keystore.key = -----BEGIN", "primary.ssl.keystore.key: an inline keystore "
     "(ssl.keystore.key and ssl.keystore.certificate.chain) takes ssl.keystore.type = PEM and no "
     "ssl.keystore.location"),
    ("primary.ssl.keystore.type = PEM\nprimary.ssl.keystore.key = -----BEGIN", "primary.ssl.keystore.key: an "
     "inline keystore needs ssl.keystore.key and ssl.keystore.certificate.chain; set "
     "ssl.keystore.certificate.chain"),
    ("sasl.mechanism = GSSAPI", "sasl.mechanism: GSSAPI (Kerberos) is not supported: the Python clients "
     "would each need a keytab and a ticket of their own on every worker; use OAUTHBEARER, SCRAM-SHA-512, "
     "SCRAM-SHA-256 or PLAIN"),
    ("sasl.mechanism = SCRAM", "sasl.mechanism: expected PLAIN or SCRAM-SHA-256 or SCRAM-SHA-512 or "
     "OAUTHBEARER, got 'SCRAM'"),
    ("primary.sasl.kerberos.service.name = kafka", "primary.sasl.kerberos.service.name: GSSAPI (Kerberos) is "
     "not supported: the Python clients would each need a keytab and a ticket of their own on every worker; "
     "use OAUTHBEARER, SCRAM-SHA-512, SCRAM-SHA-256 or PLAIN"),
    ("primary.sasl.oauthbearer.assertion.file = /a.jwt", "primary.sasl.oauthbearer.assertion.file: "
     "OAUTHBEARER (see Secured clusters) takes the client-credentials grant only (clientId and "
     "clientSecret); remove the key"),
    ("primary.sasl.login.class = com.example.Login", "primary.sasl.login.class: the Python clients cannot "
     "load Java classes; remove the key"),
    ("primary.consumer.interceptor.classes = com.example.I", "primary.consumer.interceptor.classes: the "
     "Python clients cannot load Java classes; remove the key"),
    ("primary.topics = orders", "primary.topics: `topics` is a flow setting, not a cluster's: set it at top "
     "level or per flow (`<source>-><target>.topics`)"),
    ("enabled = true", "enabled: only `<source>-><target>.enabled` enables a flow; set it per flow"),
    ("consumer.max.poll.records = 5", "consumer.max.poll.records: client settings of one kind are set per "
     "cluster: write `<alias>.consumer.max.poll.records` (or per flow, "
     "`<source>-><target>.source.consumer.max.poll.records` / `target.consumer.max.poll.records`)"),
    ("primary->backup.producer.acks = 1", "primary->backup.producer.acks: say which cluster's clients: "
     "`primary->backup.source.producer.acks` or `primary->backup.target.producer.acks`"),
    # unknown keys, with the closest known one
    ("primary->backup.topcis = orders", "primary->backup.topcis: unknown key: not an MM2 flow setting that "
     "MM2 or this product knows; did you mean `primary->backup.topics`?"),
    ("topics.exlude = tmp", "topics.exlude: unknown key: not an MM2 setting that MM2 or this product knows; "
     "did you mean `topics.exclude`?"),
    ("topics.whitelist = orders", "topics.whitelist: unknown key: not an MM2 setting that MM2 or this "
     "product knows; did you mean `topics`?"),
    ("primary.consumer.max.pol.records = 5", "primary.consumer.max.pol.records: unknown key: not a client "
     "setting that MM2 or this product knows; did you mean `primary.consumer.max.poll.records`?"),
    ("primary.bootstrap.server = p1:9092", "primary.bootstrap.server: unknown key: not a client setting that "
     "MM2 or this product knows; did you mean `primary.bootstrap.servers`?"),
    ("primary->backup.target.producer.lingerms = 5", "primary->backup.target.producer.lingerms: unknown key: "
     "not a client setting that MM2 or this product knows; did you mean "
     "`primary->backup.target.producer.linger.ms`?"),
    ("no.such.thing = 1", "no.such.thing: unknown key: not an MM2 setting that MM2 or this product knows"),
    # typed values
    ("offset.lag.max = banana", "offset.lag.max: expected a whole number of at least 0, got 'banana'; set "
     "e.g. 100"),
    ("tasks.max = 0", "tasks.max: expected a positive whole number, got '0'; set e.g. 1"),
    ("errors.retry.timeout = forever", "errors.retry.timeout: expected a whole number, got 'forever'"),
    ("refresh.topics.enabled = sometimes", "refresh.topics.enabled: expected true or false, got 'sometimes'"),
    ("emit.heartbeats.interval.seconds = 1.5", "emit.heartbeats.interval.seconds: expected a positive whole "
     "number, got '1.5'; set e.g. 1"),
    ("primary.security.protocol = TLS", "primary.security.protocol: expected PLAINTEXT or SSL or "
     "SASL_PLAINTEXT or SASL_SSL, got 'TLS'"),
]  # fmt: skip


@pytest.mark.parametrize(("line", "message"), REFUSED, ids=[line for line, _ in REFUSED])
def test_a_refused_or_unknown_key_is_an_error_naming_it(line: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load(line)

    assert str(caught.value) == message


def test_the_table_covers_at_least_60_keys() -> None:
    assert len(ACCEPTED) + len(REFUSED) >= 60


def test_keys_with_no_effect_are_warned_about_by_name_once_per_reason(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="mirrorflow.config.key_classes"):
        load("tasks.max = 4\nprimary->backup.tasks.max = 2\noffset.lag.max = 10")

    assert caplog.messages == [
        "no effect here: primary->backup.tasks.max, tasks.max (parallelism comes from Spark: one task per "
        "partition of a plan)",
        "no effect here: offset.lag.max (an offset sync is written for every mirrored batch, so translation "
        "is exact at batch bounds)",
    ]


def test_a_deprecated_name_is_read_as_mm2_3_reads_it(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="mirrorflow.config.key_classes"):
        alone = load("topics.blacklist = tmp.*, scratch\ngroups.blacklist = test.*")
    (flow,) = alone.flows
    assert flow.topics_exclude == ("tmp.*", "scratch")
    assert flow.groups_exclude == ("test.*",)
    assert not flow.should_replicate_topic("scratch")
    assert caplog.messages[0] == (
        "Configuration key topics.blacklist is deprecated and may be removed in the future. Please update "
        "your configuration to use topics.exclude instead."
    )
    # Where both are set the new name wins, wherever each is written.
    (flow,) = load("topics.exclude = a\nprimary->backup.topics.blacklist = b").flows
    assert flow.topics_exclude == ("a",)


def test_a_disabled_flows_keys_are_checked_by_name_but_not_their_values() -> None:
    assert load("backup->primary.offset.lag.max = banana").flows[0].name == "primary->backup"
    with pytest.raises(ConfigError, match=r"^backup->primary\.topcis: unknown key.*did you mean"):
        load("backup->primary.topcis = orders")


def test_the_readme_table_is_the_loaders() -> None:
    readme = README.read_text()

    assert with_table(readme) == readme, "the README's key table is out of date: run make readme-keys"


def test_check_config_prints_each_flow_and_the_class_of_every_key() -> None:
    out = io.StringIO()
    describe(load("tasks.max = 4\ntopics.blacklist = tmp"), out, topics=False)

    text = out.getvalue()
    assert "flow primary->backup\n" in text
    assert "  topics.exclude: tmp\n" in text
    assert "  remote topic of t: primary.t\n" in text
    assert "  honoured   topics.blacklist: deprecated name of `topics.exclude`" in text
    assert "  no effect  tasks.max: parallelism comes from Spark" in text
