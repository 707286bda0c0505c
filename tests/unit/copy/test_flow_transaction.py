"""The flow writer's bookkeeping as a copy's driver holds it: an epoch per fence, sequences per
remote partition within it, an abort that fences again (also later, when the fence itself failed),
and a transaction that outlived its timeout named as such. The coordinator's requests are stood in
for; tests/integration/test_transactions.py makes them on real brokers."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import replace

import pytest

from mirrorflow.copy import flow_transaction
from mirrorflow.copy.flow_transaction import FlowTransactions
from mirrorflow.core.plan import CopyResult, Grant, PartitionPlan, PartitionResult, Writer
from mirrorflow.errors import TargetStateError, TransientError, WriterFencedError

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
    parts = tuple(PartitionResult("orders", p, written + skipped, skipped, 0, 0) for p in (0, 1))
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
        transactions.abort()
        assert _undated(transactions.begin(PLANS)) == Grant(TID, Writer(7, 1), ())
        transactions.commit(_result(1), PLANS)
    assert coordinator.calls == [
        "fence 0",
        "add 0 [('primary.orders', 0), ('primary.orders', 1)]",
        "end 0 commit",
        "add 0 [('primary.orders', 0), ('primary.orders', 1)]",
        "fence 1",
        "add 1 [('primary.orders', 0), ('primary.orders', 1)]",
        "end 1 commit",
    ]


def test_a_transactions_tasks_stop_reading_at_two_thirds_of_its_timeout(
    coordinator: Coordinator, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(time, "time", lambda: 1_000.0)
    with FlowTransactions.fenced({}, TID, 90_000) as transactions:
        assert transactions.begin(PLANS).deadline == 1_060.0


def _undated(grant: Grant) -> Grant:
    return replace(grant, deadline=0.0)


def test_an_abort_whose_fence_failed_fences_before_the_next_transaction(coordinator: Coordinator) -> None:
    with FlowTransactions.fenced({}, TID, 60_000) as transactions:
        transactions.begin(PLANS)
        coordinator.fence_fails = True
        with pytest.raises(TransientError):
            transactions.abort()
        coordinator.fence_fails = False
        assert transactions.begin(PLANS).writer == Writer(7, 1)
        transactions.commit(_result(1), PLANS)


def test_a_transaction_that_outlived_its_timeout_says_so(
    coordinator: Coordinator, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = iter([100.0, 1000.0])
    monkeypatch.setattr(time, "monotonic", lambda: next(clock))
    coordinator.end_fails = WriterFencedError("PRODUCER_FENCED")
    with (
        pytest.raises(TargetStateError, match=r"stayed open 900 s, past the 60 s its coordinator allows"),
        FlowTransactions.fenced({}, TID, 60_000) as transactions,
    ):
        transactions.begin(PLANS)
        transactions.commit(_result(1), PLANS)
