"""Transforms and per-partition isolation through `airflow dags test` on real brokers: one flow drops
headers (a built-in) and test traffic (a python hook), meets a failing transform on one partition and
a remote topic that refuses its records on another; with ``isolate`` the run commits every other
partition, records the two failures and fails; once both are fixed the next run copies exactly what
was left, nothing twice."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import pytest
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient
from mirror_helpers import airflow, commit_group, create_topic, migrated_airflow, mirror_client

from mirrorflow.config.model import MirrorConfig
from mirrorflow.store.offsets_store import OffsetsStore
from mirrorflow.store.status_reads import failed_partitions
from mirrorflow_dev import sample_data
from mirrorflow_dev.local_kafka import LocalCluster
from mirrorflow_dev.sample_data import Record

pytestmark = [pytest.mark.kafka, pytest.mark.airflow]

FLOW = "primary->backup"
DAG = "mirror_primary_to_backup"
HOOKS = "mirrorflow_dev.sample_hooks"
# The remote topic accepts no record older than a day; the sample records are from 2001.
REFUSING = {"message.timestamp.before.max.ms": "86400000"}


def _config(topics: str, keys_topic: str, skip_poison: bool) -> str:
    chain = "strip, tests, skipPoison, parse" if skip_poison else "strip, tests, parse"
    return f"""\
