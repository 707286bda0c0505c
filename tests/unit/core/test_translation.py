"""Exact offset translation from the batch log, MM2's offset-sync record, coalescing a partition's
contiguous batches (the batch log of a DR window's micro-batches shrinks to one row per unbroken
stretch, translating every offset as before), trimming a batch at the source's log start, and the
hole pruning once left after a partition's newest batch."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from mirrorflow.core.plan import SourceGap
from mirrorflow.core.progress import Batch
from mirrorflow.core.translation import OffsetTranslator, coalesce, offset_syncs, pruning_hole, trimmed
from mirrorflow.errors import PlanError, WireFormatError
from mirrorflow.mm2.records import OffsetSync


def batch(source: tuple[int, int], target: tuple[int, int], *sync_points: tuple[int, int]) -> Batch:
    b = Batch("orders", 0, "primary.orders", *source, *target, target[1] - target[0], 0, sync_points)
    b.validate()
    return b


def translate_all(translator: OffsetTranslator, upstream: range) -> list[int | None]:
    return [translator.translate(u) for u in upstream]


def test_a_gapless_log_maps_arithmetically_and_never_past_the_mirrored_end() -> None:
    t = OffsetTranslator([batch((10, 20), (10, 20)), batch((0, 10), (0, 10))])  # any order

    assert translate_all(t, range(0, 23)) == [*range(0, 20), 20, 20, 20]


def test_offsets_before_the_first_mirrored_record_have_no_translation() -> None:
    t = OffsetTranslator([batch((100, 110), (0, 10))])

    assert [t.translate(u) for u in (0, 99, 100, 105, 110, 500)] == [None, None, 0, 5, 10, 10]


def test_transaction_markers_translate_to_the_next_record() -> None:
    # Source: records 0-4, commit marker 5, records 6-8, commit marker 9. Target: 8 records.
    t = OffsetTranslator([batch((0, 10), (0, 8), (6, 5))])

    assert translate_all(t, range(0, 11)) == [0, 1, 2, 3, 4, 5, 5, 6, 7, 8, 8]


def test_a_leading_gap_and_aborted_records_skip_nothing() -> None:
    # Records 3-5, aborted 6-8, abort marker 9, records 10-11.
    t = OffsetTranslator([batch((0, 12), (40, 45), (3, 40), (10, 43))])

    assert translate_all(t, range(0, 13)) == [40, 40, 40, 40, 41, 42, 43, 43, 43, 43, 43, 44, 45]


def test_a_batch_of_markers_only_maps_to_where_the_next_record_lands() -> None:
    t = OffsetTranslator([batch((0, 5), (0, 5)), batch((5, 7), (5, 5)), batch((7, 9), (5, 7))])

    assert translate_all(t, range(0, 10)) == [0, 1, 2, 3, 4, 5, 5, 5, 6, 7]


def test_reverse_maps_each_copy_back_to_its_source_record_and_the_end_to_the_mirrored_end() -> None:
    # Records 3-5, aborted 6-8, abort marker 9, records 10-11; then markers only; then records 14-15.
    t = OffsetTranslator(
        [batch((0, 12), (40, 45), (3, 40), (10, 43)), batch((12, 14), (45, 45)), batch((14, 16), (45, 47))]
    )

    assert [t.reverse(d) for d in range(38, 49)] == [None, None, 3, 4, 5, 10, 11, 14, 15, 16, None]
    # A failback resumes where a failover of the same position would have resumed.
    assert all(t.translate(t.reverse(d) or 0) == d for d in range(40, 48))


def test_reverse_maps_copies_of_records_lost_on_the_source_past_the_gap() -> None:
    lost = SourceGap("orders", 0, 10, 20, 10, 12)  # two records copied before the rest was deleted
    t = OffsetTranslator([batch((0, 10), (0, 10)), batch((20, 25), (12, 17))], [lost])

    assert [t.reverse(d) for d in (9, 10, 11, 12, 16, 17)] == [9, 20, 20, 20, 24, 25]


def test_reverse_past_the_end_answers_only_up_to_the_first_committed_record_read_there() -> None:
    # The last copy's records end at target offset 10; its commit marker is at 10.
    t = OffsetTranslator([batch((0, 10), (0, 10))])

    assert [t.reverse(d) for d in (10, 11, 12)] == [10, None, None]
    # Nothing committed up to 11 (the marker only): a consumer there read every copy.
    assert [t.reverse(d, committed_from=11) for d in (9, 10, 11, 12)] == [9, 10, 10, None]
    # A committed record at 10 (a copy not in the log yet): nothing past the end is answered.
    assert t.reverse(11, committed_from=10) is None


def test_with_nothing_mirrored_left_a_position_stands_at_the_first_committed_record_past_the_end() -> None:
    # Records 0-9, then source markers 10-11; the copy's records end at target offset 10, its commit
    # marker is at 10.
    t = OffsetTranslator([batch((0, 12), (0, 10))])

    assert [t.translate(u) for u in (9, 10, 11, 12, 20)] == [9, 10, 10, 10, 10]
    # Nothing committed up to 11 (the marker only): a consumer that read every copy stands at the
    # remote partition's end, past the marker, as a read_committed consumer there does.
    assert [t.translate(u, committed_from=11) for u in (0, 9, 10, 11, 12, 20)] == [0, 9, 11, 11, 11, 11]
    # Records an earlier attempt aborted and their marker lie past it too.
    assert t.translate(12, committed_from=14) == 14
    # A committed record at 10 (a copy not in the log yet): the position stays at it.
    assert t.translate(12, committed_from=10) == 10
    # A failback and a failover of a group that read everything go back and forth to the same place.
    assert t.translate(t.reverse(11, committed_from=11) or 0, committed_from=11) == 11


def test_mm2s_rule_on_our_offset_syncs_never_skips_but_re_reads() -> None:
    batches = [batch((0, 12), (40, 45), (3, 40), (10, 43)), batch((12, 30), (45, 60), (15, 48))]
    syncs = [s for b in batches for s in offset_syncs(b)]
    assert [(s.upstream_offset, s.downstream_offset) for s in syncs] == [
        (3, 40),
        (10, 43),
        (12, 45),
        (15, 48),
    ]
    exact = OffsetTranslator(batches)

    def mm2(upstream: int) -> int | None:
        older = [s for s in syncs if s.upstream_offset <= upstream]
        if not older:
            return None
        newest = older[-1]
        return newest.downstream_offset + (0 if newest.upstream_offset == upstream else 1)

    for u in range(3, 30):
        ours, theirs = exact.translate(u), mm2(u)
        assert ours is not None and theirs is not None
        assert theirs <= ours, f"MM2's rule would skip records at {u}"
    assert exact.translate(20) == 53 and mm2(20) == 49  # MM2 re-reads 4 records here


def test_a_gap_in_the_batch_log_is_refused() -> None:
    with pytest.raises(PlanError, match="not contiguous at source offset 10"):
        OffsetTranslator([batch((0, 10), (0, 10)), batch((11, 20), (10, 19))])


def test_offset_sync_wire_format() -> None:
    sync = OffsetSync("orders", 3, 1000, 7)

    assert sync.key() == b"\x00\x06orders" + b"\x00\x00\x00\x03"
    assert sync.value() == (1000).to_bytes(8, "big") + (7).to_bytes(8, "big")
    assert OffsetSync.decode(sync.key(), sync.value()) == sync
    with pytest.raises(WireFormatError, match="unexpected bytes"):
        OffsetSync.decode(sync.key(), sync.value() + b"\x00")


# ---------------------------------------------------------------------------------------- coalesce


def copied(
    source_start: int,
    source_end: int,
    target_start: int,
    offsets: list[int],
    targets: list[int] | None = None,
) -> Batch:
    """The batch a copy of ``offsets`` (the records of [source_start, source_end)) commits when they
    land at ``targets`` (by default one after the other from ``target_start``): a sync point wherever
    a record's offset does not follow the previous one (the first counts against ``source_start``),
    a target gap wherever a record's target offset does not, as the copy records them."""
    targets = targets if targets is not None else [target_start + i for i in range(len(offsets))]
    points, gaps, prev, prev_target = [], [], source_start - 1, target_start - 1
    for offset, target in zip(offsets, targets, strict=True):
        if offset != prev + 1:
            points.append((offset, target))
        if target != prev_target + 1:
            gaps.append((prev_target + 1, target))
        prev, prev_target = offset, target
    b = Batch(
        "t", 0, "a.t", source_start, source_end, target_start, prev_target + 1,
        len(offsets), 10 * len(offsets), tuple(points), tuple(gaps),
    )  # fmt: skip
    b.validate()
    return b


