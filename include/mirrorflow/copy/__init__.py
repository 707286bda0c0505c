"""The copy: planned record ranges moved from the source to the target inside Spark, as the flow's
writer. ``batch_copy`` copies one group of planned partitions (``source_reader``, ``produce_loop``,
``partition_copy``, ``record_batches``), ``spark_copy`` spreads a plan over Spark tasks (one job per
batch run, standing tasks for a DR window: ``standing_task``), ``spark_verify`` reads both sides'
ranges with Spark's Kafka source.

Public surface: ``spark_copy.copy_plan``, ``spark_copy.StandingCopy``, ``spark_verify.verify_ranges``
for the Spark jobs; ``batch_copy.copy_partitions`` (with ``CopySettings``, ``copy_result``) for a plan
of heartbeats only, copied in the calling process. Only ``spark_copy`` and ``spark_verify`` import
pyspark (``make lint``).
"""
