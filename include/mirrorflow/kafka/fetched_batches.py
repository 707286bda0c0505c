"""Kafka record batches as fetched: their header fields, their records decoded, and the batches a
read_committed consumer reads from one fetch response.

Invariants:
- read_committed as Kafka's consumer reads: control batches and aborted transactions are dropped,
  every other batch is kept whole, in offset order.
- A record's timestamp is the one its consumers see: a LogAppendTime batch's records carry the time
  the broker appended them (``SourceBatch.records``); ``SourceBatch.written_records`` gives the
  timestamps their writer wrote instead.
- A batch cut off at the end of a response is not returned: the next fetch starts at it.

Records of v2 batches are decoded by aiokafka's record codec (in C: three to four times
kafka-python's pure-Python one); kafka-python supplies the batch layout and legacy formats.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from aiokafka.record.default_records import DefaultRecordBatch
from kafka.record.default_records import DefaultRecordBase
from kafka.record.memory_records import MemoryRecords

from mirrorflow.core.metrics import Timestamps

_HEADER = DefaultRecordBase.HEADER_STRUCT
_ATTRIBUTES_AT = DefaultRecordBase.ATTRIBUTES_OFFSET
_ATTRIBUTES = struct.Struct(">h")
_CODEC_MASK = DefaultRecordBase.CODEC_MASK
_TRANSACTIONAL = DefaultRecordBase.TRANSACTIONAL_MASK
_CONTROL = DefaultRecordBase.CONTROL_MASK
_LOG_APPEND_TIME = DefaultRecordBase.TIMESTAMP_TYPE_MASK
_ABORT_MARKER = 0
# Base offset and length: what precedes every batch of any magic.
_LOG_OVERHEAD = 12
_LENGTH = struct.Struct(">i")


class SourceRecord(NamedTuple):
    """A decoded record; ``appended``: its timestamp is the time the broker appended it. A named
    tuple: the record path builds one per record, and a tuple is built in a third of a frozen
    dataclass's time."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    appended: bool = False


@dataclass(frozen=True)
class SourceBatch:
    """One whole batch as fetched, with the header fields the mirror decides by."""

    data: memoryview
    base_offset: int
    last_offset: int
    magic: int
    attributes: int = 0
    count: int = 0
    first_timestamp: int = 0
    max_timestamp: int = 0
    producer_id: int = -1
    producer_epoch: int = -1
    base_sequence: int = -1

    @classmethod
    def parse(cls, data: memoryview) -> SourceBatch:
        if data[16] < 2:
            legacy = next(iter(MemoryRecords(bytes(data))))
            records = list(legacy)
            return cls(data, records[0].offset, records[-1].offset, data[16], count=len(records))
        base, _, _, magic, _, attributes, delta, first_ts, max_ts, pid, epoch, sequence, count = (
            _HEADER.unpack_from(data)
        )
        return cls(data, base, base + delta, magic, attributes, count, first_ts, max_ts, pid, epoch, sequence)

    @property
    def codec(self) -> int:
        return int(self.attributes & _CODEC_MASK)

    @property
    def is_control(self) -> bool:
        return self.magic >= 2 and bool(self.attributes & _CONTROL)

    @property
    def is_transactional(self) -> bool:
        return self.magic >= 2 and bool(self.attributes & _TRANSACTIONAL)

    @property
    def is_log_append_time(self) -> bool:
        """The broker stamped the batch with its append time (a v2 batch's header alone says so)."""
        return self.magic >= 2 and bool(self.attributes & _LOG_APPEND_TIME)

    def records(self) -> list[SourceRecord]:
        """Every record of the batch, decoded; a LogAppendTime batch's records get its append time."""
        if self.magic < 2:
            return [
                SourceRecord(r.offset, r.timestamp, r.key, r.value, tuple(r.headers))
                for r in MemoryRecords(bytes(self.data))
            ]
        if self.is_log_append_time:
            return [
                SourceRecord(r.offset, self.max_timestamp, r.key, r.value, tuple(r.headers), appended=True)
                for r in DefaultRecordBatch(self.data)
            ]
        return [
            SourceRecord(r.offset, r.timestamp, r.key, r.value, tuple(r.headers))
            for r in DefaultRecordBatch(self.data)
        ]

    def written_records(self) -> list[SourceRecord]:
        """Every record of the batch with the timestamp it carries (the batch's first timestamp plus
        the record's delta), as its writer wrote it. For a v2 LogAppendTime batch that is not the
        time consumers see: the broker stamps its append time into the header alone."""
        if not self.is_log_append_time:
            return self.records()
        as_written = bytearray(self.data)
        # Read as CreateTime, each record's timestamp is its own (reading checks no CRC).
        _ATTRIBUTES.pack_into(as_written, _ATTRIBUTES_AT, self.attributes & ~_LOG_APPEND_TIME)
        return [
            SourceRecord(r.offset, r.timestamp, r.key, r.value, tuple(r.headers))
            for r in DefaultRecordBatch(memoryview(as_written))
        ]

    def timestamps(self) -> Timestamps:
        """The records' timestamps as far as the header tells without decoding: the first and the
        largest, the records' mean taken midway between them."""
        oldest = min(self.first_timestamp, self.max_timestamp)
        total = self.count * oldest + (self.max_timestamp - oldest) * self.count // 2
        return Timestamps(self.count, oldest, self.max_timestamp, total, self.max_timestamp)

    def is_abort_marker(self) -> bool:
        record = next(iter(DefaultRecordBatch(self.data)))
        return record.key is not None and struct.unpack_from(">h", record.key, 2)[0] == _ABORT_MARKER


@dataclass
class Fetched:
    """The committed batches of one fetch response's records for one partition, and where the next
    fetch starts (after the last whole batch, read or dropped; None: no whole batch came)."""

    batches: list[SourceBatch] = field(default_factory=list)
    next_offset: int | None = None


def committed_batches(records: bytes, aborted: Iterable[tuple[int, int]]) -> Fetched:
    """The batches a read_committed consumer reads from ``records`` (one fetch response's bytes for
    one partition), given its aborted transactions as (producer id, first offset) pairs."""
    pending = deque(sorted(aborted, key=lambda t: t[1]))
    aborted_producers: set[int] = set()
    fetched = Fetched()
    view = memoryview(records)
    position = 0
    # The response may end inside a batch (it is cut at the size limit): that part is fetched again.
    while position + _LOG_OVERHEAD <= len(view):
        end = position + _LOG_OVERHEAD + _LENGTH.unpack_from(view, position + 8)[0]
        if end > len(view):
            break
        batch = SourceBatch.parse(view[position:end])
        position = end
        fetched.next_offset = batch.last_offset + 1
        if batch.is_transactional or batch.is_control:
            while pending and pending[0][1] <= batch.last_offset:
                aborted_producers.add(pending.popleft()[0])
            if batch.is_control:
                if batch.is_abort_marker():
                    aborted_producers.discard(batch.producer_id)
                continue
            if batch.producer_id in aborted_producers:
                continue
        fetched.batches.append(batch)
    return fetched
