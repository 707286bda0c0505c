"""What an earlier attempt of a copy wrote, matched against a source the log cleaner compacted since,
from a remote partition whose own cleaner may have compacted it too.

An attempt whose transaction committed on the target before the offsets table moved (its driver
killed right after EndTxn, the offsets database away) left the first n planned records as they were
then, S_then, on the remote partition: the written records W = w1..wn. The next attempt reads them
back and compares them with the planned records as the source holds them now, S_now. When the
source compacts, S_now is S_then without the records the cleaner removed since: a record whose key
has a later record, or a tombstone whose retention passed. The cleaner never reorders, and it works
on a prefix of the log, dropping there every record of a key older than the newest it saw: so of
each key's records, the ones it removed come before the ones it kept.

``copied_sources`` finds how far the earlier attempt got on the source: the number k of planned
records it covered, and for each written record the source offset it copies. It takes the largest
k for which the written records are explained:

1. the first k planned records are written, in order, each as a record equal to it (key, value,
   headers, timestamp): matched from the right, each to the latest equal written record before the
   next one's match;
2. every written record not matched was removed from the source by compaction: of its key, no
   matched record comes before it (the cleaner removes the older records of a key, never a newer
   one while keeping an older); it is a tombstone, or a later record of its key exists (written
   after it, planned after the k covered, or on the source past the plan's end: ``later``);
3. the source has room for them: the unmatched records between two matched ones fit in the offsets
   between theirs, which hold no planned record now (those before the first, from the plan's start;
   those after the last, up to the first planned record not covered, or the plan's end).

Why this is sound. For the true k (what the earlier attempt did cover), matching from the right
finds the true match: were a planned record matched to an equal written record later than its true
copy, that written record, of the same key, would be a removed record after a kept one of its key,
which compaction never leaves. The true match passes 1-3: the later records of a removed record's
key end in a kept one (written and matched, planned past the covered ones, or past the plan's end)
or in a tombstone whose retention passed, and the record is explained if any of them was written.
The one true state refused (``None``, as someone else's records are) is a record none of whose
later records of its key is left or was written (the last, a tombstone, removed before it was
copied): nothing the source still holds tells it from someone else's. Taking the largest k
explained, rather than the true one, can only take a planned record for written when an equal
record (same key, value, headers and timestamp) was written: the target then holds one copy of it
where it would hold two, and every key's newest value is the same either way. Matching from the
left would not do: with W = [a=1, a=2] and S_now = [a=1 at 12] (S_then: a=1 at 10, a=2 at 11, a=1
at 12), taking a=1 at 12 as written would leave a=2 the target's newest value of a; the answer is
k = 0, both written records compacted away and a=1 at 12 still to copy.

The remote topic compacts too (``Removed.target``; its configs are synced from the source's): its
cleaner removes written records the same way, so W now is W then less those. Then a covered planned
record may also have no copy left, when its key has a later covered record (written after it, kept
by the target or not) or it is a tombstone: none of its key's records written before it is left
(the target keeps no older record of a key than one it removed), and no written record the source
removed comes after it (the source kept it, so it removed none of its key after it). The last
covered record must be written, or a tombstone whose dropping the records written after the last
match prove (they fit nowhere before it); and with this side on, a written record equal to a
planned one not covered is that record's copy, never one the source removed (else a plan whose end
the target dropped would take its first records for written). What this cannot tell: a copy whose
last records the target dropped, ending in a tombstone past its retention (``delete.retention.ms``,
a day by default), with nothing written after them. Such a tombstone can be gone only once it is
older than the remote topic's retention of tombstones (``Removed.tombstones_before_ms``): when the
records planned after the copy could be such a dropped end, the answer is ``Undecided`` (neither
copying them again, which could write them twice, nor skipping them, which could lose them).

The source offsets of records removed by compaction are gone; each is given, in order, one of the
free offsets right before the next kept record (or the first not covered, or the plan's end). The
batch log then counts every written record, stays contiguous, and translates every offset the
source still holds exactly; a consumer at a removed record's offset resumes at or before the copy
it had not read (never after: it may re-read compacted copies, it skips nothing), and a verification
finds those copies on the target only, as records the source compacted away after they were copied.

Pure: no I/O. The records past the plan's end are the caller's to read (``later``), only for the
keys the match needs them for, and only once the match got that far.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Collection, Hashable, Sequence
from typing import NamedTuple

__all__ = ["Copied", "Held", "Removed", "Undecided", "copied_sources"]


class Held(NamedTuple):
    """A record as the match compares it: its offset on its own cluster, ``same`` (equal for a record
    and its copy: a digest of key, value, headers and timestamp), its key, and whether it is a
    tombstone (a null value)."""

    offset: int
    same: Hashable
    key: Hashable
    tombstone: bool
    # Its timestamp (ms): a tombstone's copy outlives its retention on the target no sooner.
    at_ms: int = 0


# Which of these keys the source holds past the plan's end.
Later = Callable[[frozenset[Hashable]], Collection[Hashable]]


class Copied(NamedTuple):
    """What an earlier attempt wrote: the source offset each written record copies, and the source
    offset after the last planned record it covered (where the copy goes on)."""

    sources: list[int]
    position: int


class Removed(NamedTuple):
    """On which side a cleaner may have removed records since they were copied: the source's (its
    topic compacts) and the remote partition's (the remote topic compacts); and, there, tombstones
    stamped before ``tombstones_before_ms`` (now less the remote topic's ``delete.retention.ms``) may
    be gone past their retention (``None``: none)."""

    source: bool
    target: bool
    tombstones_before_ms: int | None = None

    def dropped(self, record: Held) -> bool:
        """Whether the remote partition's cleaner may have dropped the copy of tombstone ``record``."""
        before = self.tombstones_before_ms
        return self.target and record.tombstone and before is not None and record.at_ms < before


class Undecided(NamedTuple):
    """What the earlier attempt wrote may end in records the remote partition's cleaner removed since,
    the last the tombstone at source ``offset`` past its retention: whether it copied them cannot be
    told."""

    offset: int


def copied_sources(
    written: Sequence[Held],
    planned: Sequence[Held],
    start: int,
    end: int,
    later: Later,
    removed: Removed,
) -> Copied | Undecided | None:
    """For each ``written`` record (target offsets, in order), the source offset it copies, from
    ``planned`` (the plan's records as the source holds them now, in order, in ``[start, end)``), and
    where the copy goes on; ``None`` when compaction does not explain them, ``Undecided`` when the
    copy may have gone on in records the target dropped since (see the module's docstring).
    ``removed`` says on which side a cleaner may have removed records since the copy. Each candidate
    k costs O(n log n); one is tried only if its last covered record was written and the records
    written after its copy fit before the next planned record: with compaction as the cause, the
    first tried is the answer."""
    at: dict[Hashable, list[int]] = {}
    last_written: dict[Hashable, int] = {}
    for i, w in enumerate(written):
        at.setdefault(w.same, []).append(i)
        last_written[w.key] = i
    last_planned = {p.key: j for j, p in enumerate(planned)}
    most = len(planned) if removed.target else min(len(written), len(planned))
    # The last covered record was written, or (the target compacts) is a tombstone its cleaner dropped
    # past its retention, which records written after it must follow (``_explained``).
    ends = [
        k
        for k in range(most, -1, -1)
        if not k or planned[k - 1].same in at or removed.dropped(planned[k - 1])
    ]
    for k in ends:
        found = _explained(written, planned, k, at, (start, end), last_written, last_planned, later, removed)
        if found is not None:
            gone = _dropped_end(written, planned, k, removed)
            if gone is not None:
                return Undecided(gone)
            covered_end = planned[k - 1].offset + 1 if k else start
            return Copied(found, max(covered_end, found[-1] + 1 if found else start))
    return None


def _dropped_end(written: Sequence[Held], planned: Sequence[Held], k: int, removed: Removed) -> int | None:
    """The offset of a tombstone past which the records planned after the first ``k`` could all have
    been copied and removed by the target (each a record of a key a later one of them has, the last a
    tombstone it may have dropped, no key of them written): nothing tells whether they were; else
    ``None``."""
    if not removed.target or removed.tombstones_before_ms is None:
        return None
    keys = {w.key for w in written}
    following: dict[Hashable, int] = {}
    next_of = [len(planned)] * len(planned)
    for j in range(len(planned) - 1, k - 1, -1):
        next_of[j] = following.get(planned[j].key, len(planned))
        following[planned[j].key] = j
    needed = k  # every record of the run before its end needs a later record of its key in the run
    for m in range(k + 1, len(planned) + 1):
        record = planned[m - 1]
        if record.key in keys:
            return None
        if removed.dropped(record) and needed <= m:
            return record.offset
        if not record.tombstone or not removed.dropped(record):
            needed = max(needed, next_of[m - 1] + 1)
        if needed > len(planned):
            return None
    return None


def _explained(
    written: Sequence[Held],
    planned: Sequence[Held],
    k: int,
    at: dict[Hashable, list[int]],
    bounds: tuple[int, int],
    last_written: dict[Hashable, int],
    last_planned: dict[Hashable, int],
    later: Later,
    removed: Removed,
) -> list[int] | None:
    """The source offsets of ``written`` if its records are the first ``k`` planned ones, less those
    the target's cleaner removed, and records the source's cleaner removed; else ``None``."""
    start, end = bounds
    stop = planned[k].offset if k < len(planned) else end
    matched = _matched_from_the_right(written, planned, k, at, stop, removed)
    if matched is None:
        return None
    sources = _placed(written, planned, matched, start, stop)
    if sources is None:
        return None
    kept = {i for i in matched if i is not None}
    if len(kept) < len(written) and not removed.source:
        return None
    if removed.target and not _ends_as_written(written, planned, matched, start):
        return None
    cut = _target_removed_before(written, planned, matched)
    if cut is None:
        return None
    matched_keys: set[Hashable] = set()
    wanted: set[Hashable] = set()
    uncovered = {p.same for p in planned[k:]} if removed.target else set()
    for i, w in enumerate(written):
        if i in kept:
            matched_keys.add(w.key)
        elif w.key in matched_keys or cut.get(w.key, len(written)) <= i:
            return None  # the source removed it after a record of its key it kept
        elif removed.target and w.same in uncovered:
            return None  # rather the copy of that record: the target may have lost this plan's end
        elif not (w.tombstone or last_written[w.key] > i or last_planned.get(w.key, -1) >= k):
            wanted.add(w.key)
    if wanted and not wanted <= set(later(frozenset(wanted))):
        return None
    return sources


def _ends_as_written(
    written: Sequence[Held], planned: Sequence[Held], matched: Sequence[int | None], start: int
) -> bool:
    """Whether the last covered record is written, or else (a tombstone the target dropped) the records
    written after the last matched one cannot have come before it: nothing but them tells that the
    earlier attempt got that far."""
    if not matched or matched[-1] is not None:
        return True
    pairs = [(j, i) for j, i in enumerate(matched) if i is not None]
    j, i = pairs[-1] if pairs else (-1, -1)
    after = len(written) - 1 - i
    previous = planned[j].offset if j >= 0 else start - 1
    taken = {p.offset for p in planned}
    return _free_before(planned[len(matched) - 1].offset, previous, after, taken) is None


def _target_removed_before(
    written: Sequence[Held], planned: Sequence[Held], matched: Sequence[int | None]
) -> dict[Hashable, int] | None:
    """For each key of a planned record the target's cleaner removed (unmatched), the position in
    ``written`` it surely came before (its next matched record's): a record of that key written from
    there on was not removed by the source's cleaner, which kept the planned one. ``None`` if the
    target removed a record after one of its key it still holds, which its cleaner never does."""
    first: dict[Hashable, int] = {}
    for i, w in enumerate(written):
        first.setdefault(w.key, i)
    following = [len(written)] * len(matched)
    for j in range(len(matched) - 2, -1, -1):
        at_next = matched[j + 1]
        following[j] = following[j + 1] if at_next is None else at_next
    cut: dict[Hashable, int] = {}
    before = -1
    for j, at in enumerate(matched):
        if at is not None:
            before = at
            continue
        key = planned[j].key
        if first.get(key, len(written)) <= before:
            return None
        cut[key] = min(cut.get(key, len(written)), following[j])
    return cut


def _matched_from_the_right(
    written: Sequence[Held],
    planned: Sequence[Held],
    k: int,
    at: dict[Hashable, list[int]],
    stop: int,
    removed: Removed,
) -> list[int | None] | None:
    """The position in ``written`` of each of the first ``k`` planned records, each the latest equal
    record before the next one's, or (the target compacts) ``None`` for one the target's cleaner
    removed: a tombstone, or a record of a key a later covered record has (written after it, whether
    the target kept it or not); ``None`` if a record is neither, or if the records written after the
    last one's cannot fit before ``stop``."""
    matched: list[int | None] = [None] * k
    limit = len(written)
    covered_after: set[Hashable] = set()  # keys of the covered records after ``j``
    for j in range(k - 1, -1, -1):
        candidates = at.get(planned[j].same, [])
        i = bisect.bisect_left(candidates, limit) - 1
        removable = removed.dropped(planned[j]) or planned[j].key in covered_after
        covered_after.add(planned[j].key)
        if i < 0:
            if removed.target and removable:
                continue
            return None
        limit = matched[j] = candidates[i]
        if j == k - 1 and len(written) - 1 - limit > stop - planned[j].offset - 1:
            return None
    return matched


def _placed(
    written: Sequence[Held],
    planned: Sequence[Held],
    matched: Sequence[int | None],
    start: int,
    stop: int,
) -> list[int] | None:
    """Source offsets for ``written``: each matched record its planned record's, each of the others
    one of the free offsets (held by no planned record) right before the next matched record's
    (``stop`` after the last); ``None`` if they do not fit."""
    sources = [0] * len(written)
    taken = {p.offset for p in planned}
    before, previous = -1, start - 1
    pairs = [(j, i) for j, i in enumerate(matched) if i is not None]
    for j, i in [*pairs, (len(matched), len(written))]:
        offset = planned[j].offset if j < len(matched) else stop
        removed = i - before - 1
        free = _free_before(offset, previous, removed, taken)
        if free is None:
            return None
        sources[before + 1 : i] = free
        if i < len(written):
            sources[i] = offset
        before, previous = i, offset
    return sources


def _free_before(offset: int, previous: int, n: int, taken: Collection[int]) -> list[int] | None:
    """The ``n`` highest offsets between ``previous`` and ``offset`` (both excluded) not ``taken``,
    in order; ``None`` if there are fewer."""
    free: list[int] = []
    candidate = offset - 1
    while len(free) < n and candidate > previous:
        if candidate not in taken:
            free.append(candidate)
        candidate -= 1
    return free[::-1] if len(free) == n else None
