"""Throughput of candidate write paths for the copy step, on two local clusters started here.

    .venv/bin/python bench/write_paths.py [--records 200000] [--skip-kafka-python]

Copies R records (1 KiB values, 16-byte keys, 2 headers, 6 partitions) from a source topic on one
cluster to a target topic on another:

  (ii)  ours: Spark tasks move the record batches as bytes (``spark_copy.copy_plan`` between
        ``batch_run.plan_run``/``commit``)

and, for reference, paths that decode every record:

  (i)   Spark's JVM reader and built-in Kafka sink: drops record timestamps
  (iii) Spark's JVM reader, kafka-python as the writer inside mapInArrow
  (iv)  librdkafka consumer + producer in one Python task per partition (the JVM only schedules)

The record-by-record path this product used before (Spark's JVM reader, mapInArrow, a librdkafka
producer) measured 0.5-0.6x of (iv) here.

Times the copy step only: the Spark session is started and warmed up (JVM reader, Python workers)
before any clock runs. Clusters live in a temp dir on free loopback ports and are always stopped.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import pyarrow as pa
from confluent_kafka import Consumer, Producer, TopicPartition
from kafka.admin import KafkaAdminClient
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from mirrorflow.app import batch_run
from mirrorflow.config.model import parse_config
from mirrorflow.copy.spark_copy import copy_plan
from mirrorflow_dev import local_kafka, paths, processes
from mirrorflow_dev.local_kafka import LocalCluster

PARTITIONS = 6
VALUE_SIZE = 1024
OLD_TIMESTAMP_MS = 1_000_000_000_000
SOURCE = "bench-source"


def create_topic(bootstrap: str, name: str) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics(
            {name: {"num_partitions": PARTITIONS, "replication_factor": 1}}, wait_for_metadata=True
        )
    finally:
        admin.close()


def produce_source(bootstrap: str, records: int) -> float:
    """Fill the source topic round-robin over its partitions; returns records/s."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": "50", "batch.size": "1000000", "acks": "all"}
    )
    payload = os.urandom(VALUE_SIZE + 64)
    start = time.monotonic()
    for i in range(records):
        while True:
            try:
                producer.produce(
                    SOURCE,
                    key=f"key-{i:012d}".encode(),  # 16 bytes
                    value=payload[i % 64 : i % 64 + VALUE_SIZE],
                    partition=i % PARTITIONS,
                    timestamp=OLD_TIMESTAMP_MS + i,
                    headers=[("trace", i.to_bytes(8, "big")), ("source", b"bench")],
                )
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(120):
        raise RuntimeError("source records were not all delivered")
    return records / (time.monotonic() - start)


