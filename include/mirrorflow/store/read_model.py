"""The values the store's reads return besides core's, for its command line and the status page
(``mirrorflow.app.status``): frozen, plain Python, times in UTC; no database row leaves the store.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from mirrorflow.core.progress import GroupPosition

__all__ = ["EmittedCheckpoint", "PartitionErrorRecord", "PartitionLag", "ProgressRecord", "RunTotals"]


@dataclass(frozen=True)
class ProgressRecord:
    """A partition's progress row as stored, with the run that last wrote it and when; unlike
    ``OffsetsStore.progress`` not checked (``show`` prints a damaged row as it is)."""

    topic: str
    partition: int
    next_source_offset: int
    next_target_offset: int
    run_id: str
    updated_at: datetime


@dataclass(frozen=True)
class EmittedCheckpoint:
    """The last checkpoint emitted for a consumer group on one source partition, and when."""

    position: GroupPosition
    emitted_at: datetime


@dataclass(frozen=True)
class PartitionLag:
    """A partition's lag as measured by the run of its newest metrics row."""

    lag: int
    run_id: str


@dataclass(frozen=True)
class RunTotals:
    """What one run committed, summed over its partition metrics rows: records, bytes and skipped
    records in all; ``write_ms``: its longest partition write; ``lag``: offsets left after it on the
    partitions it measured; ``committed_at``: when it committed."""

    run_id: str
    records: int
    bytes: int
    skipped: int
    write_ms: int
    lag: int
    committed_at: datetime


@dataclass(frozen=True)
class PartitionErrorRecord:
    """A partition the newest run of its flow left uncommitted on its own error, and when."""

    topic: str
    partition: int
    run_id: str
    error: str
    message: str
    failed_at: datetime
