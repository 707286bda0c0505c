"""A planned partition's copy as it runs: what it read, queued, sent and had acknowledged, and the
result it makes. Invariant: the records counted (``PartitionCopy.count``) are the planned records
the target gets, in source order, each with the target offset it lands at; the result's layout
(``core.translation.Layout``: sync points where source offsets jump, target gaps where the target's
do) says where each one went, so the batch log translates every offset exactly.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from mirrorflow.core.metrics import Stats, Timestamps
from mirrorflow.core.plan import PartitionFailure, PartitionPlan, PartitionResult
from mirrorflow.core.topic_partitions import TP
from mirrorflow.core.translation import Layout, Run
from mirrorflow.errors import MirrorError
from mirrorflow.kafka.faults import FaultPolicy


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
    # Records an earlier attempt committed on the target, found there and skipped.
    already_written: int
    position: int
    # Records an earlier run of this very task appended in the same open transaction (Spark ran the
    # task again), found there and counted where they are: this attempt's batches go on after them.
    in_transaction: int = 0
    # The first sequence of this attempt's batches for the partition (``Grant.first_sequence``).
    first_sequence: int = 0
    records: int = 0
    bytes: int = 0
    # The records counted, as runs consecutive on both clusters.
    runs: list[Run] = field(default_factory=list)
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

    # Where this attempt's first batch lands: the partition's end when the copy started.
    first_new: int = -1

    def __post_init__(self) -> None:
        if self.first_new < 0:
            self.first_new = self.plan.target_start

    @property
    def tp(self) -> TP:
        return (self.plan.topic, self.plan.partition)

    @property
    def next_target_offset(self) -> int:
        """Where the next batch lands."""
        return self.first_new + self.acked

    @property
    def appended(self) -> int:
        """The records the writer appended to the remote partition in this transaction."""
        return self.in_transaction + self.acked

    @property
    def next_sequence(self) -> int:
        """The next batch's base sequence (the broker's arithmetic wraps at 2^31)."""
        return (self.first_sequence + self.appended) % (1 << 31)

    @property
    def landing(self) -> int:
        """Where the next record counted lands, by default: after the new records counted so far
        (the records found already written, committed or in this transaction, are counted where
        they are); once the copy ends, where the remote partition must end."""
        return self.first_new + self.records - self.already_written - self.in_transaction

    @property
    def remote(self) -> TP:
        return (self.plan.remote_topic, self.plan.partition)

    def count(self, offsets: Sequence[int] | range, targets: Sequence[int] | range | None = None) -> None:
        """Account for planned records at these source offsets (in order), landing at ``targets``
        (by default one after another from where the last one landed)."""
        if not len(offsets):
            return
        if targets is None:
            targets = range(self.landing, self.landing + len(offsets))
        if isinstance(offsets, range) and isinstance(targets, range):
            self._extend(offsets.start, targets.start, len(offsets))
        else:
            start = 0
            for i in range(1, len(offsets) + 1):
                if i == len(offsets) or (offsets[i], targets[i]) != (offsets[i - 1] + 1, targets[i - 1] + 1):
                    self._extend(offsets[start], targets[start], i - start)
                    start = i
        self.records += len(offsets)

    def uncount(self) -> None:
        """Forget the records counted and found already written: a read-back that found them not to
        be the first planned records starts again."""
        self.records, self.already_written, self.position = 0, 0, self.plan.source_start
        self.runs.clear()

    def _extend(self, source: int, target: int, n: int) -> None:
        if self.runs:
            s, t, k = self.runs[-1]
            if (s + k, t + k) == (source, target):
                self.runs[-1] = (s, t, k + n)
                return
        self.runs.append((source, target, n))

    def give_up(self, error: MirrorError, policy: FaultPolicy) -> None:
        """Stop this partition alone on ``error``, if the flow's policy says it is the partition's own
        (``FaultPolicy.partition_alone``); else raise it, failing the task."""
        if not policy.partition_alone(error):
            raise error
        if self.failed is None:
            self.failed = error

    def result(self) -> PartitionResult:
        if self.failed is not None:
            failure = PartitionFailure(type(self.failed).__name__, str(self.failed))
            return PartitionResult(
                self.plan.topic,
                self.plan.partition,
                0,
                0,
                0,
                self.plan.target_start,
                failure=failure,
                appended=self.appended,
            )
        layout = Layout.of(self.plan.source_start, self.plan.target_start, self.runs)
        return PartitionResult(
            topic=self.plan.topic,
            partition=self.plan.partition,
            records=self.records,
            skipped=min(self.already_written, self.records),
            bytes=self.bytes,
            target_start=self.plan.target_start,
            sync_points=layout.sync_points,
            target_gaps=layout.target_gaps,
            record_age=self.record_age,
            replication_latency=self.replication_latency,
            write_ms=max(self.last_acked_ms - self.first_received_ms, 0),
            # Short of the plan only when the reader stopped at the transaction's deadline.
            source_end=self.position if self.position < self.plan.source_end else None,
            appended=self.appended,
        )


def now_ms() -> int:
    return time.time_ns() // 1_000_000
