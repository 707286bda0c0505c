"""A compacted source topic on real brokers, after a copy whose transaction committed on the target
while its run never moved the offsets table (its driver killed right after EndTxn, the offsets
database away): the source's cleaner then removes records that copy had written. The next runs
read the copy back, take the copies of removed records for what they are, and mirror on: the
target holds the first copy and then exactly what the source holds after it, nothing lost,
duplicated or reordered for a read_committed consumer, and the batch log translates every offset
the source still holds to its copy."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from kafka.admin import AlterConfigOp, ConfigResource, ConfigResourceType, KafkaAdminClient
from mirror_helpers import copy_without_spark, create_topic

from mirrorflow.app import batch_run
from mirrorflow.config.model import MirrorConfig
from mirrorflow.config.run_options import RunOptions
from mirrorflow.core.progress import PartitionProgress
from mirrorflow.core.report import RunReport
from mirrorflow.core.translation import OffsetTranslator
from mirrorflow.errors import TargetStateError
from mirrorflow.kafka.fetched_batches import SourceRecord
from mirrorflow.kafka.record_reads import read_partition
from mirrorflow.store.offsets_store import OffsetsStore
from mirrorflow_dev import sample_data
from mirrorflow_dev.local_kafka import LocalCluster
from mirrorflow_dev.sample_data import Record

pytestmark = pytest.mark.kafka

FLOW = "primary->backup"
# The cleaner takes every segment but the active one at once (the session's clusters look every
# 100 ms); a segment rolls at the first record 100 ms (of record time) younger than its first.
COMPACTED = {
    "cleanup.policy": "compact",
    "segment.ms": "100",
    "min.cleanable.dirty.ratio": "0.01",
    "min.compaction.lag.ms": "0",
    # Tombstones go at the cleaner's next pass: until the copy's own tombstone is gone.
    "delete.retention.ms": "0",
}
DAY_MS = "86400000"
# The first records' time: ten minutes ago, one segment however long they take to write; every later
# record is stamped when written, so the first of them rolls that segment.
FIRST_MS = int(time.time() * 1000) - 600_000


def _record(key: str, value: str | None, at_ms: int | None = None) -> Record:
    stamp = int(time.time() * 1000) if at_ms is None else at_ms
    return Record(key.encode(), None if value is None else value.encode(), (("h", key.encode()),), stamp)


def _produce(bootstrap: str, topic: str, records: list[Record]) -> None:
    sample_data.produce(sample_data.producer(bootstrap), topic, 0, records)


def _held(records: list[SourceRecord]) -> list[tuple[bytes | None, bytes | None, int]]:
    return [(r.key, r.value, r.timestamp) for r in records]


def _live(records: list[SourceRecord]) -> dict[bytes | None, bytes]:
    """What a consumer reading ``records`` in order ends with: each key's last value, unless deleted."""
    last = {r.key: r.value for r in records}
    return {k: v for k, v in last.items() if v is not None}


def _set(bootstrap: str, topic: str, key: str, value: str) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        resource = ConfigResource(ConfigResourceType.TOPIC, topic, configs={key: (AlterConfigOp.SET, value)})
        assert admin.alter_configs([resource], incremental=True) == {"topic": {topic: "OK"}}
    finally:
        admin.close()


def _cleaned(
    config: MirrorConfig, bootstrap: str, topic: str, gone: set[int], rolls: list[str]
) -> list[SourceRecord]:
    """Wait until the source no longer holds offsets ``gone`` (read back), appending a record of a
    key of its own now and then (listed in ``rolls``): the cleaner takes only segments a later
    record rolled, and removes a tombstone only at a pass after the one that first cleaned it."""
    deadline = time.monotonic() + 60
    while True:
        held = read_partition(config.flow(FLOW).source.consumer, "primary", topic, 0)
        left = gone & {r.offset for r in held}
        if not left:
            return held
        assert time.monotonic() < deadline, f"the cleaner left offsets {sorted(left)}"
        rolls.append(f"roll-{len(rolls)}")
        _produce(bootstrap, topic, [_record(rolls[-1], "r")])
        time.sleep(0.5)


def _config(write_config: Callable[[str], MirrorConfig], topic: str) -> MirrorConfig:
    """The flow of ``topic``; its remote topic compacts too, but never rolls its segment in a test's
    time (segment.ms is not synced): it holds what the copies and others wrote."""
    return write_config(
        f"{FLOW}.enabled = true\n{FLOW}.topics = {topic}\n{FLOW}.config.properties.exclude = segment.ms\n"
    )


