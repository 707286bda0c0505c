"""An earlier attempt's committed copy matched against a source compacted since: how far it got,
and the source offset each written record copies, or a refusal when compaction does not explain
what is written."""

from __future__ import annotations

import random
from collections.abc import Collection, Hashable, Sequence
from typing import NamedTuple

import pytest

from mirrorflow.core.compaction import Copied, Held, Removed, Undecided, copied_sources

# Which side's cleaner removed records: only the source's (the remote topic does not compact), or both.
SOURCE, BOTH = Removed(source=True, target=False), Removed(source=True, target=True)
# Both, and the target's tombstones (stamped at 0 here) past their retention: any may be gone.
DROPPING = Removed(source=True, target=True, tombstones_before_ms=1)
# A record: (key, value); equal records are equal in key and value (and, here, timestamp).
Rec = tuple[str, str | None]


def held(offset: int, record: Rec) -> Held:
    key, value = record
    return Held(offset, record, key, value is None)


def written(*records: Rec) -> list[Held]:
    """Written at target offsets 100.. (the target's numbering plays no part)."""
    return [held(100 + i, r) for i, r in enumerate(records)]


def source(*records: tuple[int, Rec]) -> list[Held]:
    return [held(offset, r) for offset, r in records]


class Past:
    """The source past the plan's end, holding ``keys``; counts what it is asked."""

    def __init__(self, *keys: str) -> None:
        self.keys = set(keys)
        self.asked: list[frozenset[Hashable]] = []

    def __call__(self, wanted: frozenset[Hashable]) -> Collection[Hashable]:
        self.asked.append(wanted)
        return self.keys & wanted


def match(
    w: Sequence[Held], s: Sequence[Held], start: int, end: int, past: Past | None = None
) -> list[int] | None:
    found = copied_sources(w, s, start, end, past or Past(), SOURCE)
    assert not isinstance(found, Undecided)  # only a remote topic that compacts leaves it undecided
    return None if found is None else found.sources


def test_a_copy_nothing_was_compacted_from_copies_the_planned_records_in_order() -> None:
    s = source((10, ("a", "1")), (11, ("b", "1")), (13, ("c", "1")))

    assert match(written(("a", "1"), ("b", "1")), s, 10, 14) == [10, 11]
    assert match(written(("a", "1"), ("b", "1"), ("c", "1")), s, 10, 14) == [10, 11, 13]


def test_records_overwritten_after_they_were_copied_take_the_free_offsets_before_the_next_kept_one() -> None:
    # Then: a=1 at 10, b=1 at 11, a=2 at 12, c=1 at 13, all copied; a=1 removed since.
    s = source((11, ("b", "1")), (12, ("a", "2")), (13, ("c", "1")))

    assert match(written(("a", "1"), ("b", "1"), ("a", "2"), ("c", "1")), s, 10, 14) == [10, 11, 12, 13]
    # Then: a=1 at 10-11 overwritten, b=1 at 14; a=1 at 10 removed, 11-13 free: it goes to 13.
    s = source((14, ("b", "1")), (15, ("a", "2")))
    assert match(written(("a", "1"), ("b", "1")), s, 10, 16) == [13, 14]


def test_matching_from_the_left_would_take_a_newer_record_for_a_compacted_copy() -> None:
    # Then: a=1 at 10, a=2 at 11, a=1 at 12; both written records removed, a=1 at 12 not copied.
    s = source(
        (12, ("a", "1")),
    )

    assert match(written(("a", "1"), ("a", "2")), s, 10, 13) == [10, 11]


def test_of_equal_written_records_the_latest_is_the_kept_ones_copy() -> None:
    # Then: a=1 at 10 and again at 11 (the same record twice); the first removed.
    s = source((11, ("a", "1")), (12, ("b", "1")))

    assert match(written(("a", "1"), ("a", "1")), s, 10, 13) == [10, 11]
    assert match(written(("a", "1"), ("a", "1"), ("b", "1")), s, 10, 13) == [10, 11, 12]


def test_a_tombstone_past_its_retention_is_gone_with_the_records_it_deleted() -> None:
    s = source(
        (13, ("b", "1")),
    )

    assert match(written(("a", "1"), ("a", None), ("b", "1")), s, 10, 14) == [11, 12, 13]


def test_the_newer_record_a_compacted_copy_lost_to_may_lie_past_the_plan() -> None:
    s = source(
        (12, ("b", "1")),
    )
    past = Past("a")

    assert match(written(("a", "1"), ("b", "1")), s, 10, 13, past) == [11, 12]
    assert past.asked == [frozenset({"a"})]


def test_records_written_past_the_last_kept_one_fit_before_the_first_not_copied() -> None:
    # Then: b=1 at 10, a=1 at 11-12 (removed since: a=2 at 14 follows), c=1 at 13 not copied.
    s = source((10, ("b", "1")), (13, ("c", "1")), (14, ("a", "2")))

    assert match(written(("b", "1"), ("a", "1"), ("a", "1b")), s, 10, 15) == [10, 11, 12]
    # Three after b=1 do not fit in 11-12.
    assert match(written(("b", "1"), ("a", "1"), ("a", "1b"), ("a", "1c")), s, 10, 15) is None


