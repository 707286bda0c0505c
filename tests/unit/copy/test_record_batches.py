"""Record batches as the copy moves them: which pass as bytes, what stamping changes, what
read_committed drops, and exact re-encoding. Batches are built with kafka-python's own encoder."""

from __future__ import annotations

import struct

import pytest
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.util import calc_crc32c

from mirrorflow.copy.record_batches import SourceBatch, SourceRecord, committed_batches, encode, stamp

NONE, GZIP, LZ4, ZSTD = 0, 1, 3, 4
LOG_APPEND_TIME, TRANSACTIONAL, CONTROL = 0x08, 0x10, 0x20

RECORDS = [
    SourceRecord(0, 1_000, b"k0", b"v0", (("h", b"1"), ("h", b"2"))),
    SourceRecord(1, 999, None, b"null key, older timestamp " * 20, ()),
    SourceRecord(2, 1_005, b"tombstone", None, (("binary", b"\x00\xff"), ("null", None))),
]


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


def test_a_whole_createtime_batch_inside_the_range_passes() -> None:
    batch = parse(build(base_offset=10))
    assert (batch.base_offset, batch.last_offset, batch.count) == (10, 12, 3)
    assert batch.passes(10, 13)
    assert batch.passes(0, 100)


@pytest.mark.parametrize(("start", "end"), [(11, 13), (10, 12), (13, 20)])
def test_a_batch_reaching_outside_the_range_does_not_pass(start: int, end: int) -> None:
    assert not parse(build(base_offset=10)).passes(start, end)


def test_a_compacted_batch_with_an_offset_gap_does_not_pass() -> None:
    gapped = [RECORDS[0], SourceRecord(2, 1_001, b"k2", b"v2", ())]
    batch = parse(build(gapped))
    assert (batch.count, batch.last_offset) == (2, 2)
    assert not batch.passes(0, 10)
    assert batch.records() == gapped


def test_a_logappendtime_batch_does_not_pass_and_its_records_carry_the_append_time() -> None:
    data = bytearray(build(base_offset=4, attributes=LOG_APPEND_TIME))
    struct.pack_into(">q", data, 35, 7_777)  # the broker's append time is the max timestamp
    batch = parse(bytes(data))
    assert not batch.passes(0, 100)
    assert [(r.timestamp, r.appended) for r in batch.records()] == [(7_777, True)] * 3
    assert [r.offset for r in batch.records()] == [4, 5, 6]


@pytest.mark.parametrize("codec", [NONE, ZSTD])
def test_written_records_carry_the_timestamps_their_writer_gave_them_also_under_logappendtime(
    codec: int,
) -> None:
    # A LogAppendTime remote topic stamps a copied batch so: its records keep their own timestamps.
    data = bytearray(build(base_offset=4, codec=codec, attributes=LOG_APPEND_TIME))
    struct.pack_into(">q", data, 35, 7_777)
    batch = parse(bytes(data))
    written = [r._replace(offset=r.offset - 4) for r in batch.written_records()]
    assert written == RECORDS
    assert parse(build(RECORDS)).written_records() == parse(build(RECORDS)).records() == RECORDS


@pytest.mark.parametrize("codec", [NONE, GZIP, LZ4, ZSTD])
def test_stamping_changes_only_the_writer_fields_and_keeps_the_records_and_codec(codec: int) -> None:
    source = build(base_offset=100, codec=codec, producer_id=42, attributes=TRANSACTIONAL)
    stamped = stamp(bytearray(source), producer_id=7, producer_epoch=3, base_sequence=250)
    batch = DefaultRecordBatch(bytes(stamped))
    assert batch.validate_crc()
    assert (batch.base_offset, batch.producer_id, batch.producer_epoch, batch.base_sequence) == (0, 7, 3, 250)
    assert not batch.is_transactional
    assert batch.compression_type == codec
    assert decoded(stamped) == RECORDS
    # Everything after the header is the source's bytes, compressed or not.
    assert stamped[61:] == source[61:]


def test_read_committed_drops_aborted_transactions_and_control_batches() -> None:
    plain = build(RECORDS[:1], base_offset=0)
    aborted = build(RECORDS[:2], base_offset=1, producer_id=5, attributes=TRANSACTIONAL)
    abort = control(3, producer_id=5, commit=False)
    committed = build(RECORDS[:1], base_offset=4, producer_id=5, attributes=TRANSACTIONAL)
    commit = control(5, producer_id=5, commit=True)
    other = build(RECORDS[:1], base_offset=6, producer_id=6, attributes=TRANSACTIONAL)
    fetched = committed_batches(plain + aborted + abort + committed + commit + other, [(5, 1)])
    assert [b.base_offset for b in fetched.batches] == [0, 4, 6]
    assert fetched.next_offset == 7


def test_read_uncommitted_keeps_transactional_records_but_never_control_batches() -> None:
    aborted = build(RECORDS[:2], base_offset=0, producer_id=5, attributes=TRANSACTIONAL)
    fetched = committed_batches(aborted + control(2, producer_id=5, commit=False), [])
    assert [b.base_offset for b in fetched.batches] == [0]
    assert fetched.next_offset == 3


def test_a_batch_cut_off_at_the_end_of_a_response_is_left_for_the_next_fetch() -> None:
    first, second = build(base_offset=0), build(base_offset=3)
    fetched = committed_batches(first + second[:40], [])
    assert [b.base_offset for b in fetched.batches] == [0]
    assert fetched.next_offset == 3
    assert committed_batches(second[:40], []).next_offset is None


@pytest.mark.parametrize("codec", [NONE, LZ4])
def test_reencoding_keeps_every_field_and_splits_at_the_size_limit(codec: int) -> None:
    many = [SourceRecord(i, 1_000 + i, b"k%d" % i, b"x" * 100, (("h", None),)) for i in range(50)]
    batches = encode(many, codec, max_bytes=1_000)
    assert len(batches) > 3
    again: list[SourceRecord] = []
    for data in batches:
        batch = DefaultRecordBatch(bytes(stamp(data, 1, 0, len(again))))
        assert batch.validate_crc()
        assert batch.last_offset_delta + 1 == batch.records_count  # no gaps: the broker requires it
        again += decoded(data, base=len(again))
    assert again == many


def test_reencoding_renumbers_the_records_of_a_compacted_batch() -> None:
    gapped = [RECORDS[0], SourceRecord(2, 1_001, b"k2", b"v2", ())]
    (data,) = encode(gapped, NONE, max_bytes=1 << 20)
    assert [(r.offset, r.key) for r in decoded(data)] == [(0, b"k0"), (1, b"k2")]
