"""Record batches as a broker stores them, built with kafka-python's own encoder: what the batch
codec tests (``tests/unit/kafka/test_fetched_batches.py``, ``tests/unit/copy/test_record_batches.py``)
read, stamp and re-encode."""

from __future__ import annotations

import struct

from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.util import calc_crc32c

from mirrorflow.kafka.fetched_batches import SourceBatch, SourceRecord

NONE, GZIP, LZ4, ZSTD = 0, 1, 3, 4
LOG_APPEND_TIME, TRANSACTIONAL, CONTROL = 0x08, 0x10, 0x20

RECORDS = [
    SourceRecord(0, 1_000, b"k0", b"v0", (("h", b"1"), ("h", b"2"))),
    SourceRecord(1, 999, None, b"null key, older timestamp " * 20, ()),
    SourceRecord(2, 1_005, b"tombstone", None, (("binary", b"\x00\xff"), ("null", None))),
]
GAPPED = [RECORDS[0], SourceRecord(2, 1_001, b"k2", b"v2", ())]


def build(
    records: list[SourceRecord] = RECORDS,
    base_offset: int = 0,
    codec: int = NONE,
    producer_id: int = -1,
    attributes: int = 0,
) -> bytes:
    """A batch as a broker stores it at ``base_offset``, with extra attribute bits set."""
    builder = DefaultRecordBatchBuilder(
        2, codec, False, producer_id, 0 if producer_id >= 0 else -1, 0, 1 << 20
    )
    for r in records:
        builder.append(r.offset - records[0].offset, r.timestamp, r.key, r.value, list(r.headers))
    data = builder.build()
    struct.pack_into(">q", data, 0, base_offset)
    if attributes:
        struct.pack_into(">h", data, 21, struct.unpack_from(">h", data, 21)[0] | attributes)
        struct.pack_into(">I", data, 17, calc_crc32c(memoryview(data)[21:]))
    return bytes(data)


def appended_at(data: bytes, append_time: int) -> bytes:
    """A LogAppendTime batch as the broker stamps it: its append time is the max timestamp."""
    stamped = bytearray(data)
    struct.pack_into(">q", stamped, 35, append_time)
    return bytes(stamped)


def control(base_offset: int, producer_id: int, commit: bool) -> bytes:
    marker = SourceRecord(0, 5, struct.pack(">hh", 0, 1 if commit else 0), b"\x00\x00\x00\x00\x00\x00", ())
    return build([marker], base_offset, producer_id=producer_id, attributes=TRANSACTIONAL | CONTROL)


def parse(data: bytes) -> SourceBatch:
    return SourceBatch.parse(memoryview(data))


def decoded(data: bytes | bytearray, base: int = 0) -> list[SourceRecord]:
    return [
        SourceRecord(base + r.offset, r.timestamp, r.key, r.value, tuple(r.headers))
        for r in DefaultRecordBatch(bytes(data))
    ]
