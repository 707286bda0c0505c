"""Exact offset translation: where each mirrored source offset landed on the target.

The batch log (``core.progress.Batch``) records every committed copy of a partition as a source range,
a target range, the sync points where source offsets jump (compaction, transaction markers, aborted
records) and the target gaps where target offsets do (the markers of the copy's own transactions,
records of its aborted attempts). Between them the mapping is arithmetic (``runs``), so the log
maps every mirrored record exactly. ``OffsetTranslator`` answers "where does a consumer at source
offset U resume on the target" from it; ``OffsetSync`` is MM2's record of one mapping point, for
its offset-syncs topic.

Invariants of ``translate``: it never points past a record that is not yet mirrored, and it points at
the target copy of the first record at or after U, so a consumer that fails over re-reads nothing
and skips nothing that was mirrored. With no mirrored record left at or after U, it points where the
log ends on the target: the commit marker closing the last copy's transaction is there, so when told
where the first committed record past the end is (read off the remote partition: past that marker
and any records aborted after it, never past an open transaction's records) it points there, where a
read_committed consumer that read the remote partition to its end stands, with no lag. ``reverse``
goes the other way for a failback: a consumer at target offset D resumes on the source at the source
offset of the copy at D, the first record it has not consumed; at the end of the log, where the
mirror's source progress ends. It never answers for a target offset the log does not cover (before
its start, or past its end: records of a copy not committed yet), so a consumer failing back skips
nothing it has not read. The one stretch past the end it answers for is the commit marker closing the
last copy's transaction, which the next copy's batch covers: only when told where the first committed
record past the end is, as ``translate`` points there.

Source gaps (records deleted from the source before they were mirrored, skipped) tile the log with
the batches: a position inside a gap maps to where the first record after the gap landed, so the
consumer skips only what was lost; a target offset inside a gap (a copy of a record the source no
longer holds) maps back to the first source offset after it. A target offset in a target gap holds
no record a consumer reads: it maps back to the source offset of the next record.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from mirrorflow.core.plan import SourceGap
from mirrorflow.core.progress import Batch
from mirrorflow.errors import PlanError
from mirrorflow.mm2.records import OffsetSync

# (source offset, target offset, length): records consecutive on both clusters.
Run = tuple[int, int, int]


def runs(batch: Batch) -> list[Run]:
    """The batch's records as runs consecutive on both clusters, in order: a run ends where the
    source offsets jump (the next record is a sync point) or the target's do (a target gap)."""
    if not batch.records:
        return []
    sources = {t: s for s, t in batch.sync_points}
    gap_starts = [start for start, _ in batch.target_gaps]
    leading = batch.target_gaps[:1] and batch.target_gaps[0][0] == batch.target_start
    first = batch.target_gaps[0][1] if leading else batch.target_start
    starts = sorted({first, *sources, *(end for _, end in batch.target_gaps)})
    found: list[Run] = []
    source = batch.source_start
    for i, target in enumerate(starts):
        source = sources.get(target, source)
        end = starts[i + 1] if i + 1 < len(starts) else batch.target_end
        g = bisect.bisect_left(gap_starts, target)
        if g < len(gap_starts):
            end = min(end, gap_starts[g])
        found.append((source, target, end - target))
        source += end - target
    return found


def runs_from(found: Iterable[Run], *, source: int = 0, target: int = 0) -> list[Run]:
    """The records of runs ``found`` at or after source offset ``source`` and target offset ``target``."""
    kept = []
    for s, t, n in found:
        cut = max(0, source - s, target - t)
        if cut < n:
            kept.append((s + cut, t + cut, n - cut))
    return kept


@dataclass(frozen=True)
class Layout:
    """Where a copy's records went, as a batch records it: a sync point where the source offsets
    jump, a target gap where the target's do (``Batch``)."""

    sync_points: tuple[tuple[int, int], ...]
    target_gaps: tuple[tuple[int, int], ...]
    records: int

    @classmethod
    def of(cls, source_start: int, target_start: int, parts: Iterable[Run]) -> Layout:
        """The layout of runs ``parts`` (in order on both clusters) copied from ``source_start`` to
        ``target_start`` on."""
        points: list[tuple[int, int]] = []
        gaps: list[tuple[int, int]] = []
        next_source, next_target, records = source_start, target_start, 0
        for s, t, n in parts:
            if s != next_source:
                points.append((s, t))
            if t != next_target:
                gaps.append((next_target, t))
            next_source, next_target, records = s + n, t + n, records + n
        return cls(tuple(points), tuple(gaps), records)