def _run(config: MirrorConfig, run_id: str, options: RunOptions | None = None) -> RunReport:
    """plan -> copy (as the copy task makes it, without Spark) -> commit -> release."""
    flow = config.flow(FLOW)
    try:
        plan = batch_run.plan_run(config, FLOW, run_id, options or RunOptions())
        batch_run.execute_copy(config, flow, plan, lambda: copy_without_spark(flow, plan))
        return batch_run.commit_run(config, FLOW, run_id).report
    finally:
        batch_run.release_run(config, FLOW, run_id)


def test_records_compacted_away_after_a_copy_the_offsets_table_missed_neither_stop_nor_skew_the_mirror(
    kafka_clusters: dict[str, LocalCluster], write_config: Callable[[str], MirrorConfig], unique_name: str
) -> None:
    primary = kafka_clusters["primary"].bootstrap
    topic, remote = unique_name, f"primary.{unique_name}"
    create_topic(primary, topic, 1, COMPACTED)
    config = _config(write_config, topic)
    flow = config.flow(FLOW)
    # a at 0 and 3, d's value and tombstone at 4-5; one segment, the active one, which the cleaner
    # leaves alone while the copy reads it.
    first = [("a", "a1"), ("b", "b1"), ("c", "c1"), ("a", "a2"), ("d", "d1"), ("d", None), ("e", "e1")]
    _produce(primary, topic, [_record(k, v, FIRST_MS) for k, v in [*first, ("f", "f1"), ("g", "g1")]])

    # The copy's transaction commits on the target; its run never commits to the offsets table.
    plan = batch_run.plan_run(config, FLOW, "run-1")
    assert [(p.source_start, p.source_end, p.target_start) for p in plan.partitions] == [(0, 9, 0)]
    copy_without_spark(flow, plan)
    batch_run.release_run(config, FLOW, "run-1")
    copied = read_partition(flow.target.consumer, "backup", remote, 0)
    assert [c.offset for c in copied] == list(range(9))

    # The cleaner removes a1 (a2 follows it), d1 and d's tombstone (its retention passed).
    rolls: list[str] = []
    _cleaned(config, primary, topic, {0, 4, 5}, rolls)
    # Then b and g are written again and e deleted: their copied records go too, and e's tombstone
    # stays (a day's retention).
    _set(primary, topic, "delete.retention.ms", DAY_MS)
    overwritten = 9 + len(rolls)
    _produce(primary, topic, [_record("b", "b2"), _record("e", None), _record("g", "g2")])
    source = _cleaned(config, primary, topic, {0, 1, 4, 5, 6, 8}, rolls)
    assert [r.offset for r in source if r.offset < 9] == [2, 3, 7]
    assert [r.offset for r in source if overwritten <= r.offset < overwritten + 3] == [
        overwritten,
        overwritten + 1,
        overwritten + 2,
    ]

    # The next run's plan ends at b2, before e's tombstone and g2: what tells e1 and g1 from someone
    # else's records lies past it. The run after it copies the rest.
    second = _run(config, "run-2", RunOptions(max_records_per_partition=overwritten + 1))
    assert (second.records, second.partitions[0].skipped) == (overwritten + 1, 9)
    third = _run(config, "run-3")
    assert third.records == len([r for r in source if r.offset > overwritten])

    # The target holds the first copy, then what the source holds after it, in order.
    target = read_partition(flow.target.consumer, "backup", remote, 0)
    after = [r for r in source if r.offset >= 9]
    assert _held(target) == _held(copied) + _held(after)
    # A consumer reading either topic whole ends with the same value of every key.
    assert _live(target) == _live(source)
    # Every offset the source still holds translates to its copy; progress ends past both.
    copies = {2: 2, 3: 3, 7: 7} | dict(
        zip((r.offset for r in after), (r.offset for r in target[9:]), strict=True)
    )
    with OffsetsStore(config.offsets_db_url) as store:
        batches = [b.as_batch() for b in store.batches(FLOW, topic=topic, partition=0)]
        progress = store.progress(FLOW)[(topic, 0)]
    translator = OffsetTranslator(batches)
    assert {o: translator.translate(o) for o in copies} == copies
    assert progress == PartitionProgress(topic, 0, source[-1].offset + 1, target[-1].offset + 1)


