"""Record batches as fetched: their records decoded (with the timestamps consumers see, or the
ones their writer wrote), and what read_committed drops."""

from __future__ import annotations

import pytest
from batch_samples import (
    GAPPED,
    LOG_APPEND_TIME,
    NONE,
    RECORDS,
    TRANSACTIONAL,
    ZSTD,
    appended_at,
    build,
    control,
    parse,
)

from mirrorflow.kafka.fetched_batches import committed_batches


def test_a_batch_header_names_its_offsets_and_count() -> None:
    batch = parse(build(base_offset=10))
    assert (batch.base_offset, batch.last_offset, batch.count) == (10, 12, 3)
    assert batch.records() == [r._replace(offset=r.offset + 10) for r in RECORDS]


def test_a_compacted_batch_holds_the_records_compaction_left() -> None:
    batch = parse(build(GAPPED))
    assert (batch.count, batch.last_offset) == (2, 2)
    assert batch.records() == GAPPED


def test_a_logappendtime_batch_has_its_records_carry_the_append_time() -> None:
    batch = parse(appended_at(build(base_offset=4, attributes=LOG_APPEND_TIME), 7_777))
    assert batch.is_log_append_time
    assert [(r.timestamp, r.appended) for r in batch.records()] == [(7_777, True)] * 3
    assert [r.offset for r in batch.records()] == [4, 5, 6]


@pytest.mark.parametrize("codec", [NONE, ZSTD])
def test_written_records_carry_the_timestamps_their_writer_gave_them_also_under_logappendtime(
    codec: int,
) -> None:
    # A LogAppendTime remote topic stamps a copied batch so: its records keep their own timestamps.
    batch = parse(appended_at(build(base_offset=4, codec=codec, attributes=LOG_APPEND_TIME), 7_777))
    written = [r._replace(offset=r.offset - 4) for r in batch.written_records()]
    assert written == RECORDS
    assert parse(build(RECORDS)).written_records() == parse(build(RECORDS)).records() == RECORDS


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