def laid_out(
    batch: Batch, source: tuple[int, int], target: tuple[int, int], parts: Iterable[Run], size: int
) -> Batch:
    """``batch`` as the copy of source offsets ``source`` to target offsets ``target`` whose records
    are ``parts`` (runs, in order, within both ranges; the last ends at the target range's end), of
    ``size`` bytes."""
    found = Layout.of(source[0], target[0], parts)
    return replace(
        batch,
        source_start=source[0],
        source_end=source[1],
        target_start=target[0],
        target_end=target[1],
        records=found.records,
        bytes=size,
        sync_points=found.sync_points,
        target_gaps=found.target_gaps,
    )


def coalesce(batches: Sequence[Batch]) -> list[Batch]:
    """Contiguous batches of one partition (each starting where the one before ended, on both
    sides), in order, merged into as few as possible: what a DR window's many micro-batches
    become in the batch log. The merged log translates every offset as the separate one did (its
    runs are the parts' runs, a run that goes on across a junction counted once)."""
    stretches: list[list[Batch]] = []
    for batch in batches:
        last = stretches[-1][-1] if stretches else None
        if last is None or (last.source_end, last.target_end) != (batch.source_start, batch.target_start):
            stretches.append([batch])
        else:
            stretches[-1].append(batch)
    return [_merged(stretch) for stretch in stretches]


def _merged(stretch: list[Batch]) -> Batch:
    first, last = stretch[0], stretch[-1]
    if len(stretch) == 1:
        return first
    return laid_out(
        first,
        (first.source_start, last.source_end),
        (first.target_start, last.target_end),
        [run for b in stretch for run in runs(b)],
        sum(b.bytes for b in stretch),
    )


def trimmed(batch: Batch, log_start: int) -> Batch | None:
    """What of ``batch`` a consumer can still need once the source holds nothing before
    ``log_start``: the batch from ``log_start`` on, starting on the target at its first record kept
    (or at its end if it keeps none), ``batch`` itself when it starts there or later, ``None`` when it
    ends at or before it. Translation of any offset from ``log_start`` on reads the same from the
    trimmed batch. Its bytes shrink in proportion to its records (the log keeps no size per
    record)."""
    if batch.source_end <= log_start:
        return None
    if batch.source_start >= log_start:
        return batch
    kept = runs_from(runs(batch), source=log_start)
    records = sum(n for _, _, n in kept)
    return laid_out(
        batch,
        (log_start, batch.source_end),
        (kept[0][1] if kept else batch.target_end, batch.target_end),
        kept,
        batch.bytes * records // batch.records if records else 0,
    )


def pruning_hole(batches: Iterable[Batch], gaps: Iterable[SourceGap] = ()) -> SourceGap | None:
    """The gap across the hole pruning left in a partition's log (``batches`` and ``gaps``, read
    from its first row on), if it has one. Pruning once kept a partition's newest batch however far
    below the source's log start it lay, but cut the gaps after it up to the log start: a batch
    logged past them then followed a hole (``store.batch_log.prune_step`` now keeps the log
    contiguous, and cuts such a batch once a newer one is logged). Such a hole comes right after the
    log's first row, a batch, and starts no earlier on the target than that batch ends; its source
    offsets were lost to the mirror (the cut gaps said so), so it translates as one gap, as they did:
    to the first record after it. ``None`` when the first rows tile, or the hole is of another kind
    (``OffsetTranslator`` refuses it)."""
    segments: list[Batch | SourceGap] = sorted([*batches, *gaps], key=lambda s: s.source_start)
    if len(segments) < 2 or not isinstance(segments[0], Batch):
        return None
    first, after = segments[:2]
    if first.source_end >= after.source_start or first.target_end > after.target_start:
        return None
    return SourceGap(
        first.topic,
        first.partition,
        first.source_end,
        after.source_start,
        first.target_end,
        after.target_start,
    )


