"""Spark's built-in Kafka sink drops the record timestamp, which is why mirrorflow has its own writer.

The sink (``df.write.format("kafka")``) writes key, value, headers, topic and partition, but builds
each ``ProducerRecord`` with a null timestamp, so the producer stamps the send time: a mirror written
with it would lose every source timestamp (and with it time-based retention and offset lookups).
"""

from __future__ import annotations

import dataclasses
import time
from datetime import UTC, datetime

import pytest
from mirror_helpers import create_topic
from pyspark.sql import SparkSession
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from mirrorflow_dev import sample_data
from mirrorflow_dev.local_kafka import LocalCluster
from mirrorflow_dev.sample_data import BASE_TIMESTAMP_MS, Record, sample_record

pytestmark = [pytest.mark.spark, pytest.mark.kafka]

_SCHEMA = StructType(
    [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField(
            "headers",
            ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())])),
        ),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("timestamp", TimestampType()),
    ]
)


def test_builtin_kafka_sink_stamps_send_time_not_the_given_timestamp(
    spark: SparkSession, kafka_clusters: dict[str, LocalCluster], unique_name: str
) -> None:
    bootstrap = kafka_clusters["primary"].bootstrap
    create_topic(bootstrap, unique_name, 2)
    records = {p: [sample_record(unique_name, p, i) for i in range(8)] for p in range(2)}
    # Every given timestamp is in 2001 (BASE_TIMESTAMP_MS), years before the send time.
    assert all(r.timestamp < BASE_TIMESTAMP_MS + 10_000 for rs in records.values() for r in rs)
    rows = [
        (
            r.key,
            r.value,
            [(k, v) for k, v in r.headers],
            unique_name,
            p,
            datetime.fromtimestamp(r.timestamp / 1000, tz=UTC),
        )
        for p, rs in records.items()
        for r in rs
    ]
    df = spark.createDataFrame(rows, _SCHEMA).coalesce(1)  # one write task, rows in list order
    assert df.columns == ["key", "value", "headers", "topic", "partition", "timestamp"]

    before_ms = int(time.time() * 1000) - 1
    df.write.format("kafka").option("kafka.bootstrap.servers", bootstrap).save()
    after_ms = int(time.time() * 1000) + 1

    for p, expected in records.items():
        got = sample_data.read_partition(bootstrap, unique_name, p)
        # Key, value, headers (repeated keys, binary values), partition and order are written exactly...
        assert [dataclasses.replace(r, timestamp=0) for r in got] == [
            dataclasses.replace(r, timestamp=0) for r in expected
        ]
        # ...but not one given timestamp: each record carries the time it was sent.
        stamps = [r.timestamp for r in got]
        assert all(before_ms <= t <= after_ms for t in stamps), (
            f"timestamps {stamps} not within the send window [{before_ms}, {after_ms}]: if they equal "
            f"{[r.timestamp for r in expected]}, this Spark's Kafka sink now keeps record timestamps"
        )
        assert not {r.timestamp for r in expected} & set(stamps)


def test_sample_records_round_trip_with_their_timestamps(
    kafka_clusters: dict[str, LocalCluster], unique_name: str
) -> None:
    """Control: the broker itself keeps a producer-given timestamp (CreateTime), so the loss above is
    the sink's, not the topic's."""
    bootstrap = kafka_clusters["primary"].bootstrap
    create_topic(bootstrap, unique_name, 1)
    expected: list[Record] = [sample_record(unique_name, 0, i) for i in range(8)]
    sample_data.produce(sample_data.producer(bootstrap), unique_name, 0, expected)
    assert sample_data.read_partition(bootstrap, unique_name, 0) == expected
