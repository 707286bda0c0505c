"""The flow writer's transaction requests against a scripted coordinator: what is asked again (the
coordinator loading, moving, busy ending a transaction, or silent) and what each refusal raises. The
same requests on real brokers: ``tests/integration/test_transactions.py``."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pytest

from mirrorflow.core.plan import Writer
from mirrorflow.errors import (
    AuthorizationError,
    TargetStateError,
    TransientError,
    WriterFencedError,
    error_class,
)
from mirrorflow.kafka import faults, transactions
from mirrorflow.kafka.connection import Connection

TID = "primary->backup"
WRITER = Writer(producer_id=5, producer_epoch=2)


class ScriptedTarget:
    """A target's connection whose brokers answer each kind of request from a script, in turn (an
    exception is raised as the connection raises a request without an answer)."""

    def __init__(self, **answers: list[Any]) -> None:
        self.answers = answers
        self.sent: list[tuple[str, int]] = []
        self.known = {0, 1, 2}
        self.refreshes = 0
        self.client = SimpleNamespace(
            least_loaded_node=lambda bootstrap_fallback: 0,
            cluster=SimpleNamespace(broker_metadata=lambda node: object() if node in self.known else None),
        )

    def call(self, node: int, request: Any) -> Any:
        kind = type(request).__name__.removesuffix("Request")
        self.sent.append((kind, node))
        answer = self.answers[kind].pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    def refresh(self, timeout_s: float = 0) -> None:
        self.refreshes += 1
        self.known.add(3)


def _connection(target: ScriptedTarget) -> Connection:
    return cast(Connection, target)


def _found(node: int = 1, code: int = 0) -> SimpleNamespace:
    return SimpleNamespace(error_code=code, node_id=node)


def _code(code: int) -> SimpleNamespace:
    return SimpleNamespace(error_code=code, producer_id=5, producer_epoch=2)


def _added(*codes: int) -> SimpleNamespace:
    partitions = [SimpleNamespace(partition_index=i, partition_error_code=c) for i, c in enumerate(codes)]
    return SimpleNamespace(
        results_by_topic_v3_and_below=[SimpleNamespace(name="t", results_by_partition=partitions)]
    )


def test_fence_waits_for_the_coordinator_and_asks_a_moved_one_again() -> None:
    # COORDINATOR_NOT_AVAILABLE, then CONCURRENT_TRANSACTIONS (aborting the older epoch's
    # transaction), then NOT_COORDINATOR: found again, on another broker.
    target = ScriptedTarget(
        FindCoordinator=[_found(code=15), _found(1), _found(2)],
        InitProducerId=[_code(51), _code(16), _code(0)],
    )
    assert transactions.fence(_connection(target), TID, 60_000) == WRITER
    assert target.sent == [
        ("FindCoordinator", 0),
        ("FindCoordinator", 0),
        ("InitProducerId", 1),
        ("InitProducerId", 1),
        ("FindCoordinator", 0),
        ("InitProducerId", 2),
    ]


def test_a_coordinator_the_metadata_does_not_name_yet_is_looked_up() -> None:
    target = ScriptedTarget(FindCoordinator=[_found(3)])
    assert transactions.coordinator(_connection(target), TID) == 3
    assert target.refreshes == 1


@pytest.mark.parametrize("code", [53, 29, 31])
def test_a_refused_login_names_the_grants(code: int) -> None:
    target = ScriptedTarget(FindCoordinator=[_found()], InitProducerId=[_code(code)])
    with pytest.raises(AuthorizationError) as refused:
        transactions.fence(_connection(target), TID, 60_000)
    assert f"WRITE on the TransactionalId {TID!r} and WRITE on the remote topics;" in str(refused.value)


@pytest.mark.parametrize(
    ("codes", "refusal"), [((29, 55), AuthorizationError), ((55, 90), WriterFencedError)]
)
def test_a_partition_refused_is_raised_for_its_own_error_not_the_others_left_alone(
    codes: tuple[int, ...], refusal: type[Exception]
) -> None:
    target = ScriptedTarget(FindCoordinator=[_found()], AddPartitionsToTxn=[_added(*codes)])
    with pytest.raises(refusal):
        transactions.add_partitions(_connection(target), TID, WRITER, [("t", 0), ("t", 1)])


@pytest.mark.parametrize("code", [47, 49, 90])
def test_a_fenced_writer_is_told_a_newer_copy_took_over(code: int) -> None:
    target = ScriptedTarget(FindCoordinator=[_found()], EndTxn=[_code(code)])
    with pytest.raises(WriterFencedError) as fenced:
        transactions.end_transaction(_connection(target), TID, WRITER, commit=True)
    message = str(fenced.value)
    assert f"a newer copy of the flow took over its writer (transactional id {TID!r})" in message
    assert "nothing of its transaction is committed" in message
    # It crosses a process boundary (a Spark task) as its class name and message.
    assert error_class("WriterFencedError") is WriterFencedError
    assert isinstance(WriterFencedError.from_message(message), TargetStateError)


def test_ending_a_transaction_the_coordinator_holds_no_longer_open_is_a_passing_fault() -> None:
    # INVALID_TXN_STATE: the writer's state is lost; the next attempt fences anew, no person needed.
    target = ScriptedTarget(FindCoordinator=[_found()], EndTxn=[_code(48)])
    with pytest.raises(TransientError, match="refused to abort its transaction") as refused:
        transactions.end_transaction(_connection(target), TID, WRITER, commit=False)
    assert "fences this writer" in str(refused.value)


def test_an_end_whose_answer_was_lost_is_asked_again_of_the_coordinator_found_again() -> None:
    target = ScriptedTarget(
        FindCoordinator=[_found(1), _found(2)], EndTxn=[TransientError("no answer"), _code(51), _code(0)]
    )
    transactions.end_transaction(_connection(target), TID, WRITER, commit=True)
    assert [kind for kind, _ in target.sent] == [
        "FindCoordinator",
        "EndTxn",
        "FindCoordinator",
        "EndTxn",
        "EndTxn",
    ]


def test_a_coordinator_busy_past_the_deadline_is_a_transient_error_naming_the_transactional_id(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(faults, "TIMEOUT_S", 0.05)
    busy = ScriptedTarget(FindCoordinator=[_found()], EndTxn=[_code(51)] * 100)
    with pytest.raises(
        TransientError, match=f"transactional id {TID!r}, failed for 0 s: ConcurrentTransactionsError"
    ):
        transactions.end_transaction(_connection(busy), TID, WRITER, commit=True)
    loading = ScriptedTarget(FindCoordinator=[_found(code=14)] * 100)
    with pytest.raises(
        TransientError, match=f"transaction coordinator of transactional id {TID!r} .* CoordinatorLoad"
    ):
        transactions.coordinator(_connection(loading), TID)
