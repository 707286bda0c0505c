"""Which checkpoints a run emits: only mirrored partitions, only forward, or when the group rewound."""

from __future__ import annotations

from mirrorflow.core.group_positions import Translation, next_positions, offsets_to_sync
from mirrorflow.core.progress import Batch, GroupPosition
from mirrorflow.core.translation import OffsetTranslator

# orders-0: source [100, 120) -> target [0, 20), gapless; orders-1: nothing mirrored.
ORDERS_0 = OffsetTranslator([Batch("orders", 0, "primary.orders", 100, 120, 0, 20, 20, 0)])
TRANSLATIONS = {("orders", 0): Translation("primary.orders", ORDERS_0.translate)}


def position(group: str, upstream: int, downstream: int) -> GroupPosition:
    return GroupPosition(group, "orders", 0, "primary.orders", upstream, downstream, "meta")


def test_committed_offsets_of_mirrored_partitions_are_translated() -> None:
    committed = {
        "billing": {("orders", 0): (105, "meta"), ("orders", 1): (7, "")},
        "audit": {("orders", 0): (50, "")},  # before the first mirrored record: no translation
        "late": {("orders", 0): (130, "meta")},  # ahead of the mirror: capped at the mirrored end
    }

    emit, untranslated = next_positions(committed, TRANSLATIONS, {})

    assert emit == [position("billing", 105, 5), position("late", 130, 20)]
    assert untranslated == 1


def test_only_forward_moves_or_a_rewound_group_are_emitted_again() -> None:
    previous = {
        ("same", "orders", 0): position("same", 105, 5),
        ("ahead", "orders", 0): position("ahead", 130, 20),  # still not mirrored further
        ("moved", "orders", 0): position("moved", 105, 5),
        ("rewound", "orders", 0): position("rewound", 110, 10),
    }
    committed = {
        g: {("orders", 0): (u, "meta")}
        for g, u in [("same", 105), ("ahead", 140), ("moved", 107), ("rewound", 102)]
    }

    emit, _ = next_positions(committed, TRANSLATIONS, previous)

    assert emit == [position("moved", 107, 7), position("rewound", 102, 2)]


def test_reverse_checkpoints_translate_positions_on_a_remote_topic_back_to_its_upstream_topic() -> None:
    # On backup, for backup->primary: primary.orders-0 holds copies of orders-0 [100, 120).
    reverse = {("primary.orders", 0): Translation("orders", ORDERS_0.reverse)}
    committed = {
        "billing": {("primary.orders", 0): (5, "meta"), ("orders", 0): (3, "")},  # backup's own orders
        "drained": {("primary.orders", 0): (20, "")},  # read everything mirrored
        "odd": {("primary.orders", 0): (21, "")},  # past what the batch log knows
    }

    emit, untranslated = next_positions(committed, reverse, {})

    assert emit == [
        GroupPosition("billing", "primary.orders", 0, "orders", 5, 105, "meta"),
        GroupPosition("drained", "primary.orders", 0, "orders", 20, 120, ""),
    ]
    assert untranslated == 1


def test_group_offsets_sync_only_idle_groups_and_only_forward() -> None:
    positions = [
        position("new", 105, 5),  # absent on the target
        position("empty", 110, 10),  # EMPTY, behind on the target
        position("ahead", 110, 10),  # EMPTY, already further on the target
        position("busy", 110, 10),  # consuming on the target
    ]
    states = {"empty": "Empty", "ahead": "Empty", "busy": "Stable", "new": "Dead"}
    committed = {"empty": {("primary.orders", 0): (4, "")}, "ahead": {("primary.orders", 0): (12, "")}}

    sync, active = offsets_to_sync(positions, states, committed)

    assert sync == {"new": {("primary.orders", 0): 5}, "empty": {("primary.orders", 0): 10}}
    assert active == ["busy"]
