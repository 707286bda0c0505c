"""The wire format's schema id, read and mapped: only the id bytes change, only on the sides declared
framed; an id the map lacks is refused there; an undeclared side is never changed, and refused only
where its id is one the source registry holds; each refusal names the one thing to do."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from mirrorflow.config.schemas import STRATEGIES
from mirrorflow.core.schema_ids import SchemaIdMap, UnknownSchemaId, schema_id, with_schema_id

PAYLOAD = b"\x02\x06abc"  # an Avro payload (or Protobuf's message indexes, then the message)


def wire(schema: int, payload: bytes = PAYLOAD) -> bytes:
    return b"\x00" + schema.to_bytes(4, "big") + payload


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (wire(7), 7),
        (wire(2**31 + 5), 2**31 + 5),
        (b"\x00\x00\x00\x00\x09", 9),  # an empty payload (Avro's empty record)
        (None, None),
        (b"", None),
        (b"\x00\x00\x00\x07", None),  # too short
        (b"\x01" + wire(7)[1:], None),  # another magic byte
        (b'{"id": 7}', None),
    ],
)
def test_schema_id_reads_the_wire_format_only(data: bytes | None, expected: int | None) -> None:
    assert schema_id(data) == expected


def test_with_schema_id_changes_the_four_id_bytes_only() -> None:
    assert with_schema_id(wire(7), 300) == wire(300)
    assert with_schema_id(wire(7, b""), 1) == wire(1, b"")


# t: keys and values framed; v: values framed, keys undeclared; u: both undeclared; any other topic
# (plain, or heartbeats) is not listed.
MAP = SchemaIdMap(
    ids=((1, 11), (2, 2), (3, 13)),
    held=((1, "t-key"), (2, "t-value"), (3, "t-value"), (5, "left.Out")),
    subjects=("t-key", "t-value"),
    framed_keys=("t",),
    framed_values=("t", "v"),
    undeclared_keys=("v", "u"),
    undeclared_values=("u",),
    registry="http://sr.primary",
    strategies=STRATEGIES,
)
# An int64 of 16777216, big-endian: in the wire format's shape, with schema id 1.
INT64 = (16_777_216).to_bytes(8, "big")


def test_remap_maps_each_framed_side() -> None:
    assert MAP.remap("t", wire(1), wire(3)) == (wire(11), wire(13))
    assert MAP.remap("v", None, wire(3)) == (None, wire(13))
    assert MAP.maps("v") and MAP.inspects("v") and not MAP.maps("u") and MAP.covers("u")


def test_an_id_the_target_shares_passes_as_the_same_bytes() -> None:
    value = wire(2)
    assert MAP.remap("v", None, value)[1] is value


def test_nulls_and_values_outside_the_wire_format_pass_untouched() -> None:
    assert MAP.remap("t", None, None) == (None, None)
    assert MAP.remap("t", b"plain", b'{"json": 1}') == (b"plain", b'{"json": 1}')


def test_a_side_not_declared_framed_is_never_changed() -> None:
    """An int64 key whose bytes look framed with a mapped id passes as it is where undeclared, unless
    that id is one the source registry holds (then refused); not looked at on a topic not listed."""
    unheld = (4 << 24).to_bytes(8, "big")  # schema id 4: no subject read holds it
    key = bytes(unheld)
    assert MAP.remap("v", key, wire(1))[0] is key
    assert MAP.remap("w", INT64, wire(99)) == (INT64, wire(99))  # plain or heartbeats: unlisted
    with pytest.raises(UnknownSchemaId) as caught:
        MAP.remap("u", INT64, None)
    assert (caught.value.side, caught.value.source_id, caught.value.framed, caught.value.holder) == (
        "key",
        1,
        False,
        "t-key",
    )


@pytest.mark.parametrize(("key", "value", "side"), [(wire(4), wire(1), "key"), (wire(1), wire(4), "value")])
def test_an_unmapped_id_on_a_framed_side_is_refused_naming_its_side(
    key: bytes, value: bytes, side: str
) -> None:
    with pytest.raises(UnknownSchemaId) as caught:
        MAP.remap("t", key, value)

    assert (caught.value.side, caught.value.source_id, caught.value.framed, caught.value.holder) == (
        side,
        4,
        True,
        None,
    )
    assert str(caught.value) == f"the record's {side} carries schema id 4"


def test_an_empty_map_lists_nothing() -> None:
    assert not SchemaIdMap() and not SchemaIdMap().covers("t")
    assert MAP and MAP.covers("v") and not MAP.covers("w")


def refusal(topic: str, source_id: int, *, framed: bool, holders: Sequence[str] | str = ()) -> str:
    try:
        MAP.remap(topic, None, wire(source_id))
    except UnknownSchemaId as unknown:
        assert unknown.framed is framed
        return MAP.refusal(topic, unknown, holders)
    raise AssertionError("not refused")


def test_an_undeclared_side_is_refused_naming_both_declarations() -> None:
    assert refusal("u", 3, framed=False) == (
        "its value looks like Confluent's wire format, with schema id 3, which the source registry's "
        "subject t-value holds, and the flow declares u's values neither framed nor plain: passed on as "
        "they are, they would keep the source's ids. Declare them: add u to "
        "mirrorflow.schema.registry.framed.value.topics (their ids are then mapped), or, if they are not "
        "in the wire format, to mirrorflow.schema.registry.plain.value.topics (they then pass as they are)"
    )


def test_an_id_of_a_subject_left_out_asks_to_include_it() -> None:
    assert refusal("v", 5, framed=True) == (
        "its value carries schema id 5, which the flow's schema sync did not map: the source registry's "
        "subject left.Out holds it, and mirrorflow.schema.registry.subjects.include and "
        "mirrorflow.schema.registry.subjects.exclude leave left.Out out of the sync. Let them include "
        "left.Out"
    )


def test_an_id_no_source_subject_holds_never_asks_to_include_a_subject() -> None:
    assert refusal("v", 9, framed=True, holders=[]) == (
        "its value carries schema id 9, and no subject of the source registry http://sr.primary holds "
        "that id, so no sync can map it: the record was not serialized with that registry, or v's values "
        "are not all in the wire format. Find what wrote it; if those values are plain, move v from "
        "mirrorflow.schema.registry.framed.value.topics to mirrorflow.schema.registry.plain.value.topics"
    )


@pytest.mark.parametrize(
    ("holders", "then"),
    [
        (
            ["other-value", "v-shop.Order"],
            "which the source registry's subject v-shop.Order holds, registered after this copy's schema "
            "sync. Run the flow again: its next sync maps it",
        ),
        (
            ["other-value"],
            "which the source registry's subjects other-value hold, none of them v's under "
            "TopicNameStrategy, TopicRecordNameStrategy, RecordNameStrategy: the sync maps the schemas of "
            "a topic's own subjects only. Register the schema under v-value in the source registry too "
            "(it keeps its id there), then run the flow again",
        ),
        (
            "the source schema registry http://sr.primary is unreachable",
            "which no subject the flow's schema sync read holds, and the source registry "
            "http://sr.primary could not be asked which subject does (the source schema registry "
            "http://sr.primary is unreachable). Ask it (GET /schemas/ids/9/versions), then declare or "
            "sync accordingly",
        ),
    ],
)
def test_an_id_the_sync_did_not_read_is_explained_by_the_subjects_holding_it(
    holders: list[str] | str, then: str
) -> None:
    assert refusal("v", 9, framed=True, holders=holders) == f"its value carries schema id 9, {then}"


def test_a_subject_of_a_strategy_not_named_asks_to_name_it() -> None:
    narrow = SchemaIdMap(framed_values=("v",), strategies=("TopicNameStrategy",))
    with pytest.raises(UnknownSchemaId) as caught:
        narrow.remap("v", None, wire(9))

    assert narrow.refusal("v", caught.value, ["shop.Order"]) == (
        "its value carries schema id 9, which the source registry's subject shop.Order holds, a subject "
        "of RecordNameStrategy, which mirrorflow.schema.registry.subject.name.strategies does not name. "
        "Add RecordNameStrategy to it"
    )
