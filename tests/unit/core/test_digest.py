"""The record digest: BLAKE2b over the documented encoding, and everything it is sensitive to."""

from __future__ import annotations

import hashlib
import struct

import pytest
from verify_cases import A, B, T, digest

from mirrorflow.core.digest import DIGEST_SCHEME, DigestRecord, SideDigest


def test_the_digest_is_blake2b_over_the_documented_encoding() -> None:
    encoded = (
        struct.pack(">q", T)
        + struct.pack(">i", 2) + b"k1"
        + struct.pack(">i", -1)  # value None
        + struct.pack(">i", 2)  # headers
        + struct.pack(">i", 1) + b"h" + struct.pack(">i", 1) + b"1"
        + struct.pack(">i", 1) + b"n" + struct.pack(">i", -1)
    )  # fmt: skip
    expected = hashlib.blake2b(encoded, digest_size=32, person=DIGEST_SCHEME.encode()).hexdigest()

    assert digest((b"k1", None, [("h", b"1"), ("n", None)], T)) == SideDigest(1, expected)
    assert digest() == SideDigest(0, hashlib.blake2b(digest_size=32, person=b"mirrorflow-v1").hexdigest())


def test_the_digest_is_deterministic_and_counts_records() -> None:
    assert digest(A, B) == digest(A, B)
    assert digest(A, B).records == 2
    assert len(digest(A).digest) == 64


def test_the_digest_depends_on_record_order() -> None:
    assert digest(A, B) != digest(B, A)
    assert digest(A, B).records == digest(B, A).records


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ((None, b"v", [], T), (b"", b"v", [], T)),  # null key vs empty key
        ((b"k", None, [], T), (b"k", b"", [], T)),  # tombstone vs empty value
        ((b"k", b"v", [("h", None)], T), (b"k", b"v", [("h", b"")], T)),  # null vs empty header value
        ((b"ab", b"c", [], T), (b"a", b"bc", [], T)),  # the key/value boundary moved
        ((b"k", b"v", [("ab", b"c")], T), (b"k", b"v", [("a", b"bc")], T)),  # header name/value boundary
        ((b"k", b"v", [], T), (b"k", b"v", [("h", b"")], T)),  # no header vs one empty header
        ((b"k", b"v", [], T), (b"k", b"v", [], T + 1)),  # timestamp, one millisecond apart
    ],
)
def test_records_that_differ_in_anything_kept_digest_differently(
    one: DigestRecord, other: DigestRecord
) -> None:
    assert digest(one) != digest(other)


def test_header_order_and_repeats_count() -> None:
    headers = [("trace", b"a"), ("source", b"demo"), ("trace", b"b")]

    assert digest((b"k", b"v", headers, T)) != digest((b"k", b"v", headers[::-1], T))
    assert digest((b"k", b"v", headers, T)) != digest((b"k", b"v", headers[:2], T))


def test_record_boundaries_count() -> None:
    # One record with two headers is not two records, nor one record and a header split off.
    assert digest((b"k", b"v", [("a", b"1"), ("b", b"2")], T)) != digest(
        (b"k", b"v", [("a", b"1")], T), (b"k", b"v", [("b", b"2")], T)
    )
