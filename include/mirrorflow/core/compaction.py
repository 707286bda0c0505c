"""What an earlier attempt of a copy wrote, matched against a source the log cleaner compacted since.

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

__all__ = ["Held", "copied_sources"]


class Held(NamedTuple):
    """A record as the match compares it: its offset on its own cluster, ``same`` (equal for a record
    and its copy: a digest of key, value, headers and timestamp), its key, and whether it is a
    tombstone (a null value)."""

    offset: int
    same: Hashable
    key: Hashable
    tombstone: bool


# Which of these keys the source holds past the plan's end.
Later = Callable[[frozenset[Hashable]], Collection[Hashable]]


def copied_sources(
    written: Sequence[Held], planned: Sequence[Held], start: int, end: int, later: Later
) -> list[int] | None:
    """For each ``written`` record (target offsets, in order), the source offset it copies, from
    ``planned`` (the plan's records as the source holds them now, in order, in ``[start, end)``);
    ``None`` when compaction does not explain them (see the module's docstring). Each candidate k
    costs O(n log n); one is tried only if its last covered record was written and the records
    written after its copy fit before the next planned record: with compaction as the cause, the
    first tried is the answer."""
    at: dict[Hashable, list[int]] = {}
    last_written: dict[Hashable, int] = {}
    for i, w in enumerate(written):
        at.setdefault(w.same, []).append(i)
        last_written[w.key] = i
    last_planned = {p.key: j for j, p in enumerate(planned)}
    for k in range(min(len(written), len(planned)), -1, -1):
        if k and planned[k - 1].same not in at:
            continue
        found = _explained(written, planned, k, at, (start, end), last_written, last_planned, later)
        if found is not None:
            return found
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
) -> list[int] | None:
    """The source offsets of ``written`` if its records are the first ``k`` planned ones and records
    compaction removed; else ``None``."""
    start, end = bounds
    stop = planned[k].offset if k < len(planned) else end
    matched = _matched_from_the_right(written, planned, k, at, stop)
    if matched is None:
        return None
    sources = _placed(written, planned, matched, start, stop)
    if sources is None:
        return None
    kept = set(matched)
    matched_keys: set[Hashable] = set()
    wanted: set[Hashable] = set()
    for i, w in enumerate(written):
        if i in kept:
            matched_keys.add(w.key)
        elif w.key in matched_keys:
            return None  # removed after a kept record of its key
        elif not (w.tombstone or last_written[w.key] > i or last_planned.get(w.key, -1) >= k):
            wanted.add(w.key)
    if wanted and not wanted <= set(later(frozenset(wanted))):
        return None
    return sources


def _matched_from_the_right(
    written: Sequence[Held], planned: Sequence[Held], k: int, at: dict[Hashable, list[int]], stop: int
) -> list[int] | None:
    """The position in ``written`` of each of the first ``k`` planned records, each the latest equal
    record before the next one's; ``None`` if there is none, or if the records written after the
    last one's cannot fit before ``stop``."""
    matched = [0] * k
    limit = len(written)
    for j in range(k - 1, -1, -1):
        candidates = at.get(planned[j].same, [])
        i = bisect.bisect_left(candidates, limit) - 1
        if i < 0:
            return None
        limit = matched[j] = candidates[i]
        if j == k - 1 and len(written) - 1 - limit > stop - planned[j].offset - 1:
            return None
    return matched


def _placed(
    written: Sequence[Held], planned: Sequence[Held], matched: list[int], start: int, stop: int
) -> list[int] | None:
    """Source offsets for ``written``: each matched record its planned record's, each of the others
    one of the free offsets right before the next matched record's (``stop`` after the last); ``None``
    if they do not fit."""
    sources = [0] * len(written)
    before, previous = -1, start - 1
    for j, i in enumerate([*matched, len(written)]):
        offset = planned[j].offset if j < len(matched) else stop
        removed = i - before - 1
        if removed > offset - previous - 1:
            return None
        sources[before + 1 : i] = range(offset - removed, offset)
        if i < len(written):
            sources[i] = offset
        before, previous = i, offset
    return sources
