"""Control-plane access to one cluster (kafka-python): topics, partitions, offsets, configs.

Only small metadata requests go through here; records never do.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TypeVar

from kafka import KafkaAdminClient, OffsetAndMetadata, TopicPartition
from kafka.admin import (
    ACL,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    AlterConfigOp,
    ConfigResource,
    ConfigResourceType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)
from kafka.errors import (
    BrokerResponseError,
    GroupIdNotFoundError,
    KafkaError,
    NoError,
    SecurityDisabledError,
    TopicAlreadyExistsError,
)

from mirrorflow.config.clients import ADMIN_REQUEST_TIMEOUT_MS_DEFAULT
from mirrorflow.config.model import ClusterConfig
from mirrorflow.core.topic_partitions import TP
from mirrorflow.errors import TargetStateError, TransientError
from mirrorflow.kafka.connection import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    Connection,
    end_offsets,
    log_start_offsets,
    offsets_at,
)
from mirrorflow.kafka.faults import Again, Verdict, retried, verdict
from mirrorflow.kafka.oauth_tokens import python_client_config
from mirrorflow.mm2.acl_rules import TopicAcl


@dataclass(frozen=True)
class TopicDescription:
    """A topic's partition count and id; ``topic_id`` is None where the broker has no topic ids."""

    partitions: int
    topic_id: str | None


# Kafka's "no topic id" (brokers before 2.8).
_ZERO_UUID = "00000000-0000-0000-0000-000000000000"


@dataclass(frozen=True)
class NewTopic:
    partitions: int
    replication_factor: int
    configs: Mapping[str, str]


T = TypeVar("T")


