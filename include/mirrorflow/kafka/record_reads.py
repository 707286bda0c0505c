"""Records read with Fetch, as Kafka's consumer reads them: the copy's fetch rounds (``fetch``), and
the records read outside Spark: the copy's read-back (``records_of``), the verification's
LogAppendTime ranges (``written_records``), the plan's gap check (``record_digests``), the
failover's checkpoints (``read_partition``) and the checkpoints' look past the last copy's commit
marker (``first_committed``).

Invariants:
- read_committed returns committed records only: aborted transactions and control batches are
  dropped (``fetched_batches.committed_batches``); a batch is returned whole, in offset order.
- A position the log no longer holds is lost data (``SourceDataLostError``), never a reason to read
  elsewhere; a read the cluster refuses is an ``AuthorizationError`` for the copy, a transient
  error for the control plane's reads (``record_digests``, ``read_partition``), which retry
  anything but lost data; any other failure is transient.
- Every wait is bounded: a read that brings nothing for ``TIMEOUT_S`` fails (transient).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from kafka.protocol.consumer import FetchRequest

from mirrorflow.config.model import ClusterConfig
from mirrorflow.core.digest import record_digest
from mirrorflow.core.topic_partitions import TP
from mirrorflow.errors import AuthorizationError, MirrorError, SourceDataLostError, TransientError
from mirrorflow.kafka.connection import (
    FETCH_MAX_BYTES,
    READ_COMMITTED,
    READ_UNCOMMITTED,
    Connection,
    end_offsets,
    log_start_offsets,
)
from mirrorflow.kafka.faults import Again, Verdict, error_name, retried, verdict
from mirrorflow.kafka.fetched_batches import Fetched, SourceBatch, SourceRecord, committed_batches

_PARTITION_FETCH_BYTES = 10_485_760


@dataclass
class Fetch(Fetched):
    """One partition's part of a fetch response: its committed batches, and the end of what is
    committed on the broker (the last stable offset, or the high watermark reading uncommitted)."""

    stable_end: int = 0
    # A partition's error a retry would meet again (transient ones are raised).
    error: MirrorError | None = None


def fetch(connection: Connection, positions: Mapping[TP, int], isolation: int) -> dict[TP, Fetch]:
    """One fetch round: each partition's whole batches from its position on (as many as the size
    limits allow); read_committed drops control batches and aborted transactions."""
    fetched: dict[TP, Fetch] = {}
    topic_type = FetchRequest.FetchTopic
    for node, owned in connection.by_leader(positions).items():
        topics: dict[str, list[Any]] = {}
        for topic, partition in owned:
            topics.setdefault(topic, []).append(
                topic_type.FetchPartition(
                    partition=partition,
                    fetch_offset=positions[(topic, partition)],
                    partition_max_bytes=_PARTITION_FETCH_BYTES,
                    current_leader_epoch=-1,
                    last_fetched_epoch=-1,
                    log_start_offset=-1,
                )
            )
        request = FetchRequest(
            replica_id=-1,
            max_wait_ms=10,
            min_bytes=1,
            max_bytes=FETCH_MAX_BYTES,
            isolation_level=isolation,
            session_id=0,
            session_epoch=-1,
            topics=[topic_type(topic=t, partitions=ps) for t, ps in topics.items()],
            forgotten_topics_data=[],
            rack_id="",
            min_version=4,
            # v13 names topics by id only.
            max_version=12,
        )
        response = connection.call(node, request)
        if response.error_code:
            raise TransientError(
                f"fetch from the {connection.side} cluster failed: {error_name(response.error_code)}"
            )
        for t in response.responses:
            for p in t.partitions:
                tp = (t.topic, p.partition_index)
                if p.error_code:
                    fetched[tp] = Fetch(error=_fetched_error(connection, tp, positions[tp], p.error_code))
                    continue
                aborted = [(a.producer_id, a.first_offset) for a in p.aborted_transactions or ()]
                got = committed_batches(bytes(p.records or b""), aborted if isolation else ())
                stable = p.last_stable_offset if isolation and p.last_stable_offset >= 0 else p.high_watermark
                fetched[tp] = Fetch(got.batches, got.next_offset, int(stable))
    return fetched


def _fetched_error(connection: Connection, tp: TP, position: int, code: int) -> MirrorError:
    """The error of a partition's part of a fetch, if a retry would meet it again; transient ones
    are raised."""
    rule = verdict(code)
    if rule is Verdict.DATA_LOST:
        return SourceDataLostError(
            f"offset {position} of {tp[0]}-{tp[1]} is no longer on the {connection.side} cluster (deleted "
            "by retention, or the topic was recreated)"
        )
    if rule is Verdict.REFUSED:
        return AuthorizationError(
            f"the {connection.side} cluster refused the mirror's login reading {tp[0]}-{tp[1]}: "
            f"{error_name(code)}. Grant it READ on the mirrored topics (README: Secured clusters); "
            "nothing was committed."
        )
    connection.request_update()
    raise TransientError(
        f"fetching {tp[0]}-{tp[1]} from the {connection.side} cluster failed: {error_name(code)}"
    )


def read_records(
    connection: Connection, tp: TP, start: int, end: int, isolation: int, limit: int
) -> list[SourceRecord]:
    """Up to ``limit`` records of ``[start, end)``, decoded."""
    records: list[SourceRecord] = []
    for chunk in records_of(connection, tp, start, end, isolation):
        records += chunk
        if len(records) >= limit:
            break
    return records[:limit]


def records_of(
    connection: Connection, tp: TP, start: int, end: int, isolation: int
) -> Iterator[list[SourceRecord]]:
    """The records of ``[start, end)``, decoded, a batch at a time, read as far as they are taken:
    what a copy reads back after an attempt that committed, however many."""
    for batch in batches_of(connection, tp, start, end, isolation):
        yield [r for r in batch.records() if start <= r.offset < end]


def written_records(props: Mapping[str, str], tp: TP, start: int, end: int) -> Iterator[list[SourceRecord]]:
    """The committed records of ``[start, end)`` on the target cluster ``props`` reach, one batch at
    a time, each with the timestamp its batch carries for it (``SourceBatch.written_records``): what
    the copy wrote, also where a LogAppendTime remote topic shows its consumers another time."""
    connection = Connection(props, "target", [tp[0]])
    try:
        for batch in batches_of(connection, tp, start, end, READ_COMMITTED):
            yield [r for r in batch.written_records() if start <= r.offset < end]
    finally:
        connection.close()


def record_digests(
    cluster: ClusterConfig, topic: str, partition: int, start: int, stop: int, limit: int
) -> list[tuple[int, bytes]]:
    """The offset and ``record_digest`` of key, value, headers and timestamp (what the copy keeps)
    of each committed record of a partition from offset ``start`` on, before offset ``stop``, at
    most ``limit``, oldest first."""
    with control_plane_read(cluster.consumer, cluster.alias, topic) as connection:
        records = read_records(connection, (topic, partition), start, stop, READ_COMMITTED, limit)
    return [(r.offset, record_digest((r.key, r.value, r.headers, r.timestamp))) for r in records]


@dataclass(frozen=True)
class CommittedFrom:
    """Where a partition's committed records go on from a start, as one read_committed fetch round
    shows: ``first``, the offset of its first committed record at or after the start (when the round
    shows none, where it stopped reading: past the markers and aborted records it skipped; the start
    itself when it read nothing, as before an open transaction or at the end, or when the read
    failed); ``stable_end``, the partition's last stable offset then, past which only records of a
    transaction still open lie (None when the read failed)."""

    first: int
    stable_end: int | None


def committed_from(connection: Connection, starts: Mapping[TP, int]) -> dict[TP, CommittedFrom]:
    """``CommittedFrom`` of each partition from its start, in one fetch round."""
    if not starts:
        return {}
    found = {tp: CommittedFrom(start, None) for tp, start in starts.items()}
    for tp, got in fetch(connection, starts, READ_COMMITTED).items():
        if got.error is None:
            offsets = (r.offset for b in got.batches for r in b.records() if r.offset >= starts[tp])
            first = next(offsets, starts[tp] if got.next_offset is None else got.next_offset)
            found[tp] = CommittedFrom(first, got.stable_end)
    return found


def first_committed(connection: Connection, starts: Mapping[TP, int]) -> dict[TP, int]:
    """Per partition, the offset of its first committed record at or after its start
    (``CommittedFrom.first``)."""
    return {tp: found.first for tp, found in committed_from(connection, starts).items()}


def read_partition(
    consumer_props: Mapping[str, str], cluster: str, topic: str, partition: int
) -> list[SourceRecord]:
    """Every committed record of ``topic``-``partition``, from its log start to its end (high
    watermark) when called."""
    tp = (topic, partition)
    with control_plane_read(consumer_props, cluster, topic) as connection:
        start = log_start_offsets(connection, [tp])[tp]
        end = end_offsets(connection, [tp], READ_UNCOMMITTED)[tp]
        return [
            r
            for batch in batches_of(connection, tp, start, end, READ_COMMITTED)
            for r in batch.records()
            if start <= r.offset < end
        ]


@contextmanager
def control_plane_read(props: Mapping[str, str], cluster: str, *topics: str) -> Iterator[Connection]:
    """A connection to ``cluster`` for a read outside the copy: closed after it; a refused read is
    transient there, as every failure but lost data."""
    connection = Connection(props, cluster, topics)
    try:
        yield connection
    except AuthorizationError as exc:
        raise TransientError(str(exc)) from exc
    finally:
        connection.close()


def batches_of(connection: Connection, tp: TP, start: int, end: int, isolation: int) -> Iterator[SourceBatch]:
    """The batches holding the records of ``[start, end)`` (read_committed: the committed ones), in
    order; a partition error is raised, and so is a fetch that brings nothing for ``TIMEOUT_S``."""
    position = start

    def read() -> Fetch:
        got = fetch(connection, {tp: position}, isolation)[tp]
        if got.error is not None:
            raise got.error
        if got.next_offset is None:
            raise Again(f"{connection.side} partition {tp[0]}-{tp[1]}: nothing to read at {position}")
        return got

    while position < end:
        got = retried(read, f"reading {tp[0]}-{tp[1]} on the {connection.side} cluster", backoff_s=0)
        yield from got.batches
        assert got.next_offset is not None  # read() returns only a fetch that moved
        position = got.next_offset