def test_a_plan_whose_every_written_record_is_gone_covers_nothing_of_what_is_left() -> None:
    s = source((20, ("a", "3")), (21, ("b", "2")))

    assert match(written(("a", "1"), ("b", "1"), ("a", "2")), s, 10, 22) == [17, 18, 19]


@pytest.mark.parametrize(
    ("records", "why"),
    [
        ((("a", "1"), ("b", "1"), ("x", "1")), "a key the source holds no later record of"),
        ((("a", "1"), ("b", "1"), ("b", "0")), "an older value after a kept one of its key"),
        ((("a", "1"), ("c", "0"), ("b", "1")), "no free offset between a and b"),
        ((("a", "1"), ("c", "1"), ("b", "1")), "out of order"),
        ((("a", "1"), ("b", "2")), "another value where b=1 was written"),
    ],
)
def test_records_compaction_does_not_explain_are_refused(records: tuple[Rec, ...], why: str) -> None:
    # Free offsets: 12-13 and 15-19.
    s = source((10, ("a", "1")), (11, ("b", "1")), (14, ("c", "1")), (20, ("a", "2")))

    assert match(written(*records), s, 10, 21, Past("b", "c")) is None, why


def test_a_source_without_free_offsets_explains_no_extra_record() -> None:
    s = source((10, ("a", "1")), (11, ("a", "2")))

    # a=1 could have been removed (a=2 follows), but no offset before 10 was the plan's.
    assert match(written(("a", "1"), ("a", "1")), s, 10, 12) is None


def test_a_record_whose_later_records_of_its_key_are_all_gone_is_refused() -> None:
    # Then: a=1 at 10, copied; a's tombstone at 12 removed past its retention before it was copied.
    # Nothing tells a=1 from someone else's record.
    s = source(
        (11, ("b", "1")),
    )

    assert match(written(("a", "1")), s, 10, 13, Past()) is None


def test_the_source_past_the_plan_is_asked_only_for_keys_nothing_else_explains() -> None:
    s = source((11, ("b", "1")), (12, ("a", "2")))
    past = Past("a", "b", "c")

    assert match(written(("a", "1"), ("b", "1"), ("a", "2")), s, 10, 13, past) == [10, 11, 12]
    assert match(written(("c", "1"), ("c", None), ("b", "1")), s, 9, 13, past) == [9, 10, 11]
    assert past.asked == []


def _compacted(log: list[Rec], clean: int, tombstones_gone: bool) -> set[int]:
    """The offsets (indexes of ``log``) the cleaner keeps, having cleaned ``[0, clean)``: there, each
    key's newest record below ``clean`` only, and no tombstone if their retention passed."""
    newest = {key: i for i, (key, _) in enumerate(log[:clean])}
    kept = set(range(clean, len(log)))
    for i, (key, value) in enumerate(log[:clean]):
        if newest[key] == i and not (value is None and tombstones_gone):
            kept.add(i)
    return kept


class Story(NamedTuple):
    """A random source log, the plan's end, how many records an earlier attempt copied, what the
    source's cleaner kept, each record as the match holds it, the planned records it kept, and the
    keys it holds past the plan."""

    log: list[Rec]
    planned_end: int
    copied: int
    kept: set[int]
    stamp: list[Held]
    planned: list[Held]
    past: set[str]


def _story(rng: random.Random) -> Story:
    keys = "abcdef"[: rng.randint(1, 6)]
    log: list[Rec] = [
        (rng.choice(keys), None if rng.random() < 0.15 else str(rng.randint(0, 2)))
        for _ in range(rng.randint(1, 30))
    ]
    planned_end = rng.randint(1, len(log))
    copied = rng.randint(1, planned_end)
    kept = _compacted(log, rng.randint(0, len(log)), rng.random() < 0.5)
    # Every record its own timestamp (its offset): no two are equal.
    stamp = [Held(i, (i, *r), r[0], r[1] is None) for i, r in enumerate(log)]
    planned = [stamp[i] for i in range(planned_end) if i in kept]
    past = {log[i][0] for i in kept if i >= planned_end}
    return Story(log, planned_end, copied, kept, stamp, planned, past)


@pytest.mark.parametrize("seed", range(300))
def test_what_compaction_leaves_is_matched_as_it_was_copied(seed: int) -> None:
    log, planned_end, copied, kept, stamp, s, past = _story(random.Random(seed))
    w = [stamp[i]._replace(offset=100 + i) for i in range(copied)]

    copy = copied_sources(w, s, 0, planned_end, lambda wanted: past & wanted, SOURCE)
    assert not isinstance(copy, Undecided)
    found = None if copy is None else copy.sources

    unexplained = [
        i
        for i in range(copied)
        if i not in kept
        and log[i][1] is not None
        and not any(log[j][0] == log[i][0] for j in range(i + 1, len(log)) if j < copied or j in kept)
    ]
    if unexplained:
        assert found is None
        return
    assert found is not None
    uncovered = [i for i in range(copied, planned_end) if i in kept]
    assert found == sorted(set(found))
    assert all(0 <= o < (uncovered[0] if uncovered else planned_end) for o in found)
    assert all(found[i] == i for i in range(copied) if i in kept)


