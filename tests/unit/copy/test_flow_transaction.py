"""The flow writer's bookkeeping as a copy's driver holds it: an epoch per fence, sequences per
remote partition within it, a failed transaction aborted under its own epoch and the next one fenced
anew (also later, when that fence failed), a fence never answered with a fence, a commit without an
answer or past its timeout as passing faults, and no fence once the attempt lost its flow. The
coordinator's requests are stood in for; tests/integration/test_transactions.py makes them on real
brokers."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import replace

import pytest

from mirrorflow.copy import flow_transaction
from mirrorflow.copy.flow_transaction import FlowTransactions
from mirrorflow.core.plan import CopyResult, Grant, PartitionFailure, PartitionPlan, PartitionResult, Writer
from mirrorflow.errors import CommitConflictError, TransientError, WriterFencedError

TID = "mirrorflow.primary->backup"
PLANS = (
    PartitionPlan("orders", 0, 0, 10, "primary.orders", 0),
    PartitionPlan("orders", 1, 0, 10, "primary.orders", 0),
)


class Coordinator:
    """What the flow's transactional id went through."""

    def __init__(self) -> None:
        self.epoch = -1
        self.calls: list[str] = []
        self.fence_fails = False
        self.end_fails: Exception | None = None

    def fence(self, conn: object, tid: str, timeout_ms: int) -> Writer:
        if self.fence_fails:
            raise TransientError("the coordinator is away")
        self.epoch += 1
        self.calls.append(f"fence {self.epoch}")
        return Writer(7, self.epoch)

    def add(self, conn: object, tid: str, writer: Writer, tps: Iterable[tuple[str, int]]) -> None:
        self.calls.append(f"add {writer.producer_epoch} {sorted(tps)}")

    def end(self, conn: object, tid: str, writer: Writer, commit: bool) -> None:
        if self.end_fails is not None:
            raise self.end_fails
        self.calls.append(f"end {writer.producer_epoch} {'commit' if commit else 'abort'}")


@pytest.fixture
def coordinator(monkeypatch: pytest.MonkeyPatch) -> Coordinator:
    c = Coordinator()
    monkeypatch.setattr(flow_transaction, "fence", c.fence)
    monkeypatch.setattr(flow_transaction, "add_partitions", c.add)
    monkeypatch.setattr(flow_transaction, "end_transaction", c.end)
    monkeypatch.setattr(flow_transaction, "Connection", lambda *a: type("C", (), {"close": lambda s: None})())
    return c


def _result(written: int, skipped: int = 0) -> CopyResult:
    parts = tuple(
        PartitionResult("orders", p, written + skipped, skipped, 0, 0, appended=written) for p in (0, 1)
    )
    return CopyResult("primary->backup", "r", parts)


def test_sequences_count_per_partition_within_an_epoch_and_start_again_after_an_abort(
    coordinator: Coordinator,
) -> None:
    with FlowTransactions.fenced({}, TID, 60_000) as transactions:
        assert _undated(transactions.begin(PLANS)) == Grant(TID, Writer(7, 0), ())
        transactions.commit(_result(5, skipped=2), PLANS)
        second = transactions.begin(PLANS)
        assert second.sequences == (("primary.orders", 0, 5), ("primary.orders", 1, 5))
        assert second.first_sequence("primary.orders", 1) == 5
        failed = TransientError("a task failed")
        assert transactions.aborted(failed) is failed
        assert _undated(transactions.begin(PLANS)) == Grant(TID, Writer(7, 1), ())
        transactions.commit(_result(1), PLANS)
    assert coordinator.calls == [
        "fence 0",
        "add 0 [('primary.orders', 0), ('primary.orders', 1)]",
        "end 0 commit",
        "add 0 [('primary.orders', 0), ('primary.orders', 1)]",
        # The failed transaction ended under its own epoch, the next one fenced anew.
        "end 0 abort",
        "fence 1",
        "add 1 [('primary.orders', 0), ('primary.orders', 1)]",
        "end 1 commit",
    ]


def test_a_partition_that_failed_alone_counts_the_sequences_it_used(coordinator: Coordinator) -> None:
    # Under isolate a failed partition's appended batches commit with the others': its next batch
    # goes on from their sequences.
    failed = PartitionResult("orders", 0, 0, 0, 0, 0, failure=PartitionFailure("X", "refused"), appended=3)
    ok = PartitionResult("orders", 1, 4, 0, 0, 0, appended=4)
    with FlowTransactions.fenced({}, TID, 60_000) as transactions:
        transactions.begin(PLANS)
        transactions.commit(CopyResult("primary->backup", "r", (failed, ok)), PLANS)
        assert transactions.begin(PLANS).sequences == (("primary.orders", 0, 3), ("primary.orders", 1, 4))


