"""Every key an MM2 config may hold, and what this product does with it: each is **honoured**, has
**no effect** in a batch system (accepted, and warned about by name with the reason), or is
**refused** (an error naming the key as written and what to do). A key in none of the tables is
unknown: an error suggesting the closest known key. The README's key table is generated from here
(``python -m mirrorflow.config.keys``), so the two cannot drift.

Invariants: no key of a loaded config is silently ignored; a refused key set to a value that
changes nothing (its MM2 default, e.g. ``topic.filter.class = ...DefaultTopicFilter``) is accepted;
a typed key (boolean, number) holds a value of its type whatever its class, as MM2's ConfigDef
demands.
"""

from __future__ import annotations

import difflib
import enum
import logging
import re
from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import dataclass

from mirrorflow.config.java_clients import CONNECT_WORKER_KEYS, JAVA_CLIENT_KEYS
from mirrorflow.config.property_view import checked_bool, checked_integer, checked_whole_number, shown
from mirrorflow.errors import ConfigError

log = logging.getLogger(__name__)


class Treatment(enum.StrEnum):
    HONOURED = "honoured"
    NO_EFFECT = "no effect"
    REFUSED = "refused"


@dataclass(frozen=True)
class Key:
    """One key (or, ending in ``.*``, every key under a prefix). ``note``: what it does (honoured),
    why it does nothing here (no effect) or what to do instead (refused). ``kind``: ``bool``,
    ``int`` (a whole number of at least 0), ``pos`` (at least 1), ``long`` (any whole number: Java
    reads some where ``-1`` means no limit) or ``text``. ``harmless``: values of a refused key that
    change nothing, accepted. ``choices``: the only values an honoured key takes."""

    name: str
    treatment: Treatment
    note: str
    default: str = ""
    kind: str = "text"
    harmless: tuple[str, ...] = ()
    choices: tuple[str, ...] = ()

    def matches(self, key: str) -> bool:
        return key.startswith(self.name[:-1]) if self.name.endswith(".*") else key == self.name


@dataclass(frozen=True)
class KeyUse:
    """A key as written in the file, and what this product does with it."""

    written: str
    treatment: Treatment
    note: str


H, N, R = Treatment.HONOURED, Treatment.NO_EFFECT, Treatment.REFUSED
PROJECT_PREFIX = "mirrorflow."
_PROJECT = "this product's setting (see the table of mirrorflow settings)"


def _dr(what: str) -> str:
    return f"DR mode: how often a window {what} (see DR mode); a batch run does it once per run"


_NO_REST = "no Connect worker or REST server runs: Airflow schedules the flows"
_STATE = "progress lives in the offsets table (mirrorflow.offsets.db.url), not in Connect's topics"
_TRANSFORMS = "see Transforms: Connect's Filter, DropHeaders and InsertHeader, python hooks"
_PREDICATES = "see Transforms: Connect's HasHeaderKey, TopicNameMatches and RecordIsTombstone"
_JAVA_CLASS = "the Python clients cannot load Java classes; remove the key"
_DEPRECATED = "deprecated name of"

