"""The fault rules: one verdict per Kafka error code, whichever request met it; the one retry primitive;
and the flow's fault policy (partition, attempt or run)."""

from __future__ import annotations

import pytest
from kafka import errors as kafka_errors

from mirrorflow.errors import (
    AuthorizationError,
    CommitConflictError,
    ConfigError,
    MirrorError,
    SchemaIdError,
    SourceDataLostError,
    TargetStateError,
    TransformError,
    TransientError,
    WriterFencedError,
)
from mirrorflow.kafka import faults
from mirrorflow.kafka.faults import Again, FaultPolicy, Verdict, WindowAction, retried, verdict


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (kafka_errors.NotLeaderForPartitionError, Verdict.PASSING),
        (kafka_errors.RequestTimedOutError, Verdict.PASSING),
        (kafka_errors.NotEnoughReplicasError, Verdict.PASSING),
        (kafka_errors.CoordinatorLoadInProgressError, Verdict.MOVED),
        (kafka_errors.NotCoordinatorError, Verdict.MOVED),
        (kafka_errors.ConcurrentTransactionsError, Verdict.BUSY),
        (kafka_errors.OperationNotAttemptedError, Verdict.NOT_ATTEMPTED),
        (kafka_errors.TopicAuthorizationFailedError, Verdict.REFUSED),
        (kafka_errors.TransactionalIdAuthorizationFailedError, Verdict.REFUSED),
        # A fence is a fence in Produce, AddPartitionsToTxn and EndTxn alike.
        (kafka_errors.InvalidProducerEpochError, Verdict.FENCED),
        (kafka_errors.InvalidProducerIdMappingError, Verdict.FENCED),
        (kafka_errors.ProducerFencedError, Verdict.FENCED),
        (kafka_errors.OutOfOrderSequenceNumberError, Verdict.STATE_LOST),
        (kafka_errors.UnknownProducerIdError, Verdict.STATE_LOST),
        (kafka_errors.InvalidTxnStateError, Verdict.STATE_LOST),
        (kafka_errors.MessageSizeTooLargeError, Verdict.TOO_LARGE),
        (kafka_errors.InvalidTimestampError, Verdict.BAD_BATCH),
        (kafka_errors.PolicyViolationError, Verdict.BAD_BATCH),
        (kafka_errors.OffsetOutOfRangeError, Verdict.DATA_LOST),
        (kafka_errors.InvalidTransactionTimeoutError, Verdict.BAD_TIMEOUT),
        (kafka_errors.UnknownError, Verdict.UNEXPECTED),
        (kafka_errors.InvalidRequestError, Verdict.UNEXPECTED),
    ],
)
def test_each_code_has_one_verdict(error: type[kafka_errors.BrokerResponseError], expected: Verdict) -> None:
    assert verdict(error.errno) is expected


def test_retried_asks_again_while_the_step_says_again_then_names_what_failed_and_how() -> None:
    calls: list[int] = []

    def step() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise Again("not yet")
        return "done"

    assert retried(step, "reading", backoff_s=0) == "done"
    assert len(calls) == 3

    def never() -> str:
        raise Again("still LOADING")

    with pytest.raises(TransientError, match=r"^reading failed for 0 s: still LOADING$") as gave_up:
        retried(never, "reading", timeout_s=0.01, backoff_s=0)
    assert type(gave_up.value) is TransientError  # ``Again`` never leaves it


def test_retried_ends_at_once_on_any_other_error_also_a_transient_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(faults, "TIMEOUT_S", 60.0)
    for error in (TransientError("the step failed; its caller retries"), TargetStateError("refused")):
        calls: list[int] = []

        def step(error: Exception = error, calls: list[int] = calls) -> None:
            calls.append(1)
            raise error

        with pytest.raises(type(error)):
            retried(step, "reading", backoff_s=0)
        assert len(calls) == 1


@pytest.mark.parametrize(
    "error",
    [
        TransformError("refused record"),
        SchemaIdError("unmapped id"),
        AuthorizationError("READ refused"),
        TargetStateError("foreign records"),
    ],
)
def test_a_partitions_own_error_stops_only_it_under_isolate(error: MirrorError) -> None:
    assert FaultPolicy(isolate=True).partition_alone(error)
    assert not FaultPolicy().partition_alone(error)


@pytest.mark.parametrize(
    "error", [TransientError("away"), SourceDataLostError("lost"), WriterFencedError("fenced")]
)
def test_passing_faults_lost_data_and_fences_are_never_a_partitions_own(error: MirrorError) -> None:
    assert not FaultPolicy(isolate=True).partition_alone(error)


def test_a_window_waits_out_passing_faults_goes_on_past_skipped_data_and_ends_on_the_rest() -> None:
    fail, skip = FaultPolicy(), FaultPolicy(skip_lost=True)
    assert fail.in_window(TransientError("away")) is WindowAction.WAIT
    assert fail.in_window(SourceDataLostError("lost")) is WindowAction.END
    assert skip.in_window(SourceDataLostError("lost")) is WindowAction.GO_ON
    for ends in (WriterFencedError("fenced"), CommitConflictError("lock"), ConfigError("bad")):
        assert skip.in_window(ends) is WindowAction.END


def test_only_an_unmapped_schema_id_is_cured_by_syncing_the_schemas_again() -> None:
    assert FaultPolicy.cured_by_schema_sync(SchemaIdError.__name__)
    assert not FaultPolicy.cured_by_schema_sync(TransformError.__name__)
