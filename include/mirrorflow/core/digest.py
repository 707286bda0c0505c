"""The record digest: what a mirror must keep of records, hashed so that two sequences of records
compare by a short digest.

The digest (``RecordDigest``) is BLAKE2b over the records in offset order, each encoded without
ambiguity (every field length-prefixed, a null distinct from an empty byte string): timestamp (ms),
key, value, and the headers, names and values in their order. It is sensitive to the order of the
records and of the headers. Offsets are never hashed: the remote partition numbers the records
differently. Neither are the timestamp type, compression, producer ids or leader epochs: a mirror
does not keep them either. ``record_digest`` is one record's own digest, of the same encoding: what
a comparison record by record compares.

Invariant: two sequences of records share a digest only if they are the same records in the same
order (or BLAKE2b collides); the digest of a sequence fed in pieces is the digest of the whole.

Standard library only, no I/O: it runs inside Spark tasks, in the control plane and in unit tests
alike.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = [
    "DIGEST_SCHEME",
    "DigestRecord",
    "Header",
    "RecordDigest",
    "SideDigest",
    "digest_records",
    "record_digest",
]

# Names the record encoding below; part of the hash (BLAKE2b personalisation), so digests of two
# encodings never compare equal by accident. Change it with the encoding.
DIGEST_SCHEME = "mirrorflow-v1"

Header = tuple[str, bytes | None]
# (key, value, headers, timestamp in ms): what a mirror must keep of a record.
DigestRecord = tuple[bytes | None, bytes | None, Sequence[Header], int]


_I32 = struct.Struct(">i").pack
_I64 = struct.Struct(">q").pack
_NULL = _I32(-1)


def _field(data: bytes | None) -> bytes:
    return _NULL if data is None else _I32(len(data)) + data


def _encode(key: bytes | None, value: bytes | None, headers: Sequence[Header], timestamp_ms: int) -> bytes:
    """One record, prefix-free: a stream of encoded records decodes back to exactly one sequence of
    records, so two sequences share a digest only if BLAKE2b collides."""
    parts = [_I64(timestamp_ms), _field(key), _field(value), _I32(len(headers))]
    for name, header_value in headers:
        parts.append(_field(name.encode()))
        parts.append(_field(header_value))
    return b"".join(parts)


@dataclass(frozen=True)
class SideDigest:
    """What one cluster holds in a range: how many records, and their digest (hex)."""

    records: int
    digest: str


class RecordDigest:
    """The running digest of one side of a range, fed records in offset order."""

    def __init__(self) -> None:
        self._hash = hashlib.blake2b(digest_size=32, person=DIGEST_SCHEME.encode())
        self.records = 0

    def update(
        self, key: bytes | None, value: bytes | None, headers: Sequence[Header], timestamp_ms: int
    ) -> None:
        self._hash.update(_encode(key, value, headers, timestamp_ms))
        self.records += 1

    def update_many(self, records: Iterable[DigestRecord]) -> None:
        """``records`` in the order given: the same digest as ``update`` for each, in one call to the
        hash (far cheaper for the many records of a Spark task)."""
        encoded = [_encode(*record) for record in records]
        self._hash.update(b"".join(encoded))
        self.records += len(encoded)

    def result(self) -> SideDigest:
        return SideDigest(self.records, self._hash.hexdigest())


def record_digest(record: DigestRecord) -> bytes:
    """One record's own digest (16 bytes, the same encoding as the range digest): what a record by
    record comparison compares."""
    return hashlib.blake2b(_encode(*record), digest_size=16, person=DIGEST_SCHEME.encode()).digest()


def digest_records(records: Iterable[DigestRecord]) -> SideDigest:
    """The digest of ``records`` (key, value, headers, timestamp in ms), in the order given."""
    digest = RecordDigest()
    for key, value, headers, timestamp_ms in records:
        digest.update(key, value, headers, timestamp_ms)
    return digest.result()
