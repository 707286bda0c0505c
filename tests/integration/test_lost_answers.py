"""A produce request whose answer never arrives: the copy sends the batch again as it is (same
producer id, epoch and sequence), and the target holds it once. The broker keeps the writer's state
while its transaction is open, whatever the records' timestamps, so it drops the repeat of a batch
it appended and answers with that batch's offset. The answer is lost here by wrapping the client's
send on real brokers: after the broker appended the batch, or before the request left.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from kafka.errors import KafkaConnectionError
from kafka.future import Future
from kafka.net.compat import KafkaNetClient
from kafka.protocol.producer import ProduceRequest
from kafka.record.default_records import DefaultRecordBatch
from mirror_helpers import assert_same_records, copy_without_spark, create_topic

from mirrorflow.app import batch_run
from mirrorflow.config.model import MirrorConfig
from mirrorflow.errors import TargetStateError
from mirrorflow_dev import sample_data
from mirrorflow_dev.local_kafka import LocalCluster

pytestmark = pytest.mark.kafka

FLOW = "primary->backup"
RECORDS = 40


def _flow_of_samples(
    primary: LocalCluster, write_config: Callable[[str], MirrorConfig], topic: str
) -> MirrorConfig:
    """The flow of ``topic``, a new one-partition topic holding ``RECORDS`` sample records."""
    create_topic(primary.bootstrap, topic, 1)
    sample_data.produce_samples(primary.bootstrap, topic, 1, 0, RECORDS)
    return write_config(f"{FLOW}.enabled = true\n{FLOW}.topics = {topic}\n")


@pytest.mark.parametrize("appended", [True, False], ids=["appended-then-lost", "lost-before-sending"])
def test_a_batch_whose_answer_is_lost_is_on_the_target_exactly_once(
    appended: bool,
    kafka_clusters: dict[str, LocalCluster],
    write_config: Callable[[str], MirrorConfig],
    unique_name: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    primary, backup = kafka_clusters["primary"], kafka_clusters["backup"]
    topic, remote = unique_name, f"primary.{unique_name}"
    config = _flow_of_samples(primary, write_config, topic)
    flow = config.flow(FLOW)

    sent: list[int] = []  # the base sequence of each batch sent to the remote partition
    real_send = KafkaNetClient.send

    def send(client: KafkaNetClient, node_id: int, request: Any, **kwargs: Any) -> Future:
        batches = [
            bytes(p.records)
            for t in (request.topic_data if isinstance(request, ProduceRequest) else ())
            if t.name == remote
            for p in t.partition_data
        ]
        sent.extend(DefaultRecordBatch(b).base_sequence for b in batches)
        if not batches or len(sent) > 1:
            return real_send(client, node_id, request, **kwargs)
        lost: Future = Future()
        if appended:
            real_send(client, node_id, request, **kwargs).add_both(
                lambda _: lost.failure(KafkaConnectionError("the answer was lost"))
            )
        else:
            lost.failure(KafkaConnectionError("the request never left"))
        return lost

    plan = batch_run.plan_run(config, FLOW, "run-1")
    try:
        monkeypatch.setattr(KafkaNetClient, "send", send)
        batch_run.execute_copy(
            config,
            flow,
            plan,
            lambda: copy_without_spark(flow, plan),
        )
        monkeypatch.undo()
        batch_run.commit_run(config, FLOW, "run-1")
    finally:
        batch_run.release_run(config, FLOW, "run-1")

    # Sent again as it was, once; every other batch once.
    assert sent[:2] == [0, 0]
    assert len(set(sent)) == len(sent) - 1, f"a batch was sent more than twice: base sequences {sent}"
    assert assert_same_records(primary.bootstrap, topic, backup.bootstrap, remote, 1) == RECORDS


def test_a_batch_the_target_appends_past_its_planned_offset_fails_the_copy_naming_both_offsets(
    kafka_clusters: dict[str, LocalCluster],
    write_config: Callable[[str], MirrorConfig],
    unique_name: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Another producer writes to the remote partition right before the copy's first batch, after
    the copy read where the partition ends: the broker appends that batch after the stranger's
    record. Its acknowledgement names offset 1 where the copy expected it at 0, and the copy stops
    there."""
    primary, backup = kafka_clusters["primary"], kafka_clusters["backup"]
    topic, remote = unique_name, f"primary.{unique_name}"
    config = _flow_of_samples(primary, write_config, topic)
    flow = config.flow(FLOW)
    real_send = KafkaNetClient.send
    # Dropped at the end: its librdkafka threads would go on calling the session's clusters.
    stranger = [sample_data.producer(backup.bootstrap)]

    def send(client: KafkaNetClient, node_id: int, request: Any, **kwargs: Any) -> Future:
        if isinstance(request, ProduceRequest) and any(t.name == remote for t in request.topic_data):
            sample_data.produce(stranger[0], remote, 0, [sample_data.sample_record(remote, 0, 0)])
            monkeypatch.setattr(KafkaNetClient, "send", real_send)
        return real_send(client, node_id, request, **kwargs)

    plan = batch_run.plan_run(config, FLOW, "run-1")
    monkeypatch.setattr(KafkaNetClient, "send", send)
    try:
        with pytest.raises(TargetStateError) as failed:
            copy_without_spark(flow, plan)
    finally:
        batch_run.release_run(config, FLOW, "run-1")
        stranger.clear()
    assert f"batch for {remote}-0 at offset 1, where this copy expected it at 0" in str(failed.value)
