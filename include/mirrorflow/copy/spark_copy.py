"""The Spark side of a run: execute exactly the plan it is handed, nothing more.

Spark's JVM Kafka source reads each planned source range (``assign`` with per-partition starting and
ending offsets, ``read_committed`` so aborted transactions are never mirrored, headers included),
records in offset order. The planned partitions are spread over as many Spark tasks as Spark has
cores (``Plan.task_groups``), each task reading its partitions one after another: a task costs about
0.3 s to set up, so a task per partition made runs over many small partitions slow. ``mapInArrow``
hands each task's records to ``record_writer.write_partitions`` as Arrow batches, which produces them
to the remote partitions. Planned records deleted from the source before they were read fail the copy
with ``SourceDataLostError``: a retry would read the same planned range again. With ``spark_verify``
(which reads the same way), the only modules that import pyspark.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping
from functools import reduce

import pyarrow as pa
from py4j.protocol import Py4JJavaError
from pyspark.errors.exceptions.captured import CapturedException
from pyspark.sql import DataFrame, SparkSession

from mirrorflow.config.clients import librdkafka_config, spark_reader_options
from mirrorflow.copy.record_writer import READ_COLUMNS, RESULT_SCHEMA, copy_result, write_partitions
from mirrorflow.core.plan import CopyResult, PartitionPlan, Plan
from mirrorflow.errors import AuthorizationError, MirrorError, SourceDataLostError, error_class

_SPARK_TYPES = {pa.string(): "string", pa.int32(): "int", pa.int64(): "bigint"}
RESULT_DDL = ", ".join(f"{f.name} {_SPARK_TYPES[f.type]}" for f in RESULT_SCHEMA)


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
        return write_partitions(iter(batches), plans, producer_conf)

    # One Spark task per group: each group's read coalesced into one partition, the groups united.
    groups = plan.task_groups(spark.sparkContext.defaultParallelism)
    records = reduce(
        DataFrame.union, (read_ranges(spark, g, source_consumer_props).coalesce(1) for g in groups)
    )
    try:
        rows = records.mapInArrow(write, RESULT_DDL).collect()
    except (Py4JJavaError, CapturedException) as error:
        reason = source_data_loss(error) if isinstance(error, Py4JJavaError) else None
        if reason is not None:
            raise SourceDataLostError(
                f"flow {plan.flow} run {plan.run_id}: planned source records are no longer on the source: "
                f"{reason}"
            ) from error
        classified = task_error(str(error))
        if classified is None:
            raise
        raise classified from error
    return copy_result(plan, (r.asDict() for r in rows))


# A copy task's own error, as Spark's failure quotes its traceback: "mirrorflow.errors.<Class>: <message>".
_TASK_ERROR = re.compile(r"mirrorflow\.errors\.(\w+): ([^\n]*)")
_REFUSED = re.compile(r"org\.apache\.kafka\.common\.errors\.(\w*AuthorizationException): ([^\n]*)")


def task_error(failure: str) -> MirrorError | None:
    """The classified error behind a failed Spark job: one a copy task raised (same class and
    message), or a cluster refusing the reader's login; None for anything else."""
    raised = _TASK_ERROR.search(failure)
    kind = error_class(raised.group(1)) if raised else None
    if raised and kind is not None:
        return kind.from_message(raised.group(2))
    refused = _REFUSED.search(failure)
    if refused:
        return AuthorizationError(
            f"the source cluster refused the mirror's login: {refused.group(2)} ({refused.group(1)}). "
            "Grant it READ on the mirrored topics (README: Secured clusters); nothing was committed."
        )
    return None


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