def split_copy(
    offsets: list[int], end: int, cuts: list[int], rng: random.Random | None = None
) -> tuple[list[Batch], list[int]]:
    """The records at ``offsets`` (of source offsets [0, end)) copied as micro-batches ending at
    each of ``cuts``, and the target offset each record landed at: with ``rng``, each micro-batch
    that writes lands past its commit marker and, at times, an aborted attempt's records (the first
    one past an earlier copy's marker too, at times)."""
    batches: list[Batch] = []
    targets: list[int] = []
    start, target = 0, 0
    for cut in [*cuts, end]:
        part = [o for o in offsets if start <= o < cut]
        first = target
        if rng is not None and part and (batches or rng.random() < 0.5):
            first += 1 + (rng.randint(1, 5) if rng.random() < 0.3 else 0)
        landed = list(range(first, first + len(part)))
        batches.append(copied(start, cut, target, part, landed))
        targets += landed
        start, target = cut, (landed[-1] + 1 if part else target)
    return batches, targets


def expected_translation(offsets: list[int], targets: list[int], upstream: int, end: int) -> int:
    """Where a consumer at ``upstream`` resumes: the copy of the first record at or after it, or
    the log's end."""
    return next((t for o, t in zip(offsets, targets, strict=True) if o >= upstream), end)