class ClusterAdmin:
    """A short-lived admin connection to one cluster; use as a context manager."""

    def __init__(self, cluster: ClusterConfig) -> None:
        self.alias = cluster.alias
        self._cluster = cluster
        self._connection: Connection | None = None
        try:
            # request.timeout.ms also bounds the wait for the cluster's first answer (kafka-python's
            # bootstrap timeout), so that an unreachable cluster fails as soon as a request would.
            timeout_ms = int(cluster.admin.get("request.timeout.ms", ADMIN_REQUEST_TIMEOUT_MS_DEFAULT))
            self._admin = KafkaAdminClient(
                **python_client_config(cluster.admin),
                request_timeout_ms=timeout_ms,
                bootstrap_timeout_ms=timeout_ms,
            )
        except KafkaError as exc:
            raise TransientError(
                f"cluster {cluster.alias} ({cluster.bootstrap_servers}) is unreachable: {exc}; check its "
                "bootstrap.servers and that its brokers are up and reachable from this worker"
            ) from exc

    def __enter__(self) -> ClusterAdmin:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._admin.close()
        if self._connection is not None:
            self._connection.close()

    def cluster_id(self) -> str:
        """The cluster's id: a cluster rebuilt under the same address has another."""
        try:
            return str(self._admin.describe_cluster()["cluster_id"])
        except KafkaError as error:
            raise TransientError(f"cluster {self.alias} could not be described: {error}") from error

    def topics(self) -> set[str]:
        return set(self._admin.list_topics())

    def describe_topics(self, topics: Iterable[str]) -> dict[str, TopicDescription]:
        """Partition count and id of each topic, in one metadata request."""
        names = sorted(topics)
        if not names:
            return {}
        described = {}
        for t in self._admin.describe_topics(names):
            topic_id = str(t.get("topic_id") or _ZERO_UUID)
            described[t["name"]] = TopicDescription(
                len(t["partitions"]), None if topic_id == _ZERO_UUID else topic_id
            )
        return described

    def _offsets(self, partitions: Iterable[TP]) -> tuple[Connection, list[TP]]:
        """The connection partitions' offsets are read over (``kafka.connection``'s ListOffsets, the
        one reader of offsets, the copy's too), opened on first use with the topics first asked
        about: its bootstrap then knows their leaders, with no metadata refresh to wait for."""
        tps = list(partitions)
        if self._connection is None:
            self._connection = Connection(self._cluster.admin, self.alias, {t for t, _ in tps})
        return self._connection, tps

    def earliest_offsets(self, partitions: Iterable[TP]) -> dict[TP, int]:
        """Each partition's log start offset."""
        return log_start_offsets(*self._offsets(partitions))

    def latest_offsets(self, partitions: Iterable[TP]) -> dict[TP, int]:
        """Each partition's last stable offset (read_committed)."""
        return end_offsets(*self._offsets(partitions), READ_COMMITTED)

    def written_offsets(self, partitions: Iterable[TP]) -> dict[TP, int]:
        """Each partition's high watermark: past every record written, an open transaction's and
        those of one whose markers are still on their way too (read_uncommitted)."""
        return end_offsets(*self._offsets(partitions), READ_UNCOMMITTED)

    def offsets_at(self, partitions: Iterable[TP], timestamp_ms: int) -> dict[TP, int | None]:
        """Per partition, the offset of its first record with a timestamp at or after
        ``timestamp_ms``; None where there is no such record."""
        return offsets_at(*self._offsets(partitions), timestamp_ms)

    def partition_sizes(self, topics: Iterable[str]) -> dict[TP, int]:
        """Bytes each partition of ``topics`` takes on disk (its largest replica). Empty when the
        login may not describe log dirs (DESCRIBE on the cluster): sizes only inform estimates."""
        names = sorted(topics)
        if not names:
            return {}
        try:
            brokers = self._admin.describe_log_dirs(names)
        except KafkaError:
            return {}
        sizes: dict[TP, int] = {}
        for broker in brokers:
            for log_dir in broker["log_dirs"]:
                for topic in log_dir["topics"]:
                    for p in topic["partitions"]:
                        key = (topic["name"], p["partition_index"])
                        sizes[key] = max(sizes.get(key, 0), int(p["partition_size"]))
        return sizes

    def topic_configs(self, topics: Iterable[str]) -> dict[str, dict[str, str]]:
        """Each topic's configs set on the topic itself: not defaults, not inherited from the broker,
        not sensitive (their values are never returned)."""
        resources = [ConfigResource(ConfigResourceType.TOPIC, t) for t in sorted(topics)]
        if not resources:
            return {}
        described: Mapping[str, Any] = self._admin.describe_configs(resources).get("topic", {})
        return {
            topic: {
                k: str(v["value"])
                for k, v in entries.items()
                if v.get("config_source") == "DYNAMIC_TOPIC_CONFIG"
                and v.get("value") is not None
                and not v.get("is_sensitive")
            }
            for topic, entries in described.items()
        }

    def effective_topic_configs(
        self, topics: Iterable[str], keys: Iterable[str]
    ) -> dict[str, dict[str, str]]:
        """The value in effect of each of ``keys`` for each topic, wherever it is set (on the topic,
        the broker, or Kafka's default). A topic or key the cluster does not describe is an error."""
        wanted = sorted(set(keys))
        resources = [
            ConfigResource(ConfigResourceType.TOPIC, t, configs=dict.fromkeys(wanted)) for t in sorted(topics)
        ]
        if not resources:
            return {}
        described: Mapping[str, Any] = self._admin.describe_configs(resources, config_filter="all").get(
            "topic", {}
        )
        found = {
            r.name: {
                k: str(v["value"]) for k, v in described.get(r.name, {}).items() if v.get("value") is not None
            }
            for r in resources
        }
        missing = [f"{t} {k}" for t, configs in found.items() for k in wanted if k not in configs]
        if missing:
            raise TargetStateError(
                f"cluster {self.alias} did not describe {', '.join(missing)}: does the topic exist, and may "
                "the mirror's login describe its configs (DESCRIBE_CONFIGS)?"
            )
        return found

    def alter_topic_configs(self, changes: Mapping[str, Mapping[str, str | None]]) -> None:
        """Incrementally alter topic configs: a value SETs the key, ``None`` DELETEs it (back to the
        default). Keys not named are left as they are."""
        resources = [
            ConfigResource(
                ConfigResourceType.TOPIC,
                topic,
                configs={
                    k: (AlterConfigOp.DELETE, None) if v is None else (AlterConfigOp.SET, v)
                    for k, v in keys.items()
                },
            )
            for topic, keys in sorted(changes.items())
            if keys
        ]
        if not resources:
            return
        response = self._admin.alter_configs(resources, raise_on_unknown=False, incremental=True)
        # kafka-python reports each resource as "OK" or "[Error <code>] <name>: <message>".
        failed = {t: str(outcome) for t, outcome in response.get("topic", {}).items() if outcome != "OK"}
        if failed:
            raise TargetStateError(
                f"cluster {self.alias} refused topic config changes: {failed}; fix the cause (e.g. an "
                "invalid value on the source, or missing ALTER_CONFIGS permission) or exclude the key "
                "with config.properties.exclude"
            )

    def create_topics(self, topics: Mapping[str, NewTopic]) -> None:
        """Create topics in one request and wait until they are usable; a topic someone else created
        meanwhile is fine (its partitions are checked by the caller)."""
        if not topics:
            return
        spec = {
            name: {
                "num_partitions": t.partitions,
                "replication_factor": t.replication_factor,
                "configs": dict(t.configs),
            }
            for name, t in topics.items()
        }
        response = self._admin.create_topics(spec, raise_errors=False)
        failed = {
            t["name"]: t.get("error_message") or f"error code {t['error_code']}"
            for t in response["topics"]
            if t["error_code"] not in (0, TopicAlreadyExistsError.errno)
        }
        if failed:
            raise TargetStateError(f"cluster {self.alias} refused to create topics: {failed}")
        self._admin.wait_for_topics(sorted(topics), timeout_ms=30000)

    def consumer_groups(self) -> list[str]:
        """Every consumer group that keeps its offsets in Kafka."""
        return sorted({str(g["group_id"]) for g in self._admin.list_groups()})

    def group_offsets(self, groups: Iterable[str]) -> dict[str, dict[TP, tuple[int, str]]]:
        """Each group's committed (offset, metadata) per partition; partitions without one are left out."""
        names = sorted(groups)
        if not names:
            return {}
        found = self._coordinated(lambda: self._admin.list_group_offsets(dict.fromkeys(names)))
        return {
            group: {
                (tp.topic, tp.partition): (int(om.offset), om.metadata or "")
                for tp, om in offsets.items()
                if om.offset is not None and om.offset >= 0
            }
            for group, offsets in found.items()
        }

    def group_states(self, groups: Iterable[str]) -> dict[str, str]:
        """Each group's state as the broker names it (``Empty``, ``Stable``, ``Dead`` when unknown...).
        A group the cluster does not know is ``Dead``, as the classic describe answers (brokers from
        Kafka 4.0 answer GROUP_ID_NOT_FOUND). A group its coordinator cannot describe yet (a fresh
        cluster still loading its offsets topic) is asked again, never taken for one in an unknown
        state: a failover would leave it alone as active."""
        names = sorted(groups)
        if not names:
            return {}

        def describe() -> dict[str, str]:
            states = {}
            for group, found in sorted(self._admin.describe_groups(names).items()):
                error = _error_code(str(found.get("error") or ""))
                if error == GroupIdNotFoundError.errno:
                    states[group] = "Dead"
                elif found.get("error"):
                    raise _group_error(self.alias, group, str(found["error"]), error)
                else:
                    states[group] = str(found.get("group_state", ""))
            return states

        return self._coordinated(describe)

    def commit_group_offsets(self, group: str, offsets: Mapping[TP, int]) -> None:
        """Commit offsets for a group without members (empty or not yet existing)."""
        if not offsets:
            return
        committed = {TopicPartition(t, p): OffsetAndMetadata(o, "", -1) for (t, p), o in offsets.items()}
        result = self._coordinated(lambda: self._admin.alter_group_offsets(group, committed))
        failed = {
            f"{tp.topic}-{tp.partition}": err.__name__ for tp, err in result.items() if err is not NoError
        }
        if failed:
            raise TransientError(
                f"cluster {self.alias} refused offsets for group {group}: {failed}; the group may have "
                "become active meanwhile (then it is left alone next time) or the broker is unavailable"
            )

    def _coordinated(self, call: Callable[[], T]) -> T:
        """``call`` (a request to groups' coordinators), asked again while they are not available."""

        def ask() -> T:
            try:
                return call()
            except BrokerResponseError as exc:
                if verdict(exc.errno) is Verdict.MOVED:
                    raise Again(f"{exc}; the cluster may still be starting") from exc
                raise

        return retried(ask, f"cluster {self.alias}: asking its group coordinators", backoff_s=0.5)

    def topic_acls(self) -> list[TopicAcl] | None:
        """Every LITERAL topic ACL; None when the cluster has no authorizer."""
        any_literal_topic = ACLFilter(
            None, None, ACLOperation.ANY, ACLPermissionType.ANY,
            ResourcePatternFilter(ResourceType.TOPIC, None, ACLResourcePatternType.LITERAL),
        )  # fmt: skip
        try:
            acls, error = self._admin.describe_acls(any_literal_topic)
        except SecurityDisabledError:
            return None
        # kafka-python reports the outcome as an error class or instance.
        kind = error if isinstance(error, type) else type(error)
        if issubclass(kind, SecurityDisabledError):
            return None
        if not issubclass(kind, NoError):
            raise TransientError(f"cluster {self.alias} could not list topic ACLs: {error}")
        return [
            TopicAcl(
                a.resource_pattern.resource_name,
                a.principal,
                a.host,
                a.operation.name,
                a.permission_type.name,
            )
            for a in acls
        ]

    def create_topic_acls(self, acls: Iterable[TopicAcl]) -> None:
        """Create the ACLs (existing identical ones are fine); a refusal names the bindings."""
        bindings = [
            ACL(
                a.principal,
                a.host,
                ACLOperation[a.operation],
                ACLPermissionType[a.permission],
                ResourcePattern(ResourceType.TOPIC, a.topic, ACLResourcePatternType.LITERAL),
            )
            for a in acls
        ]
        if not bindings:
            return
        result = self._admin.create_acls(bindings)
        failed = [
            f"{acl.resource_pattern.resource_name} {acl.principal}: {err}"
            for acl, err in result.get("failed", [])
        ]
        if failed:
            raise TargetStateError(
                f"cluster {self.alias} refused ACLs: {failed[:5]}; the mirror's principal needs ALTER on "
                "the target cluster for sync.topic.acls.enabled (or turn it off)"
            )

    def add_partitions(self, topic: str, total: int) -> None:
        self._admin.create_partitions({topic: total})


# How kafka-python words a group's error in a description: ``[Error 14] CoordinatorLoadInProgressError: ...``.
_ERROR_CODE = re.compile(r"\[Error (-?\d+)\]")


def _error_code(error: str) -> int | None:
    code = _ERROR_CODE.match(error)
    return int(code.group(1)) if code else None


def _group_error(cluster: str, group: str, error: str, code: int | None) -> TransientError:
    """The error of a group's description: asked again while its coordinator moves or loads
    (``Again``), else passing at the step's level."""
    rule = verdict(code) if code is not None else Verdict.UNEXPECTED
    if rule in (Verdict.MOVED, Verdict.PASSING):
        return Again(f"cluster {cluster}: group {group}: {error}")
    return TransientError(f"cluster {cluster} could not describe group {group}: {error}")