def total_records(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-watermarks"})
    try:
        return sum(
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(PARTITIONS)
        )
    finally:
        consumer.close()


def read_source(spark: SparkSession, bootstrap: str) -> DataFrame:
    return (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", SOURCE)
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .option("includeHeaders", "true")
        .load()
    )


def builtin_sink(spark: SparkSession, src: str, dst: str, target: str) -> None:
    (
        read_source(spark, src)
        .select("key", "value", "headers", F.lit(target).alias("topic"), "partition")
        .write.format("kafka")
        .option("kafka.bootstrap.servers", dst)
        # The same batching as our writer, so the comparison is about the path, not the settings.
        .option("kafka.linger.ms", "20")
        .option("kafka.batch.size", "1000000")
        .option("kafka.acks", "all")
        .save()
    )


def kafka_python_writer(
    bootstrap: str, target: str
) -> Callable[[Iterable[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    def write(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from kafka import KafkaProducer

        producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=20, batch_size=1_000_000)
        written = 0
        for batch in batches:
            rows = batch.select(["key", "value", "headers", "partition", "timestamp"]).to_pylist()
            for r in rows:
                producer.send(
                    target,
                    key=r["key"],
                    value=r["value"],
                    headers=[(h["key"], h["value"]) for h in r["headers"] or ()],
                    partition=r["partition"],
                    timestamp_ms=int(r["timestamp"].timestamp() * 1000),
                )
            written += len(rows)
        producer.flush()
        producer.close()
        yield pa.RecordBatch.from_pylist([{"records": written}])

    return write


def librdkafka_task_copy(spark: SparkSession, src: str, dst: str, target: str) -> None:
    """(iv): each task consumes its source partition with librdkafka and produces every message
    (key, value, headers, timestamp) to the same target partition."""

    def copy(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        # Imported here: cloudpickle ships this function by value and cannot carry the classes.
        from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

        producer = Producer({"bootstrap.servers": dst, "linger.ms": "20", "batch.size": "1000000",
                             "enable.idempotence": "true", "acks": "all"})  # fmt: skip
        for batch in batches:
            for partition in batch.column("id").to_pylist():
                consumer = Consumer({"bootstrap.servers": src, "group.id": "bench-iv",
                                     "enable.partition.eof": "true", "fetch.max.bytes": "52428800",
                                     "max.partition.fetch.bytes": "10485760"})  # fmt: skip
                consumer.assign([TopicPartition(SOURCE, partition, 0)])
                done = False
                while not done:
                    for m in consumer.consume(10_000, 1.0):
                        err = m.error()
                        if err is not None:
                            done = err.code() == KafkaError._PARTITION_EOF
                            continue
                        while True:
                            try:
                                producer.produce(target, m.value(), m.key(), partition, headers=m.headers(),
                                                 timestamp=m.timestamp()[1])  # fmt: skip
                                break
                            except BufferError:
                                producer.poll(0.05)
                    producer.poll(0)
                consumer.close()
        if producer.flush(120):
            raise RuntimeError("records undelivered")
        yield pa.RecordBatch.from_pylist([{"id": 0}])

    spark.range(0, PARTITIONS, numPartitions=PARTITIONS).mapInArrow(copy, "id bigint").collect()


def bench(records: int, skip_kafka_python: bool, work: Path) -> list[tuple[str, float]]:
    ports = processes.free_ports(4)
    clusters = local_kafka.start_clusters(
        [("primary", ports[0], ports[1]), ("backup", ports[2], ports[3])],
        work / "kafka",
        heap_mb=1024,
        full_jit=True,
    )
    spark: SparkSession | None = None
    try:
        src = clusters["primary"].bootstrap
        create_topic(src, SOURCE)
        print(f"produced {records} source records at {produce_source(src, records):,.0f} records/s")
        spark = start_spark(work)
        return measure(spark, clusters, records, skip_kafka_python, work)
    finally:
        if spark is not None:
            spark.stop()
        local_kafka.stop_clusters(clusters)


def start_spark(work: Path) -> SparkSession:
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYSPARK_PYTHON"] = sys.executable
    return (
        SparkSession.builder.master("local[2]")
        .appName("mirrorflow-bench")
        .config("spark.jars", ",".join(str(j) for j in paths.spark_kafka_jars()))
        .config("spark.driver.memory", "2g")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.sql.warehouse.dir", str(work / "warehouse"))
        .getOrCreate()
    )


def measure(
    spark: SparkSession, clusters: dict[str, LocalCluster], records: int, skip_kafka_python: bool, work: Path
) -> list[tuple[str, float]]:
    src, dst = clusters["primary"].bootstrap, clusters["backup"].bootstrap
    spark.sparkContext.setLogLevel("ERROR")
    # Warm-up: load the Kafka reader's classes and start the Python workers before timing anything.
    assert read_source(spark, src).count() == records
    spark.range(10).mapInArrow(lambda bs: bs, "id bigint").collect()

    def timed(name: str, copy: Callable[[], object], target: str) -> tuple[str, float]:
        start = time.monotonic()
        copy()
        seconds = time.monotonic() - start
        written = total_records(dst, target)
        if written != records:
            raise RuntimeError(f"{name}: {written} records on the target, expected {records}")
        print(f"{name}: {seconds:.1f} s")
        return name, seconds

    results = []
    start = time.monotonic()
    assert read_source(spark, src).count() == records
    results.append(("(0) Spark JVM reader alone (count, no write)", time.monotonic() - start))

    create_topic(dst, "bench-builtin")
    results.append(
        timed(
            "(i) Spark Kafka sink (drops timestamps)",
            lambda: builtin_sink(spark, src, dst, "bench-builtin"),
            "bench-builtin",
        )
    )

    config = parse_config(
        "\n".join(
            [
                "clusters = primary, backup",
                f"primary.bootstrap.servers = {src}",
                f"backup.bootstrap.servers = {dst}",
                "replication.factor = 1",
                "offset-syncs.topic.replication.factor = 1",
                "heartbeats.topic.replication.factor = 1",
                f"mirrorflow.state.dir = {work / 'state'}",
                f"mirrorflow.max.records.per.partition = {records}",
                "primary->backup.enabled = true",
                f"primary->backup.topics = {SOURCE}",
            ]
        ),
        env={},
    )
    flow = config.flow("primary->backup")
    try:
        plan = batch_run.plan_run(config, flow.name, "bench")

        def ours() -> None:
            batch_run.execute_copy(
                config,
                flow,
                plan,
                lambda: copy_plan(spark.sparkContext, flow, plan),
            )

        results.append(timed("(ii) record batches as bytes (ours)", ours, f"primary.{SOURCE}"))
        # The flow also mirrors the source's heartbeats topic, as MM2 does: count the bench topic only.
        report = batch_run.commit_run(config, flow.name, "bench").report
        assert sum(p.records for p in report.partitions if p.topic == SOURCE) == records
    finally:
        batch_run.release_run(config, flow.name, "bench")

    create_topic(dst, "bench-librdkafka-task")
    results.append(
        timed(
            "(iv) librdkafka read + write per task (reference)",
            lambda: librdkafka_task_copy(spark, src, dst, "bench-librdkafka-task"),
            "bench-librdkafka-task",
        )
    )

    if not skip_kafka_python:
        create_topic(dst, "bench-kafka-python")
        writer = kafka_python_writer(dst, "bench-kafka-python")
        results.append(
            timed(
                "(iii) mapInArrow + kafka-python",
                lambda: read_source(spark, src).mapInArrow(writer, "records bigint").collect(),
                "bench-kafka-python",
            )
        )
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--skip-kafka-python", action="store_true", help="kafka-python: about 6k records/s")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="mirrorflow-bench-"))
    try:
        results = bench(args.records, args.skip_kafka_python, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    mib = args.records * (VALUE_SIZE + 16) / 2**20
    cpus = os.cpu_count()
    print(f"\n{args.records} records, {PARTITIONS} partitions, 1 KiB values, local[2], {cpus} CPUs\n")
    print("| write path | seconds | records/s | MiB/s |\n|---|---:|---:|---:|")
    for name, seconds in results:
        print(f"| {name} | {seconds:.1f} | {args.records / seconds:,.0f} | {mib / seconds:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
