"""One cluster's connections for record traffic (kafka-python's ``KafkaNetClient``): partition
leaders, requests to them, and partitions' offsets (ListOffsets: the one reader of log start, end
and by-time offsets, for the copy and the control plane alike); the one topic config the copy asks
for itself (``topic_config``: whether a source topic compacts, when what an earlier attempt wrote no
longer matches it).

The copy opens one per cluster in each Spark task and drives it from the thread that sends
(``poll``), so that a request is one more message on a connection already open; the range reads
(``record_reads``) open one per read; ``admin.ClusterAdmin`` keeps one for the offsets it reads.
Other control-plane requests go through ``admin.ClusterAdmin``'s client, which runs its own I/O
thread. Invariants:
- An unreachable cluster, a request without an answer after ``TIMEOUT_S`` and a partition without
  a leader are ``TransientError``s naming the cluster; a failed request asks for fresh metadata, so
  that the next one finds a moved leader.
- A request goes to the leader of the partitions it names: one request per broker, whatever the
  number of partitions. An offset a partition cannot give right now (a leader moving or its broker
  gone, a topic just created) is asked again with fresh metadata until ``TIMEOUT_S``.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from kafka.errors import UnknownTopicOrPartitionError
from kafka.net.compat import KafkaNetClient
from kafka.protocol.admin.configs import DescribeConfigsRequest
from kafka.protocol.consumer import ListOffsetsRequest
from kafka.structs import TopicPartition

from mirrorflow.core.topic_partitions import TP
from mirrorflow.errors import AuthorizationError, TransientError
from mirrorflow.kafka.faults import TIMEOUT_S, Again, Verdict, error_name, retried, verdict
from mirrorflow.kafka.oauth_tokens import python_client_config

# The largest fetch response (a whole one is one frame).
FETCH_MAX_BYTES = 52_428_800
# How long a failed request waits for the cluster's metadata afterwards (``Connection.call``).
_RELOOK_S = 5.0
# One bootstrap try, and the least time left worth another.
_BOOTSTRAP_TRY_S = 5.0
_BOOTSTRAP_MIN_TRY_S = 0.5
READ_UNCOMMITTED = 0
READ_COMMITTED = 1
_EARLIEST = -2
_LATEST = -1
_TOPIC_RESOURCE = 2


class Connection:
    """One cluster's connections, with its partitions' leaders; ``side`` names the cluster in
    errors ("the {side} cluster")."""

    def __init__(self, props: Mapping[str, str], side: str, topics: Iterable[str]) -> None:
        self.side = side
        self.client = KafkaNetClient(
            **python_client_config(props),
            request_timeout_ms=int(TIMEOUT_S * 1000),
            receive_message_max_bytes=FETCH_MAX_BYTES + (1 << 20),
        )
        try:
            # Topics first: the bootstrap's metadata then names their leaders. A refresh right after
            # it would wait out the client's retry backoff (100 ms), a third of a small copy's time.
            self._topics = set(topics)
            # Asking for a topic's metadata must never create it (kafka-python asks brokers to, and
            # their auto.create.topics.enable is on by default): a remote topic not created yet, or
            # a source topic deleted since the plan, would come back with the broker's defaults.
            self.client.cluster.config["allow_auto_create_topics"] = False
            self.client.cluster.set_topics(sorted(self._topics))
            self._bootstrap()
        except Exception as exc:
            self.client.close()
            raise TransientError(f"cannot reach the {side} cluster: {exc}") from exc

    def _bootstrap(self) -> None:
        """The cluster's metadata from a bootstrap server picked at random, each try bounded: a
        broker that accepts connections but never answers (frozen, or stuck in a long pause) holds a
        try until it times out, which would otherwise be the whole wait."""
        deadline = time.monotonic() + TIMEOUT_S

        def attempt() -> None:
            left = max(deadline - time.monotonic(), _BOOTSTRAP_MIN_TRY_S)
            try:
                self.client._manager.bootstrap(int(min(_BOOTSTRAP_TRY_S, left) * 1000))
            except Exception as exc:
                raise Again(repr(exc)) from exc

        retried(attempt, "bootstrap", timeout_s=TIMEOUT_S - _BOOTSTRAP_MIN_TRY_S, backoff_s=0)

    def refresh(self, timeout_s: float = TIMEOUT_S) -> None:
        """The cluster's metadata read now, waiting at most ``timeout_s``."""
        update = self.client.cluster.request_update()
        self.client.poll(timeout_ms=int(timeout_s * 1000), future=update)
        if not update.succeeded():
            raise TransientError(f"cannot read the {self.side} cluster's metadata: {update.exception}")

    def has_topic(self, topic: str) -> bool:
        """Whether ``topic`` exists on the cluster: its metadata, read now unless already held. A
        topic that does not exist is left out of later metadata requests (kafka-python fails a
        request for it alone)."""
        cluster = self.client.cluster
        if cluster.partitions_for_topic(topic) is not None:
            return True
        asked = set(self._topics)
        cluster.set_topics(sorted(asked | {topic}))
        update = cluster.request_update()
        self.client.poll(timeout_ms=int(TIMEOUT_S * 1000), future=update)
        if cluster.partitions_for_topic(topic) is not None:
            self._topics.add(topic)
            return True
        cluster.set_topics(sorted(asked))
        if update.failed() and not isinstance(update.exception, UnknownTopicOrPartitionError):
            raise TransientError(f"cannot read the {self.side} cluster's metadata: {update.exception}")
        return False

    def request_update(self) -> None:
        """Fresh metadata with the next request: a leader may have moved."""
        self.client.cluster.request_update()

    def leader(self, tp: TP) -> int:
        node = self.client.cluster.leader_for_partition(TopicPartition(*tp))
        if node is None or node < 0:
            if tp[0] not in self._topics:
                # A topic's leaders are known only once its metadata is asked for.
                self._topics.add(tp[0])
                self.client.cluster.set_topics(sorted(self._topics))
            self.refresh()
            node = self.client.cluster.leader_for_partition(TopicPartition(*tp))
        if node is None or node < 0:
            raise TransientError(f"{self.side} partition {tp[0]}-{tp[1]} has no leader")
        return int(node)

    def by_leader(self, tps: Iterable[TP]) -> dict[int, list[TP]]:
        nodes: dict[int, list[TP]] = {}
        for tp in tps:
            nodes.setdefault(self.leader(tp), []).append(tp)
        return nodes

    def call(self, node: int, request: Any) -> Any:
        """``request``'s answer from broker ``node``. When none comes, the cluster's metadata is read
        again before the error is raised: the leader may have moved (its broker died), and a caller
        that retries through ``call`` would otherwise send to the dead broker again, as nothing
        between the two calls moves a refresh that is only asked for."""
        try:
            return self.client.send_and_receive(node, request, timeout_ms=int(TIMEOUT_S * 1000))
        except Exception as exc:
            with contextlib.suppress(TransientError):  # the request's own error says more
                self.refresh(_RELOOK_S)
            raise TransientError(f"request to the {self.side} cluster failed: {exc!r}") from exc

    def poll(self, timeout_ms: int) -> None:
        """Move requests sent (``send``) and their answers, for at most ``timeout_ms``."""
        self.client.poll(timeout_ms=timeout_ms)

    def connect_brokers(self) -> None:
        """Open a connection to every broker of the cluster now: the first requests to a partition's
        leader then find it open (its TCP and version handshake paid before)."""
        try:
            for broker in self.client.cluster.brokers():
                self.client.await_ready(broker.node_id, timeout_ms=int(TIMEOUT_S * 1000))
        except Exception as exc:
            raise TransientError(f"cannot reach the {self.side} cluster's brokers: {exc}") from exc

    def close(self) -> None:
        self.client.close()


