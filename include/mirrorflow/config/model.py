"""The typed, immutable configuration, read from an MM2 ``mm2.properties`` file (the source of truth).

Scopes and precedence follow MirrorMaker 2: top-level keys < ``<alias>.*`` (client settings of one
cluster) < ``<source>-><target>.*`` (flow overrides win). Settings of this product live under
``mirrorflow.``, at top level or per flow; MM2 ignores them, so one file serves both.

Everything is validated while parsing: a ``MirrorConfig`` that exists is usable, and every error is a
``ConfigError`` naming the key as written in the file. A typed key's kind, default and choices are
its row's in the key table (``config.keys``), read through ``config.key_values``.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from mirrorflow.config.clients import (
    ADMIN_REQUEST_TIMEOUT_MS_DEFAULT,
    TRANSACTION_TIMEOUT_MS_DEFAULT,
    check_translatable,
    copy_ignored,
)
from mirrorflow.config.dr import DrSettings, dr_settings
from mirrorflow.config.flow_checks import check_flows
from mirrorflow.config.key_classes import KeyUse, classify
from mirrorflow.config.key_values import (
    choice,
    default,
    default_flag,
    default_number,
    flag,
    number,
    optional_number,
)
from mirrorflow.config.keys import (
    AIRFLOW_POOL,
    AIRFLOW_QUEUE,
    ALERT_HEARTBEAT_AGE_MAX_SECONDS,
    ALERT_LAG_MAX_RECORDS,
    ALERT_NOTIFIER,
    COPY_TIMEOUT,
    DEPRECATED_ALIASES,
    LOCK_WAIT,
    MAX_RECORDS_PER_PARTITION,
    ON_PARTITION_ERROR,
    ON_SOURCE_DATA_LOSS,
    REVERSE_CHECKPOINTS,
    SCHEDULE,
    SPARK_CONF_PREFIX,
    SPARK_CONN_ID,
    SPARK_DEPLOY_MODE,
    TASK_RETRIES,
)
from mirrorflow.config.properties import parse_properties
from mirrorflow.config.property_view import PropertyView
from mirrorflow.config.providers import resolve_references
from mirrorflow.config.schemas import SchemaSync, schema_sync
from mirrorflow.config.scopes import FLOW_ARROW, cluster_aliases, split_scopes
from mirrorflow.config.state import offsets_db_url, state_dir
from mirrorflow.config.strimzi import is_strimzi, secrets_folder, to_properties
from mirrorflow.config.transforms import TransformConfig, transforms_of
from mirrorflow.errors import ConfigError
from mirrorflow.mm2.filters import (
    GROUPS_DEFAULT,
    GROUPS_EXCLUDE_DEFAULT,
    TOPICS_DEFAULT,
    TOPICS_EXCLUDE_DEFAULT,
    GroupFilter,
    TopicFilter,
    compile_patterns,
    should_replicate_topic,
)
from mirrorflow.mm2.policy import (
    CLASS_CONFIG,
    CLASS_DEFAULT,
    SEPARATOR_CONFIG,
    SEPARATOR_DEFAULT,
    DefaultReplicationPolicy,
    ReplicationPolicy,
    replication_policy,
)

log = logging.getLogger(__name__)

ENV_CONFIG = "MIRROR_CONFIG"
# MM2's --clusters: the DAG files make DAGs only of the flows whose target is listed.
ENV_CLUSTERS = "MIRROR_CLUSTERS"

CONFIG_PROPERTIES_EXCLUDE_DEFAULT: tuple[str, ...] = (
    "follower.replication.throttled.replicas",
    "leader.replication.throttled.replicas",
    "message.timestamp.difference.max.ms",
    "message.timestamp.type",
    "unclean.leader.election.enable",
    "min.insync.replicas",
)
TASK_RETRY_DELAY_SECONDS = 30
# Time for the plan, commit, checkpoint and release tasks of a run, on top of its copy attempts.
_RUN_OVERHEAD_SECONDS = 3600

# (prefix as written in the file, properties under it with the prefix stripped), lowest precedence first.
_Layers = Sequence[tuple[str, Mapping[str, str]]]
_CLIENT_ROLES = ("consumer", "producer", "admin")
_ROLE_PREFIXES = tuple(f"{role}." for role in _CLIENT_ROLES)
_NOT_IDENTIFIER = re.compile(r"[^A-Za-z0-9_]")


@dataclass(frozen=True)
class ClusterConfig:
    """One Kafka cluster as seen by one flow (or by all flows, in ``MirrorConfig.clusters``).

    ``client`` holds the settings shared by every client of the cluster (``bootstrap.servers``
    included): top-level ``security.protocol``/``ssl.*``/``sasl.*`` < ``<alias>.*`` < a flow's
    ``<src>-><tgt>.source.cluster.*`` (or ``target.cluster.*``). ``consumer``, ``producer`` and
    ``admin`` are ``client`` overlaid with ``<alias>.<role>.*`` < ``<src>-><tgt>.source.<role>.*``.
    """

    alias: str
    bootstrap_servers: str
    client: Mapping[str, str]
    consumer: Mapping[str, str]
    producer: Mapping[str, str]
    admin: Mapping[str, str]


@dataclass(frozen=True)
class MirrorSettings:
    """This product's settings of one flow (``mirrorflow.*``, top level < flow).

    ``schedule`` None means manual runs only; ``max_records_per_partition`` > 0 bounds one run;
    ``spark_conn_id`` names the Airflow connection whose host is the Spark master (``local[*]``,
    ``spark://host:7077``, ``yarn``, ``k8s://...``): Airflow's SparkSubmitOperator takes the master
    only from a connection. ``spark_deploy_mode`` is where the Spark driver runs: ``client`` (in the
    Airflow task) or ``cluster`` (on the cluster; it overrides the connection's ``deploy-mode``).
    ``spark_conf`` comes from ``mirrorflow.spark.conf.<spark key>``.
    A copy attempt is stopped (its Spark job killed) after ``copy_timeout_seconds``; every task is
    retried ``task_retries`` times. A run that finds the flow locked by another run waits up to
    ``lock_wait_seconds`` for it (the one before it still releasing), then fails.
    ``on_source_data_loss`` is ``fail`` (a run whose next source records were deleted before they
    were mirrored fails, naming them) or ``skip`` (it continues after them and records the gap).
    ``on_partition_error`` is ``fail`` (a partition's error a retry would meet again, such as a
    refused write, a record too large for the target or a failing transform, fails the whole run,
    committing nothing) or ``isolate`` (the run commits every other partition, records the failed
    one with its error, and fails at the end; the next run copies the failed range again).
    A run whose lag left on some partition exceeds ``alert_lag_max_records``, or whose newest
    mirrored heartbeat is older than
    ``alert_heartbeat_age_max_seconds``, fails its freshness task (None: no such alert), which calls
    ``alert_notifier`` (``module:attribute`` of an Airflow notifier or callback) when set.
    ``airflow_queue`` and ``airflow_pool``: the Airflow queue and pool of every task of the flow's
    DAGs (None: Airflow's defaults), so that a flow's work runs on workers near its target.
    ``reverse_checkpoints``: the flow ``B->A`` also checkpoints its groups' positions on the remote
    topics of its opposite flow ``A->B`` back to their upstream topics on ``A``, for a failback
    (``mirrorflow.app.checkpoints``).
    """

    schedule: str | None = None
    max_records_per_partition: int = default_number(MAX_RECORDS_PER_PARTITION)
    spark_conn_id: str = default(SPARK_CONN_ID)
    spark_deploy_mode: str = default(SPARK_DEPLOY_MODE)
    spark_conf: Mapping[str, str] = field(default_factory=PropertyView)
    copy_timeout_seconds: int = default_number(COPY_TIMEOUT)
    task_retries: int = default_number(TASK_RETRIES)
    lock_wait_seconds: int = default_number(LOCK_WAIT)
    on_source_data_loss: str = default(ON_SOURCE_DATA_LOSS)
    on_partition_error: str = default(ON_PARTITION_ERROR)
    alert_lag_max_records: int | None = None
    alert_heartbeat_age_max_seconds: int | None = None
    alert_notifier: str | None = None
    airflow_queue: str | None = None
    airflow_pool: str | None = None
    reverse_checkpoints: bool = default_flag(REVERSE_CHECKPOINTS)


@dataclass(frozen=True)
class FlowConfig:
    """One directional MM2 flow ``<source>-><target>`` with its effective settings.

    ``properties`` holds every effective flow-level key (top level overlaid by ``<src>-><tgt>.*``,
    prefix stripped), for MM2 keys without a typed field yet; when parsed it is a ``PropertyView``,
    whose typed accessors name the key as written in errors. The filters are derived from the
    pattern lists, so ``dataclasses.replace`` keeps them consistent.
    """

    source: ClusterConfig
    target: ClusterConfig
    topics: tuple[str, ...] = TOPICS_DEFAULT
    topics_exclude: tuple[str, ...] = TOPICS_EXCLUDE_DEFAULT
    groups: tuple[str, ...] = GROUPS_DEFAULT
    groups_exclude: tuple[str, ...] = GROUPS_EXCLUDE_DEFAULT
    replication_policy: ReplicationPolicy = field(default_factory=DefaultReplicationPolicy)
    replication_factor: int = default_number("replication.factor")
    config_properties_exclude: tuple[str, ...] = CONFIG_PROPERTIES_EXCLUDE_DEFAULT
    sync_topic_configs: bool = default_flag("sync.topic.configs.enabled")
    sync_topic_acls: bool = default_flag("sync.topic.acls.enabled")
    emit_checkpoints: bool = default_flag("emit.checkpoints.enabled")
    sync_group_offsets: bool = default_flag("sync.group.offsets.enabled")
    emit_heartbeats: bool = default_flag("emit.heartbeats.enabled")
    emit_offset_syncs: bool = default_flag("emit.offset-syncs.enabled")
    offset_syncs_topic_location: str = default("offset-syncs.topic.location")
    offset_syncs_topic_replication_factor: int = default_number("offset-syncs.topic.replication.factor")
    heartbeats_topic_replication_factor: int = default_number("heartbeats.topic.replication.factor")
    checkpoints_topic_replication_factor: int = default_number("checkpoints.topic.replication.factor")
    settings: MirrorSettings = field(default_factory=MirrorSettings)
    # The transforms applied to every mirrored record, in order (``config.transforms``).
    transforms: tuple[TransformConfig, ...] = ()
    dr: DrSettings | None = None
    # The schema registries whose subjects travel with the data (``config.schemas``), if any.
    schemas: SchemaSync | None = None
    properties: Mapping[str, str] = field(default_factory=PropertyView)
    topic_filter: TopicFilter = field(init=False, repr=False, compare=False)
    group_filter: GroupFilter = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Built once: should_replicate_topic runs for every topic of the source.
        object.__setattr__(self, "topic_filter", TopicFilter(self.topics, self.topics_exclude))
        object.__setattr__(self, "group_filter", GroupFilter(self.groups, self.groups_exclude))

    @property
    def name(self) -> str:
        """MM2's name of the flow, e.g. ``primary->backup``."""
        return f"{self.source.alias}{FLOW_ARROW}{self.target.alias}"

    @property
    def opposite(self) -> str:
        """The name of the flow the other way between the same two clusters."""
        return f"{self.target.alias}{FLOW_ARROW}{self.source.alias}"

    @property
    def dag_id(self) -> str:
        """``mirror_<source>_to_<target>``, characters outside ``[A-Za-z0-9_]`` replaced by ``_``: the
        flow's DAG; its cutover and failover DAGs add a suffix (``dag_ids``)."""
        source, target = (_NOT_IDENTIFIER.sub("_", side.alias) for side in (self.source, self.target))
        return f"mirror_{source}_to_{target}"

    @property
    def cutover_dag_id(self) -> str:
        return f"{self.dag_id}_cutover"

    @property
    def failover_dag_id(self) -> str:
        return f"{self.dag_id}_failover"

    @property
    def dag_ids(self) -> tuple[str, str, str]:
        """Every Airflow DAG of the flow: its runs, its cutover, its failover."""
        return (self.dag_id, self.cutover_dag_id, self.failover_dag_id)

    @property
    def copy_task_timeout_seconds(self) -> int:
        """How long one attempt of the copy task may take: a copy, or a DR window (with its wait for
        the next one, before and after it) and the copy that ends it."""
        dr = self.dr
        return self.settings.copy_timeout_seconds + (
            dr.window_seconds + dr.handover_wait_seconds if dr else 0
        )

    @property
    def lock_ttl_seconds(self) -> int:
        """How long a run holds its flow's lock at most: longer than all its copy attempts, so that
        a lock is never taken over while a copy of its run may still write."""
        attempts = self.settings.task_retries + 1
        return attempts * (self.copy_task_timeout_seconds + TASK_RETRY_DELAY_SECONDS) + _RUN_OVERHEAD_SECONDS

    def should_replicate_topic(self, topic: str) -> bool:
        """MM2's rule for a source topic of this flow (see ``filters.should_replicate_topic``)."""
        return should_replicate_topic(self.replication_policy, self.topic_filter, topic, self.target.alias)


@dataclass(frozen=True)
class MirrorConfig:
    """The whole file: its clusters, its enabled flows and where this product keeps its state."""

    path: Path | None
    clusters: Mapping[str, ClusterConfig]
    flows: tuple[FlowConfig, ...]
    state_dir: Path
    offsets_db_url: str
    # What chose the state folder (env or key, as ``config.state.StateDir``); None: the default.
    state_dir_chosen_by: str | None = None
    # Every key of the file as written, with what this product does with it (``config.key_classes``).
    keys: tuple[KeyUse, ...] = ()

    def flow(self, name: str) -> FlowConfig:
        """The enabled flow called ``name`` (``<source>-><target>``)."""
        for flow in self.flows:
            if flow.name == name:
                return flow
        enabled = ", ".join(flow.name for flow in self.flows) or "none"
        raise ConfigError(
            f"no enabled flow {name!r} in {self.path or 'the configuration'} (enabled: {enabled}); "
            "flows are named <source>-><target> and enabled by `<source>-><target>.enabled = true`"
        )


def load_config(
    path: str | os.PathLike[str] | None = None, env: Mapping[str, str] = os.environ
) -> MirrorConfig:
    """Read the config file: ``path`` if given, else the file env ``MIRROR_CONFIG`` names."""
    if path is not None:
        chosen, chosen_by = Path(path), "the path given"
    elif env.get(ENV_CONFIG):
        chosen, chosen_by = Path(env[ENV_CONFIG]), f"env {ENV_CONFIG}"
    else:
        raise ConfigError(
            f"no configuration: set env {ENV_CONFIG} to the path of your mm2.properties (for the "
            "demo's, run make demo or make airflow from the repository, which set it)"
        )
    chosen = chosen.absolute()
    if not chosen.is_file():
        raise ConfigError(
            f"config file {chosen} ({chosen_by}) does not exist; "
            f"pass the path of an mm2.properties file or set {ENV_CONFIG} to one"
        )
    try:
        text = chosen.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise ConfigError(f"config file {chosen} is not UTF-8 text ({error}); save it as UTF-8") from error
    return parse_config(text, path=chosen, env=env)


def parse_config(text: str, *, path: Path | None = None, env: Mapping[str, str] = os.environ) -> MirrorConfig:
    """Parse and validate the text of an mm2.properties file, or of a Strimzi ``KafkaMirrorMaker2``
    (a ``.yaml`` file, or one of that ``kind``: ``config.strimzi``); ``path`` is used in messages and
    as the base of relative paths in it (the current directory when None).
    """
    base = path.absolute().parent if path else Path.cwd()
    if is_strimzi(text, path):
        text = to_properties(text, str(path or "<string>"), secrets_folder(base, env))
    # Kafka's ConfigDef trims every value; java.util.Properties keeps trailing whitespace.
    parsed = {key: value.strip() for key, value in parse_properties(text, str(path or "<string>")).items()}
    # MM2's config providers: ${file:...}, ${env:...} and ${directory:...} become what they refer to.
    raw = resolve_references(parsed, env, base)
    aliases = cluster_aliases(raw)
    top, by_cluster, by_flow = split_scopes(raw, aliases)
    enabled = [
        (source, target)
        for (source, target), overrides in by_flow.items()
        # MM2: flows are disabled unless enabled, and only the flow's own key enables one.
        if PropertyView.layered([(f"{source}{FLOW_ARROW}{target}.", overrides)]).get_bool("enabled", False)
    ]
    keys = classify(top, by_cluster, by_flow, enabled)

    top_client = {k: v for k, v in top.items() if k == "security.protocol" or k.startswith(("ssl.", "sasl."))}
    cluster_layers = {
        alias: [("", top_client), (f"{alias}.", by_cluster.get(alias, {}))] for alias in aliases
    }
    clusters = {alias: _cluster_config(alias, layers) for alias, layers in cluster_layers.items()}

    flows = [
        _flow_config(source, target, cluster_layers, top, by_flow[(source, target)])
        for source, target in enabled
    ]
    check_flows(flows)

    state = state_dir(top, env, base)
    return MirrorConfig(
        path=path,
        clusters=MappingProxyType(clusters),
        flows=tuple(flows),
        state_dir=state.path,
        offsets_db_url=offsets_db_url(top, env, state.path),
        state_dir_chosen_by=state.chosen_by,
        keys=keys,
    )


def _flow_side_layers(
    flow_name: str, side: str, overrides: Mapping[str, str]
) -> list[tuple[str, dict[str, str]]]:
    """A flow's client overrides of one side, shaped as ``<alias>.*`` keys (MM2's connector keys:
    ``source.cluster.*`` for every client, ``source.consumer.*`` etc. for one).
    """
    shared = f"{side}.cluster."
    roles = tuple(f"{side}.{prefix}" for prefix in _ROLE_PREFIXES)
    return [
        (
            f"{flow_name}.{shared}",
            {k[len(shared) :]: v for k, v in overrides.items() if k.startswith(shared)},
        ),
        (
            f"{flow_name}.{side}.",
            {k[len(side) + 1 :]: v for k, v in overrides.items() if k.startswith(roles)},
        ),
    ]


def _cluster_config(alias: str, layers: _Layers) -> ClusterConfig:
    """``layers``: ``<alias>.*``-shaped properties (shared keys and ``<role>.*`` keys), lowest first."""
    merged = PropertyView.layered(layers)
    client = merged.excluding(_ROLE_PREFIXES)
    if not client.get("bootstrap.servers"):
        # An empty value wins over the cluster's own (a flow override): name the key to fix.
        written = "bootstrap.servers" in client
        key = client.written_as("bootstrap.servers") if written else f"{alias}.bootstrap.servers"
        raise ConfigError(f"cluster {alias!r} has no bootstrap servers; add `{key} = host:9092`", key=key)
    roles = {role: client.overlaid(merged.stripped(f"{role}.")) for role in _CLIENT_ROLES}
    # Read by the control plane itself (kafka-python); librdkafka checks the writer's settings.
    roles["admin"].get_positive_int("request.timeout.ms", ADMIN_REQUEST_TIMEOUT_MS_DEFAULT)
    roles["producer"].get_positive_int("transaction.timeout.ms", TRANSACTION_TIMEOUT_MS_DEFAULT)
    for props in roles.values():
        check_translatable(props, props.written_as)
    ignored = copy_ignored(roles["producer"], roles["producer"].written_as)
    if ignored:
        log.warning(
            "%s: not applied to the record copy, which keeps the source's record batches (their batching "
            "and compression) and writes idempotently with acks=all; heartbeats, offset syncs and "
            "checkpoints still use them",
            ", ".join(ignored),
        )
    return ClusterConfig(alias, client["bootstrap.servers"], client, **roles)


def _flow_config(
    source: str,
    target: str,
    cluster_layers: Mapping[str, _Layers],
    top: Mapping[str, str],
    overrides: Mapping[str, str],
) -> FlowConfig:
    """The flow ``source->target`` from the clusters' layers, the top level and its own keys."""
    name = f"{source}{FLOW_ARROW}{target}"
    props = PropertyView.layered([("", top), (f"{name}.", overrides)])
    for old, new in DEPRECATED_ALIASES.items():
        props = props.aliased(old, new)
    lists = {
        key: props.get_list(key, default)
        for key, default in (
            ("topics", TOPICS_DEFAULT),
            ("topics.exclude", TOPICS_EXCLUDE_DEFAULT),
            ("groups", GROUPS_DEFAULT),
            ("groups.exclude", GROUPS_EXCLUDE_DEFAULT),
            ("config.properties.exclude", CONFIG_PROPERTIES_EXCLUDE_DEFAULT),
        )
    }
    deploy_mode_conf = f"{SPARK_CONF_PREFIX}spark.submit.deployMode"
    if props.get(deploy_mode_conf) is not None:
        # spark-submit's --deploy-mode, which the flow's DAG always passes, would override it.
        raise ConfigError(
            f"the deploy mode is set by {SPARK_DEPLOY_MODE} (client or cluster); remove this key",
            key=props.written_as(deploy_mode_conf),
        )
    # Validated here so that a bad pattern is reported under the key as written (flow prefix).
    for key, patterns in lists.items():
        compile_patterns(patterns, props.written_as(key))
    return FlowConfig(
        source=_cluster_config(
            source, [*cluster_layers[source], *_flow_side_layers(name, "source", overrides)]
        ),
        target=_cluster_config(
            target, [*cluster_layers[target], *_flow_side_layers(name, "target", overrides)]
        ),
        topics=lists["topics"],
        topics_exclude=lists["topics.exclude"],
        groups=lists["groups"],
        groups_exclude=lists["groups.exclude"],
        replication_policy=replication_policy(
            props.get(CLASS_CONFIG, CLASS_DEFAULT),
            props.get(SEPARATOR_CONFIG, SEPARATOR_DEFAULT),
            source_cluster_alias=source,
            class_key=props.written_as(CLASS_CONFIG),
            separator_key=props.written_as(SEPARATOR_CONFIG),
        ),
        replication_factor=number(props, "replication.factor"),
        config_properties_exclude=lists["config.properties.exclude"],
        sync_topic_configs=flag(props, "sync.topic.configs.enabled"),
        sync_topic_acls=flag(props, "sync.topic.acls.enabled"),
        emit_checkpoints=flag(props, "emit.checkpoints.enabled"),
        sync_group_offsets=flag(props, "sync.group.offsets.enabled"),
        emit_heartbeats=flag(props, "emit.heartbeats.enabled"),
        emit_offset_syncs=flag(props, "emit.offset-syncs.enabled"),
        offset_syncs_topic_location=props.get_choice("offset-syncs.topic.location", ("source", "target")),
        offset_syncs_topic_replication_factor=number(props, "offset-syncs.topic.replication.factor"),
        heartbeats_topic_replication_factor=number(props, "heartbeats.topic.replication.factor"),
        checkpoints_topic_replication_factor=number(props, "checkpoints.topic.replication.factor"),
        settings=MirrorSettings(
            schedule=props.get(SCHEDULE) or None,
            max_records_per_partition=number(props, MAX_RECORDS_PER_PARTITION),
            spark_conn_id=props.get_required(SPARK_CONN_ID, default(SPARK_CONN_ID)),
            spark_deploy_mode=choice(props, SPARK_DEPLOY_MODE),
            spark_conf=props.stripped(SPARK_CONF_PREFIX),
            copy_timeout_seconds=number(props, COPY_TIMEOUT),
            task_retries=number(props, TASK_RETRIES),
            lock_wait_seconds=number(props, LOCK_WAIT),
            on_source_data_loss=choice(props, ON_SOURCE_DATA_LOSS),
            on_partition_error=choice(props, ON_PARTITION_ERROR),
            alert_lag_max_records=optional_number(props, ALERT_LAG_MAX_RECORDS),
            alert_heartbeat_age_max_seconds=optional_number(props, ALERT_HEARTBEAT_AGE_MAX_SECONDS),
            alert_notifier=props.get_reference(ALERT_NOTIFIER),
            airflow_queue=props.get(AIRFLOW_QUEUE) or None,
            airflow_pool=props.get(AIRFLOW_POOL) or None,
            reverse_checkpoints=flag(props, REVERSE_CHECKPOINTS),
        ),
        transforms=transforms_of(props),
        dr=dr_settings(props, name),
        schemas=schema_sync(props, name),
        properties=props,
    )


def flows_for_dags(config: MirrorConfig, env: Mapping[str, str] = os.environ) -> tuple[FlowConfig, ...]:
    """The flows the DAG files make DAGs of: all, or with env ``MIRROR_CLUSTERS`` (comma-separated
    aliases, MM2's ``--clusters``) only those whose target is listed, so that an Airflow deployment
    near some clusters runs only the flows writing to them."""
    listed = env.get(ENV_CLUSTERS, "").strip()
    if not listed:
        return config.flows
    aliases = [a.strip() for a in listed.split(",") if a.strip()]
    unknown = [a for a in aliases if a not in config.clusters]
    if unknown:
        raise ConfigError(
            f"{', '.join(unknown)} is not a cluster of {config.path or 'the configuration'} (clusters: "
            f"{', '.join(config.clusters)}); list target cluster aliases, e.g. {ENV_CLUSTERS}=backup",
            key=f"env {ENV_CLUSTERS}",
        )
    return tuple(flow for flow in config.flows if flow.target.alias in aliases)
