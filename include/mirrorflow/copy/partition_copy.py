"""A planned partition's copy as it runs: what it read, queued, sent and had acknowledged, and the
result it makes. Invariant: the records counted (``PartitionCopy.count``) are the planned records
the target gets, in source order; each one whose source offset does not follow the previous one's
is an offset-sync point of the result, so the batch log translates every offset exactly.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from mirrorflow.core.metrics import Stats, Timestamps
from mirrorflow.core.plan import PartitionFailure, PartitionPlan, PartitionResult
from mirrorflow.errors import MirrorError
from mirrorflow.kafka.connection import TP


@dataclass
class Piece:
    """Records of one partition ready to produce as one batch; stamped when first sent."""

    data: bytearray
    count: int
    timestamps: Timestamps
    budgeted: int
    stamped: bool = False


@dataclass
class PartitionCopy:
    """Running state of one planned partition's copy."""

    plan: PartitionPlan
    already_written: int
    position: int
    records: int = 0
    bytes: int = 0
    prev_offset: int = -1
    sync_points: list[tuple[int, int]] = field(default_factory=list)
    record_age: Stats = field(default_factory=Stats)
    replication_latency: Stats = field(default_factory=Stats)
    first_received_ms: int = 0
    last_acked_ms: int = 0
    # Records this attempt wrote that the target acknowledged.
    acked: int = 0
    pending: deque[Piece] = field(default_factory=deque)
    in_flight: bool = False
    failing_since: float = 0.0
    # Set (isolate) when the partition met an error a retry would meet again: it copies no more.
    failed: MirrorError | None = None

    @property
    def tp(self) -> TP:
        return (self.plan.topic, self.plan.partition)

    @property
    def next_target_offset(self) -> int:
        """Where the next batch lands: its records' sequences count from there."""
        return self.plan.target_start + self.already_written + self.acked

    @property
    def remote(self) -> TP:
        return (self.plan.remote_topic, self.plan.partition)

    def count(self, offsets: Sequence[int] | range) -> int:
        """Account for planned records at these source offsets (in order); returns the target offset
        of the first. A record whose offset does not follow the previous one is an offset-sync point."""
        target = self.plan.target_start + self.records
        if isinstance(offsets, range):
            if offsets.start != self.prev_offset + 1:
                self.sync_points.append((offsets.start, target))
        else:
            prev = self.prev_offset
            for i, offset in enumerate(offsets):
                if offset != prev + 1:
                    self.sync_points.append((offset, target + i))
                prev = offset
        if len(offsets):
            self.prev_offset = offsets[-1]
        self.records += len(offsets)
        return target

    def result(self) -> PartitionResult:
        if self.failed is not None:
            failure = PartitionFailure(type(self.failed).__name__, str(self.failed))
            return PartitionResult(
                self.plan.topic, self.plan.partition, 0, 0, 0, self.plan.target_start, failure=failure
            )
        return PartitionResult(
            topic=self.plan.topic,
            partition=self.plan.partition,
            records=self.records,
            skipped=min(self.already_written, self.records),
            bytes=self.bytes,
            target_start=self.plan.target_start,
            sync_points=tuple(self.sync_points),
            record_age=self.record_age,
            replication_latency=self.replication_latency,
            write_ms=max(self.last_acked_ms - self.first_received_ms, 0),
        )


def now_ms() -> int:
    return time.time_ns() // 1_000_000
