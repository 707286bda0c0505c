"""Every fault rule, in one place: what a Kafka error code means to the request that met it
(``verdict``), how long and how a passing fault is waited out (``retried``, ``TIMEOUT_S``), and what a
flow does with an error its copy met: only the partition stops, the attempt fails and is retried, or
the run ends for a person to act (``FaultPolicy``).

Where a new rule goes: a Kafka error code gets its verdict in ``_VERDICTS`` (by kafka-python's class
for it, never by number), and the request's module raises the error that verdict names; a new kind of
error (``mirrorflow.errors``) gets its scope in ``FaultPolicy``. A request never loops on its own: it
raises ``TransientError`` for a passing fault inside a step that ``retried`` runs.

Invariants:
- Each Kafka error code has one verdict, whichever request met it: a writer fenced is fenced in
  Produce, AddPartitionsToTxn and EndTxn alike; a code without a rule is passing when Kafka says it
  is retriable, else ``UNEXPECTED``, which a step fails on as transient.
- Every wait is bounded: a step asked again while its fault passes gives up after ``TIMEOUT_S`` (or
  its own bound), raising its last ``TransientError`` with how long it tried.
- A writer fenced is never fenced again by the copy that met the fence: only a copy that still holds
  its flow (its lock, its lease) may start a new epoch (``copy.flow_transaction``, ``app.dr_window``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import TypeVar

from kafka import errors as kafka_errors
from tenacity import Retrying, retry_if_exception_type, stop_after_delay, wait_fixed

from mirrorflow.config.model import FlowConfig
from mirrorflow.errors import (
    MirrorError,
    SchemaIdError,
    SourceDataLostError,
    TransientError,
    WriterFencedError,
)

T = TypeVar("T")

# How long a request waits for its answer, and a step asks again while a fault passes.
TIMEOUT_S = 30.0
# How long a batch may keep failing with passing errors before its copy gives up (the Java producer's
# delivery.timeout.ms default), unless its transaction's time runs out first.
DELIVERY_TIMEOUT_S = 120.0


class Verdict(Enum):
    """What an error code means to the request that met it."""

    # A passing condition (a leader moving, a replica behind, a timeout): ask again, with fresh
    # metadata, until the step's bound.
    PASSING = "passing"
    # The coordinator is loading, moved or not there: find it again and ask again.
    MOVED = "moved"
    # The transaction coordinator is still ending a transaction: ask the same one again.
    BUSY = "busy"
    # Left alone because another partition of the request failed: that one is the answer.
    NOT_ATTEMPTED = "not attempted"
    # The login may not do this: an ``AuthorizationError`` naming the grant.
    REFUSED = "refused"
    # A newer epoch of the writer took over: ``WriterFencedError``; never fenced again by this copy.
    FENCED = "fenced"
    # The broker's state of the writer does not go on where the copy's does (a sequence out of order,
    # a producer forgotten, no transaction to end): the attempt fails as transient, and the next one
    # fences the writer anew and reads back what is there.
    STATE_LOST = "writer state lost"
    # A batch larger than the target takes: split it.
    TOO_LARGE = "too large"
    # A batch the target refuses as it is (its topic, timestamps, format, policy, compression): a
    # resend would meet it again, a ``TargetStateError``.
    BAD_BATCH = "batch refused"
    # The position is no longer in the log: lost data, never a reason to read elsewhere.
    DATA_LOST = "data lost"
    # The transaction timeout asked for is above the brokers' bound: a ``ConfigError``.
    BAD_TIMEOUT = "bad transaction timeout"
    # No rule, and Kafka does not call it retriable: the step fails as transient.
    UNEXPECTED = "unexpected"


_VERDICTS: dict[type[kafka_errors.BrokerResponseError], Verdict] = {
    kafka_errors.OffsetOutOfRangeError: Verdict.DATA_LOST,
    kafka_errors.MessageSizeTooLargeError: Verdict.TOO_LARGE,
    kafka_errors.RecordListTooLargeError: Verdict.TOO_LARGE,
    kafka_errors.CoordinatorLoadInProgressError: Verdict.MOVED,
    kafka_errors.CoordinatorNotAvailableError: Verdict.MOVED,
    kafka_errors.NotCoordinatorError: Verdict.MOVED,
    kafka_errors.ConcurrentTransactionsError: Verdict.BUSY,
    kafka_errors.OperationNotAttemptedError: Verdict.NOT_ATTEMPTED,
    kafka_errors.TopicAuthorizationFailedError: Verdict.REFUSED,
    kafka_errors.ClusterAuthorizationFailedError: Verdict.REFUSED,
    kafka_errors.TransactionalIdAuthorizationFailedError: Verdict.REFUSED,
    kafka_errors.InvalidProducerEpochError: Verdict.FENCED,
    kafka_errors.InvalidProducerIdMappingError: Verdict.FENCED,
    kafka_errors.ProducerFencedError: Verdict.FENCED,
    kafka_errors.OutOfOrderSequenceNumberError: Verdict.STATE_LOST,
    kafka_errors.DuplicateSequenceNumberError: Verdict.STATE_LOST,
    kafka_errors.UnknownProducerIdError: Verdict.STATE_LOST,
    kafka_errors.InvalidTxnStateError: Verdict.STATE_LOST,
    kafka_errors.InvalidTopicError: Verdict.BAD_BATCH,
    kafka_errors.InvalidTimestampError: Verdict.BAD_BATCH,
    kafka_errors.UnsupportedForMessageFormatError: Verdict.BAD_BATCH,
    kafka_errors.PolicyViolationError: Verdict.BAD_BATCH,
    kafka_errors.UnsupportedCompressionTypeError: Verdict.BAD_BATCH,
    kafka_errors.InvalidRecordError: Verdict.BAD_BATCH,
    kafka_errors.InvalidTransactionTimeoutError: Verdict.BAD_TIMEOUT,
}


def verdict(code: int) -> Verdict:
    """What error ``code`` means to the request that met it (0, no error, has none)."""
    kind = kafka_errors.for_code(code)
    found = _VERDICTS.get(kind)
    if found is not None:
        return found
    return Verdict.PASSING if kind.retriable else Verdict.UNEXPECTED


def error_name(code: int) -> str:
    """The name kafka-python gives an error code (``NOT_LEADER_OR_FOLLOWER`` is
    ``NotLeaderForPartitionError``)."""
    return str(kafka_errors.for_code(code).__name__)


def error_description(code: int) -> str:
    return str(kafka_errors.for_code(code).description)


class Again(TransientError):
    """A passing fault met inside a step that ``retried`` runs: the step is asked again. It never
    leaves ``retried``, which raises a ``TransientError`` once it gives up."""


def retried(step: Callable[[], T], what: str, *, timeout_s: float | None = None, backoff_s: float = 0.1) -> T:
    """``step()``'s value, asked again ``backoff_s`` after each ``Again`` it raises until ``timeout_s``
    (``TIMEOUT_S`` by default) have passed; then a ``TransientError`` saying that ``what`` failed for
    that long, and how it failed last. Any other error (a plain ``TransientError`` too: the step fails
    now, its caller's retry comes later) ends it at once."""
    if timeout_s is None:
        timeout_s = TIMEOUT_S
    retrying = Retrying(
        stop=stop_after_delay(timeout_s),
        wait=wait_fixed(backoff_s),
        retry=retry_if_exception_type(Again),
        reraise=True,
    )
    try:
        return retrying(step)
    except Again as last:
        raise TransientError(f"{what} failed for {timeout_s:.0f} s: {last}") from last


class WindowAction(Enum):
    """What a DR window does with a micro-batch's error."""

    # Plan again after a pause: the fault passes (a broker or the offsets database away).
    WAIT = "wait"
    # Plan again at once: the next plan records the lost source records as a gap.
    GO_ON = "go on"
    # End the window with the error, for a person (or the next window) to act on.
    END = "end"


@dataclass(frozen=True)
class FaultPolicy:
    """A flow's fault policy: whether a partition's own error stops only that partition
    (``mirrorflow.on.partition.error = isolate``), and whether lost source records are skipped and
    recorded (``mirrorflow.on.source.data.loss = skip``). Scopes, from the smallest:
    - a partition's own error, which a retry would meet again (a record its chain refuses, a batch or
      write the target refuses, a read refused, someone else's records on its remote partition): under
      isolate, only that partition stops, its error committed with the others' progress;
    - a passing fault, or lost source records: the copy attempt fails, its transaction aborted, and a
      retry (Airflow's, or the window's next micro-batch) plans again from what was committed;
    - a fence: the copy that met it ends and never fences back; the flow is the newer copy's;
    - anything else ends the run (or window) with its message."""

    isolate: bool = False
    skip_lost: bool = False

    @classmethod
    def of(cls, flow: FlowConfig) -> FaultPolicy:
        settings = flow.settings
        return cls(settings.on_partition_error == "isolate", settings.on_source_data_loss == "skip")

    def partition_alone(self, error: MirrorError) -> bool:
        """Whether ``error``, met copying one partition, stops only that partition."""
        return self.isolate and not isinstance(error, _NEVER_A_PARTITIONS_OWN)

    def in_window(self, error: MirrorError) -> WindowAction:
        """What a DR window does with the error of a micro-batch."""
        if isinstance(error, TransientError):
            return WindowAction.WAIT
        if isinstance(error, SourceDataLostError) and self.skip_lost:
            return WindowAction.GO_ON
        return WindowAction.END

    @staticmethod
    def cured_by_schema_sync(kind: str) -> bool:
        """Whether a partition refused for an error of class ``kind`` may go on once the flow's schemas
        were synced again and map more ids (a schema registered at the source after the last sync)."""
        return kind == SchemaIdError.__name__


# Errors that are never one partition's own: they fail the attempt (passing faults, lost data) or end
# the copy (a fence), whatever the policy.
_NEVER_A_PARTITIONS_OWN = (TransientError, SourceDataLostError, WriterFencedError)
