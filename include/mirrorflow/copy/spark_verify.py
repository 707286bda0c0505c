"""The Spark side of a verification: read both sides of every range of a verify plan and compare them.

``verify_ranges`` reads each range of a ``VerifyPlan`` (``mirrorflow.core.verify_plan``) on the source and
on the target with Spark's Kafka source, committed records only (``read_ranges``), and compares them
inside the Spark tasks (through ``mapInArrow``): a range by its digest (``digest_partitions``), a
compacted or LogAppendTime range record by record (``record_keys``, paired by source offset in
``compare_records``). The target side of a range copied to a LogAppendTime remote topic is read
from its record batches instead (``kafka.record_reads.written_records``): Spark's source would
show the target's append time, not the timestamp the copy wrote. A Spark module: it imports pyspark, and
only the verify job (``jobs/mirror_verify.py``) imports it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager

import pyarrow as pa
from py4j.protocol import Py4JJavaError
from pyspark.errors.exceptions.captured import CapturedException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from mirrorflow.config.clients import spark_reader_options
from mirrorflow.config.model import FlowConfig
from mirrorflow.copy import spark_copy
from mirrorflow.core.plan import PartitionPlan
from mirrorflow.core.verdicts import VerifyResult, verdicts
from mirrorflow.core.verify_arrow import (
    DIGEST_DDL,
    DIGEST_INPUT_COLUMNS,
    DIGEST_INPUT_DDL,
    FOUND_DDL,
    KEY_DDL,
    compare_records,
    digest_partitions,
    input_batch,
    record_keys,
)
from mirrorflow.core.verify_plan import SOURCE, TARGET, VerifyPlan, VerifyRange, span
from mirrorflow.errors import PlanError, SourceDataLostError
from mirrorflow.kafka import record_reads

__all__ = ["verify_ranges"]

# Columns the digest reads, as produced by Spark's Kafka source.
READ_COLUMNS = ("topic", "partition", "offset", "key", "value", "timestamp", "headers")
SPAN_DDL = "topic string, partition int, start bigint, end bigint"


def verify_ranges(spark: SparkSession, flow: FlowConfig, plan: VerifyPlan) -> VerifyResult:
    """Read both sides of every range of ``flow`` (``_reads``: committed records only, headers
    included, records missing from a range fail the read) and compare them, the source as the
    flow's transforms make it: ranges by digest, compacted and LogAppendTime ones record by record
    (``VerifyRange.by_record``).

    Relies on Spark's Kafka source reading each topic-partition's range as one Spark partition, in
    offset order (so it does with neither ``minPartitions`` nor ``maxRecordsPerPartition`` set, as
    ``read_ranges`` sets neither). Coalescing and union keep that: they concatenate whole partitions.
    ``digest_partitions`` and ``verdicts`` check it, so a reader that split or reordered a range fails
    the verification instead of reporting a false difference. The records of a range compared
    record by record are paired by source offset across tasks (partitioned by range and source
    offset, then sorted).

    Records of a range deleted since the plan was made (retention on either cluster) fail it with
    ``PlanError``: plan the verification again.
    """
    if not plan.ranges:
        return VerifyResult(plan.flow, plan.run_id, ())
    transforms = flow.transforms
    tasks = spark.sparkContext.defaultParallelism
    by_digest = [r for r in plan.ranges if not r.by_record]
    by_record = [r for r in plan.ranges if r.by_record]

    def digest(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return digest_partitions(iter(batches), plan, transforms)

    def keys(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return record_keys(iter(batches), plan, transforms)

    def compare(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return compare_records(iter(batches))

    with _job_errors(plan):
        digests = _reads(spark, flow, by_digest).mapInArrow(digest, DIGEST_DDL).collect() if by_digest else []
        found = []
        if by_record:
            found = (
                _reads(spark, flow, by_record)
                .mapInArrow(keys, KEY_DDL)
                # Both sides of a source offset meet in one task, source first.
                .repartition(tasks, "range", "source_offset")
                .sortWithinPartitions("range", "source_offset", "side")
                .mapInArrow(compare, FOUND_DDL)
                .collect()
            )
    return verdicts(plan, (r.asDict() for r in digests), (r.asDict() for r in found))


def _reads(spark: SparkSession, flow: FlowConfig, ranges: Sequence[VerifyRange]) -> DataFrame:
    """Both sides of ``ranges`` in ``DIGEST_INPUT_COLUMNS``, one Spark partition per topic-partition
    read (a few tasks, each with whole partitions one after another)."""
    reads: list[DataFrame] = []
    partitions = 0  # Spark partitions of the reads: one per topic-partition read
    # A partition has one range per read (one Kafka source option per partition): gap-split ranges of
    # a partition go to successive reads.
    for layer in _layers(ranges):
        for side, props in ((SOURCE, flow.source.consumer), (TARGET, flow.target.consumer)):
            # read_ranges reads [source_start, source_end) of topic-partition: here the range to read,
            # on whichever cluster ``props`` reach. Empty target ranges need no read.
            spans = [span(r, side) for r in layer if side == SOURCE or (r.records and not r.log_append_time)]
            wanted = [PartitionPlan(t, p, a, b, t, 0) for t, p, a, b in spans]
            if wanted:
                read = read_ranges(spark, wanted, props)
                reads.append(read.withColumn("side", F.lit(side)).select(*DIGEST_INPUT_COLUMNS))
                partitions += len(wanted)
        written = [span(r, TARGET) for r in layer if r.records and r.log_append_time]
        if written:
            reads.append(_written_reads(spark, flow.target.consumer, written))
            partitions += len(written)
    records = reads[0]
    for read in reads[1:]:
        records = records.union(read)
    # A task costs about 0.3 s to set up: a few tasks, each digesting whole partitions one after another.
    # (Counted from the plan: asking Spark would look up the Kafka offsets once more.)
    tasks = spark.sparkContext.defaultParallelism
    return records.coalesce(tasks) if partitions > tasks else records


def _written_reads(
    spark: SparkSession, consumer_props: Mapping[str, str], spans: Sequence[tuple[str, int, int, int]]
) -> DataFrame:
    """The target records of ``spans`` (topic, partition, start, end) with the timestamps their
    batches carry (``kafka.record_reads.written_records``), one Spark partition per span, in
    ``DIGEST_INPUT_COLUMNS``."""
    props = dict(consumer_props)

    def read(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            columns = (batch.column(name).to_pylist() for name in ("topic", "partition", "start", "end"))
            for topic, partition, start, end in zip(*columns, strict=True):
                for records in record_reads.written_records(props, (topic, partition), start, end):
                    yield input_batch(TARGET, topic, partition, records)

    wanted = spark.sparkContext.parallelize(spans, len(spans))
    return (
        spark.createDataFrame(wanted, SPAN_DDL)
        .mapInArrow(read, DIGEST_INPUT_DDL)
        .select(*DIGEST_INPUT_COLUMNS)
    )


@contextmanager
def _job_errors(plan: VerifyPlan) -> Iterator[None]:
    """A failed Spark job as the error behind it: records of the plan gone from either cluster is a
    ``PlanError`` (plan again), an error a task raised is raised again as its class."""
    try:
        yield
    except (Py4JJavaError, CapturedException) as error:
        # Spark's reason when records a read needs are gone, found as the copy finds it.
        lost = source_data_loss(error) if isinstance(error, Py4JJavaError) else None
        classified = spark_copy.task_error(str(error))
        if isinstance(classified, SourceDataLostError):
            lost = str(classified)  # the record batch reader's
        if lost is not None:
            raise PlanError(
                f"flow {plan.flow} verification {plan.run_id}: records of the verify plan are no longer "
                f"on the source or the target ({lost}); plan the verification again"
            ) from error
        if classified is None:
            raise
        raise classified from error


def read_ranges(
    spark: SparkSession, partitions: Iterable[PartitionPlan], consumer_props: Mapping[str, str]
) -> DataFrame:
    """The planned source records of these partitions; one Spark partition per source partition."""
    assign: dict[str, list[int]] = {}
    starting: dict[str, dict[str, int]] = {}
    ending: dict[str, dict[str, int]] = {}
    for p in partitions:
        assign.setdefault(p.topic, []).append(p.partition)
        starting.setdefault(p.topic, {})[str(p.partition)] = p.source_start
        ending.setdefault(p.topic, {})[str(p.partition)] = p.source_end
    return (
        spark.read.format("kafka")
        # Larger fetches than the consumer's 1 MiB per partition; the cluster's consumer settings win.
        .option("kafka.max.partition.fetch.bytes", "10485760")
        .option("kafka.fetch.max.bytes", "52428800")
        # Each task's consumer otherwise ends on a fetch that waits the default 500 ms for data that
        # will not come: half a second per planned partition, 50 s for 200 small partitions.
        .option("kafka.fetch.max.wait.ms", "10")
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


def source_data_loss(error: Py4JJavaError) -> str | None:
    """Spark's reason when the job failed because planned records are gone from the source (its
    Kafka reader's error condition ``KAFKA_DATA_LOSS.*``, with ``failOnDataLoss``), else None."""
    cause = error.java_exception
    while cause is not None:
        kafka_error = cause.getClass().getName() == "org.apache.spark.sql.kafka010.KafkaIllegalStateException"
        if kafka_error and str(cause.getCondition()).startswith("KAFKA_DATA_LOSS"):
            # The reason follows advice meant for streaming queries (failOnDataLoss), which is no option.
            return " ".join(str(cause.getMessage()).split("Reason:", 1)[-1].split())
        cause = cause.getCause()
    return None


def _layers(ranges: Sequence[VerifyRange]) -> list[list[VerifyRange]]:
    """The ranges in layers holding at most one range per source partition and per target partition."""
    layers: list[list[VerifyRange]] = []
    used: list[set[tuple[str, str, int]]] = []
    for r in ranges:
        keys = {("source", r.topic, r.partition), ("target", r.remote_topic, r.partition)}
        for layer, taken in zip(layers, used, strict=True):
            if not keys & taken:
                layer.append(r)
                taken.update(keys)
                break
        else:
            layers.append([r])
            used.append(keys)
    return layers
