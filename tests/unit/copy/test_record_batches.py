"""Record batches as the copy writes them: which pass as bytes, what stamping changes, and exact
re-encoding."""

from __future__ import annotations

import pytest
from batch_samples import (
    GAPPED,
    GZIP,
    LOG_APPEND_TIME,
    LZ4,
    NONE,
    RECORDS,
    TRANSACTIONAL,
    ZSTD,
    appended_at,
    build,
    decoded,
    parse,
)
from kafka.record.default_records import DefaultRecordBatch

from mirrorflow.copy.record_batches import encode, passes, stamp
from mirrorflow.kafka.fetched_batches import SourceRecord


def test_a_whole_createtime_batch_inside_the_range_passes() -> None:
    batch = parse(build(base_offset=10))
    assert passes(batch, 10, 13)
    assert passes(batch, 0, 100)


@pytest.mark.parametrize(("start", "end"), [(11, 13), (10, 12), (13, 20)])
def test_a_batch_reaching_outside_the_range_does_not_pass(start: int, end: int) -> None:
    assert not passes(parse(build(base_offset=10)), start, end)


def test_a_compacted_batch_with_an_offset_gap_does_not_pass() -> None:
    assert not passes(parse(build(GAPPED)), 0, 10)


def test_a_logappendtime_batch_does_not_pass() -> None:
    assert not passes(parse(appended_at(build(base_offset=4, attributes=LOG_APPEND_TIME), 7_777)), 0, 100)


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


@pytest.mark.parametrize("source_attributes", [0, TRANSACTIONAL])
@pytest.mark.parametrize("codec", [NONE, ZSTD])
def test_stamping_transactional_sets_the_transactional_bit_and_keeps_the_rest(
    codec: int, source_attributes: int
) -> None:
    source = build(base_offset=100, codec=codec, producer_id=42, attributes=source_attributes)
    stamped = stamp(bytearray(source), producer_id=7, producer_epoch=3, base_sequence=250, transactional=True)
    batch = DefaultRecordBatch(bytes(stamped))
    assert batch.validate_crc()
    assert batch.is_transactional and not batch.is_control_batch
    assert (batch.base_offset, batch.producer_id, batch.producer_epoch, batch.base_sequence) == (0, 7, 3, 250)
    assert batch.compression_type == codec
    assert decoded(stamped) == RECORDS
    assert stamped[61:] == source[61:]
    # Stamped again, as a non-transactional writer's: the bit is cleared, the rest as before.
    again = DefaultRecordBatch(bytes(stamp(stamped, 7, 3, 250)))
    assert again.validate_crc() and not again.is_transactional
    assert again.compression_type == codec


def test_reencoded_batches_are_stamped_transactional_like_passed_ones() -> None:
    """Re-encoded batches leave ``encode`` without a writer; the copy stamps them as it stamps
    batches passed as bytes."""
    for data in encode(RECORDS, LZ4, max_bytes=1 << 20):
        assert not DefaultRecordBatch(bytes(data)).is_transactional
        batch = DefaultRecordBatch(bytes(stamp(data, 9, 1, 0, transactional=True)))
        assert batch.validate_crc() and batch.is_transactional
        assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (9, 1, 0)
        assert decoded(data) == RECORDS


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
    (data,) = encode(GAPPED, NONE, max_bytes=1 << 20)
    assert [(r.offset, r.key) for r in decoded(data)] == [(0, b"k0"), (1, b"k2")]