def test_a_transactions_tasks_stop_reading_at_two_thirds_of_its_timeout_and_resending_at_its_end(
    coordinator: Coordinator, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(time, "time", lambda: 1_000.0)
    with FlowTransactions.fenced({}, TID, 90_000) as transactions:
        grant = transactions.begin(PLANS)
        assert (grant.deadline, grant.expires) == (1_060.0, 1_090.0)


def _undated(grant: Grant) -> Grant:
    return replace(grant, deadline=0.0, expires=0.0)


def test_a_commit_whose_answer_never_came_leaves_no_transaction_open(coordinator: Coordinator) -> None:
    # EndTxn unanswered: whether it committed is the coordinator's to settle, which the next fence
    # makes it do; the next transaction begins (no "one transaction at a time" failure).
    with FlowTransactions.fenced({}, TID, 60_000) as transactions:
        transactions.begin(PLANS)
        coordinator.end_fails = TransientError("no answer from the coordinator")
        with pytest.raises(TransientError, match="no answer"):
            transactions.commit(_result(1), PLANS)
        coordinator.end_fails = None
        assert transactions.begin(PLANS).writer == Writer(7, 1)
        transactions.commit(_result(1), PLANS)
    assert coordinator.calls[-3:] == [
        "fence 1",
        "add 1 [('primary.orders', 0), ('primary.orders', 1)]",
        "end 1 commit",
    ]


def test_a_fence_is_never_answered_with_a_fence(coordinator: Coordinator) -> None:
    # A newer attempt fenced the writer while its transaction was young: this attempt ends. Neither
    # the abort nor any later begin fences (which would abort the newer attempt's transaction).
    fenced = WriterFencedError("PRODUCER_FENCED")
    with FlowTransactions.fenced({}, TID, 60_000) as transactions:
        transactions.begin(PLANS)
        assert transactions.aborted(fenced) is fenced
        with pytest.raises(WriterFencedError):
            transactions.begin(PLANS)
    assert coordinator.calls == ["fence 0", "add 0 [('primary.orders', 0), ('primary.orders', 1)]"]


def test_a_commit_fenced_while_young_ends_the_attempt(coordinator: Coordinator) -> None:
    coordinator.end_fails = WriterFencedError("PRODUCER_FENCED")
    with pytest.raises(WriterFencedError), FlowTransactions.fenced({}, TID, 60_000) as transactions:
        transactions.begin(PLANS)
        transactions.commit(_result(1), PLANS)
    assert not any(c.startswith("end 0 abort") or c == "fence 1" for c in coordinator.calls)


def test_a_transaction_that_outlived_its_timeout_is_a_passing_fault(
    coordinator: Coordinator, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Its coordinator aborted it (bumping the epoch): the attempt goes on with a new epoch.
    clock = iter([100.0, 1000.0, 1000.0])
    monkeypatch.setattr(time, "monotonic", lambda: next(clock))
    coordinator.end_fails = WriterFencedError("PRODUCER_FENCED")
    with FlowTransactions.fenced({}, TID, 60_000) as transactions:
        transactions.begin(PLANS)
        with pytest.raises(TransientError, match=r"stayed open 900 s, past the 60 s its coordinator allows"):
            transactions.commit(_result(1), PLANS)
        coordinator.end_fails = None
        assert transactions.begin(PLANS).writer == Writer(7, 1)


def test_an_attempt_that_no_longer_holds_its_flow_never_fences(coordinator: Coordinator) -> None:
    holds = [True]

    def holds_flow() -> None:
        if not holds[0]:
            raise CommitConflictError("the lock is another run's")

    with FlowTransactions.fenced({}, TID, 60_000, holds_flow) as transactions:
        transactions.begin(PLANS)
        transactions.aborted(TransientError("a task failed"))
        holds[0] = False
        with pytest.raises(CommitConflictError):
            transactions.begin(PLANS)
    assert coordinator.calls.count("fence 1") == 0


def test_an_abort_whose_fence_failed_fences_before_the_next_transaction(coordinator: Coordinator) -> None:
    with FlowTransactions.fenced({}, TID, 60_000) as transactions:
        transactions.begin(PLANS)
        transactions.aborted(TransientError("a task failed"))
        coordinator.fence_fails = True
        with pytest.raises(TransientError):
            transactions.begin(PLANS)
        coordinator.fence_fails = False
        assert transactions.begin(PLANS).writer == Writer(7, 1)
        transactions.commit(_result(1), PLANS)
