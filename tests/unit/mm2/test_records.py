"""MM2's Checkpoint and Heartbeat records, byte for byte as connect-mirror-client writes them."""

from __future__ import annotations

import pytest

from mirrorflow.errors import WireFormatError
from mirrorflow.mm2.records import Checkpoint, Heartbeat


def i16(n: int) -> bytes:
    return n.to_bytes(2, "big", signed=True)


def i32(n: int) -> bytes:
    return n.to_bytes(4, "big", signed=True)


def i64(n: int) -> bytes:
    return n.to_bytes(8, "big", signed=True)


def test_checkpoint_wire_format() -> None:
    cp = Checkpoint(
        "billing", "primary.orders", 2, upstream_offset=1500, downstream_offset=1420, metadata="m"
    )

    assert cp.key() == i16(7) + b"billing" + i16(14) + b"primary.orders" + i32(2)
    assert cp.value() == i16(0) + i64(1500) + i64(1420) + i16(1) + b"m"
    assert Checkpoint.decode(cp.key(), cp.value()) == cp


def test_heartbeat_wire_format() -> None:
    hb = Heartbeat("primary", "backup", 1_795_000_000_000)

    assert hb.key() == i16(7) + b"primary" + i16(6) + b"backup"
    assert hb.value() == i16(0) + i64(1_795_000_000_000)
    assert Heartbeat.decode(hb.key(), hb.value()) == hb


def test_non_ascii_names_count_utf8_bytes() -> None:
    cp = Checkpoint("grüppe", "primary.tøpic", 0, 1, 1)
    assert cp.key()[:2] == i16(len("grüppe".encode())) and Checkpoint.decode(cp.key(), cp.value()) == cp


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        (i16(1) + b"g" + i16(1) + b"t" + i32(0), i16(1) + i64(1) + i64(1) + i16(0), "version 1"),
        (
            i16(1) + b"g" + i16(1) + b"t" + i32(0),
            i16(0) + i64(1) + i64(1) + i16(0) + b"x",
            "unexpected bytes",
        ),
        (i16(1) + b"g" + i16(1) + b"t", i16(0) + i64(1) + i64(1) + i16(0), "record ends at byte"),
        (i16(-1) + i16(1) + b"t" + i32(0), i16(0) + i64(1) + i64(1) + i16(0), "null or negative STRING"),
    ],
)
def test_malformed_checkpoints_are_refused_with_the_reason(key: bytes, value: bytes, message: str) -> None:
    with pytest.raises(WireFormatError, match=message):
        Checkpoint.decode(key, value)


def test_a_heartbeat_of_an_unknown_version_is_refused() -> None:
    with pytest.raises(WireFormatError, match="heartbeat value version 3"):
        Heartbeat.decode(Heartbeat("a", "b", 1).key(), i16(3) + i64(1))
