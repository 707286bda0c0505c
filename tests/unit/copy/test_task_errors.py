"""Errors that cross a process boundary (a Spark task, the copy job) keep their class and message."""

from __future__ import annotations

import pytest

from mirrorflow import errors
from mirrorflow.copy.spark_copy import task_error
from mirrorflow.errors import (
    AuthorizationError,
    ConfigError,
    DrainTimeoutError,
    MirrorError,
    ParamError,
    TargetStateError,
    TransientError,
    VerificationError,
    error_class,
)

# As Spark quotes a failed Python task: the worker's traceback inside the job's failure.
PYTHON_TASK_FAILURE = """Job aborted due to stage failure: Task 0 in stage 3.0 failed 1 times
org.apache.spark.api.python.PythonException: Traceback (most recent call last):
  File "/work/include/mirrorflow/record_writer.py", line 171, in check_written
    raise TargetStateError(
mirrorflow.errors.TargetStateError: remote partition primary.orders-0 offset 4 holds another record
\tat org.apache.spark.api.python.BasePythonRunner$ReaderIterator.handlePythonException"""

READER_REFUSED = """Job aborted due to stage failure: Task 1 in stage 0.0 failed 1 times
org.apache.kafka.common.errors.TopicAuthorizationException: Not authorized to access topics: [orders]
\tat org.apache.kafka.clients.consumer.internals.FetchCollector.handleInitializeErrors"""


def test_error_class_finds_mirror_errors_only() -> None:
    assert error_class("TargetStateError") is TargetStateError
    assert error_class("ConfigError") is ConfigError
    assert error_class("error_class") is None
    assert error_class("Exception") is None
    assert error_class("NoSuchError") is None
    assert error_class("DrainTimeoutError") is DrainTimeoutError
    assert error_class("VerificationError") is VerificationError
    assert error_class("ParamError") is ParamError


KINDS = sorted(
    (c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, MirrorError)),
    key=lambda c: c.__name__,
)


@pytest.mark.parametrize("kind", KINDS, ids=lambda c: c.__name__)
def test_every_kind_is_found_by_name_and_rebuilt_from_its_message(kind: type[MirrorError]) -> None:
    assert kind.__module__ == "mirrorflow.errors"  # as a task's traceback names it
    assert error_class(kind.__name__) is kind
    rebuilt = kind.from_message("the message")
    assert type(rebuilt) is kind
    assert str(rebuilt) == "the message"


def test_a_param_error_is_rebuilt_with_the_message_it_was_raised_with() -> None:
    raised = ParamError("topics", "'x' is not a list of topic names")

    rebuilt = task_error(f"mirrorflow.errors.ParamError: {raised}")

    assert type(rebuilt) is ParamError
    assert str(rebuilt) == str(raised)
    assert str(raised) == (
        "trigger param topics: 'x' is not a list of topic names. Trigger the run again with a valid value."
    )


def test_a_task_error_keeps_its_class_and_message() -> None:
    error = task_error(PYTHON_TASK_FAILURE)

    assert type(error) is TargetStateError
    assert str(error) == "remote partition primary.orders-0 offset 4 holds another record"


def test_a_refused_reader_is_an_authorization_error() -> None:
    error = task_error(READER_REFUSED)

    assert type(error) is AuthorizationError
    assert str(error) == (
        "the source cluster refused the mirror's login: Not authorized to access topics: [orders] "
        "(TopicAuthorizationException). Grant it READ on the mirrored topics (README: Secured clusters); "
        "nothing was committed."
    )


def test_anything_else_is_left_as_it_is() -> None:
    assert task_error("Job aborted: java.lang.OutOfMemoryError: Java heap space") is None
    assert isinstance(task_error("mirrorflow.errors.TransientError: broker down"), TransientError)