# Connections idle between two tasks of this process, one per cluster and role (``kept_open``).
_idle: dict[tuple[str, tuple[tuple[str, str], ...]], Connection] = {}
_idle_guard = threading.Lock()


@contextmanager
def kept_open(props: Mapping[str, str], side: str, topics: Iterable[str]) -> Iterator[Connection]:
    """A connection to the cluster of ``props``: the one an earlier task of this process left idle,
    if any (a DR window's micro-batches run task after task in the same Python workers, and a new
    connection pays its bootstrap and metadata every time), else a new one. It is left idle for the
    next task when the block ends normally, and closed when the block raises: a connection whose
    requests failed is never reused, nor one a broker closed while it was idle (``_still_open``)."""
    key = (side, tuple(sorted(props.items())))
    with _idle_guard:
        connection = _idle.pop(key, None)
    if connection is not None and not _still_open(connection):
        connection.close()
        connection = None
    if connection is None:
        connection = Connection(props, side, topics)
    try:
        yield connection
    except BaseException:
        connection.close()
        raise
    with _idle_guard:
        spare = _idle.pop(key, None)
        _idle[key] = connection
    if spare is not None:
        spare.close()


def _still_open(connection: Connection) -> bool:
    """Whether every broker socket an idle connection had is still open: one a broker closed while
    the connection was idle (the broker restarted, or closed it as idle) shows on a first look
    (``poll(0)``), and the connection is then opened afresh, metadata included, as for a new task."""
    client = connection.client
    had = [b.node_id for b in client.cluster.brokers() if client.connected(b.node_id)]
    connection.poll(0)
    return all(client.connected(node) for node in had)


