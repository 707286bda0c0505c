"""The flow writer's transactions on real brokers (``kafka.transactions``, Produce with a
transactional id, batches stamped transactional): what a committed transaction leaves on the target,
offset by offset, markers included, and where a read_committed read finds the next record
(``first_committed``); a second transaction of the same epoch; a newer epoch fencing an
older one with a transaction open; and a stale epoch still refused once the partition's leader has
forgotten the writer's idempotent state, which the copy's fence without transactions relies on.

Each case reads back the partition's log as written (``_log``: record batches and markers, read
uncommitted) and what a read_committed consumer reads (``kafka.record_reads.read_partition``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from kafka.protocol.admin.transactions import DescribeProducersRequest
from kafka.protocol.consumer import FetchRequest
from kafka.record import MemoryRecords
from mirror_helpers import create_topic, local_clusters, wait_end

from mirrorflow.copy.record_batches import encode, stamp
from mirrorflow.core.plan import Writer
from mirrorflow.core.topic_partitions import TP
from mirrorflow.errors import TransientError, WriterFencedError
from mirrorflow.kafka.connection import READ_UNCOMMITTED, Connection, end_offsets
from mirrorflow.kafka.fetched_batches import SourceRecord
from mirrorflow.kafka.produce import produce
from mirrorflow.kafka.record_reads import first_committed, read_partition
from mirrorflow.kafka.transactions import add_partitions, coordinator, end_transaction, fence
from mirrorflow_dev import kafka_home
from mirrorflow_dev.local_kafka import LocalCluster

pytestmark = pytest.mark.kafka

TIMEOUT_MS = 60_000
# Kafka's answer to a batch of an epoch older than the coordinator's (Kafka 4.3), whether or not
# the partition's leader still holds the writer's state: INVALID_PRODUCER_EPOCH.
OLD_EPOCH = 47
# A batch of the current epoch for a partition not added to its transaction: INVALID_TXN_STATE.
NOT_ADDED = 48
TWO_DAYS_MS = 2 * 86_400_000
# A broker of its own for the expiry case: forgets a producer 2 s after its newest write (a day by
# default), and looks every second (every 10 minutes by default).
EXPIRING = {"producer.id.expiration.ms": "2000", "producer.id.expiration.check.interval.ms": "1000"}


@pytest.fixture
def target(kafka_clusters: dict[str, LocalCluster]) -> Iterator[Connection]:
    connection = Connection({"bootstrap.servers": kafka_clusters["backup"].bootstrap}, "target", ())
    try:
        yield connection
    finally:
        connection.close()


@pytest.fixture(scope="module")
def expiring(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    if not kafka_home.libs_present():
        pytest.fail("Kafka jars missing: run `make setup`", pytrace=False)
    with local_clusters(("expiring",), tmp_path_factory.mktemp("expiring"), EXPIRING) as clusters:
        yield clusters["expiring"]


def _records(tag: str, count: int, timestamp: int = 1_000) -> list[SourceRecord]:
    return [
        SourceRecord(i, timestamp + i, f"{tag}-{i}".encode(), f"value {tag}-{i}".encode(), ())
        for i in range(count)
    ]


def _send(
    target: Connection, txn_id: str, writer: Writer, tp: TP, sequence: int, records: Sequence[SourceRecord]
) -> tuple[int, int]:
    """``records`` as one batch of ``writer``'s transaction starting at ``sequence``: the partition's
    answer (error code, base offset)."""
    (data,) = encode(records, 0, 1 << 20)
    stamp(data, writer.producer_id, writer.producer_epoch, sequence, transactional=True)
    call = produce(target, target.leader(tp), [(tp, bytes(data))], txn_id)
    deadline = time.monotonic() + 30
    while not call.done:
        assert time.monotonic() < deadline, "no answer to the produce request"
        target.poll(10)
    return call.answers()[tp]


def _log(target: Connection, tp: TP) -> list[tuple[str, int, int, int]]:
    """The partition's log as written, from offset 0: ("records", first offset, epoch, count) per
    batch of records (transactional, as every batch here), (marker, offset, epoch, 1) per control
    batch, marker "commit" or "abort"."""
    end = end_offsets(target, [tp], READ_UNCOMMITTED)[tp]
    log: list[tuple[str, int, int, int]] = []
    position = 0
    while position < end:
        for batch in _fetched(target, tp, position):
            if batch.is_control_batch:
                (marker,) = list(batch)
                log.append(
                    ("commit" if marker.commit else "abort", batch.base_offset, batch.producer_epoch, 1)
                )
            else:
                assert batch.is_transactional, f"a batch at {batch.base_offset} is not transactional"
                log.append(("records", batch.base_offset, batch.producer_epoch, batch.records_count))
            position = batch.next_offset
    return log


def _fetched(target: Connection, tp: TP, position: int) -> list[Any]:
    """The batches of one fetch from ``position``, read uncommitted, control batches included."""
    topic_type = FetchRequest.FetchTopic
    partition = topic_type.FetchPartition(
        partition=tp[1], fetch_offset=position, partition_max_bytes=1 << 20, current_leader_epoch=-1,
        last_fetched_epoch=-1, log_start_offset=-1,
    )  # fmt: skip
    request = FetchRequest(
        replica_id=-1, max_wait_ms=10, min_bytes=1, max_bytes=1 << 20, isolation_level=READ_UNCOMMITTED,
        session_id=0, session_epoch=-1, topics=[topic_type(topic=tp[0], partitions=[partition])],
        forgotten_topics_data=[], rack_id="", min_version=4, max_version=12,
    )  # fmt: skip
    (answer,) = [p for t in target.call(target.leader(tp), request).responses for p in t.partitions]
    assert answer.error_code == 0
    records = MemoryRecords(bytes(answer.records or b""))
    batches = []
    while records.has_next():
        batches.append(records.next_batch())
    return batches


def _committed(bootstrap: str, tp: TP) -> list[tuple[int, bytes | None, bytes | None]]:
    """What a read_committed consumer reads of the partition: (offset, key, value)."""
    return [
        (r.offset, r.key, r.value) for r in read_partition({"bootstrap.servers": bootstrap}, "target", *tp)
    ]


def _at(offset: int, records: Sequence[SourceRecord]) -> list[tuple[int, bytes | None, bytes | None]]:
    return [(offset + i, r.key, r.value) for i, r in enumerate(records)]


def test_a_committed_transaction_is_read_at_offsets_0_to_n_with_its_marker_at_n(
    kafka_clusters: dict[str, LocalCluster], target: Connection, unique_name: str
) -> None:
    backup = kafka_clusters["backup"]
    create_topic(backup.bootstrap, unique_name, 2)
    txn_id, p0, p1 = f"txn-{unique_name}", (unique_name, 0), (unique_name, 1)
    assert target.client.cluster.broker_metadata(coordinator(target, txn_id)) is not None

    writer = fence(target, txn_id, TIMEOUT_MS)
    add_partitions(target, txn_id, writer, [p0, p1])
    first, second, third = _records("a", 3), _records("b", 2), _records("c", 2)
    # Sequences count each partition's records of the epoch from 0.
    assert _send(target, txn_id, writer, p0, 0, first) == (0, 0)
    assert _send(target, txn_id, writer, p1, 0, second) == (0, 0)
    assert _send(target, txn_id, writer, p1, 2, third) == (0, 2)
    end_transaction(target, txn_id, writer, commit=True)

    wait_end(backup.bootstrap, *p0, 4)
    wait_end(backup.bootstrap, *p1, 5)
    assert _committed(backup.bootstrap, p0) == _at(0, first)
    assert _committed(backup.bootstrap, p1) == _at(0, second + third)
    epoch = writer.producer_epoch
    assert _log(target, p0) == [("records", 0, epoch, 3), ("commit", 3, epoch, 1)]
    assert _log(target, p1) == [("records", 0, epoch, 2), ("records", 2, epoch, 2), ("commit", 4, epoch, 1)]


def test_a_second_transaction_of_the_same_epoch_continues_its_sequences_after_the_marker(
    kafka_clusters: dict[str, LocalCluster], target: Connection, unique_name: str
) -> None:
    backup = kafka_clusters["backup"]
    create_topic(backup.bootstrap, unique_name, 2)
    txn_id, p0, p1 = f"txn-{unique_name}", (unique_name, 0), (unique_name, 1)
    writer = fence(target, txn_id, TIMEOUT_MS)
    first, second = _records("a", 3), _records("b", 4)

    add_partitions(target, txn_id, writer, [p0])
    assert _send(target, txn_id, writer, p0, 0, first) == (0, 0)
    end_transaction(target, txn_id, writer, commit=True)
    # Adding the partition again waits for the ended transaction's marker: the next batch lands after.
    add_partitions(target, txn_id, writer, [p0])
    assert _send(target, txn_id, writer, p0, 3, second) == (0, 4)
    assert _send(target, txn_id, writer, p1, 0, second) == (NOT_ADDED, -1)
    end_transaction(target, txn_id, writer, commit=True)
    # Ending it again the other way: the coordinator holds no transaction open to abort. The writer's
    # state is lost, a passing fault: the next attempt fences anew.
    with pytest.raises(TransientError, match="refused to abort its transaction") as refused:
        end_transaction(target, txn_id, writer, commit=False)
    assert "InvalidTxnStateError" in str(refused.value)

    wait_end(backup.bootstrap, *p0, 9)
    assert _committed(backup.bootstrap, p0) == _at(0, first) + _at(4, second)
    epoch = writer.producer_epoch
    assert _log(target, p0) == [
        ("records", 0, epoch, 3),
        ("commit", 3, epoch, 1),
        ("records", 4, epoch, 4),
        ("commit", 8, epoch, 1),
    ]
    assert end_offsets(target, [p1], READ_UNCOMMITTED)[p1] == 0
    # Where the next committed record is: a record itself; past a marker; the end where none is.
    assert first_committed(target, {p0: 1}) == {p0: 1}
    assert first_committed(target, {p0: 3}) == {p0: 4}
    assert first_committed(target, {p0: 8, p1: 0}) == {p0: 9, p1: 0}
    # Its marker written, a partition is in no transaction until added again.
    assert _send(target, txn_id, writer, p0, 7, first) == (NOT_ADDED, -1)
    assert end_offsets(target, [p0], READ_UNCOMMITTED)[p0] == 9


def test_a_newer_epoch_aborts_the_open_transaction_of_the_older_and_refuses_its_requests(
    kafka_clusters: dict[str, LocalCluster], target: Connection, unique_name: str
) -> None:
    backup = kafka_clusters["backup"]
    create_topic(backup.bootstrap, unique_name, 1)
    txn_id, tp = f"txn-{unique_name}", (unique_name, 0)
    old = fence(target, txn_id, TIMEOUT_MS)
    add_partitions(target, txn_id, old, [tp])
    stale, fresh = _records("stale", 3), _records("fresh", 2)
    assert _send(target, txn_id, old, tp, 0, stale) == (0, 0)

    new = fence(target, txn_id, TIMEOUT_MS)
    # The coordinator aborted the open transaction with the epoch after the old one (its marker
    # says so), and gave the new writer the one after that.
    assert (new.producer_id, new.producer_epoch) == (old.producer_id, old.producer_epoch + 2)
    assert _send(target, txn_id, old, tp, 3, stale) == (OLD_EPOCH, -1)
    with pytest.raises(WriterFencedError, match=f"transactional id {txn_id!r}.*ProducerFencedError"):
        add_partitions(target, txn_id, old, [tp])
    for commit in (True, False):
        with pytest.raises(WriterFencedError, match="ProducerFencedError"):
            end_transaction(target, txn_id, old, commit=commit)

    add_partitions(target, txn_id, new, [tp])
    assert _send(target, txn_id, new, tp, 0, fresh) == (0, 4)
    end_transaction(target, txn_id, new, commit=True)

    wait_end(backup.bootstrap, *tp, 7)
    assert _committed(backup.bootstrap, tp) == _at(4, fresh)
    assert _log(target, tp) == [
        ("records", 0, old.producer_epoch, 3),
        ("abort", 3, old.producer_epoch + 1, 1),
        ("records", 4, new.producer_epoch, 2),
        ("commit", 6, new.producer_epoch, 1),
    ]


def _producers(target: Connection, tp: TP) -> list[tuple[int, int]]:
    """The writers the partition's leader holds state for: (producer id, epoch)."""
    topic = DescribeProducersRequest.TopicRequest(name=tp[0], partition_indexes=[tp[1]])
    answer = target.call(target.leader(tp), DescribeProducersRequest(topics=[topic]))
    return [
        (s.producer_id, s.producer_epoch)
        for t in answer.topics
        for p in t.partitions
        for s in p.active_producers
    ]


