"""Consumer-group positions moved to the target: which checkpoints to emit, which target group offsets
to set. Pure rules, no I/O: ``mirrorflow.app.checkpoints`` (each run's checkpoint task), the cutover
and the failover read the groups and commit what these rules decide.

A group's committed source offset on a mirrored partition is translated exactly
(``OffsetTranslator`` over the batch log) to a ``GroupPosition`` on the remote partition. With
reverse checkpoints, a group's committed offset on a remote topic of the opposite flow (``A.orders``
on ``B``, for the flow ``B->A``) is translated back the same way to the upstream topic (``orders`` on
``A``): each partition comes with its own ``Translation``.

Invariants: a checkpoint never points past a record that is not yet mirrored; for a partition whose
log is exact, a consumer resuming at it re-reads nothing and skips nothing; a checkpoint is emitted
only when it moves forward or the source group rewound (its committed offset went back). What was
emitted is kept in the offsets table, which is how "forward" is judged.

Target group offsets are set with MM2's safety rules: only groups that are absent or EMPTY on the
target (``IDLE_STATES``), only where the target has no offset or a smaller one (offsets only move
forward); active groups are left alone and reported.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import NamedTuple

from mirrorflow.core.progress import GroupPosition
from mirrorflow.core.topic_partitions import TP

__all__ = ["IDLE_STATES", "Translation", "next_positions", "offsets_to_sync"]


# Target group states in which nobody consumes (``Dead``: the group does not exist): offsets may
# be committed for them.
IDLE_STATES = frozenset({"Empty", "Dead"})


class Translation(NamedTuple):
    """Where one partition's committed offsets go: the topic's name on the checkpoint's target, and
    the exact offset there (``OffsetTranslator.translate``, or ``.reverse`` for reverse
    checkpoints; None: nothing mirrored to point at yet)."""

    target_topic: str
    translate: Callable[[int], int | None]


def next_positions(
    committed: Mapping[str, Mapping[TP, tuple[int, str]]],
    translations: Mapping[TP, Translation],
    previous: Mapping[tuple[str, str, int], GroupPosition],
) -> tuple[list[GroupPosition], int]:
    """The positions to emit now, and how many committed offsets have no translation yet (outside
    what is mirrored). Only partitions with a translation count."""
    emit: list[GroupPosition] = []
    untranslated = 0
    for group, offsets in sorted(committed.items()):
        for (topic, partition), (upstream, metadata) in sorted(offsets.items()):
            translation = translations.get((topic, partition))
            if translation is None:
                continue
            downstream = translation.translate(upstream)
            if downstream is None:
                untranslated += 1
                continue
            last = previous.get((group, topic, partition))
            if last is None or downstream > last.downstream_offset or upstream < last.upstream_offset:
                emit.append(
                    GroupPosition(
                        group, topic, partition, translation.target_topic, upstream, downstream, metadata
                    )
                )
    return emit, untranslated


def offsets_to_sync(
    positions: Iterable[GroupPosition],
    states: Mapping[str, str],
    target_committed: Mapping[str, Mapping[TP, tuple[int, str]]],
) -> tuple[dict[str, dict[TP, int]], list[str]]:
    """Per idle target group, the remote partitions whose committed offset moves forward; and the
    groups left alone because they are active on the target."""
    sync: dict[str, dict[TP, int]] = {}
    active: set[str] = set()
    for p in positions:
        if states.get(p.group_id, "Dead") not in IDLE_STATES:
            active.add(p.group_id)
            continue
        tp = (p.remote_topic, p.partition)
        current = target_committed.get(p.group_id, {}).get(tp)
        if current is None or current[0] < p.downstream_offset:
            sync.setdefault(p.group_id, {})[tp] = p.downstream_offset
    return sync, sorted(active)
