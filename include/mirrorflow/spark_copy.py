"""The Spark side of a run: execute exactly the plan it is handed, nothing more.

Spark's JVM Kafka source reads each planned source range (``assign`` with per-partition starting and
ending offsets, ``read_committed`` so aborted transactions are never mirrored, headers included): one
Spark task per planned partition, records in offset order. ``mapInArrow`` hands each task's records
to ``record_writer.write_partition`` as Arrow batches, which produces them to the remote partition.
The only module that imports pyspark.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from mirrorflow.clients import librdkafka_config, spark_reader_options
from mirrorflow.plan import CopyResult, PartitionResult, Plan
from mirrorflow.record_writer import READ_COLUMNS, RESULT_SCHEMA, result_from_row, write_partition

_SPARK_TYPES = {pa.string(): "string", pa.int32(): "int", pa.int64(): "bigint"}
RESULT_DDL = ", ".join(f"{f.name} {_SPARK_TYPES[f.type]}" for f in RESULT_SCHEMA)


def read_plan(spark: SparkSession, plan: Plan, consumer_props: Mapping[str, str]) -> DataFrame:
    """The planned source records; one Spark partition per planned source partition."""
    assign: dict[str, list[int]] = {}
    starting: dict[str, dict[str, int]] = {}
    ending: dict[str, dict[str, int]] = {}
    for p in plan.partitions:
        assign.setdefault(p.topic, []).append(p.partition)
        starting.setdefault(p.topic, {})[str(p.partition)] = p.source_start
        ending.setdefault(p.topic, {})[str(p.partition)] = p.source_end
    return (
        spark.read.format("kafka")
        # Larger fetches than the consumer's 1 MiB per partition; the cluster's consumer settings win.
        .option("kafka.max.partition.fetch.bytes", "10485760")
        .option("kafka.fetch.max.bytes", "52428800")
        .options(**spark_reader_options(consumer_props))
        .option("kafka.isolation.level", "read_committed")
        .option("assign", json.dumps(assign))
        .option("startingOffsets", json.dumps(starting))
        .option("endingOffsets", json.dumps(ending))
        .option("includeHeaders", "true")
        # Records missing from a planned range are lost data, never a reason to skip ahead.
        .option("failOnDataLoss", "true")
        .load()
        .select(*READ_COLUMNS)
    )


def copy_plan(
    spark: SparkSession,
    plan: Plan,
    source_consumer_props: Mapping[str, str],
    target_producer_props: Mapping[str, str],
) -> CopyResult:
    """Copy every planned partition; partitions whose range held no committed record report zero."""
    if not plan.partitions:
        return CopyResult(plan.flow, plan.run_id, ())
    plans = {(p.topic, p.partition): p for p in plan.partitions}
    producer_conf = librdkafka_config(target_producer_props)

    def write(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return write_partition(iter(batches), plans, producer_conf)

    rows = read_plan(spark, plan, source_consumer_props).mapInArrow(write, RESULT_DDL).collect()
    done = {(r.topic, r.partition): result_from_row(r.asDict()) for r in rows}
    results = tuple(
        done.get((p.topic, p.partition)) or PartitionResult(p.topic, p.partition, 0, 0, 0, p.target_start)
        for p in plan.partitions
    )
    return CopyResult(plan.flow, plan.run_id, results)