def test_a_stale_epoch_is_refused_after_the_leader_forgot_the_writer(
    expiring: LocalCluster, unique_name: str
) -> None:
    """A leader that forgets a writer 2 s after its newest write (production's brokers a day after, by
    the records' timestamps, and mirrored records are often older: these are two days old). Without
    transactions the copy's fence is gone with it, and a stale copy's next batch would be appended;
    here the coordinator still knows the epoch, and the leader asks it before a transaction's first
    batch (KIP-890's verification): the stale epoch's batches are refused."""
    create_topic(expiring.bootstrap, unique_name, 1)
    txn_id, tp = f"txn-{unique_name}", (unique_name, 0)
    then = int(time.time() * 1000) - TWO_DAYS_MS
    stale, fresh, late = _records("stale", 3, then), _records("fresh", 2, then), _records("late", 2, then)
    connection = Connection({"bootstrap.servers": expiring.bootstrap}, "target", [tp[0]])
    try:
        old = fence(connection, txn_id, TIMEOUT_MS)
        add_partitions(connection, txn_id, old, [tp])
        assert _send(connection, txn_id, old, tp, 0, stale) == (0, 0)
        end_transaction(connection, txn_id, old, commit=True)
        new = fence(connection, txn_id, TIMEOUT_MS)
        add_partitions(connection, txn_id, new, [tp])
        assert _send(connection, txn_id, new, tp, 0, fresh) == (0, 4)
        # A writer with a transaction open is never forgotten; once it ended, 2 s after its marker.
        assert _producers(connection, tp) == [(new.producer_id, new.producer_epoch)]
        end_transaction(connection, txn_id, new, commit=True)
        wait_end(expiring.bootstrap, *tp, 7)

        deadline = time.monotonic() + 30
        while _producers(connection, tp):
            assert time.monotonic() < deadline, "the leader kept the writer's state for 30 s"
            time.sleep(0.2)
        # The old epoch's next batch, and its first one again: both refused, nothing appended.
        assert _send(connection, txn_id, old, tp, 3, late) == (OLD_EPOCH, -1)
        assert _send(connection, txn_id, old, tp, 0, late) == (OLD_EPOCH, -1)
        with pytest.raises(WriterFencedError):
            add_partitions(connection, txn_id, old, [tp])
        assert end_offsets(connection, [tp], READ_UNCOMMITTED)[tp] == 7
        assert _committed(expiring.bootstrap, tp) == _at(0, stale) + _at(4, fresh)
        assert _log(connection, tp) == [
            ("records", 0, old.producer_epoch, 3),
            ("commit", 3, old.producer_epoch, 1),
            ("records", 4, new.producer_epoch, 2),
            ("commit", 6, new.producer_epoch, 1),
        ]
    finally:
        connection.close()


