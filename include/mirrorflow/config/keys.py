"""The key table: every key an mm2.properties file may hold, MM2's and this product's own
(``mirrorflow.*``), and what this product does with it. Each is **honoured**, has **no effect** in
a batch system (accepted, and warned about by name with the reason), or is **refused** (an error
naming the key as written and what to do). The section a row is in says where its key may be
written: ``TOP_LEVEL_KEYS`` and ``TOP_LEVEL_SETTINGS`` at top level only, ``FLOW_KEYS`` and
``FLOW_SETTINGS`` at top level (every flow) or as ``<source>-><target>.<key>`` (this product's
settings: ``config.setting_keys``), ``CLIENT_KEYS`` (``config.client_keys``) as a cluster's or a
flow's client settings.

``config.key_classes`` classifies a file's keys by these rows (a key no row takes is unknown) and
writes the README's key table from MM2's; ``config.key_values`` reads a typed key by its row. So a
key's kind, default and choices are stated once, here.

Invariants: a refused key lists the values that change nothing (its MM2 default), which are
accepted; a setting of this product with choices has its first as its default.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

from mirrorflow.mm2.filters import (
    GROUPS_DEFAULT,
    GROUPS_EXCLUDE_DEFAULT,
    TOPICS_DEFAULT,
    TOPICS_EXCLUDE_DEFAULT,
)
from mirrorflow.mm2.policy import SEPARATOR_CONFIG, SEPARATOR_DEFAULT


class Treatment(enum.StrEnum):
    HONOURED = "honoured"
    NO_EFFECT = "no effect"
    REFUSED = "refused"


@dataclass(frozen=True)
class Key:
    """One key (or, ending in ``.*``, every key under a prefix). ``note``: what it does (honoured),
    why it does nothing here (no effect) or what to do instead (refused). ``kind``: ``bool``,
    ``int`` (a whole number of at least 0), ``pos`` (at least 1), ``rf`` (a replication factor: at least 1,
    or -1 for the brokers' ``default.replication.factor``), ``long`` (any whole number: Java
    reads some where ``-1`` means no limit) or ``text``. ``harmless``: values of a refused key that
    change nothing, accepted. ``choices``: the only values an honoured key takes."""

    name: str
    treatment: Treatment
    note: str
    default: str = ""
    kind: str = "text"
    harmless: tuple[str, ...] = ()
    choices: tuple[str, ...] = ()
    # The default as the README shows it, where more than the value (or "none") says.
    shown: str = ""

    def matches(self, key: str) -> bool:
        return key.startswith(self.name[:-1]) if self.name.endswith(".*") else key == self.name


H, N, R = Treatment.HONOURED, Treatment.NO_EFFECT, Treatment.REFUSED
PROJECT_PREFIX = "mirrorflow."


def _dr(what: str) -> str:
    return f"DR mode: how often a window {what} (see DR mode); a batch run does it once per run"


NO_REST_NOTE = "no Connect worker or REST server runs: Airflow schedules the flows"
STATE_NOTE = "progress lives in the offsets table (mirrorflow.offsets.db.url), not in Connect's topics"
_RF = "; -1: the brokers' `default.replication.factor`"
_TRANSFORMS = "see Transforms: Connect's Filter, DropHeaders and InsertHeader, python hooks"
_PREDICATES = "see Transforms: Connect's HasHeaderKey, TopicNameMatches and RecordIsTombstone"
JAVA_CLASS_NOTE = "the Python clients cannot load Java classes; remove the key"
_TRANSACTION_BOUNDARY = (
    "a batch run's copy is one transaction of the flow's writer, a DR window's micro-batch one each"
)

# MM2's connector and MirrorMaker settings, at top level (every flow) or as <source>-><target>.<key>.
FLOW_KEYS: tuple[Key, ...] = (
    Key("enabled", H, "per flow only: flows are directional and off unless enabled", "false", "bool"),
    Key("topics", H, "include regexes, comma-separated, full-name match", ", ".join(TOPICS_DEFAULT)),
    Key("topics.exclude", H, "exclude regexes; exclude wins", ", ".join(TOPICS_EXCLUDE_DEFAULT)),
    Key("groups", H, "consumer groups whose positions are checkpointed", ", ".join(GROUPS_DEFAULT)),
    Key("groups.exclude", H, "consumer groups never checkpointed", ", ".join(GROUPS_EXCLUDE_DEFAULT)),
    Key(
        "config.properties.exclude",
        H,
        "topic configs never copied to remote topics, nor reverted on them",
        "MM2's list",
    ),
    Key(
        "replication.policy.class",
        H,
        "`DefaultReplicationPolicy` or `IdentityReplicationPolicy` (MM2 class names or short names)",
        "DefaultReplicationPolicy",
    ),
    Key(SEPARATOR_CONFIG, H, "separator of remote topic names", SEPARATOR_DEFAULT),
    Key("replication.factor", H, f"for remote topics created on the target{_RF}", "2", "rf"),
    Key(
        "sync.topic.configs.enabled",
        H,
        "each plan brings existing remote topics in line with their "
        "sources (incremental alter: SET what the source sets on the topic, revert what it leaves at the "
        "default)",
        "true",
        "bool",
    ),
    Key(
        "sync.topic.acls.enabled",
        H,
        "each plan copies the source's LITERAL topic ACLs of mirrored topics "
        "to their remote topics with MM2's rules (ALLOW WRITE dropped, ALLOW ALL becomes READ, DENY kept), "
        "additive only; skipped when the source has no authorizer, logged when the target has none",
        "true",
        "bool",
    ),
    Key(
        "emit.checkpoints.enabled",
        H,
        "each run's `checkpoint` task translates the committed offsets of "
        "the selected groups on the flow's mirrored partitions and writes MM2 checkpoints to "
        "`<source>.checkpoints.internal` on the target (only positions that moved forward, or groups that "
        "rewound); translation is exact (see How a run works)",
        "true",
        "bool",
    ),
    Key(
        "sync.group.offsets.enabled",
        H,
        "also commit the translated positions to the same groups on the "
        "target (remote topic names), MM2's rules: only groups absent or EMPTY there, only forward; active "
        "groups are left alone and named in the task log",
        "false",
        "bool",
    ),
    Key(
        "emit.heartbeats.enabled",
        H,
        "each run's plan first writes MM2 heartbeats for the flow's cluster "
        "pair, (source, target) to `heartbeats` on the target and (target, source) on the source; the "
        "source's `heartbeats` is mirrored to `<source>.heartbeats` whatever `topics` says, so MM2's "
        "`MirrorClient` sees the topology. A run whose only new records are heartbeats copies them without "
        "starting Spark",
        "true",
        "bool",
    ),
    Key(
        "emit.offset-syncs.enabled",
        H,
        "after each commit, write MM2 OffsetSync records (one per run of "
        "consecutive source offsets in each committed batch) to MM2's offset-syncs topic",
        "true",
        "bool",
    ),
    Key(
        "offset-syncs.topic.location",
        H,
        "`source`: `mm2-offset-syncs.<target>.internal` on the source; "
        "`target`: `mm2-offset-syncs.<source>.internal` on the target (MM2's naming)",
        "source",
    ),
    Key("offset-syncs.topic.replication.factor", H, f"for the offset-syncs topic{_RF}", "3", "rf"),
    Key(
        "heartbeats.topic.replication.factor",
        H,
        f"for the `heartbeats` topics, created on first use (single partition, compacted){_RF}",
        "3",
        "rf",
    ),
    Key(
        "checkpoints.topic.replication.factor",
        H,
        f"for the checkpoints topic, created on first use (single partition, compacted){_RF}",
        "3",
        "rf",
    ),
    Key("emit.heartbeats.interval.seconds", H, _dr("emits heartbeats"), "1", "pos"),
    Key(
        "emit.checkpoints.interval.seconds", H, _dr("emits checkpoints and syncs group offsets"), "60", "pos"
    ),
    Key(
        "refresh.topics.interval.seconds",
        H,
        _dr("looks for new topics and partitions (with the config sync: the shorter interval of the two)"),
        "600",
        "pos",
    ),
    Key("sync.topic.configs.interval.seconds", H, _dr("syncs remote topics' configs"), "600", "pos"),
    Key("sync.topic.acls.interval.seconds", H, _dr("syncs ACLs"), "600", "pos"),
    Key("tasks.max", N, "parallelism comes from Spark: one task per partition of a plan", "1", "pos"),
    Key("tasks.max.enforce", N, "parallelism comes from Spark", "true", "bool"),
    Key("refresh.topics.enabled", N, "every run and DR window lists the source's topics", "true", "bool"),
    Key("refresh.groups.enabled", N, "every checkpoint pass lists the source's groups", "true", "bool"),
    Key(
        "refresh.groups.interval.seconds", N, "every checkpoint pass lists the source's groups", "600", "pos"
    ),
    Key(
        "sync.group.offsets.interval.seconds",
        N,
        "group offsets are synced with each checkpoint pass (emit.checkpoints.interval.seconds in DR mode)",
        "60",
        "pos",
    ),
    Key(
        "offset.lag.max",
        N,
        "an offset sync is written for every mirrored batch, so translation is exact at batch bounds",
        "100",
        "int",
    ),
    Key("consumer.poll.timeout.ms", N, "the copy reads planned offset ranges without polling", "1000", "int"),
    Key(
        "admin.timeout.ms", N, "admin calls are bounded by `<alias>.admin.request.timeout.ms`", "60000", "int"
    ),
    Key(
        "exactly.once.support",
        N,
        "every copy is exactly-once already: it writes in transactions of the flow's transactional "
        "id, fenced by every attempt (read remote topics with `read_committed`)",
    ),
    Key("exactly.once.source.support", N, "every copy is exactly-once already (a Connect worker setting)"),
    Key("transaction.boundary", N, _TRANSACTION_BOUNDARY),
    Key("transaction.boundary.interval.ms", N, _TRANSACTION_BOUNDARY, kind="int"),
    Key("errors.tolerance", N, "records are copied as bytes: nothing is converted, so nothing fails to be"),
    Key("errors.log.enable", N, "records are copied as bytes: nothing is converted", kind="bool"),
    Key("errors.log.include.messages", N, "records are copied as bytes: nothing is converted", kind="bool"),
    Key(
        "errors.retry.timeout",
        N,
        "failed tasks are retried by Airflow (mirrorflow.task.retries)",
        kind="long",
    ),
    Key(
        "errors.retry.delay.max.ms",
        N,
        "failed tasks are retried by Airflow (mirrorflow.task.retries)",
        kind="int",
    ),
    Key("config.action.reload", N, "the config is read afresh by every run"),
    Key(
        "add.source.alias.to.metrics",
        N,
        "metrics are Prometheus files and the status page, named by flow (MM2 3.x)",
        kind="bool",
    ),
    Key(
        "use.incremental.alter.configs",
        R,
        "remote topics' configs are always synced with incremental alter (MM2 3.x's default); remove the key",
        "requested",
        harmless=("requested", "required"),
    ),
    Key("metric.names.formats", N, "metrics are Prometheus files and the status page, not JMX"),
    Key("metric.reporters", N, "metrics are Prometheus files and the status page, not JMX"),
    Key("metrics.*", N, "metrics are Prometheus files and the status page, not JMX"),
    Key("dedicated.mode.enable.internal.rest", N, NO_REST_NOTE, kind="bool"),
    Key("name", N, "a flow is named `<source>-><target>`"),
    Key("offsets.storage.topic", N, STATE_NOTE),
    Key(
        "topic.creation.groups", N, "remote topics are created with the source's partition count and configs"
    ),
    Key(
        "topic.filter.class",
        R,
        "only MM2's default filter (`topics`, `topics.exclude`) is supported; remove the key",
        harmless=("org.apache.kafka.connect.mirror.DefaultTopicFilter",),
    ),
    Key(
        "group.filter.class",
        R,
        "only MM2's default filter (`groups`, `groups.exclude`) is supported; remove the key",
        harmless=("org.apache.kafka.connect.mirror.DefaultGroupFilter",),
    ),
    Key(
        "config.property.filter.class",
        R,
        "only MM2's default filter (`config.properties.exclude`) is supported; remove the key",
        harmless=("org.apache.kafka.connect.mirror.DefaultConfigPropertyFilter",),
    ),
    Key(
        "forwarding.admin.class",
        R,
        JAVA_CLASS_NOTE,
        harmless=("org.apache.kafka.clients.admin.ForwardingAdmin",),
    ),
    Key(
        "replication.policy.internal.topic.separator.enabled",
        R,
        "internal topics always use the separator (MM2's default); remove the key",
        "true",
        "bool",
        harmless=("true",),
    ),
    Key(
        "heartbeats.replication.enabled",
        R,
        "heartbeats topics are always mirrored (MM2's default); remove the key",
        "true",
        "bool",
        harmless=("true",),
    ),
    Key("source.cluster.alias", R, "the flow's name `<source>-><target>` sets it; remove the key"),
    Key("target.cluster.alias", R, "the flow's name `<source>-><target>` sets it; remove the key"),
    Key("connector.class", R, "a flow copies records, checkpoints and heartbeats together; remove the key"),
    Key(
        "key.converter",
        R,
        "records are copied as bytes (MM2's default); remove the key",
        harmless=("org.apache.kafka.connect.converters.ByteArrayConverter",),
    ),
    Key(
        "value.converter",
        R,
        "records are copied as bytes (MM2's default); remove the key",
        harmless=("org.apache.kafka.connect.converters.ByteArrayConverter",),
    ),
    Key(
        "header.converter",
        R,
        "headers are copied as bytes (MM2's default); remove the key",
        harmless=("org.apache.kafka.connect.converters.ByteArrayConverter",),
    ),
    Key("transforms", H, _TRANSFORMS),
    Key("transforms.*", H, _TRANSFORMS),
    Key("predicates", H, _PREDICATES),
    Key("predicates.*", H, _PREDICATES),
)

# Deprecated names MM2 3.x still reads (KIP-629; removed in MM2 4.0), with MM2's rule: the new name
# wins where both are set.
DEPRECATED_ALIASES: Mapping[str, str] = {
    "topics.blacklist": "topics.exclude",
    "groups.blacklist": "groups.exclude",
    "config.properties.blacklist": "config.properties.exclude",
}

TOP_LEVEL_KEYS: tuple[Key, ...] = (
    Key("clusters", H, "comma-separated cluster aliases (required)"),
    Key(
        "config.providers",
        H,
        "credentials by reference: `${<name>:<path>:<key>}` read by Kafka's File, "
        "Directory or EnvVar config providers when the config is loaded (see Secured clusters)",
    ),
    Key("config.providers.*", H, "the providers' `.class` and `.param.*`"),
)

# This product's own settings (MM2 ignores them), named here for the code that reads them.
SCHEDULE = "mirrorflow.schedule"
MAX_RECORDS_PER_PARTITION = "mirrorflow.max.records.per.partition"
SPARK_CONN_ID = "mirrorflow.spark.conn.id"
SPARK_DEPLOY_MODE = "mirrorflow.spark.deploy.mode"
SPARK_CONF_PREFIX = "mirrorflow.spark.conf."
COPY_TIMEOUT = "mirrorflow.copy.timeout.seconds"
TASK_RETRIES = "mirrorflow.task.retries"
LOCK_WAIT = "mirrorflow.lock.wait.seconds"
AIRFLOW_QUEUE = "mirrorflow.airflow.queue"
AIRFLOW_POOL = "mirrorflow.airflow.pool"
REVERSE_CHECKPOINTS = "mirrorflow.reverse.checkpoints.enabled"
ON_SOURCE_DATA_LOSS = "mirrorflow.on.source.data.loss"
ON_PARTITION_ERROR = "mirrorflow.on.partition.error"
ALERT_LAG_MAX_RECORDS = "mirrorflow.alert.lag.max.records"
ALERT_HEARTBEAT_AGE_MAX_SECONDS = "mirrorflow.alert.heartbeat.age.max.seconds"
ALERT_NOTIFIER = "mirrorflow.alert.notifier"
MODE = "mirrorflow.mode"
DR_WINDOW_SECONDS = "mirrorflow.dr.window.seconds"
DR_IDLE_WAIT_MS = "mirrorflow.dr.idle.wait.ms"
DR_TRIGGER_INTERVAL_MS = "mirrorflow.dr.trigger.interval.ms"
DR_HANDOVER_WAIT = "mirrorflow.dr.handover.wait.seconds"
STATE_DIR = "mirrorflow.state.dir"
# A flow's schema registries (config.schemas): Confluent's client settings of each, and the subjects.
SCHEMA_REGISTRY = "mirrorflow.schema.registry."
SCHEMA_REGISTRY_SIDES = ("source", "target")
SCHEMA_REGISTRY_CLIENT_KEYS = (
    "url",
    "basic.auth.user.info",
    "ssl.ca.location",
    "ssl.certificate.location",
    "ssl.key.location",
)
SCHEMA_SUBJECTS_INCLUDE = SCHEMA_REGISTRY + "subjects.include"
SCHEMA_SUBJECTS_EXCLUDE = SCHEMA_REGISTRY + "subjects.exclude"
# The subject name strategies the source's serializers use, whose subjects the sync reads.
SCHEMA_STRATEGIES = SCHEMA_REGISTRY + "subject.name.strategies"
# The topics (source names) whose keys or values are declared in Confluent's wire format (framed), or
# declared not (plain).
SCHEMA_FRAMED_KEYS = SCHEMA_REGISTRY + "framed.key.topics"
SCHEMA_FRAMED_VALUES = SCHEMA_REGISTRY + "framed.value.topics"
SCHEMA_PLAIN_KEYS = SCHEMA_REGISTRY + "plain.key.topics"
SCHEMA_PLAIN_VALUES = SCHEMA_REGISTRY + "plain.value.topics"
OFFSETS_DB_URL = "mirrorflow.offsets.db.url"
