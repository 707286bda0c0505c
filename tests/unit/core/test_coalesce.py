"""Coalescing a partition's contiguous batches: the batch log of a DR window's micro-batches shrinks
to one row per unbroken stretch, translating every offset as before."""

from __future__ import annotations

import random

import pytest

from mirrorflow.core.progress import Batch
from mirrorflow.core.translation import OffsetTranslator, coalesce


def copied(source_start: int, source_end: int, target_start: int, offsets: list[int]) -> Batch:
    """The batch a copy of ``offsets`` (the records of [source_start, source_end)) commits: a sync
    point wherever a record's offset does not follow the previous one (the first counts against
    ``source_start``), as the copy records them."""
    points, prev = [], source_start - 1
    for i, offset in enumerate(offsets):
        if offset != prev + 1:
            points.append((offset, target_start + i))
        prev = offset
    return Batch(
        "t", 0, "a.t", source_start, source_end, target_start, target_start + len(offsets),
        len(offsets), 10 * len(offsets), tuple(points),
    )  # fmt: skip


def split_copy(offsets: list[int], end: int, cuts: list[int]) -> list[Batch]:
    """The records at ``offsets`` (of source offsets [0, end)) copied as micro-batches ending at
    each of ``cuts``."""
    batches, start, target = [], 0, 0
    for cut in [*cuts, end]:
        part = [o for o in offsets if start <= o < cut]
        batches.append(copied(start, cut, target, part))
        start, target = cut, target + len(part)
    return batches


@pytest.mark.parametrize("seed", range(200))
def test_coalesced_micro_batches_are_the_batch_one_copy_of_the_whole_range_commits(seed: int) -> None:
    rng = random.Random(seed)
    end = rng.randint(1, 60)
    # Records at some offsets; the others are transaction markers, aborted or compacted records.
    offsets = [o for o in range(end) if rng.random() < 0.7]
    cuts = sorted(rng.sample(range(1, end), rng.randint(0, min(end - 1, 8)))) if end > 1 else []
    parts = split_copy(offsets, end, cuts)

    (merged,) = coalesce(parts)

    merged.validate()
    assert merged == copied(0, end, 0, offsets)
    whole, separate = OffsetTranslator([merged]), OffsetTranslator(parts)
    assert [whole.translate(u) for u in range(end + 2)] == [separate.translate(u) for u in range(end + 2)]


def test_only_contiguous_batches_merge() -> None:
    a = copied(0, 10, 0, list(range(10)))
    b = copied(10, 20, 10, list(range(10, 20)))
    after_gap = copied(25, 30, 20, list(range(25, 30)))  # records 20-24 were lost: a recorded gap
    other_start = copied(30, 40, 30, list(range(30, 40)))  # the target moved on (not this log's)

    assert coalesce([a, b, after_gap, other_start]) == [
        copied(0, 20, 0, list(range(20))),
        after_gap,
        other_start,
    ]
    assert coalesce([]) == []