# MM2's connector and MirrorMaker settings, at top level (every flow) or as <source>-><target>.<key>.
FLOW_KEYS: tuple[Key, ...] = (
    Key("enabled", H, "per flow only: flows are directional and off unless enabled", "false", "bool"),
    Key("topics", H, "include regexes, comma-separated, full-name match", ".*"),
    Key("topics.exclude", H, "exclude regexes; exclude wins", r".*[\-\.]internal, .*\.replica, __.*"),
    Key("groups", H, "consumer groups whose positions are checkpointed", ".*"),
    Key("groups.exclude", H, "consumer groups never checkpointed", "console-consumer-.*, connect-.*, __.*"),
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
    Key("replication.policy.separator", H, "separator of remote topic names", "."),
    Key("replication.factor", H, "for remote topics created on the target", "2", "pos"),
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
    Key("offset-syncs.topic.replication.factor", H, "for the offset-syncs topic", "3", "pos"),
    Key(
        "heartbeats.topic.replication.factor",
        H,
        "for the `heartbeats` topics, created on first use (single partition, compacted)",
        "3",
        "pos",
    ),
    Key(
        "checkpoints.topic.replication.factor",
        H,
        "for the checkpoints topic, created on first use (single partition, compacted)",
        "3",
        "pos",
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
        "every copy is exactly-once already: it writes as the flow's one "
        "producer id, each record's sequence its target offset",
    ),
    Key("exactly.once.source.support", N, "every copy is exactly-once already (a Connect worker setting)"),
    Key("transaction.boundary", N, "every copy is exactly-once without transactions"),
    Key("transaction.boundary.interval.ms", N, "every copy is exactly-once without transactions", kind="int"),
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
    Key("dedicated.mode.enable.internal.rest", N, _NO_REST, kind="bool"),
    Key("name", N, "a flow is named `<source>-><target>`"),
    Key("offsets.storage.topic", N, _STATE),
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
        "forwarding.admin.class", R, _JAVA_CLASS, harmless=("org.apache.kafka.clients.admin.ForwardingAdmin",)
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

_COPY_OWN = "not used: the copy and the control plane fetch and write record batches with their own sizes"
_NO_GROUP = "the copy reads planned offset ranges, without a consumer group"
_EXACTLY_ONCE = "every copy writes idempotently as the flow's one producer id, exactly once"
_AS_BYTES = "records are copied as bytes"
_OPENSSL = "TLS versions and ciphers are OpenSSL's defaults (TLS 1.2 or newer)"
_NO_OAUTH = (
    "SASL OAUTHBEARER and GSSAPI (Kerberos) are not supported; use SCRAM-SHA-512, SCRAM-SHA-256 or PLAIN"
)

# Java client settings (at <alias>., <alias>.<role>., top-level security keys, and a flow's
# source.cluster. / target.<role>. etc.). A client key not listed has no effect (_COPY_OWN).
CLIENT_KEYS: tuple[Key, ...] = (
    Key("bootstrap.servers", H, "every client of the cluster (required per cluster)"),
    Key("client.id", H, "every client"),
    Key(
        "security.protocol",
        H,
        "every client",
        "PLAINTEXT",
        choices=("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"),
    ),
    Key(
        "sasl.mechanism",
        H,
        "every client: `PLAIN`, `SCRAM-SHA-256` or `SCRAM-SHA-512`",
        choices=("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"),
    ),
    Key("sasl.jaas.config", H, "every client: the `username` and `password` of the login module"),
    Key(
        "ssl.truststore.location",
        H,
        "every client: a PEM file of CA certificates (librdkafka's "
        "`ssl.ca.location`, kafka-python's `ssl_cafile`)",
    ),
    Key(
        "ssl.truststore.type",
        H,
        "`PEM`; JKS and PKCS12 are refused with the keytool command that exports a PEM file",
        "JKS",
    ),
    Key(
        "ssl.endpoint.identification.algorithm",
        H,
        "every client: `https` verifies the broker's host name, empty does not",
        "https",
    ),
    Key(
        "request.timeout.ms",
        H,
        "the control plane's admin calls (also the wait for an unreachable cluster) and the librdkafka "
        "writers",
        "30000",
        "pos",
    ),
    *(
        Key(
            k,
            H,
            "the librdkafka writers of heartbeats, offset syncs and checkpoints; the record copy keeps "
            "the source's batches, idempotent with acks=all",
            kind="text" if k in ("acks", "compression.type") else "int",
        )
        for k in (
            "acks",
            "linger.ms",
            "batch.size",
            "compression.type",
            "delivery.timeout.ms",
            "retry.backoff.ms",
        )
    ),
    Key(
        "max.request.size",
        H,
        "the librdkafka writers (their `message.max.bytes`); the record copy sends the source's batches as "
        "they are, each within the remote topic's `max.message.bytes` (synced from the source)",
        "1048576",
        "pos",
    ),
    Key("metadata.max.age.ms", H, "the librdkafka writers", kind="int"),
    Key("socket.connection.setup.timeout.ms", H, "the librdkafka writers", kind="int"),
    Key(
        "ssl.keystore.location",
        H,
        "every client: the client certificate (mutual TLS), a PEM file of the private key and its "
        "certificate chain, or a PKCS12 store; JKS is refused with the keytool command that converts it",
    ),
    Key("ssl.keystore.type", H, "`PEM` or `PKCS12`", "JKS"),
    Key("ssl.keystore.password", H, "a PKCS12 store's password (a PEM keystore has none)"),
    Key(
        "ssl.key.password",
        H,
        "the password of a PEM keystore's private key (a PKCS12 store's key has the store's)",
    ),
    Key(
        "ssl.keystore.key", H, "the client certificate's private key inline, in PEM (ssl.keystore.type = PEM)"
    ),
    Key(
        "ssl.keystore.certificate.chain",
        H,
        "the client certificate's chain inline, in PEM (with ssl.keystore.key)",
    ),
    Key(
        "ssl.truststore.certificates",
        R,
        "write the certificates to a PEM file and point `ssl.truststore.location` at it",
    ),
    Key("sasl.kerberos.*", R, _NO_OAUTH),
    Key("sasl.oauthbearer.*", R, _NO_OAUTH),
    Key("sasl.login.*", R, _NO_OAUTH),
    Key("sasl.client.callback.handler.class", R, _JAVA_CLASS),
    Key("ssl.engine.factory.class", R, _JAVA_CLASS),
    Key("interceptor.classes", R, _JAVA_CLASS),
    Key("security.providers", R, _JAVA_CLASS),
    Key("bootstrap.controllers", R, "the clients reach brokers only; set `bootstrap.servers`"),
    Key("config.providers", R, "config providers are declared at top level only; move the key there"),
    Key("ssl.truststore.password", N, "a PEM truststore has no password"),
    *(
        Key(k, N, _OPENSSL)
        for k in (
            "ssl.protocol",
            "ssl.enabled.protocols",
            "ssl.cipher.suites",
            "ssl.keymanager.algorithm",
            "ssl.trustmanager.algorithm",
            "ssl.secure.random.implementation",
            "ssl.provider",
        )
    ),
    Key(
        "isolation.level",
        N,
        "the copy always reads committed records only: aborted transactions and their markers are not copied",
    ),
    *(
        Key(k, N, _EXACTLY_ONCE)
        for k in (
            "enable.idempotence",
            "transactional.id",
            "transaction.timeout.ms",
            "transaction.two.phase.commit.enable",
            "max.in.flight.requests.per.connection",
        )
    ),
    *(
        Key(k, N, _AS_BYTES)
        for k in ("key.serializer", "value.serializer", "key.deserializer", "value.deserializer")
    ),
    *(
        Key(k, N, _NO_GROUP)
        for k in (
            "group.id",
            "group.instance.id",
            "group.protocol",
            "group.remote.assignor",
            "auto.offset.reset",
            "enable.auto.commit",
            "auto.commit.interval.ms",
            "partition.assignment.strategy",
            "heartbeat.interval.ms",
            "session.timeout.ms",
            "max.poll.interval.ms",
            "max.poll.records",
            "share.acknowledgement.mode",
            "share.acquire.mode",
        )
    ),
)

_ROLES = ("consumer.", "producer.", "admin.")
_FLOW_CLIENT_PREFIXES = tuple(
    f"{side}.{kind}." for side in ("source", "target") for kind in ("cluster", *[r[:-1] for r in _ROLES])
)
_TOP_LEVEL_CLIENT = re.compile(r"security\.protocol|ssl\..*|sasl\..*")


def client_key(name: str) -> Key | None:
    """What a Java client setting does here; None for a key no Java client has."""
    rule = _rule(name, CLIENT_KEYS)
    if rule is not None:
        return rule
    return Key(name, N, _COPY_OWN) if name in JAVA_CLIENT_KEYS else None


def classify(
    top: Mapping[str, str],
    by_cluster: Mapping[str, Mapping[str, str]],
    by_flow: Mapping[tuple[str, str], Mapping[str, str]],
    enabled: Container[tuple[str, str]],
) -> tuple[KeyUse, ...]:
    """Every key of the file by scope (prefixes stripped) with its treatment; warns about keys with
    no effect and deprecated names, raises ``ConfigError`` for a refused, unknown or mistyped key.
    This product's own keys (``mirrorflow.*``) are checked where they are read. The values of a
    flow not ``enabled`` are not checked: MM2 builds nothing from them."""
    uses: list[KeyUse] = []
    for key, value in top.items():
        uses.append(_top_level(key, value))
    for alias, props in by_cluster.items():
        for key, value in props.items():
            uses.append(_cluster_level(f"{alias}.", key, value))
    for (source, target), props in by_flow.items():
        for key, value in props.items():
            uses.append(_flow_level(f"{source}->{target}.", key, value, (source, target) in enabled))
    _warn(uses)
    return tuple(uses)


def _top_level(key: str, value: str) -> KeyUse:
    if key.startswith(PROJECT_PREFIX):
        return KeyUse(key, H, _PROJECT)
    rule = _rule(key, TOP_LEVEL_KEYS) or _rule(key, FLOW_KEYS)
    if key == "enabled":
        raise ConfigError("only `<source>-><target>.enabled` enables a flow; set it per flow", key=key)
    if rule is None and _TOP_LEVEL_CLIENT.fullmatch(key):
        rule = client_key(key)
    if rule is None and key in CONNECT_WORKER_KEYS:
        rule = _worker_key(key)
    if rule is None and key.startswith(_ROLES):
        raise ConfigError(
            "client settings of one kind are set per cluster: write `<alias>." + key + "` (or per flow, "
            f"`<source>-><target>.source.{key}` / `target.{key}`)",
            key=key,
        )
    if rule is None:
        alias = DEPRECATED_ALIASES.get(key)
        if alias is not None:
            return _deprecated(key, alias)
        candidates = [*_names(TOP_LEVEL_KEYS), *_names(FLOW_KEYS), *DEPRECATED_ALIASES]
        _unknown(key, key, candidates, "an MM2 setting")
    assert rule is not None
    return _use(key, value, rule)


def _cluster_level(prefix: str, key: str, value: str) -> KeyUse:
    written = prefix + key
    name = key
    for role in _ROLES:
        if key.startswith(role):
            name = key[len(role) :]
            break
    rule = client_key(name)
    if rule is None and name == key and key in CONNECT_WORKER_KEYS:
        rule = _worker_key(key)
    if rule is None and (_rule(key, FLOW_KEYS) or key in DEPRECATED_ALIASES):
        raise ConfigError(
            f"`{key}` is a flow setting, not a cluster's: set it at top level or per flow "
            f"(`<source>-><target>.{key}`)",
            key=written,
        )
    if rule is None:
        known = JAVA_CLIENT_KEYS | (CONNECT_WORKER_KEYS if name == key else frozenset())
        _unknown(written, name, known, "a client setting")
    assert rule is not None
    return _use(written, value, rule)


def _flow_level(prefix: str, key: str, value: str, check: bool) -> KeyUse:
    written = prefix + key
    if key.startswith(PROJECT_PREFIX):
        return KeyUse(written, H, _PROJECT)
    for client_prefix in _FLOW_CLIENT_PREFIXES:
        if key.startswith(client_prefix):
            name = key[len(client_prefix) :]
            rule = client_key(name)
            if rule is None:
                _unknown(written, name, JAVA_CLIENT_KEYS, "a client setting")
            assert rule is not None
            return _use(written, value, rule, check)
    if key.startswith(_ROLES):
        raise ConfigError(
            f"say which cluster's clients: `{prefix}source.{key}` or `{prefix}target.{key}`", key=written
        )
    alias = DEPRECATED_ALIASES.get(key)
    if alias is not None:
        return _deprecated(written, alias)
    rule = _rule(key, FLOW_KEYS)
    if rule is None:
        _unknown(written, key, [*_names(FLOW_KEYS), *DEPRECATED_ALIASES], "an MM2 flow setting")
    assert rule is not None
    return _use(written, value, rule, check)


def _worker_key(key: str) -> Key:
    """A Connect worker setting (converters and exactly-once support are also connector settings)."""
    return _rule(key, FLOW_KEYS) or Key(key, N, _STATE if "storage" in key else _NO_REST)


def _deprecated(written: str, new: str) -> KeyUse:
    return KeyUse(written, H, f"{_DEPRECATED} `{new}` (MM2 3.x; `{new}` wins where both are set)")


def _use(written: str, value: str, rule: Key, check: bool = True) -> KeyUse:
    """The key's use, after checking the refusals and (``check``) its value's type."""
    if rule.treatment is R and value not in rule.harmless:
        raise ConfigError(rule.note, key=written)
    if not check:
        return KeyUse(written, rule.treatment, rule.note)
    if rule.kind == "bool":
        checked_bool(written, value)
    if rule.kind == "long":
        checked_integer(written, value)
    if rule.kind in ("int", "pos"):
        example = int(rule.default) if rule.default else None
        checked_whole_number(written, value, zero_allowed=rule.kind == "int", example=example)
    # Java reads the protocol in any case, the mechanism as written.
    chosen = value.upper() if rule.name == "security.protocol" else value
    if rule.choices and chosen not in rule.choices:
        if rule.name in ("sasl.mechanism",):
            raise ConfigError(f"{value} is not supported: {_NO_OAUTH}", key=written)
        raise ConfigError(f"expected {' or '.join(rule.choices)}, got {shown(written, value)}", key=written)
    return KeyUse(written, rule.treatment, rule.note)


def _rule(key: str, table: Sequence[Key]) -> Key | None:
    exact = [k for k in table if k.name == key]
    if exact:
        return exact[0]
    return next((k for k in table if k.name.endswith(".*") and k.matches(key)), None)


def _names(table: Sequence[Key]) -> list[str]:
    return [k.name for k in table if not k.name.endswith(".*")]


# Names from MirrorMaker 1 and other tools that MM2 never read, with what they meant in MM2's words.
_MEANT = {
    "topics.whitelist": "topics",
    "groups.whitelist": "groups",
    "whitelist": "topics",
    "blacklist": "topics.exclude",
}


def closest(name: str, candidates: Iterable[str]) -> str | None:
    """The candidate ``name`` was probably meant to be, if any."""
    if name in _MEANT:
        return _MEANT[name]
    close = difflib.get_close_matches(name, sorted(set(candidates)), n=1, cutoff=0.75)
    return close[0] if close else None


def _unknown(written: str, name: str, candidates: Iterable[str], what: str) -> None:
    """``name``: the key without its scope's and client kind's prefixes, as ``candidates`` are."""
    close = closest(name, candidates)
    hint = f"; did you mean `{written[: len(written) - len(name)]}{close}`?" if close else ""
    raise ConfigError(f"unknown key: not {what} that MM2 or this product knows{hint}", key=written)


def _warn(uses: Sequence[KeyUse]) -> None:
    """One warning per reason, naming its keys as written."""
    by_note: dict[str, list[str]] = {}
    for use in uses:
        if use.treatment is N:
            by_note.setdefault(use.note, []).append(use.written)
        elif use.note.startswith(_DEPRECATED):
            new = use.note.split("`")[1]
            # MM2's own words.
            log.warning(
                "Configuration key %s is deprecated and may be removed in the future. Please update your "
                "configuration to use %s instead.",
                use.written,
                new,
            )
    for note, keys in by_note.items():
        log.warning("no effect here: %s (%s)", ", ".join(sorted(keys)), note)


def markdown() -> str:
    """The README's key table: one row per key (or per group of client keys sharing a note)."""
    rows = ["| key | class | default | what it does, or why not, or what to do |", "|---|---|---|---|"]

    def row(names: Sequence[str], rule: Key) -> None:
        keys = ", ".join(f"`{n}`" for n in names)
        default = f"`{rule.default}`" if rule.default else ""
        rows.append(f"| {keys} | {rule.treatment.value} | {default} | {rule.note} |")

    rows.append("| **top level only** | | | |")
    for rule in TOP_LEVEL_KEYS:
        row([rule.name], rule)
    rows.append("| **every flow (top level) or one flow (`<source>-><target>.<key>`)** | | | |")
    for rule in sorted(FLOW_KEYS, key=lambda k: (list(Treatment).index(k.treatment), k.name)):
        row([rule.name], rule)
    for old, new in DEPRECATED_ALIASES.items():
        rows.append(
            f"| `{old}` | honoured | | {_DEPRECATED} `{new}`, with MM2's warning (MM2 3.x; `{new}` wins "
            "where both are set) |"
        )
    rows.append(
        "| **client settings: `<alias>.<key>`, `<alias>.consumer\\|producer\\|admin.<key>`, a flow's "
        "`source.cluster.<key>`, `target.producer.<key>` etc.; top level: `security.protocol`, `ssl.*`, "
        "`sasl.*` for every cluster** | | | |"
    )
    grouped: dict[tuple[Treatment, str, str], list[str]] = {}
    for rule in CLIENT_KEYS:
        grouped.setdefault((rule.treatment, rule.note, rule.default), []).append(rule.name)
    others = sorted(JAVA_CLIENT_KEYS - {k for k in JAVA_CLIENT_KEYS if _rule(k, CLIENT_KEYS)})
    grouped[(N, _COPY_OWN, "")] = others
    for (treatment, note, default), names in sorted(
        grouped.items(), key=lambda g: list(Treatment).index(g[0][0])
    ):
        row(names, Key(names[0], treatment, note, default))
    rows.append("| **Connect worker settings, top level or `<alias>.<key>`** | | | |")
    worker = sorted(k for k in CONNECT_WORKER_KEYS if not _rule(k, FLOW_KEYS))
    row([k for k in worker if "storage" in k], Key("", N, _STATE))
    row([k for k in worker if "storage" not in k], Key("", N, _NO_REST))
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
