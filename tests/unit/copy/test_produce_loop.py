"""The produce loop's state machine through every verdict of a Produce answer (``kafka.faults``), on a
scripted target: a batch counts only where the copy expects it, a passing answer or a lost one resends
the same batch with the same sequence, a batch too large is split, and each refusal fails the partition
(under isolate) or the task, as the flow's policy says. The same loop on real brokers:
``tests/integration/test_transactions.py``, ``test_lost_answers.py`` and ``test_faults.py``."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any, cast

import pytest
from batch_samples import build, parse
from kafka.record.default_records import DefaultRecordBatch

from mirrorflow.copy import produce_loop
from mirrorflow.copy.partition_copy import PartitionCopy, Piece
from mirrorflow.copy.produce_loop import ProduceLoop
from mirrorflow.copy.source_reader import Budget, SourceReader
from mirrorflow.core.plan import Grant, PartitionPlan, Writer
from mirrorflow.errors import AuthorizationError, TargetStateError, TransientError, WriterFencedError
from mirrorflow.kafka.connection import Connection
from mirrorflow.kafka.faults import FaultPolicy
from mirrorflow.kafka.fetched_batches import SourceRecord

FAIL = FaultPolicy()  # the flow default: mirrorflow.on.partition.error = fail
GRANT = Grant("mirrorflow.primary->backup", Writer(producer_id=7, producer_epoch=3))
OK = 0
# Answers by their Kafka names.
NOT_LEADER, UNKNOWN_SERVER_ERROR = 6, -1
MESSAGE_TOO_LARGE, TOPIC_AUTHORIZATION_FAILED, INVALID_TIMESTAMP = 10, 29, 32
OUT_OF_ORDER_SEQUENCE, INVALID_PRODUCER_EPOCH, PRODUCER_FENCED = 45, 47, 90
LOST = "lost"  # no answer came (a timeout, a closed connection)


class ScriptedTarget:
    """A target whose one broker answers each partition's Produce from a script, in turn: an error
    code, or ``LOST``; once a script runs out, every batch is appended where it is expected. It keeps
    what it appended, per partition, with each batch's sequence."""

    def __init__(self, **scripts: list[int | str]) -> None:
        self.scripts = {int(name.removeprefix("p")): deque(s) for name, s in scripts.items()}
        self.appended: dict[int, list[tuple[int, int]]] = {}
        self.ends: dict[int, int] = {}
        self.client = SimpleNamespace(send=self._send)

    def by_leader(self, tps: Any) -> dict[int, list[tuple[str, int]]]:
        found = list(tps)
        return {0: found} if found else {}

    def poll(self, timeout_ms: int) -> None:
        pass

    def request_update(self) -> None:
        pass

    def _send(self, node: int, request: Any) -> Any:
        responses = []
        for topic in request.topic_data:
            answers = []
            for data in topic.partition_data:
                script = self.scripts.get(data.index)
                answer = script.popleft() if script else OK
                if answer == LOST:
                    return SimpleNamespace(is_done=True, succeeded=lambda: False, exception=TimeoutError())
                batch = DefaultRecordBatch(bytes(data.records))
                base = self.ends.get(data.index, 0)
                if answer == OK:
                    self.appended.setdefault(data.index, []).append(
                        (batch.base_sequence, batch.records_count)
                    )
                    self.ends[data.index] = base + batch.records_count
                answers.append(SimpleNamespace(index=data.index, error_code=answer, base_offset=base))
            responses.append(SimpleNamespace(name=topic.name, partition_responses=answers))
        value = SimpleNamespace(responses=responses)
        return SimpleNamespace(is_done=True, succeeded=lambda: True, value=value, exception=None)


class QueuedReader:
    """A reader that has queued every piece already, as ``SourceReader`` leaves them."""

    def __init__(self, pieces: list[tuple[PartitionCopy, Piece]]) -> None:
        self.ready = deque(pieces)
        self.error: BaseException | None = None
        self.finished = threading.Event()
        self.finished.set()
        self.wake = threading.Event()


def _records(n: int) -> list[SourceRecord]:
    return [SourceRecord(i, 1_000 + i, f"k{i}".encode(), b"v" * 100, ()) for i in range(n)]


def _part(partition: int) -> PartitionCopy:
    return PartitionCopy(PartitionPlan("orders", partition, 0, 100, "primary.orders", 0), 0, 0)


def _piece(records: int) -> Piece:
    data = bytearray(build(_records(records)))
    return Piece(data, records, parse(bytes(data)).timestamps(), budgeted=0)


def _write(
    target: ScriptedTarget,
    pieces: dict[int, list[int]],
    policy: FaultPolicy = FAIL,
    grant: Grant = GRANT,
) -> list[PartitionCopy]:
    parts = {p: _part(p) for p in pieces}
    queued = [(parts[p], _piece(n)) for p, sizes in pieces.items() for n in sizes]
    loop = ProduceLoop(cast(Connection, target), Budget(1 << 20), policy, grant)
    loop.write(cast(SourceReader, QueuedReader(queued)), list(parts.values()))
    return list(parts.values())


