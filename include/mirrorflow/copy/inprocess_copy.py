"""Executes a plan of heartbeats only in the plan task's own process, without Spark.

Starting Spark costs about ten seconds, and a run whose only new records are the heartbeat it just
emitted would otherwise start it every time. Here the few planned records are read with librdkafka
and handed, as Arrow batches shaped like Spark's Kafka source rows, to the same
``record_writer.write_partitions`` the Spark job uses, so the copy keeps the same invariants (source
order, idempotent gapless producer, an earlier attempt's records recognised and never written twice).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import cast

import pyarrow as pa
from confluent_kafka import Message

from mirrorflow.config.clients import librdkafka_config
from mirrorflow.config.model import FlowConfig
from mirrorflow.copy.range_reader import read_range
from mirrorflow.copy.record_writer import copy_result, write_partitions
from mirrorflow.core.plan import CopyResult, PartitionPlan, Plan

# Spark's Kafka source row, as mapInArrow hands it to the writer (timestamps in microseconds).
_HEADER = pa.struct([("key", pa.string()), ("value", pa.binary())])
READ_SCHEMA = pa.schema(
    [
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("timestamp", pa.timestamp("us")),
        ("headers", pa.list_(_HEADER)),
    ]
)


def copy_in_process(flow: FlowConfig, plan: Plan) -> CopyResult:
    """Copy every planned partition of ``plan`` from the flow's source to its target."""
    plans = {(p.topic, p.partition): p for p in plan.partitions}
    batches = (_batch(p, list(_records(flow, p))) for p in plan.partitions)
    rows = write_partitions(
        (b for b in batches if b.num_rows), plans, librdkafka_config(flow.target.producer)
    )
    return copy_result(plan, (row for batch in rows for row in batch.to_pylist()))


def _records(flow: FlowConfig, p: PartitionPlan) -> Iterator[Message]:
    return read_range(
        flow.source.consumer, flow.source.alias, p.topic, p.partition, p.source_start, p.source_end
    )


def _batch(p: PartitionPlan, messages: list[Message]) -> pa.RecordBatch:
    columns: Mapping[str, list[object]] = {
        "topic": [p.topic] * len(messages),
        "partition": [p.partition] * len(messages),
        "offset": [m.offset() for m in messages],
        "key": [m.key() for m in messages],
        "value": [m.value() for m in messages],
        "timestamp": [m.timestamp()[1] * 1000 for m in messages],
        "headers": [[{"key": k, "value": v} for k, v in _headers(m)] for m in messages],
    }
    return pa.RecordBatch.from_pydict(dict(columns), schema=READ_SCHEMA)


def _headers(m: Message) -> list[tuple[str, bytes | None]]:
    return cast("list[tuple[str, bytes | None]]", m.headers() or [])