primary->backup.enabled = true
primary->backup.topics = {topics}
primary->backup.sync.topic.configs.enabled = false
primary->backup.mirrorflow.on.partition.error = isolate
primary->backup.transforms = {chain}
primary->backup.transforms.strip.type = org.apache.kafka.connect.transforms.DropHeaders
primary->backup.transforms.strip.headers = trace
primary->backup.transforms.tests.type = python
primary->backup.transforms.tests.function = {HOOKS}:drop_test_keys
primary->backup.transforms.tests.predicate = onKeys
primary->backup.transforms.parse.type = python
primary->backup.transforms.parse.function = {HOOKS}:reject_poison
primary->backup.predicates = onKeys{", poisoned" if skip_poison else ""}
primary->backup.predicates.onKeys.type = TopicNameMatches
primary->backup.predicates.onKeys.pattern = {keys_topic}
""" + (
        "primary->backup.transforms.skipPoison.type = Filter\n"
        "primary->backup.transforms.skipPoison.predicate = poisoned\n"
        "primary->backup.predicates.poisoned.type = HasHeaderKey\n"
        "primary->backup.predicates.poisoned.name = poison\n"
        if skip_poison
        else ""
    )


def _without_trace(records: list[Record]) -> list[Record]:
    return [dataclasses.replace(r, headers=tuple(h for h in r.headers if h[0] != "trace")) for r in records]


# Isolation through an Airflow batch run: make test keeps a DR window that leaves a failed partition
# out and mirrors the others (tests/integration/test_dr_window.py), and a batch run's failing transform
# (tests/integration/test_transform_runs.py).
@pytest.mark.extended
def test_isolate_commits_the_other_partitions_and_the_next_run_copies_the_failed_ones_exactly(
    kafka_clusters: dict[str, LocalCluster],
    write_config: Callable[[str], MirrorConfig],
    unique_name: str,
    tmp_path: Path,
) -> None:
    primary, backup = kafka_clusters["primary"], kafka_clusters["backup"]
    hdr, keys, boom, stale = (f"{unique_name}-{t}" for t in ("hdr", "keys", "boom", "stale"))
    group = f"{unique_name}-app"
    for topic in (hdr, keys, boom, stale):
        create_topic(primary.bootstrap, topic, 2 if topic == hdr else 1)
    create_topic(backup.bootstrap, f"primary.{stale}", 1, REFUSING)
    producer = sample_data.producer(primary.bootstrap)
    sample_data.produce_samples(primary.bootstrap, hdr, 2, 0, 30)
    sample_data.produce(
        producer,
        keys,
        0,
        [
            dataclasses.replace(r, key=b"test-%d" % i) if i % 4 == 1 else r
            for i, r in ((i, sample_data.sample_record(keys, 0, i)) for i in range(30))
        ],
    )
    # Two produce calls, two batches: the second fails the transform.
    sample_data.produce(producer, boom, 0, [sample_data.sample_record(boom, 0, i) for i in range(10)])
    poison = dataclasses.replace(
        sample_data.sample_record(boom, 0, 10), value=b"poison", headers=(("poison", b""),)
    )
    sample_data.produce(
        producer, boom, 0, [poison, *(sample_data.sample_record(boom, 0, i) for i in range(11, 20))]
    )
    sample_data.produce_samples(primary.bootstrap, stale, 1, 0, 15)
    config = write_config(_config(f"{unique_name}-.*", keys, skip_poison=False))
    env = migrated_airflow(tmp_path / "airflow", config, tmp_path)
    store = OffsetsStore(config.offsets_db_url)

    first = airflow(env, tmp_path, "dags", "test", DAG)

    output = first.stdout + first.stderr
    assert first.returncode != 0, output[-5000:]
    assert "PartitionsFailedError" in output, output[-5000:]
    assert {(b.topic, b.partition, b.source_end, b.records) for b in store.batches(FLOW)} == {
        (hdr, 0, 30, 30), (hdr, 1, 30, 30), (keys, 0, 30, 22),
    }  # fmt: skip
    failures = failed_partitions(store, FLOW)
    assert [(f.topic, f.partition, f.error) for f in failures] == [
        (boom, 0, "TransformError"), (stale, 0, "TargetStateError"),
    ]  # fmt: skip
    assert (
        f"failed on {boom}-0 offset 10: ValueError: cannot parse the value of offset 10"
        in failures[0].message
    )
    assert f"refused a batch for primary.{stale}-0: InvalidTimestampError" in failures[1].message
    for p in range(2):
        source = sample_data.read_partition(primary.bootstrap, hdr, p)
        assert sample_data.read_partition(backup.bootstrap, f"primary.{hdr}", p) == _without_trace(source)
    source = sample_data.read_partition(primary.bootstrap, keys, 0)
    assert sample_data.read_partition(backup.bootstrap, f"primary.{keys}", 0) == _without_trace(
        [r for r in source if not (r.key or b"").startswith(b"test-")]
    )
    # The poisoned partition's first batch may have reached the target before its second failed the
    # transform (the reader and the writer race), uncommitted: the next run reads it back.
    assert len(sample_data.read_partition(backup.bootstrap, f"primary.{boom}", 0)) in (0, 10)

    # The operator fixes both: the remote topic accepts old records, the poisoned record is filtered.
    admin = KafkaAdminClient(bootstrap_servers=backup.bootstrap)
    try:
        admin.alter_configs(
            [
                ConfigResource(
                    ConfigResourceType.TOPIC,
                    f"primary.{stale}",
                    {"message.timestamp.before.max.ms": str(2**63 - 1)},
                )
            ]
        )
    finally:
        admin.close()
    write_config(_config(f"{unique_name}-.*", keys, skip_poison=True))
    # A group consumed offsets 0-4 of the keys topic; its next record, offset 5, is test traffic that
    # was dropped: it resumes on the target at the copy of offset 6, the target's fifth record.
    commit_group(primary.bootstrap, group, {(keys, 0): 5})

    second = airflow(env, tmp_path, "dags", "test", DAG)

    assert second.returncode == 0, (second.stdout + second.stderr)[-5000:]
    assert failed_partitions(store, FLOW) == []
    source = sample_data.read_partition(primary.bootstrap, boom, 0)
    assert sample_data.read_partition(backup.bootstrap, f"primary.{boom}", 0) == _without_trace(
        [r for r in source if r.value != b"poison"]
    )
    source = sample_data.read_partition(primary.bootstrap, stale, 0)
    assert sample_data.read_partition(backup.bootstrap, f"primary.{stale}", 0) == _without_trace(source)
    assert {(b.topic, b.source_start, b.source_end, b.records) for b in store.batches(FLOW, boom)} == {
        (boom, 0, 20, 19)
    }
    assert {(b.topic, b.source_start, b.source_end, b.records) for b in store.batches(FLOW, stale)} == {
        (stale, 0, 15, 15)
    }
    # The run's checkpoint task translated the group exactly, as MM2's own client reads it.
    (translated,) = [line for line in mirror_client(backup, "primary", group) if line.startswith("offset")]
    assert translated == f"offset primary.{keys}-0 4"
