"""Exact offset translation: where each mirrored source offset landed on the target.

The batch log (``core.progress.Batch``) records every committed copy of a partition as a source range,
a target range and the sync points where source offsets jump (compaction, transaction markers,
aborted records). Between sync points the mapping is arithmetic, so the log maps every mirrored
record exactly. ``OffsetTranslator`` answers "where does a consumer at source offset U resume on the
target" from it; ``OffsetSync`` is MM2's record of one mapping point, for its offset-syncs topic.

Invariants of ``translate``: it never points past a record that is not yet mirrored, and it points at
the target copy of the first record at or after U, so a consumer that fails over re-reads nothing
and skips nothing that was mirrored. ``reverse`` goes the other way for a failback: a consumer at
target offset D resumes on the source at the source offset of the copy at D, the first record it has
not consumed; at the end of the log, where the mirror's source progress ends. It never answers for a
target offset the log does not cover (before its start, or past its end: records of a copy not
committed yet), so a consumer failing back skips nothing it has not read.

Source gaps (records deleted from the source before they were mirrored, skipped) tile the log with
the batches: a position inside a gap maps to where the first record after the gap lands (the gap's
``target_end``), so the consumer skips only what was lost; a target offset inside a gap (a copy of a
record the source no longer holds) maps back to the first source offset after it.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import replace

from mirrorflow.core.plan import SourceGap
from mirrorflow.core.progress import Batch
from mirrorflow.errors import PlanError
from mirrorflow.mm2.records import OffsetSync


def runs(batch: Batch) -> list[tuple[int, int]]:
    """(source offset, target offset) of the first record of each run of consecutive source offsets
    in the batch; a batch without records has none."""
    if batch.target_end == batch.target_start:
        return []
    points = list(batch.sync_points)
    if not points or points[0][1] != batch.target_start:
        points.insert(0, (batch.source_start, batch.target_start))
    return points


def coalesce(batches: Sequence[Batch]) -> list[Batch]:
    """Contiguous batches of one partition (each starting where the one before ended, on both
    sides), in order, merged into as few as possible: what a DR window's many micro-batches
    become in the batch log. The merged log translates every source offset as the separate one
    did (its sync points are the runs of the parts, a run that goes on across a junction counted
    once)."""
    merged: list[Batch] = []
    for batch in batches:
        last = merged[-1] if merged else None
        if last is None or (last.source_end, last.target_end) != (batch.source_start, batch.target_start):
            merged.append(batch)
            continue
        points = runs(last)
        for point in runs(batch):
            if points:
                src, tgt = points[-1]
                if point == (src + point[1] - tgt, point[1]):
                    continue  # the run before the junction goes on in the next batch
            points.append(point)
        if points and points[0] == (last.source_start, last.target_start):
            points = points[1:]  # the first record at the start is no sync point
        merged[-1] = replace(
            last,
            source_end=batch.source_end,
            target_end=batch.target_end,
            records=last.records + batch.records,
            bytes=last.bytes + batch.bytes,
            sync_points=tuple(points),
        )
    return merged


def trimmed(batch: Batch, log_start: int) -> Batch | None:
    """What of ``batch`` a consumer can still need once the source holds nothing before
    ``log_start``: the batch from ``log_start`` on (its sync points below gone, the first record at
    or after it becoming one where its offset is not ``log_start``), ``batch`` itself when it starts
    there or later, ``None`` when it ends at or before it. Translation of any offset from
    ``log_start`` on reads the same from the trimmed batch. Its bytes shrink in proportion to its
    records (the log keeps no size per record)."""
    if batch.source_end <= log_start:
        return None
    if batch.source_start >= log_start:
        return batch
    points = runs(batch)
    ends = [t for _, t in points[1:]] + [batch.target_end]
    kept = [
        (max(src, log_start), tgt + max(0, log_start - src))
        for (src, tgt), end in zip(points, ends, strict=True)
        if src + (end - tgt) > log_start
    ]
    if not kept:
        # Only offsets without records (markers, compacted or aborted ones) at or after log_start.
        return replace(
            batch, source_start=log_start, target_start=batch.target_end, records=0, bytes=0, sync_points=()
        )
    first_source, first_target = kept[0]
    records = batch.target_end - first_target
    return replace(
        batch,
        source_start=log_start,
        target_start=first_target,
        records=records,
        bytes=batch.bytes * records // batch.records,
        sync_points=tuple(kept if first_source != log_start else kept[1:]),
    )


def offset_syncs(batch: Batch) -> list[OffsetSync]:
    """MM2 offset syncs for a batch: one per run, so MM2's own rule (newest sync at or below U, then
    +1) never skips a record either."""
    return [OffsetSync(batch.topic, batch.partition, s, t) for s, t in runs(batch)]


class OffsetTranslator:
    """Exact source -> target offset translation for one partition, from its batch log and gaps."""

    def __init__(self, batches: Iterable[Batch], gaps: Iterable[SourceGap] = ()) -> None:
        self._segments: list[Batch | SourceGap] = sorted([*batches, *gaps], key=lambda b: b.source_start)
        for before, after in zip(self._segments, self._segments[1:], strict=False):
            if (before.source_end, before.target_end) != (after.source_start, after.target_start):
                raise PlanError(
                    f"batch log of {after.topic}-{after.partition} is not contiguous at source offset "
                    f"{before.source_end}: inspect it with `python -m mirrorflow.store show`"
                )
        self._starts = [b.source_start for b in self._segments]
        self._target_starts = [b.target_start for b in self._segments]
        self._runs = [runs(b) if isinstance(b, Batch) else [] for b in self._segments]
        self._run_starts = [[s for s, _ in r] for r in self._runs]
        self._run_target_starts = [[t for _, t in r] for r in self._runs]

    def translate(self, upstream: int) -> int | None:
        """The target offset a consumer at source offset ``upstream`` resumes at; ``None`` when the
        offset precedes everything mirrored (MM2 emits no checkpoint then either)."""
        if not self._segments or upstream < self._segments[0].source_start:
            return None
        if upstream >= self._segments[-1].source_end:
            # Not mirrored yet: the records from here on will land at the end of the remote partition.
            return self._segments[-1].target_end
        i = bisect.bisect_right(self._starts, upstream) - 1
        segment = self._segments[i]
        if isinstance(segment, SourceGap):
            return segment.target_end  # the first record after the gap: nothing before it exists
        return _within(segment, self._runs[i], self._run_starts[i], upstream)

    def reverse(self, downstream: int) -> int | None:
        """The source offset a consumer at target offset ``downstream`` of the remote partition
        resumes at on the source (a failback); ``None`` when the log does not cover the offset."""
        if (
            not self._segments
            or not self._segments[0].target_start <= downstream <= self._segments[-1].target_end
        ):
            return None
        if downstream == self._segments[-1].target_end:
            return self._segments[-1].source_end  # everything mirrored was read: on with what was not
        # Segments tile the target offsets too; an empty one shares its start with the next one.
        i = bisect.bisect_right(self._target_starts, downstream) - 1
        segment = self._segments[i]
        if isinstance(segment, SourceGap):
            return segment.source_end  # copies of records the source no longer holds
        # Every target offset of a batch is one of its records: the run holding it says whose copy.
        k = bisect.bisect_right(self._run_target_starts[i], downstream) - 1
        src, tgt = self._runs[i][k]
        return src + (downstream - tgt)


def _within(batch: Batch, points: Sequence[tuple[int, int]], starts: Sequence[int], upstream: int) -> int:
    k = bisect.bisect_right(starts, upstream) - 1
    if k < 0:
        # Before the batch's first record: that record is the next one.
        return points[0][1] if points else batch.target_end
    src, tgt = points[k]
    run_end = points[k + 1][1] if k + 1 < len(points) else batch.target_end
    if upstream < src + (run_end - tgt):
        return tgt + (upstream - src)
    # In a gap after run k: the next record is the first of run k + 1 (or of the next batch).
    return run_end