def test_someone_else_writing_the_sources_records_again_is_refused_on_a_compacted_topic_too(
    kafka_clusters: dict[str, LocalCluster], write_config: Callable[[str], MirrorConfig], unique_name: str
) -> None:
    primary, backup = kafka_clusters["primary"].bootstrap, kafka_clusters["backup"].bootstrap
    topic, remote = unique_name, f"primary.{unique_name}"
    create_topic(primary, topic, 1, COMPACTED)
    config = _config(write_config, topic)
    flow = config.flow(FLOW)
    records = [_record(k, "1", FIRST_MS) for k in "abcde"]
    _produce(primary, topic, records)
    plan = batch_run.plan_run(config, FLOW, "run-1")
    try:
        copy_without_spark(flow, plan)
        # Another producer writes the same records to the remote partition again: each of the first
        # copy's records then has a later record of its key, as if compaction had removed it, but the
        # source never held records in the offsets they would have taken.
        _produce(backup, remote, records)

        with pytest.raises(TargetStateError) as caught:
            copy_without_spark(flow, plan)
    finally:
        batch_run.release_run(config, FLOW, "run-1")

    message = str(caught.value)
    assert message.startswith(f"remote partition {remote}-0 holds more records past the planned start 0")
    assert (
        "than the 5 planned: something else writes to the remote topic. Nothing was committed; stop the "
        in message
    )
    assert (
        _held(read_partition(flow.target.consumer, "backup", remote, 0))
        == _held(read_partition(flow.source.consumer, "primary", topic, 0)) * 2
    )


def test_copies_the_remote_partitions_own_cleaner_removed_after_a_missed_commit_are_covered(
    kafka_clusters: dict[str, LocalCluster], write_config: Callable[[str], MirrorConfig], unique_name: str
) -> None:
    """The remote topic compacts too: its cleaner removes a copied record a later copy of its key
    overwrote, before the next run reads the copy back. The source, whose segment never rolls,
    still holds it. The next run takes it as copied, and mirrors on."""
    primary, backup = kafka_clusters["primary"].bootstrap, kafka_clusters["backup"].bootstrap
    topic, remote = unique_name, f"primary.{unique_name}"
    create_topic(primary, topic, 1, COMPACTED | {"segment.ms": DAY_MS})
    config = _config(write_config, topic)
    flow = config.flow(FLOW)
    # a1 and a2 in the remote partition's first segment; c1, ten minutes younger, rolls it there.
    _produce(primary, topic, [_record(k, v, FIRST_MS) for k, v in [("a", "a1"), ("b", "b1"), ("a", "a2")]])
    _produce(primary, topic, [_record("c", "c1")])

    plan = batch_run.plan_run(config, FLOW, "run-1")
    _set(backup, remote, "segment.ms", "100")
    copy_without_spark(flow, plan)
    batch_run.release_run(config, FLOW, "run-1")
    copied = read_partition(flow.target.consumer, "backup", remote, 0)
    assert [c.offset for c in copied] == [0, 1, 2, 3]
    deadline = time.monotonic() + 60
    while 0 in {r.offset for r in read_partition(flow.target.consumer, "backup", remote, 0)}:
        assert time.monotonic() < deadline, "the remote partition's cleaner left a1"
        time.sleep(0.2)
    _produce(primary, topic, [_record("d", "d1")])

    report = _run(config, "run-2")

    source = read_partition(flow.source.consumer, "primary", topic, 0)
    target = read_partition(flow.target.consumer, "backup", remote, 0)
    assert [r.offset for r in source] == [0, 1, 2, 3, 4]
    assert (report.records, report.partitions[0].skipped) == (4, 3)
    assert _held(target) == _held(copied[1:]) + _held(source[4:])
    assert _live(target) == _live(source)
    with OffsetsStore(config.offsets_db_url) as store:
        batches = [b.as_batch() for b in store.batches(FLOW, topic=topic, partition=0)]
        progress = store.progress(FLOW)[(topic, 0)]
    translator = OffsetTranslator(batches)
    # a1's offset resumes at the first copy the target still holds after it.
    assert {o: translator.translate(o) for o in range(5)} == {0: 1, 1: 1, 2: 2, 3: 3, 4: target[-1].offset}
    assert progress == PartitionProgress(topic, 0, 5, target[-1].offset + 1)
