"""Kafka record batches as the mirror writes them: passed through as bytes, or re-encoded exactly.

A magic-v2 batch already holds every record's key, value, headers, offset and timestamp deltas and
the compression codec. Only its writer's header fields belong to whoever appends it. Invariants:
- A passed batch keeps every byte of its records (compressed ones stay compressed); only the base
  offset, partition leader epoch, producer id and epoch, base sequence, transactional bit and the
  CRC-32C over them change.
- A batch passes only when the target would store exactly its planned records with their
  timestamps: magic 2, CreateTime, no offset gaps (a compacted batch has fewer records than its
  offset span, which the broker refuses), and wholly inside the planned range.
- Every other batch is re-encoded record by record with the source's codec: key, value, headers
  (repeated, binary, null) and timestamp kept; a LogAppendTime batch's records carry the time the
  source appended them, which is what consumers of the source saw (MM2 does the same).

What is read, and how (read_committed, decoding), is ``kafka.fetched_batches``'. Records are encoded
by aiokafka's record codec (in C: three to four times kafka-python's pure-Python one); kafka-python
supplies the batch layout.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from aiokafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.default_records import DefaultRecordBase
from kafka.record.util import calc_crc32c

from mirrorflow.core.transforms import Encodable
from mirrorflow.kafka.fetched_batches import SourceBatch

_CRC_AT = DefaultRecordBase.CRC_OFFSET
_ATTRIBUTES_AT = DefaultRecordBase.ATTRIBUTES_OFFSET
# Base offset, length, partition leader epoch: before the CRC'd part, rewritten without it.
_PREFIX = struct.Struct(">qii")
# Attributes .. base sequence, the CRC'd writer fields.
_WRITER = struct.Struct(">h")
_PRODUCER = struct.Struct(">qhi")
_PRODUCER_AT = struct.calcsize(">qiibIhiqq")
_TRANSACTIONAL = DefaultRecordBase.TRANSACTIONAL_MASK


def passes(batch: SourceBatch, start: int, end: int) -> bool:
    """Whether ``batch`` can travel as it is for the planned range ``[start, end)``."""
    return (
        batch.magic == 2
        and not batch.is_log_append_time
        and batch.count == batch.last_offset - batch.base_offset + 1
        and start <= batch.base_offset
        and batch.last_offset < end
    )


def stamp(
    batch: bytearray,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    *,
    transactional: bool = False,
) -> bytearray:
    """``batch`` (a v2 batch's bytes) as this writer's, part of its open transaction or not
    (``transactional``): base offset 0, no leader epoch, the producer fields and the transactional
    bit set and the CRC-32C recomputed."""
    _, length, _ = _PREFIX.unpack_from(batch)
    _PREFIX.pack_into(batch, 0, 0, length, -1)
    attributes = _WRITER.unpack_from(batch, _ATTRIBUTES_AT)[0]
    attributes = attributes | _TRANSACTIONAL if transactional else attributes & ~_TRANSACTIONAL
    _WRITER.pack_into(batch, _ATTRIBUTES_AT, attributes)
    _PRODUCER.pack_into(batch, _PRODUCER_AT, producer_id, producer_epoch, base_sequence)
    struct.pack_into(">I", batch, _CRC_AT, calc_crc32c(memoryview(batch)[_ATTRIBUTES_AT:]))
    return batch


def encode(records: Sequence[Encodable], codec: int, max_bytes: int) -> list[bytearray]:
    """``records`` as v2 batches of at most ``max_bytes`` before compression each (a record larger
    than that gets a batch of its own), CreateTime, compressed with ``codec``, their producer fields
    still to be stamped."""
    batches: list[bytearray] = []
    builder = _builder(codec, max_bytes)
    index = 0
    for record in records:
        if builder.append(index, record.timestamp, record.key, record.value, list(record.headers)) is None:
            batches.append(builder.build())
            builder, index = _builder(codec, max_bytes), 0
            builder.append(index, record.timestamp, record.key, record.value, list(record.headers))
        index += 1
    if index:
        batches.append(builder.build())
    return batches


def _builder(codec: int, max_bytes: int) -> DefaultRecordBatchBuilder:
    return DefaultRecordBatchBuilder(2, codec, False, -1, -1, -1, max_bytes)
