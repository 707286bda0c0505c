"""Writes one planned partition's records to the target with librdkafka, from Arrow batches.

Runs inside a Spark task (``mapInArrow``), once per planned source partition, and never imports
pyspark. Invariants:
- Records reach the remote partition in source order, with key, value, headers and timestamp as read.
- The producer is idempotent and gapless: what an attempt leaves on the target is always a prefix of
  the planned records. So before writing, ``target end - target_start`` records are known to be there
  already, and exactly that many are skipped: re-running a plan never duplicates a record.
- Any delivery failure fails the task; the caller commits nothing for it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from mirrorflow.errors import TargetStateError, TransientError
from mirrorflow.plan import PartitionPlan, PartitionResult

# Columns the writer reads, as produced by Spark's Kafka source.
READ_COLUMNS = ("topic", "partition", "offset", "key", "value", "timestamp", "headers")

RESULT_SCHEMA = pa.schema(
    [
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("records", pa.int64()),
        ("skipped", pa.int64()),
        ("bytes", pa.int64()),
        ("target_start", pa.int64()),
        ("sync_points", pa.string()),
    ]
)

# Settings that make the gapless-prefix invariant hold; the user's producer settings cannot undo them.
_PRODUCER_GUARANTEES = {
    "enable.idempotence": "true",
    "enable.gapless.guarantee": "true",
    "acks": "all",
}
_PRODUCER_DEFAULTS = {
    "linger.ms": "20",
    "batch.size": "1000000",
    "queue.buffering.max.kbytes": "131072",
    "queue.buffering.max.messages": "500000",
}
_TIMEOUT_S = 30.0


@dataclass
class _Progress:
    """Running state of one partition's copy."""

    plan: PartitionPlan
    already_written: int
    records: int = 0
    bytes: int = 0
    prev_offset: int = -1
    sync_points: list[tuple[int, int]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def on_delivery(self, err: object, _msg: object) -> None:
        if err is not None:
            self.errors.append(str(err))


def target_end_offset(conf: Mapping[str, str], topic: str, partition: int) -> int:
    consumer = Consumer({**conf, "group.id": "mirrorflow-watermarks", "enable.auto.commit": "false"})
    try:
        _low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=_TIMEOUT_S)
        return int(high)
    except KafkaException as exc:
        raise TransientError(
            f"cannot read the end offset of {topic}-{partition} on the target: {exc}"
        ) from exc
    finally:
        consumer.close()


def write_partition(
    batches: Iterator[pa.RecordBatch],
    plans: Mapping[tuple[str, int], PartitionPlan],
    producer_conf: Mapping[str, str],
) -> Iterator[pa.RecordBatch]:
    """Copy the records of one Spark partition (= one planned source partition); yield one result row."""
    state: _Progress | None = None
    producer: Producer | None = None
    for batch in batches:
        if batch.num_rows == 0:
            continue
        if state is None:
            key = (batch.column("topic")[0].as_py(), batch.column("partition")[0].as_py())
            plan = plans[key]
            written = target_end_offset(producer_conf, plan.remote_topic, plan.partition) - plan.target_start
            if written < 0:
                raise TargetStateError(
                    f"remote partition {plan.remote_topic}-{plan.partition} ends before the planned start "
                    f"{plan.target_start}: it was truncated or recreated since the plan was made"
                )
            state = _Progress(plan, written, prev_offset=plan.source_start - 1)
            producer = Producer(
                {
                    **_PRODUCER_DEFAULTS,
                    **producer_conf,
                    **_PRODUCER_GUARANTEES,
                    # Only failures call back into Python: a callback per record costs the copy rate.
                    "delivery.report.only.error": True,
                    "on_delivery": state.on_delivery,
                }
            )
        assert producer is not None
        _write_batch(producer, state, batch)
    if state is None or producer is None:
        return
    remaining = producer.flush(_TIMEOUT_S * 4)
    if remaining or state.errors:
        raise TransientError(
            f"{state.plan.remote_topic}-{state.plan.partition}: {remaining} records undelivered, "
            f"errors: {state.errors[:3]}; the plan can be re-run safely"
        )
    _check_result(state, producer_conf)
    yield pa.RecordBatch.from_pylist(
        [
            {
                "topic": state.plan.topic,
                "partition": state.plan.partition,
                "records": state.records,
                "skipped": min(state.already_written, state.records),
                "bytes": state.bytes,
                "target_start": state.plan.target_start,
                "sync_points": json.dumps(state.sync_points),
            }
        ],
        schema=RESULT_SCHEMA,
    )