def target_compacts(
    w: Sequence[Held],
    s: Sequence[Held],
    start: int,
    end: int,
    past: Past | None = None,
    removed: Removed = DROPPING,
) -> Copied | Undecided | None:
    return copied_sources(w, s, start, end, past or Past(), removed)


def test_records_the_remote_partitions_cleaner_removed_are_covered_without_a_copy() -> None:
    # Then: a=1 at 10, b=1 at 11, a=2 at 12, all copied; the target's cleaner removed a=1 since.
    s = source((10, ("a", "1")), (11, ("b", "1")), (12, ("a", "2")), (13, ("c", "1")))
    w = written(("b", "1"), ("a", "2"))

    assert target_compacts(w, s, 10, 14) == Copied([11, 12], 13)
    assert match(w, s, 10, 14) is None  # the remote topic does not compact: someone else's records


def test_a_tombstone_the_remote_partition_dropped_past_its_retention_is_covered() -> None:
    s = source((10, ("a", None)), (11, ("b", "1")), (12, ("c", None)), (13, ("d", "1")))

    # c's tombstone, dropped as well or never copied: nothing written after it says which.
    assert target_compacts(written(("b", "1")), s, 10, 14) == Undecided(12)
    # Younger than the remote topic's delete.retention.ms, no tombstone can be gone: a's was never
    # copied, and b=1 is someone else's.
    assert target_compacts(written(("b", "1")), s, 10, 14, removed=BOTH) is None
    # Here d=1 was written after it: it was copied, and dropped.
    assert target_compacts(written(("b", "1"), ("d", "1")), s, 10, 14) == Copied([11, 13], 14)


def test_both_cleaners_at_once() -> None:
    # Then: a=1 at 10, b=1 at 11, a=2 at 12, b=2 at 13, all copied; since, the source removed a=1 and
    # b=1, the target a=1 only.
    s = source((12, ("a", "2")), (13, ("b", "2")))

    assert target_compacts(written(("b", "1"), ("a", "2"), ("b", "2")), s, 10, 14) == Copied([11, 12, 13], 14)


@pytest.mark.parametrize(
    ("records", "why"),
    [
        ((("a", "1"), ("b", "1")), "the target kept a=1 and removed a=2 after it"),
        ((("b", "1"),), "a=2 removed with no later record of a on the target"),
    ],
)
def test_removals_the_remote_partitions_cleaner_does_not_make_are_refused(
    records: tuple[Rec, ...], why: str
) -> None:
    s = source((10, ("a", "1")), (11, ("a", "2")), (12, ("b", "1")))

    assert target_compacts(written(*records), s, 10, 13) is None, why


@pytest.mark.parametrize("seed", range(300))
def test_what_both_cleaners_leave_is_matched_as_it_was_copied(seed: int) -> None:
    rng = random.Random(seed)
    log, planned_end, copied, kept, stamp, s, past = _story(rng)
    dropping = rng.random() < 0.5
    on_target = _compacted(log[:copied], rng.randint(0, copied), dropping)
    present = [i for i in range(copied) if i in on_target]
    w = [stamp[i]._replace(offset=100 + i) for i in present]

    copy = target_compacts(w, s, 0, planned_end, Past(*past), DROPPING if dropping else BOTH)
    if isinstance(copy, Undecided):  # only where tombstones may be gone: never a wrong answer
        assert dropping
        return
    found = None if copy is None else copy.sources

    unexplained = [
        i
        for i in present
        if i not in kept
        and log[i][1] is not None
        and not any(log[j][0] == log[i][0] for j in range(i + 1, len(log)) if j in on_target or j in kept)
    ]
    covered = [i for i in range(copied) if i in kept]
    # A copy that ended in records the target dropped since (its last a tombstone past its retention)
    # shows how far it got only by records written after them: else undecided or refused, never
    # taken for less or more.
    lost_end = bool(covered) and covered[-1] not in on_target
    if unexplained or not w:
        assert found is None or not w
        return
    if found is None:
        assert lost_end, "refused what compaction explains"
        return
    uncovered = [i for i in range(copied, planned_end) if i in kept]
    assert found == sorted(set(found))
    assert all(0 <= o < (uncovered[0] if uncovered else planned_end) for o in found)
    assert all(found[n] == i for n, i in enumerate(present) if i in kept)
    assert copy is not None
    # Never past a record not copied, and past every one copied.
    assert copy.position <= (uncovered[0] if uncovered else planned_end)
    assert copy.position > (covered[-1] if covered else -1)
