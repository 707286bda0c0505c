"""Transforms on real brokers and Spark: the target holds exactly what the chain makes of the source,
a retried copy reads it back instead of writing it twice, a consumer positioned at a dropped record
fails over to the next copied one, and a failing transform fails the run naming the record."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest
from mirror_helpers import commit_group, create_topic, run_flow
from pyspark.sql import SparkSession

from mirrorflow.app import batch_run
from mirrorflow.app.batch_run import checkpoint_run
from mirrorflow.app.verify import plan_verification
from mirrorflow.config.model import MirrorConfig
from mirrorflow.copy.spark_copy import copy_plan
from mirrorflow.copy.spark_verify import verify_ranges
from mirrorflow.errors import TransformError
from mirrorflow.mm2.records import Checkpoint
from mirrorflow.store.offsets_store import OffsetsStore
from mirrorflow_dev import sample_data
from mirrorflow_dev.local_kafka import LocalCluster
from mirrorflow_dev.sample_data import Record

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

FLOW = "primary->backup"
HOOKS = "mirrorflow_dev.sample_hooks"
TRANSFORMS = f"""\
primary->backup.transforms = strip, tests
primary->backup.transforms.strip.type = org.apache.kafka.connect.transforms.DropHeaders
primary->backup.transforms.strip.headers = trace
primary->backup.transforms.tests.type = python
primary->backup.transforms.tests.function = {HOOKS}:drop_test_keys
"""


def _records(topic: str, partition: int, count: int) -> list[Record]:
    """Sample records, every fifth one test traffic (key ``test-<index>``)."""
    return [
        dataclasses.replace(r, key=f"test-{i}".encode()) if i % 5 == 0 else r
        for i, r in ((i, sample_data.sample_record(topic, partition, i)) for i in range(count))
    ]


def _expected(source: list[Record]) -> list[Record]:
    """What the chain makes of the source: test traffic dropped, ``trace`` headers gone."""
    return [
        dataclasses.replace(r, headers=tuple(h for h in r.headers if h[0] != "trace"))
        for r in source
        if not (r.key or b"").startswith(b"test-")
    ]


def test_the_target_holds_what_the_chain_makes_of_the_source_and_translation_skips_dropped_records(
    kafka_clusters: dict[str, LocalCluster],
    write_config: Callable[[str], MirrorConfig],
    spark: SparkSession,
    unique_name: str,
) -> None:
    primary, backup = kafka_clusters["primary"], kafka_clusters["backup"]
    topic, remote, group = unique_name, f"primary.{unique_name}", f"{unique_name}-app"
    create_topic(primary.bootstrap, topic, 2)
    producer = sample_data.producer(primary.bootstrap)
    for p in range(2):
        sample_data.produce(producer, topic, p, _records(topic, p, 40))
    config = write_config(f"primary->backup.enabled = true\nprimary->backup.topics = {topic}\n{TRANSFORMS}")
    flow = config.flow(FLOW)

    plan = batch_run.plan_run(config, FLOW, "run-1")
    try:
        batch_run.execute_copy(config, flow, plan, lambda: copy_plan(spark.sparkContext, flow, plan))
        # A retried copy of the same plan finds every record on the target: it reads them back
        # through the chain and writes nothing twice.
        batch_run.execute_copy(config, flow, plan, lambda: copy_plan(spark.sparkContext, flow, plan))
        report = batch_run.commit_run(config, FLOW, "run-1").report
    finally:
        batch_run.release_run(config, FLOW, "run-1")

    for p in range(2):
        source = sample_data.read_partition(primary.bootstrap, topic, p)
        assert sample_data.read_partition(backup.bootstrap, remote, p) == _expected(source)
    assert [(r.records, r.skipped) for r in report.partitions] == [(32, 32), (32, 32)]
    store = OffsetsStore(config.offsets_db_url)
    # Each dropped record is an offset gap: the copy of offset 1 lands at 0, of 6 at 4, ...
    (first, _) = store.batches(FLOW, topic)
    assert (first.source_start, first.source_end, first.target_end) == (0, 40, 32)
    assert first.sync_points[:3] == ((1, 0), (6, 4), (11, 8))

    # The group consumed offsets 0-9 of partition 0; its next record, offset 10, was dropped: it
    # resumes on the target at the copy of offset 11.
    commit_group(primary.bootstrap, group, {(topic, 0): 10})
    checkpoint_run(config, FLOW, "checkpoints")
    records = sample_data.read_partition(backup.bootstrap, "primary.checkpoints.internal", 0)
    (checkpoint,) = [
        c for c in (Checkpoint.decode(r.key or b"", r.value or b"") for r in records) if c.group == group
    ]
    assert (checkpoint.topic, checkpoint.upstream_offset, checkpoint.downstream_offset) == (remote, 10, 8)
    source = sample_data.read_partition(primary.bootstrap, topic, 0)
    assert sample_data.read_partition(backup.bootstrap, remote, 0)[8] == _expected(source[11:12])[0]

    # Verification digests the source as the chain makes it: the copy verifies; compared with the
    # source as it is, each partition differs by the records dropped on purpose.
    verify = plan_verification(config, FLOW, "verify-1")
    verdicts = verify_ranges(spark, flow, verify).partitions
    assert [(v.source.records, v.target.records, v.source == v.target) for v in verdicts] == [
        (32, 32, True)
    ] * 2
    untransformed = verify_ranges(spark, dataclasses.replace(flow, transforms=()), verify).partitions
    assert [(v.source.records, v.target.records) for v in untransformed] == [(40, 32)] * 2


def test_a_failing_transform_fails_the_run_naming_the_record_and_commits_nothing(
    kafka_clusters: dict[str, LocalCluster],
    write_config: Callable[[str], MirrorConfig],
    spark: SparkSession,
    unique_name: str,
) -> None:
    primary = kafka_clusters["primary"]
    topic = unique_name
    create_topic(primary.bootstrap, topic, 2)
    producer = sample_data.producer(primary.bootstrap)
    for p in range(2):
        records = [sample_data.sample_record(topic, p, i) for i in range(20)]
        if p == 1:
            records[7] = dataclasses.replace(records[7], value=b"poison")
        sample_data.produce(producer, topic, p, records)
    config = write_config(
        f"primary->backup.enabled = true\nprimary->backup.topics = {topic}\n"
        "primary->backup.transforms = parse\nprimary->backup.transforms.parse.type = python\n"
        f"primary->backup.transforms.parse.function = {HOOKS}:reject_poison\n"
    )

    with pytest.raises(TransformError) as failed:
        run_flow(config, FLOW, "run-1", spark)

    assert str(failed.value) == (
        f"transform parse (python {HOOKS}:reject_poison) failed on {topic}-1 offset 7: ValueError: cannot "
        "parse the value of offset 7. Nothing of that partition from there on was committed; fix the "
        "transform (or filter the record out before it) and run the flow again"
    )
    assert OffsetsStore(config.offsets_db_url).batches(FLOW) == []