def _write_batch(producer: Producer, state: _Progress, batch: pa.RecordBatch) -> None:
    n = batch.num_rows
    offsets = batch.column("offset").to_numpy()
    first_index = state.records
    # Sync points: records whose source offset does not follow the previous one.
    prev = offsets[:-1] + 1
    gaps = [0] if offsets[0] != state.prev_offset + 1 else []
    gaps.extend(int(i) + 1 for i in (offsets[1:] != prev).nonzero()[0])
    target_base = state.plan.target_start + first_index
    state.sync_points.extend((int(offsets[i]), target_base + i) for i in gaps)
    state.prev_offset = int(offsets[-1])
    state.records += n
    state.bytes += _payload_bytes(batch)

    skip = max(0, state.already_written - first_index)
    if skip >= n:
        return
    topic, partition = state.plan.remote_topic, state.plan.partition
    keys = batch.column("key").to_pylist()
    values = batch.column("value").to_pylist()
    # Spark hands timestamps as microseconds; Kafka wants milliseconds.
    millis = pc.divide(batch.column("timestamp").cast(pa.int64()), 1000).to_pylist()
    # Headers of the whole batch as one flat list of (key, value) pairs, sliced per record: far
    # cheaper than converting each record's list of structs.
    header_col = batch.column("headers")
    flat = header_col.flatten()
    pairs = list(zip(flat.field("key").to_pylist(), flat.field("value").to_pylist(), strict=True))
    counts = header_col.value_lengths().fill_null(0).to_pylist()
    start = sum(counts[:skip])
    produce = producer.produce
    for i in range(skip, n):
        end = start + counts[i]
        record_headers = pairs[start:end] if end > start else None
        start = end
        while True:
            try:
                produce(
                    topic, value=values[i], key=keys[i], partition=partition, timestamp=millis[i],
                    headers=record_headers,
                )  # fmt: skip
                break
            except BufferError:
                producer.poll(0.05)
    producer.poll(0)


def _payload_bytes(batch: pa.RecordBatch) -> int:
    total = 0
    for name in ("key", "value"):
        lengths = pc.binary_length(batch.column(name))
        total += int(pc.sum(lengths).as_py() or 0)
    return total


def _check_result(state: _Progress, producer_conf: Mapping[str, str]) -> None:
    plan = state.plan
    if state.already_written > state.records:
        raise TargetStateError(
            f"remote partition {plan.remote_topic}-{plan.partition} holds {state.already_written} records "
            f"past the planned start {plan.target_start}, more than the {state.records} planned: something "
            "else writes to the remote topic. Nothing was committed; stop the other writer."
        )
    end = target_end_offset(producer_conf, plan.remote_topic, plan.partition)
    if end != plan.target_start + state.records:
        raise TargetStateError(
            f"remote partition {plan.remote_topic}-{plan.partition} ends at {end}, expected "
            f"{plan.target_start + state.records} after this copy: something else writes to the remote "
            "topic. Nothing was committed; stop the other writer."
        )


def result_from_row(row: Mapping[str, object]) -> PartitionResult:
    return PartitionResult(
        topic=str(row["topic"]),
        partition=int(str(row["partition"])),
        records=int(str(row["records"])),
        skipped=int(str(row["skipped"])),
        bytes=int(str(row["bytes"])),
        target_start=int(str(row["target_start"])),
        sync_points=tuple((int(a), int(b)) for a, b in json.loads(str(row["sync_points"]))),
    )