def end_offsets(connection: Connection, tps: Iterable[TP], isolation: int) -> dict[TP, int]:
    """Each partition's end offset: read_uncommitted its high watermark (every record written
    counts), read_committed its last stable offset."""
    return _list_offsets(connection, tps, _LATEST, isolation, "end offset")


def log_start_offsets(connection: Connection, tps: Iterable[TP]) -> dict[TP, int]:
    """Each partition's log start offset: its oldest record still held."""
    return _list_offsets(connection, tps, _EARLIEST, READ_UNCOMMITTED, "log start offset")


def offsets_at(connection: Connection, tps: Iterable[TP], timestamp_ms: int) -> dict[TP, int | None]:
    """Per partition, the offset of its first record with a timestamp at or after ``timestamp_ms``;
    None where there is no such record."""
    found = _list_offsets(connection, tps, timestamp_ms, READ_UNCOMMITTED, "offset by time")
    return {tp: offset if offset >= 0 else None for tp, offset in found.items()}


def topic_config(connection: Connection, tp: TP, name: str) -> str | None:
    """The value in effect of config ``name`` of partition ``tp``'s topic (set on the topic, on its
    broker, or Kafka's default), as the partition's leader describes it; None when it has none."""
    topic = tp[0]
    resource = DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=_TOPIC_RESOURCE, resource_name=topic, configuration_keys=[name]
    )
    request = DescribeConfigsRequest(
        resources=[resource], include_synonyms=False, include_documentation=False
    )
    (result,) = connection.call(connection.leader(tp), request).results
    if result.error_code and verdict(result.error_code) is Verdict.REFUSED:
        raise AuthorizationError(
            f"the {connection.side} cluster refused to describe the configs of {topic} to the mirror's "
            f"login: {error_name(result.error_code)}. Grant it DESCRIBE_CONFIGS on the mirrored topics "
            "(README: Secured clusters); nothing was committed."
        )
    if result.error_code:
        raise TransientError(
            f"cannot describe the configs of {topic} on the {connection.side} cluster: "
            f"{error_name(result.error_code)}"
        )
    return next((c.value for c in result.configs if c.name == name), None)


def _list_offsets(
    connection: Connection, tps: Iterable[TP], timestamp: int, isolation: int, what: str
) -> dict[TP, int]:
    offsets: dict[TP, int] = {}
    wanted = list(tps)

    def round_trip() -> dict[TP, int]:
        nonlocal wanted
        silent: list[TransientError] = []
        again = []
        for tp, offset in _list_offsets_once(connection, wanted, timestamp, isolation, what, silent):
            if offset is None:
                again.append(tp)
            else:
                offsets[tp] = offset
        wanted = again
        if again:
            connection.request_update()
            t, p = again[0]
            cause = f": {silent[-1]}" if silent else ""
            raise Again(f"no {what} of {t}-{p} yet (its leader is moving, or it is not ready{cause})")
        return offsets

    return retried(round_trip, f"reading {what}s on the {connection.side} cluster")


def _list_offsets_once(
    connection: Connection,
    tps: list[TP],
    timestamp: int,
    isolation: int,
    what: str,
    silent: list[TransientError],
) -> list[tuple[TP, int | None]]:
    """One ListOffsets round; None for a partition whose error (or whose leader's silence) a fresh
    look may cure."""
    found: list[tuple[TP, int | None]] = []
    topic_type = ListOffsetsRequest.ListOffsetsTopic
    for node, owned in connection.by_leader(tps).items():
        topics: dict[str, list[Any]] = {}
        for topic, partition in owned:
            topics.setdefault(topic, []).append(
                topic_type.ListOffsetsPartition(
                    partition_index=partition, timestamp=timestamp, current_leader_epoch=-1
                )
            )
        request = ListOffsetsRequest(
            replica_id=-1,
            isolation_level=isolation,
            topics=[topic_type(name=t, partitions=ps) for t, ps in topics.items()],
            # v2 is the first to carry the isolation level.
            min_version=2 if isolation == READ_COMMITTED else 1,
        )
        try:
            answer = connection.call(node, request)
        except TransientError as error:
            # The leader's broker is gone (killed, restarting): asked again of the next leader,
            # which the metadata names once the controller moved its partitions.
            silent.append(error)
            found.extend((tp, None) for tp in owned)
            continue
        for t in answer.topics:
            for p in t.partitions:
                tp = (t.name, p.partition_index)
                if p.error_code and verdict(p.error_code) is Verdict.PASSING:
                    found.append((tp, None))
                elif p.error_code:
                    raise TransientError(
                        f"cannot read the {what} of {t.name}-{p.partition_index} on the "
                        f"{connection.side} cluster: {error_name(p.error_code)}"
                    )
                else:
                    found.append((tp, int(p.offset)))
    return found
