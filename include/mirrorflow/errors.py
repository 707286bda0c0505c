"""Classified errors.

``TransientError`` subclasses are worth a retry (Airflow retries the task). Everything else under
``MirrorError`` is a problem a person must fix: retrying cannot help, and the message says what to do.
"""

from __future__ import annotations


class MirrorError(Exception):
    """Base of every error this product raises on purpose."""


class ConfigError(MirrorError):
    """The configuration is invalid. ``key`` names the offending property when there is one."""

    def __init__(self, message: str, key: str | None = None) -> None:
        self.key = key
        super().__init__(f"{key}: {message}" if key else message)


class TransientError(MirrorError):
    """A passing condition (broker unavailable, timeout): a retry of the same step is safe."""


class FlowLockedError(MirrorError):
    """Another run of the same flow holds the flow's lock."""


class TargetStateError(MirrorError):
    """The target cluster is not in the state the plan expects (truncated, deleted, foreign writes)."""


class PlanError(MirrorError):
    """A plan file is missing, malformed, or belongs to another flow or run."""


class CommitConflictError(MirrorError):
    """Committed progress moved since the plan was made: committing again would double-count."""


class SourceDataLostError(MirrorError):
    """Source records were deleted (retention, delete-records) before they were mirrored."""


class SourceTopicRecreatedError(TargetStateError):
    """A source topic was deleted and recreated under the same name: the flow's progress, batch log
    and remote topic belong to the old topic, so nothing of the new one may be copied on top."""


class AuthorizationError(MirrorError):
    """A cluster refused the mirror's login an operation it needs (see the README's grants)."""


class WireFormatError(MirrorError):
    """Bytes in an MM2 internal topic that are not the record they should be."""


class StaleMirrorError(MirrorError):
    """The mirror is further behind than the flow's alert thresholds allow (lag or heartbeat age)."""


class CorruptStateError(MirrorError):
    """A row of the offsets database that mirrorflow never writes (edited by hand, or a damaged
    database): nothing may be planned, committed or translated from it until a person repairs it."""


def error_class(name: str) -> type[MirrorError] | None:
    """The error class of this module called ``name``, if there is one (to raise again an error
    that crossed a process boundary as its class name and message)."""
    found = globals().get(name)
    return found if isinstance(found, type) and issubclass(found, MirrorError) else None
