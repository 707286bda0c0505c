"""Classified errors: every kind of error this product raises on purpose is a class of this module.

``TransientError`` subclasses are worth a retry (Airflow retries the task). Everything else under
``MirrorError`` is a problem a person must fix: retrying cannot help, and the message says what to do.

An error that crosses a process boundary (a Spark task, the copy job) travels as its class name and
message and is raised again from them (``error_class``, ``MirrorError.from_message``): so every kind
is defined here, and each can be rebuilt from its message alone.
"""

from __future__ import annotations

from typing import Self


class MirrorError(Exception):
    """Base of every error this product raises on purpose."""

    @classmethod
    def from_message(cls, message: str) -> Self:
        """The error again from its message (its ``str``), as it crossed a process boundary."""
        return cls(message)


class ConfigError(MirrorError):
    """The configuration is invalid. ``key`` names the offending property when there is one."""

    def __init__(self, message: str, key: str | None = None) -> None:
        self.key = key
        super().__init__(f"{key}: {message}" if key else message)


class ParamError(ConfigError):
    """A trigger param is invalid; raised before the run writes anything."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(f"{message}. Trigger the run again with a valid value.", key=f"trigger param {name}")

    @classmethod
    def from_message(cls, message: str) -> Self:
        """The error again from its whole message, which already names the param."""
        error = cls.__new__(cls)
        ConfigError.__init__(error, message)
        return error


class TransientError(MirrorError):
    """A passing condition (broker unavailable, timeout): a retry of the same step is safe."""


class FlowLockedError(MirrorError):
    """Another run of the same flow holds the flow's lock."""


class TurnTimeoutError(MirrorError):
    """A run waited as long as its limit allows for its turn (earlier runs of its flow to finish, the
    flow's lock to be free) and gave up before writing anything."""


class TargetStateError(MirrorError):
    """The target cluster is not in the state the plan expects (truncated, deleted, foreign writes)."""


class WriterFencedError(TargetStateError):
    """A newer copy of the flow fenced this one's writer (a newer epoch of its transactional id): the
    coordinator aborted what this copy's transaction wrote, and refuses its requests from then on."""


class PlanError(MirrorError):
    """A plan file is missing, malformed, or belongs to another flow or run."""


class CommitConflictError(MirrorError):
    """Committed progress moved since the plan was made: committing again would double-count."""


class SourceDataLostError(MirrorError):
    """Source records were deleted (retention, delete-records) before they were mirrored."""


class SourceTopicRecreatedError(TargetStateError):
    """A source topic was deleted and recreated under the same name: the flow's progress, batch log
    and remote topic belong to the old topic, so nothing of the new one may be copied on top."""


class RecordRefusedError(MirrorError):
    """The flow's transform chain refuses a source record (named in the message): a retry would meet
    it again, so under ``isolate`` only its partition stops."""


class TransformError(RecordRefusedError):
    """A flow's transform raised, or broke its contract, on a record (named in the message)."""


class SchemaIdError(RecordRefusedError):
    """A mirrored key or value carries a schema id (named with its partition and offset) that the
    flow's schema sync did not map, on a side declared framed, or that the source registry holds, on
    a side declared neither framed nor plain: copied as it is, it would mean another schema, or none,
    on the target. The message names the subject holding it and the one thing to do."""


class PartitionsFailedError(MirrorError):
    """A run committed every partition but those that failed on their own errors (named)."""


class AuthorizationError(MirrorError):
    """A cluster refused the mirror's login an operation it needs (see the README's grants)."""


class WireFormatError(MirrorError):
    """Bytes in an MM2 internal topic that are not the record they should be."""


class StaleMirrorError(MirrorError):
    """The mirror is further behind than the flow's alert thresholds allow (lag or heartbeat age)."""


class CorruptStateError(MirrorError):
    """A row of the offsets database that mirrorflow never writes (edited by hand, or a damaged
    database): nothing may be planned, committed or translated from it until a person repairs it."""


class DrainTimeoutError(MirrorError):
    """The drain did not reach zero lag in time: producers to the source are probably still writing."""


class VerificationError(MirrorError):
    """The verify step found partitions whose source and target records differ."""


def error_class(name: str) -> type[MirrorError] | None:
    """The error class of this module called ``name``, if there is one (to raise again an error
    that crossed a process boundary as its class name and message: ``from_message``)."""
    found = globals().get(name)
    return found if isinstance(found, type) and issubclass(found, MirrorError) else None
