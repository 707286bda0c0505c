"""The flow's transactions on its target, as the driver of a copy holds them: a batch run's copy job
or a DR window, each one attempt of the flow's writer.

Invariants:
- An attempt fences the flow's transactional id when it starts (``FlowTransactions.fenced``): what
  every earlier attempt left open is aborted, and their requests are refused from then on, whatever
  their records' timestamps. A DR window fences when it takes the flow over, so the window before
  it can append nothing after the handover.
- Each copy (a batch run's plan, a micro-batch) is one transaction: its remote partitions are added
  before any task writes (``begin``), which waits out the markers of the writer's previous
  transaction; the tasks write with the ``Grant`` it returns; the transaction commits (``commit``)
  only after every task answered, and before the offsets table moves.
- A copy ends inside its transaction's timeout: its tasks stop reading source records at
  ``READING_SHARE`` of it (``Grant.deadline``), and what they read by then is written and
  committed; the rest is the next copy's (``core.plan.PartitionResult.source_end``).
- Sequences count per remote partition within the epoch: a partition's first sequence in a
  transaction is what the epoch's committed transactions wrote there. A copy that fails aborts:
  the attempt fences again (a new epoch, sequences from 0), so nothing of the failed copy is read
  by read_committed consumers and no sequence of it is reused.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager, suppress

from mirrorflow.config.clients import transaction_timeout_ms
from mirrorflow.core.plan import CopyResult, Grant, PartitionPlan, Plan, Writer, transactional_id
from mirrorflow.errors import MirrorError, TargetStateError, WriterFencedError
from mirrorflow.kafka.connection import TP, Connection
from mirrorflow.kafka.transactions import add_partitions, end_transaction, fence

# How long the coordinator lets a DR window's micro-batch stay open before aborting it (at most; a
# batch run's is the target's transaction.timeout.ms). A micro-batch takes well under a second:
# Kafka's producer default, so that a window frozen with one open holds read_committed consumers
# back no longer.
WINDOW_TRANSACTION_TIMEOUT_MS = 60_000
# The share of a transaction's timeout its copy reads in: the rest is for writing what it read,
# checking the target's ends and committing.
READING_SHARE = 2 / 3


class FlowTransactions:
    """One attempt's writer of the flow's transactional id on the target of ``props``."""

    def __init__(self, props: Mapping[str, str], transactional_id: str, timeout_ms: int) -> None:
        self.transactional_id = transactional_id
        self.timeout_ms = timeout_ms
        self._target = Connection(props, "target", ())
        self._began = 0.0
        self._writer: Writer | None = None
        self._sequences: dict[TP, int] = {}
        self._open: list[TP] | None = None

    @classmethod
    @contextmanager
    def fenced(
        cls, props: Mapping[str, str], transactional_id: str, timeout_ms: int
    ) -> Iterator[FlowTransactions]:
        """The attempt's writer, fenced; an open transaction is aborted when the block fails."""
        transactions = cls(props, transactional_id, timeout_ms)
        try:
            transactions.fence()
            yield transactions
        except BaseException:
            # Best effort: a transaction left open is aborted by the next fence, or by the
            # coordinator after its timeout.
            with suppress(MirrorError):
                transactions.abort()
            raise
        finally:
            transactions.close()

    def fence(self) -> None:
        """A new epoch of the writer: every earlier one is cut off, its open transaction aborted."""
        self._writer = fence(self._target, self.transactional_id, self.timeout_ms)
        self._sequences.clear()
        self._open = None

    def begin(self, plans: Iterable[PartitionPlan]) -> Grant:
        """A transaction over the remote partitions of ``plans``, and what its tasks write as (the
        writer fenced first if an abort could not fence it)."""
        assert self._open is None, "one transaction at a time"
        if self._writer is None:
            self.fence()
        assert self._writer is not None
        tps = sorted({(p.remote_topic, p.partition) for p in plans})
        add_partitions(self._target, self.transactional_id, self._writer, tps)
        self._open, self._began = tps, time.monotonic()
        return Grant(
            self.transactional_id,
            self._writer,
            tuple((t, p, self._sequences[(t, p)]) for t, p in tps if (t, p) in self._sequences),
            deadline=time.time() + self.timeout_ms / 1000 * READING_SHARE,
        )

    def commit(self, result: CopyResult, plans: Iterable[PartitionPlan]) -> None:
        """Commit the open transaction, whose tasks wrote ``result`` for ``plans``."""
        assert self._writer is not None and self._open is not None, "no transaction is open"
        try:
            end_transaction(self._target, self.transactional_id, self._writer, commit=True)
        except WriterFencedError as fenced:
            open_s = time.monotonic() - self._began
            if open_s * 1000 < self.timeout_ms:
                raise
            raise TargetStateError(
                f"the copy's transaction of {self.transactional_id} stayed open {open_s:.0f} s, past "
                f"the {self.timeout_ms / 1000:g} s its coordinator allows, and was aborted: writing what "
                f"the copy had read in its first {self.timeout_ms / 1000 * READING_SHARE:g} s took the "
                "rest. Nothing was committed. Run the flow again; if this repeats, raise the target's "
                "producer transaction.timeout.ms (and its brokers' transaction.max.timeout.ms)"
            ) from fenced
        self._open = None
        remote = {(p.topic, p.partition): (p.remote_topic, p.partition) for p in plans}
        for r in result.partitions:
            tp = remote[(r.topic, r.partition)]
            self._sequences[tp] = self._sequences.get(tp, 0) + r.records - r.skipped

    def abort(self) -> None:
        """Abort what is open by fencing again; nothing when nothing is open. If the fence fails, the
        next ``begin`` fences first."""
        if self._open is not None:
            self._writer, self._open = None, None
            self.fence()

    def close(self) -> None:
        self._target.close()


def copied_in_one_transaction(
    props: Mapping[str, str], plan: Plan, copy: Callable[[Grant], CopyResult]
) -> CopyResult:
    """``copy`` of ``plan`` as one attempt of its flow's writer on the target of ``props``: fenced,
    one transaction, committed once ``copy`` returned."""
    with FlowTransactions.fenced(
        props, transactional_id(plan.flow), transaction_timeout_ms(props)
    ) as transactions:
        grant = transactions.begin(plan.partitions)
        result = copy(grant)
        transactions.commit(result, plan.partitions)
    return result