def expected_reverse(offsets: list[int], targets: list[int], downstream: int, source_end: int) -> int:
    """Where a consumer at target ``downstream`` resumes on the source: the source offset of the
    first record at or after it, or the mirrored end."""
    return next((o for o, t in zip(offsets, targets, strict=True) if t >= downstream), source_end)


@pytest.mark.parametrize("seed", range(200))
@pytest.mark.parametrize("transactional", [False, True], ids=["dense", "target-gaps"])
def test_coalesced_micro_batches_are_the_batch_one_copy_of_the_whole_range_commits(
    seed: int, transactional: bool
) -> None:
    rng = random.Random(seed)
    end = rng.randint(1, 60)
    # Records at some offsets; the others are transaction markers, aborted or compacted records.
    offsets = [o for o in range(end) if rng.random() < 0.7]
    cuts = sorted(rng.sample(range(1, end), rng.randint(0, min(end - 1, 8)))) if end > 1 else []
    parts, targets = split_copy(offsets, end, cuts, rng if transactional else None)

    (merged,) = coalesce(parts)

    merged.validate()
    assert merged == copied(0, end, 0, offsets, targets)
    whole, separate = OffsetTranslator([merged]), OffsetTranslator(parts)
    upstream, downstream = range(end + 2), range(merged.target_end + 1)
    assert [whole.translate(u) for u in upstream] == [separate.translate(u) for u in upstream]
    assert [whole.translate(u) for u in upstream] == [
        expected_translation(offsets, targets, u, merged.target_end) for u in upstream
    ]
    assert [whole.reverse(d) for d in downstream] == [separate.reverse(d) for d in downstream]
    assert [whole.reverse(d) for d in downstream] == [
        expected_reverse(offsets, targets, d, end) for d in downstream
    ]


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


# ----------------------------------------------------------------------------------------- trimmed