def offset_syncs(batch: Batch) -> list[OffsetSync]:
    """MM2 offset syncs for a batch: one per run, so MM2's own rule (newest sync at or below U, then
    +1) never skips a record either."""
    return [OffsetSync(batch.topic, batch.partition, s, t) for s, t, _ in runs(batch)]


class OffsetTranslator:
    """Exact source -> target offset translation for one partition, from its batch log and gaps."""

    def __init__(self, batches: Iterable[Batch], gaps: Iterable[SourceGap] = ()) -> None:
        self._segments: list[Batch | SourceGap] = sorted([*batches, *gaps], key=lambda b: b.source_start)
        for before, after in zip(self._segments, self._segments[1:], strict=False):
            if (before.source_end, before.target_end) != (after.source_start, after.target_start):
                raise PlanError(
                    f"batch log of {after.topic}-{after.partition} is not contiguous at source offset "
                    f"{before.source_end} (target {before.target_end}): the next row starts at source "
                    f"offset {after.source_start} (target {after.target_start})"
                )
        self._starts = [b.source_start for b in self._segments]
        self._target_starts = [b.target_start for b in self._segments]
        self._runs = [runs(b) if isinstance(b, Batch) else [] for b in self._segments]
        self._run_starts = [[s for s, _, _ in r] for r in self._runs]
        self._run_target_starts = [[t for _, t, _ in r] for r in self._runs]
        # The target offset of the first record from each segment on; past the last, the log's end.
        following = [self._segments[-1].target_end] if self._segments else []
        for r in reversed(self._runs):
            following.append(r[0][1] if r else following[-1])
        self._next_record = following[::-1]

    def translate(self, upstream: int, committed_from: int | None = None) -> int | None:
        """The target offset a consumer at source offset ``upstream`` resumes at; ``None`` when the
        offset precedes everything mirrored (MM2 emits no checkpoint then either). ``committed_from``,
        when given, is where the first committed record at or past the log's target end is (read off
        the remote partition): before it lie only the markers closing the copies' transactions and
        records they aborted, so a consumer with no mirrored record left to read stands there."""
        if not self._segments or upstream < self._segments[0].source_start:
            return None
        end = self._segments[-1].target_end
        if upstream >= self._segments[-1].source_end:
            # Not mirrored yet: the records from here on will land at the end of the remote partition.
            found_at = end
        else:
            i = bisect.bisect_right(self._starts, upstream) - 1
            found = self._runs[i]
            k = bisect.bisect_right(self._run_starts[i], upstream) - 1
            if k >= 0 and upstream < found[k][0] + found[k][2]:
                return found[k][1] + (upstream - found[k][0])
            # Before a run, between runs, or in a source gap (nothing before its end exists): the next
            # record is the first of the next run, in this segment or a later one.
            found_at = found[k + 1][1] if k + 1 < len(found) else self._next_record[i + 1]
        return committed_from if found_at == end and committed_from is not None else found_at

    @property
    def target_end(self) -> int | None:
        """Where the log's last segment ends on the target; ``None`` for an empty log."""
        return self._segments[-1].target_end if self._segments else None

    def reverse(self, downstream: int, committed_from: int | None = None) -> int | None:
        """The source offset a consumer at target offset ``downstream`` of the remote partition
        resumes at on the source (a failback); ``None`` when the log does not cover the offset.
        ``committed_from``, when given, is where the first committed record past the log's end is
        (read off the remote partition): up to it lie only the markers that close the last copy's
        transaction, so a consumer there read every copy too."""
        end = self.target_end
        if end is None or downstream < self._segments[0].target_start:
            return None
        if downstream > end and (committed_from is None or downstream > committed_from):
            return None
        if downstream >= end:
            return self._segments[-1].source_end  # everything mirrored was read: on with what was not
        # Segments tile the target offsets too; an empty one shares its start with the next one.
        i = bisect.bisect_right(self._target_starts, downstream) - 1
        segment = self._segments[i]
        if isinstance(segment, SourceGap):
            return segment.source_end  # copies of records the source no longer holds
        found = self._runs[i]
        k = bisect.bisect_right(self._run_target_starts[i], downstream) - 1
        if k >= 0 and downstream < found[k][1] + found[k][2]:
            return found[k][0] + (downstream - found[k][1])  # the run holding it says whose copy
        # In a target gap: no record was read past the one before it, and the next is run k + 1's.
        return found[k + 1][0]
