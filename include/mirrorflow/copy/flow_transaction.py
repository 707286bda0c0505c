"""The flow's transactions on its target, as the driver of a copy holds them: a batch run's copy job
or a DR window, each one attempt of the flow's writer.

Invariants:
- An attempt fences the flow's transactional id when it starts (``FlowTransactions.fenced``): what
  every earlier attempt left open is aborted, and their requests are refused from then on, whatever
  their records' timestamps. A DR window fences when it takes the flow over, so the window before
  it can append nothing after the handover. An attempt fences only while it holds the flow
  (``holds_flow``, checked before every fence).
- A fence is never answered with a fence: an attempt whose writer a newer one fenced (and whose
  transaction had not outlived its timeout) ends, and every later ``begin`` raises that fence again.
  Its failed transaction is ended with EndTxn (abort) under its own epoch, which cannot touch a
  newer epoch's transaction.
- Each copy (a batch run's plan, a micro-batch) is one transaction: its remote partitions are added
  before any task writes (``begin``), which waits out the markers of the writer's previous
  transaction; the tasks write with the ``Grant`` it returns; the transaction commits (``commit``)
  only after every task answered, and before the offsets table moves.
- A copy ends inside its transaction's timeout: its tasks stop reading source records at
  ``READING_SHARE`` of it (``Grant.deadline``), and what they read by then is written and
  committed; the rest is the next copy's (``core.plan.PartitionResult.source_end``). A transaction
  found aborted after its timeout (its coordinator aborts it, bumping the epoch) is a passing fault:
  the next ``begin`` fences anew, if the attempt still holds the flow.
- Sequences count per remote partition within the epoch: a partition's first sequence in a
  transaction is what the epoch's committed transactions appended there. A transaction that did
  not commit, or whose outcome is unknown (EndTxn unanswered), leaves no transaction open: the next
  ``begin`` fences first (a new epoch, sequences from 0), which completes or aborts it on the
  coordinator, so nothing of a failed copy is read by read_committed consumers twice and no
  sequence of it is reused.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager

from mirrorflow.config.clients import transaction_timeout_ms
from mirrorflow.core.plan import CopyResult, Grant, PartitionPlan, Plan, Writer, transactional_id
from mirrorflow.core.topic_partitions import TP
from mirrorflow.errors import MirrorError, TransientError, WriterFencedError
from mirrorflow.kafka.connection import Connection
from mirrorflow.kafka.transactions import add_partitions, end_transaction, fence

# How long the coordinator lets a DR window's micro-batch stay open before aborting it (at most; a
# batch run's is the target's transaction.timeout.ms). A micro-batch takes well under a second:
# Kafka's producer default, so that a window frozen with one open holds read_committed consumers
# back no longer.
WINDOW_TRANSACTION_TIMEOUT_MS = 60_000
# The share of a transaction's timeout its copy reads in: the rest is for writing what it read,
# checking the target's ends and committing.
READING_SHARE = 2 / 3


def _holds_anything() -> None:
    """A batch run's copy job: it checked its run's lock when it started (``app.copy_guard``)."""


class FlowTransactions:
    """One attempt's writer of the flow's transactional id on the target of ``props``; ``holds_flow``
    raises when the attempt no longer holds the flow (its lock taken over), before any fence."""

    def __init__(
        self,
        props: Mapping[str, str],
        transactional_id: str,
        timeout_ms: int,
        holds_flow: Callable[[], None] = _holds_anything,
    ) -> None:
        self.transactional_id = transactional_id
        self.timeout_ms = timeout_ms
        self._holds_flow = holds_flow
        self._target = Connection(props, "target", ())
        self._began = 0.0
        self._writer: Writer | None = None
        self._sequences: dict[TP, int] = {}
        self._open: list[TP] | None = None
        # The fence a newer attempt made: this attempt writes no more.
        self._fenced_out: WriterFencedError | None = None

    @classmethod
    @contextmanager
    def fenced(
        cls,
        props: Mapping[str, str],
        transactional_id: str,
        timeout_ms: int,
        holds_flow: Callable[[], None] = _holds_anything,
    ) -> Iterator[FlowTransactions]:
        """The attempt's writer, fenced; an open transaction is aborted when the block fails."""
        transactions = cls(props, transactional_id, timeout_ms, holds_flow)
        try:
            with transactions.aborting():
                transactions.fence()
                yield transactions
        finally:
            transactions.close()

    def fence(self) -> None:
        """A new epoch of the writer, while the attempt holds the flow: every earlier one is cut off,
        its open transaction aborted (or completed, if its commit was decided)."""
        if self._fenced_out is not None:
            raise self._fenced_out
        self._holds_flow()
        self._writer, self._open = None, None
        self._sequences.clear()
        self._writer = fence(self._target, self.transactional_id, self.timeout_ms)

    def begin(self, plans: Iterable[PartitionPlan]) -> Grant:
        """A transaction over the remote partitions of ``plans``, and what its tasks write as (the
        writer fenced first after a transaction that did not commit)."""
        assert self._open is None, "one transaction at a time: commit or abort the last one first"
        if self._writer is None or self._fenced_out is not None:
            self.fence()
        assert self._writer is not None
        tps = sorted({(p.remote_topic, p.partition) for p in plans})
        # Before AddPartitionsToTxn: the coordinator's clock starts with its answer, so this one never
        # says the transaction is younger than the coordinator counts it.
        self._began = time.monotonic()
        add_partitions(self._target, self.transactional_id, self._writer, tps)
        self._open = tps
        now = time.time()
        return Grant(
            self.transactional_id,
            self._writer,
            tuple((t, p, self._sequences[(t, p)]) for t, p in tps if (t, p) in self._sequences),
            deadline=now + self.timeout_ms / 1000 * READING_SHARE,
            expires=now + self.timeout_ms / 1000,
        )

    def commit(self, result: CopyResult, plans: Iterable[PartitionPlan]) -> None:
        """Commit the open transaction, whose tasks wrote ``result`` for ``plans``. Whatever happens,
        no transaction is open after it; one that did not commit (or whose answer was lost) is settled
        by the next ``begin``'s fence."""
        assert self._writer is not None and self._open is not None, "no transaction is open"
        try:
            end_transaction(self._target, self.transactional_id, self._writer, commit=True)
        except WriterFencedError as fenced:
            self._writer, self._open = None, None
            judged = self._judged(fenced)
            if judged is fenced:
                raise
            raise judged from fenced
        except MirrorError:
            self._writer, self._open = None, None
            raise
        self._open = None
        remote = {(p.topic, p.partition): (p.remote_topic, p.partition) for p in plans}
        for r in result.partitions:
            tp = remote[(r.topic, r.partition)]
            self._sequences[tp] = self._sequences.get(tp, 0) + r.appended

    @contextmanager
    def aborting(self) -> Iterator[None]:
        """A block whose failure ends the open transaction (``aborted``) and raises the error the copy
        fails with."""
        try:
            yield
        except BaseException as failed:
            judged = self.aborted(failed)
            if judged is failed:
                raise
            raise judged from failed

    def aborted(self, failed: BaseException) -> BaseException:
        """End the open transaction of a copy that failed with ``failed``, and return the error the
        copy fails with. The transaction is aborted with EndTxn under this attempt's own epoch (never
        a fence: a newer epoch's transaction stays untouched), best effort; the next ``begin`` fences
        anew. A fence, met by the copy or by the abort, is judged (``_judged``): it ends the attempt
        (a newer one took over, so whatever else this one met is moot and must not be reported as the
        run's outcome), or, met after the transaction's timeout, is a passing fault."""
        writer, opened = self._writer, self._open
        self._writer, self._open = None, None
        if isinstance(failed, WriterFencedError):
            return self._judged(failed)  # whoever fenced the writer aborted its transaction
        if opened is not None and writer is not None:
            try:
                end_transaction(self._target, self.transactional_id, writer, commit=False)
            except WriterFencedError as fenced:
                if self._judged(fenced) is fenced:
                    return fenced
            except MirrorError:
                pass  # the next fence, or the coordinator's timeout, aborts it
        return failed

    def _judged(self, fenced: WriterFencedError) -> MirrorError:
        """``fenced`` as this attempt takes it: met by a transaction that outlived its timeout, it is its
        coordinator's abort (a passing fault: the next ``begin`` fences anew); any other fence is a
        newer attempt's, and ends this one."""
        open_s = time.monotonic() - self._began
        if self._began and open_s * 1000 >= self.timeout_ms:
            timed_out = TransientError(
                f"the copy's transaction of {self.transactional_id} stayed open {open_s:.0f} s, past the "
                f"{self.timeout_ms / 1000:g} s its coordinator allows, and was aborted (a broker slow or "
                "away meanwhile). Nothing of it was committed; the next attempt fences the writer anew and "
                "copies it again. If this repeats, raise the target's producer transaction.timeout.ms (and "
                "its brokers' transaction.max.timeout.ms)"
            )
            timed_out.__cause__ = fenced
            return timed_out
        self._fenced_out = fenced
        return fenced

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