@pytest.fixture(autouse=True)
def _no_pause(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(time, "sleep", lambda s: None)
    yield


def test_acknowledged_batches_count_in_order_with_their_sequences() -> None:
    target = ScriptedTarget()
    (part,) = _write(target, {0: [3, 2]})
    assert target.appended[0] == [(0, 3), (3, 2)]
    assert (part.acked, part.next_sequence, part.failed) == (5, 5, None)


@pytest.mark.parametrize("answer", [NOT_LEADER, LOST, UNKNOWN_SERVER_ERROR])
def test_a_passing_or_lost_answer_resends_the_same_batch_with_the_same_sequence(answer: int | str) -> None:
    target = ScriptedTarget(p0=[OK, answer, answer])
    (part,) = _write(target, {0: [2, 2]})
    assert target.appended[0] == [(0, 2), (2, 2)]
    assert part.acked == 4


def test_a_batch_too_large_is_split_into_batches_of_at_most_half_its_size_in_its_place() -> None:
    target = ScriptedTarget(p0=[MESSAGE_TOO_LARGE])
    (part,) = _write(target, {0: [8, 1]})
    *split, (after, one) = target.appended[0]
    assert len(split) > 1 and sum(n for _, n in split) == 8
    assert [s for s, _ in target.appended[0]] == [sum(n for _, n in split[:i]) for i in range(len(split) + 1)]
    assert (after, one, part.acked) == (8, 1, 9)


def test_a_single_record_too_large_is_the_remote_topics_to_fix() -> None:
    with pytest.raises(TargetStateError, match=r"larger than the target accepts; raise .*max.message.bytes"):
        _write(ScriptedTarget(p0=[MESSAGE_TOO_LARGE]), {0: [1]})


@pytest.mark.parametrize(
    ("answer", "error", "says"),
    [
        (TOPIC_AUTHORIZATION_FAILED, AuthorizationError, "Grant it WRITE on the remote topics"),
        (INVALID_TIMESTAMP, TargetStateError, "change the remote topic"),
    ],
)
def test_a_refusal_a_resend_would_meet_again_fails_the_task_or_only_its_partition(
    answer: int, error: type[Exception], says: str
) -> None:
    with pytest.raises(error, match=says):
        _write(ScriptedTarget(p0=[answer]), {0: [2], 1: [2]})
    # Under isolate the other partition goes on; the refused one writes nothing more.
    target = ScriptedTarget(p0=[answer])
    refused, other = _write(target, {0: [2, 2], 1: [2]}, FaultPolicy(isolate=True))
    assert isinstance(refused.failed, error) and says in str(refused.failed)
    assert (refused.acked, 0 in target.appended) == (0, False)
    assert (other.acked, other.failed) == (2, None)


@pytest.mark.parametrize("answer", [INVALID_PRODUCER_EPOCH, PRODUCER_FENCED])
def test_a_fence_ends_the_task_even_under_isolate(answer: int) -> None:
    for policy in (FAIL, FaultPolicy(isolate=True)):
        with pytest.raises(WriterFencedError, match="a newer attempt of the flow fenced its writer"):
            _write(ScriptedTarget(p0=[answer]), {0: [2], 1: [2]}, policy)


def test_a_writer_state_the_target_lost_fails_the_attempt_as_transient() -> None:
    with pytest.raises(TransientError, match="the next attempt fences the writer anew"):
        _write(ScriptedTarget(p0=[OUT_OF_ORDER_SEQUENCE]), {0: [2]}, FaultPolicy(isolate=True))


def test_a_batch_placed_elsewhere_is_someone_elses_write() -> None:
    target = ScriptedTarget()
    target.ends[0] = 5  # five records another writer appended after the copy read the end
    with pytest.raises(TargetStateError, match="something else wrote to the remote partition"):
        _write(target, {0: [2]})


def test_resending_stops_at_the_delivery_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(produce_loop, "DELIVERY_TIMEOUT_S", 0.0)
    with pytest.raises(TransientError, match=r"kept refusing a batch for primary\.orders-0: NotLeader"):
        _write(ScriptedTarget(p0=[NOT_LEADER, NOT_LEADER]), {0: [2]})


def test_resending_stops_once_the_transaction_expired() -> None:
    # Its coordinator aborts the transaction then: resending is in vain, the attempt fails as
    # transient (a retry fences anew), not as a fence.
    expired = Grant(GRANT.transactional_id, GRANT.writer, expires=time.time() - 1)
    with pytest.raises(TransientError, match="until its transaction's time ran out"):
        _write(ScriptedTarget(p0=[NOT_LEADER]), {0: [2]}, grant=expired)