@pytest.mark.parametrize("seed", range(200))
@pytest.mark.parametrize("transactional", [False, True], ids=["dense", "target-gaps"])
def test_a_batch_trimmed_at_the_log_start_is_what_a_copy_from_there_commits(
    seed: int, transactional: bool
) -> None:
    rng = random.Random(seed)
    end = rng.randint(1, 60)
    # Records at some offsets; the others are transaction markers, aborted or compacted records.
    offsets = [o for o in range(end) if rng.random() < 0.7]
    parts, targets = split_copy(offsets, end, sorted(rng.sample(range(1, end), min(end - 1, 3))), rng)
    (whole,) = coalesce(parts) if transactional else (copied(0, end, 100, offsets),)
    targets = targets if transactional else [100 + i for i in range(len(offsets))]
    log_start = rng.randint(0, end - 1)
    kept = [(o, t) for o, t in zip(offsets, targets, strict=True) if o >= log_start]

    cut = trimmed(whole, log_start)

    assert cut is not None
    cut.validate()
    start = kept[0][1] if kept else whole.target_end
    from_there = copied(log_start, end, start, [o for o, _ in kept], [t for _, t in kept])
    size = whole.bytes * len(kept) // whole.records if kept else 0
    assert cut == (whole if log_start == 0 else replace(from_there, bytes=size))
    before, after = OffsetTranslator([whole]), OffsetTranslator([cut])
    upstream = range(log_start, end + 2)
    assert [after.translate(u) for u in upstream] == [before.translate(u) for u in upstream]
    downstream = range(cut.target_start, cut.target_end + 1)
    assert [after.reverse(d) for d in downstream] == [before.reverse(d) for d in downstream]


def test_a_batch_below_the_log_start_goes_and_one_above_it_stays_as_it_is() -> None:
    below, above = copied(0, 10, 0, list(range(10))), copied(10, 20, 10, [12, 15])

    assert trimmed(below, 10) is None
    assert trimmed(below, 11) is None
    assert trimmed(above, 10) is above
    assert trimmed(above, 3) is above


# ------------------------------------------------------------------------------------ pruning_hole


def test_a_hole_right_after_the_first_row_a_batch_is_the_gap_pruning_cut() -> None:
    kept, after = batch((10, 20), (100, 110)), batch((30, 35), (112, 117))
    cut = [SourceGap("orders", 0, 20, 25, 110, 112), SourceGap("orders", 0, 25, 30, 112, 112)]

    hole = pruning_hole([after, kept])

    assert hole == SourceGap("orders", 0, 20, 30, 110, 112)
    # It translates as the gaps it stands for did, both ways: to the first record after it.
    bridged, original = OffsetTranslator([kept, after], [hole]), OffsetTranslator([kept, after], cut)
    assert translate_all(bridged, range(8, 38)) == translate_all(original, range(8, 38))
    assert [bridged.reverse(d) for d in range(100, 118)] == [
        *range(10, 20), 30, 30, *range(30, 35), 35,
    ]  # fmt: skip
    # A gap pruning trimmed at the log start (kept) ends the hole where it starts.
    assert pruning_hole([kept], [SourceGap("orders", 0, 26, 30, 110, 112)]) == SourceGap(
        "orders", 0, 20, 26, 110, 110
    )


@pytest.mark.parametrize(
    ("batches", "gaps"),
    [
        ([batch((10, 20), (100, 110)), batch((20, 25), (110, 115))], []),  # tiles
        ([batch((10, 20), (100, 110))], [SourceGap("orders", 0, 20, 30, 110, 110)]),  # tiles
        ([batch((10, 20), (100, 110))], []),  # one row
        ([], [SourceGap("orders", 0, 0, 5, 0, 0)]),  # gaps only
        ([batch((30, 35), (110, 115))], [SourceGap("orders", 0, 0, 10, 110, 110)]),  # a gap first
        ([batch((10, 20), (100, 110)), batch((30, 35), (108, 113))], []),  # back on the target
        ([batch((0, 10), (90, 100)), batch((10, 20), (100, 110)), batch((30, 35), (110, 115))], []),
    ],
    ids=["batches", "gap", "one-row", "gaps-only", "gap-first", "target-overlap", "second-row"],
)
def test_no_other_log_has_a_hole_pruning_left(batches: list[Batch], gaps: list[SourceGap]) -> None:
    assert pruning_hole(batches, gaps) is None