def test_a_commit_whose_answer_was_lost_is_asked_again_and_holds(
    kafka_clusters: dict[str, LocalCluster],
    target: Connection,
    unique_name: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The coordinator committed, its answer never came: the commit asked again answers as the first
    would have, and the records are committed once."""
    backup = kafka_clusters["backup"]
    create_topic(backup.bootstrap, unique_name, 1)
    txn_id, tp = f"txn-{unique_name}", (unique_name, 0)
    writer = fence(target, txn_id, TIMEOUT_MS)
    add_partitions(target, txn_id, writer, [tp])
    records = _records("a", 3)
    assert _send(target, txn_id, writer, tp, 0, records) == (0, 0)

    real_call = target.call
    lost: list[str] = []

    def call(node: int, request: Any) -> Any:
        answer = real_call(node, request)
        if type(request).__name__ == "EndTxnRequest" and not lost:
            lost.append(f"error code {answer.error_code}")
            raise TransientError("the answer was lost")
        return answer

    monkeypatch.setattr(target, "call", call)
    end_transaction(target, txn_id, writer, commit=True)
    assert lost == ["error code 0"]

    wait_end(backup.bootstrap, *tp, 4)
    assert _committed(backup.bootstrap, tp) == _at(0, records)
    assert _log(target, tp) == [
        ("records", 0, writer.producer_epoch, 3),
        ("commit", 3, writer.producer_epoch, 1),
    ]
