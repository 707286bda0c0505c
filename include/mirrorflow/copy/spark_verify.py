"""The Spark side of a verification: read both sides of every range of a verify plan and digest them.

``verify_ranges`` reads each range of a ``VerifyPlan`` (``mirrorflow.core.verify``) on the source and
on the target with Spark's Kafka source, committed records only (``read_ranges``), and
digests the records inside the Spark tasks (``digest_partitions``, through ``mapInArrow``); the
verdicts compare both sides' counts and digests. A Spark module: it imports pyspark, and only the
verify job (``jobs/mirror_verify.py``) imports it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence

import pyarrow as pa
from py4j.protocol import Py4JJavaError
from pyspark.errors.exceptions.captured import CapturedException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from mirrorflow.config.clients import spark_reader_options
from mirrorflow.config.model import FlowConfig
from mirrorflow.copy import spark_copy
from mirrorflow.core.plan import PartitionPlan
from mirrorflow.core.verify import (
    DIGEST_DDL,
    DIGEST_INPUT_COLUMNS,
    SOURCE,
    TARGET,
    VerifyPlan,
    VerifyRange,
    VerifyResult,
    digest_partitions,
    span,
    verdicts,
)
from mirrorflow.errors import PlanError

__all__ = ["verify_ranges"]

# Columns the digest reads, as produced by Spark's Kafka source.
READ_COLUMNS = ("topic", "partition", "offset", "key", "value", "timestamp", "headers")


def verify_ranges(spark: SparkSession, flow: FlowConfig, plan: VerifyPlan) -> VerifyResult:
    """Read both sides of every range of ``flow`` with Spark's Kafka source (``read_ranges``:
    committed records only, headers included, records missing from a range fail the read) and
    compare them, the source as the flow's transforms make it.

    Relies on Spark's Kafka source reading each topic-partition's range as one Spark partition, in
    offset order (so it does with neither ``minPartitions`` nor ``maxRecordsPerPartition`` set, as
    ``read_ranges`` sets neither). Coalescing and union keep that: they concatenate whole partitions.
    ``digest_partitions`` and ``verdicts`` check it, so a reader that split or reordered a range fails
    the verification instead of reporting a false difference.

    Records of a range deleted since the plan was made (retention on either cluster) fail it with
    ``PlanError``: plan the verification again.
    """
    if not plan.ranges:
        return VerifyResult(plan.flow, plan.run_id, ())
    source_consumer_props, target_consumer_props = flow.source.consumer, flow.target.consumer
    transforms = flow.transforms
    reads: list[DataFrame] = []
    partitions = 0  # Spark partitions of the reads: one per topic-partition read
    # A partition has one range per read (one Kafka source option per partition): gap-split ranges of
    # a partition go to successive reads.
    for layer in _layers(plan.ranges):
        for side, props in ((SOURCE, source_consumer_props), (TARGET, target_consumer_props)):
            # read_ranges reads [source_start, source_end) of topic-partition: here the range to read,
            # on whichever cluster ``props`` reach. Empty target ranges need no read.
            spans = [span(r, side) for r in layer]
            wanted = [PartitionPlan(t, p, a, b, t, 0) for t, p, a, b in spans if b > a]
            if wanted:
                read = read_ranges(spark, wanted, props)
                reads.append(read.withColumn("side", F.lit(side)).select(*DIGEST_INPUT_COLUMNS))
                partitions += len(wanted)
    records = reads[0]
    for read in reads[1:]:
        records = records.union(read)
    # A task costs about 0.3 s to set up: a few tasks, each digesting whole partitions one after another.
    # (Counted from the plan: asking Spark would look up the Kafka offsets once more.)
    tasks = spark.sparkContext.defaultParallelism
    if partitions > tasks:
        records = records.coalesce(tasks)

    def digest(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return digest_partitions(iter(batches), plan, transforms)

    try:
        rows = records.mapInArrow(digest, DIGEST_DDL).collect()
    except (Py4JJavaError, CapturedException) as error:
        # Spark's reason when records a read needs are gone, found as the copy finds it.
        lost = source_data_loss(error) if isinstance(error, Py4JJavaError) else None
        if lost is not None:
            raise PlanError(
                f"flow {plan.flow} verification {plan.run_id}: records of the verify plan are no longer "
                f"on the source or the target ({lost}); plan the verification again"
            ) from error
        classified = spark_copy.task_error(str(error))
        if classified is None:
            raise
        raise classified from error
    return verdicts(plan, (r.asDict() for r in rows))


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
