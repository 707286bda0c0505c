"""The wire format's schema id, read and mapped: only the id bytes change, only on the sides the sync
covers, and an id the sync did not map is refused."""

from __future__ import annotations

import pytest

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


MAP = SchemaIdMap(ids=((1, 11), (2, 2), (3, 13)), key_topics=("t",), value_topics=("t", "v"))


def test_remap_maps_each_covered_side() -> None:
    assert MAP.remap("t", wire(1), wire(3)) == (wire(11), wire(13))
    assert MAP.remap("v", wire(1), wire(3)) == (wire(1), wire(13))  # v's keys are not covered
    assert MAP.remap("other", wire(99), wire(99)) == (wire(99), wire(99))


def test_an_id_the_target_shares_passes_as_the_same_bytes() -> None:
    value = wire(2)
    assert MAP.remap("v", None, value)[1] is value


def test_nulls_and_values_outside_the_wire_format_pass_untouched() -> None:
    assert MAP.remap("t", None, None) == (None, None)
    assert MAP.remap("t", b"plain", b'{"json": 1}') == (b"plain", b'{"json": 1}')


@pytest.mark.parametrize(("key", "value", "side"), [(wire(4), wire(1), "key"), (wire(1), wire(4), "value")])
def test_an_unmapped_id_is_refused_naming_its_side(key: bytes, value: bytes, side: str) -> None:
    with pytest.raises(UnknownSchemaId) as caught:
        MAP.remap("t", key, value)

    assert (caught.value.side, caught.value.source_id) == (side, 4)
    assert str(caught.value) == (
        f"the record's {side} carries schema id 4, which is not a schema of the subjects this flow syncs"
    )


def test_an_empty_map_covers_nothing() -> None:
    assert not SchemaIdMap() and SchemaIdMap().subjects() == []
    assert MAP.subjects() == ["t-key", "t-value", "v-value"]
    assert MAP and MAP.covers("v") and not MAP.covers("w")
