"""Schemas travel with the data, on real schema registries (Apicurio Registry's Confluent API, one per
cluster): records produced with Confluent's Avro and Protobuf serializers on the source, under each
subject name strategy, a schema evolving mid-stream (in a batch run and while a DR window mirrors), a
Protobuf schema importing another (a schema reference), decode on the target with the target's
registry to exactly what was produced, although the two registries number the schemas differently;
a record whose id the source registry does not hold is never copied; keys and values of sides not
declared framed pass byte for byte, or stop their partition where they may carry a source id."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import (
    RegisteredSchema,
    Schema,
    SchemaRegistryClient,
    record_subject_name_strategy,
    topic_record_subject_name_strategy,
)
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, text_format
from google.protobuf.message import Message
from mirror_helpers import create_topic, run_flow, write_mm2
from pyspark.sql import SparkSession
from windows import WindowThread

from mirrorflow.app.batch_run import load_plan
from mirrorflow.app.verify import plan_verification
from mirrorflow.copy.spark_verify import verify_ranges
from mirrorflow.core.schema_ids import schema_id
from mirrorflow.core.window import WindowSummary
from mirrorflow.errors import PartitionsFailedError, SchemaIdError
from mirrorflow.store.offsets_store import OffsetsStore
from mirrorflow.store.status_reads import failed_partitions
from mirrorflow_dev import sample_data
from mirrorflow_dev.local_kafka import LocalCluster
from mirrorflow_dev.local_registry import LocalRegistry

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

FLOW = "primary->backup"
SR = "mirrorflow.schema.registry."
ORDER_V1 = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [{"name": "id", "type": "long"}, {"name": "item", "type": "string"}],
}
# The next version: a field added with a default (backward compatible).
ORDER_V2 = {**ORDER_V1, "fields": [*ORDER_V1["fields"], {"name": "note", "type": "string", "default": ""}]}
KEY = {"type": "record", "name": "OrderKey", "namespace": "shop", "fields": [{"name": "id", "type": "long"}]}

# Protobuf: shop.Order imports shop/money.proto, so its serializer registers Money under a subject of
# its own and Order's versions refer to it. Order's second version adds a field.
MONEY_PROTO = """name: "shop/money.proto" package: "shop" syntax: "proto3"
message_type { name: "Money"
  field { name: "currency" number: 1 type: TYPE_STRING label: LABEL_OPTIONAL json_name: "currency" }
  field { name: "cents" number: 2 type: TYPE_INT64 label: LABEL_OPTIONAL json_name: "cents" } }"""
ORDER_PROTO_V1 = """name: "shop/order.proto" package: "shop" syntax: "proto3" dependency: "shop/money.proto"
message_type { name: "Order"
  field { name: "id" number: 1 type: TYPE_INT64 label: LABEL_OPTIONAL json_name: "id" }
  field { name: "price" number: 2 type: TYPE_MESSAGE type_name: ".shop.Money" label: LABEL_OPTIONAL
          json_name: "price" } }"""
NOTE_FIELD = 'field { name: "note" number: 3 type: TYPE_STRING label: LABEL_OPTIONAL json_name: "note" }'
ORDER_PROTO_V2 = ORDER_PROTO_V1.replace('json_name: "price" }', f'json_name: "price" }}\n  {NOTE_FIELD}')
# Confluent's current Protobuf wire format (message indexes as zigzag varints).
PROTOBUF_CONF = {"use.deprecated.format": False}


def registry_client(url: str) -> SchemaRegistryClient:
    """Confluent's client, failing a request the registry does not answer within 30 s."""
    return SchemaRegistryClient({"url": url, "timeout": 30})


def _config(
    tmp_path: Path,
    clusters: dict[str, LocalCluster],
    registries: dict[str, LocalRegistry],
    topic: str,
    extra: str = "",
    *,
    framed: str = "key, value",
) -> Any:
    """A flow of ``topic`` (a list of topics) naming both registries, with ``topic``'s ``framed``
    sides declared framed."""
    declared = "".join(f"{FLOW}.{SR}framed.{side.strip()}.topics = {topic}\n" for side in framed.split(","))
    return write_mm2(
        tmp_path,
        {"primary": clusters["primary"], "backup": clusters["backup"]},
        1,
        f"{FLOW}.enabled = true\n{FLOW}.topics = {topic}\n"
        f"{FLOW}.{SR}source.url = {registries['primary'].url}\n"
        f"{FLOW}.{SR}target.url = {registries['backup'].url}\n{declared if framed else ''}{extra}",
    )


def _produce(
    bootstrap: str, registry: str, topic: str, schema: dict[str, Any], rows: list[tuple[int, dict[str, Any]]]
) -> None:
    client = registry_client(registry)
    keys = AvroSerializer(client, json.dumps(KEY))
    values = AvroSerializer(client, json.dumps(schema))
    producer = sample_data.producer(bootstrap)
    for partition, row in rows:
        producer.produce(
            topic,
            key=keys({"id": row["id"]}, SerializationContext(topic, MessageField.KEY)),
            value=values(row, SerializationContext(topic, MessageField.VALUE)),
            partition=partition,
        )
    producer.flush(30)


def _protobuf_classes(order_proto: str) -> tuple[type[Message], type[Message]]:
    """The message classes shop.Order (as ``order_proto`` declares it) and shop.Money, built at run
    time in a descriptor pool of their own."""
    pool = descriptor_pool.DescriptorPool()
    for text in (MONEY_PROTO, order_proto):
        pool.Add(text_format.Parse(text, descriptor_pb2.FileDescriptorProto()))
    return tuple(
        message_factory.GetMessageClass(pool.FindMessageTypeByName(f"shop.{n}")) for n in ("Order", "Money")
    )


class _AsStored(SchemaRegistryClient):
    """Confluent's client, reading schemas as the registry stores them. Its Protobuf deserializer asks
    for them ``?format=serialized`` (a base64 descriptor), and Apicurio then parses the stored schema
    as .proto text: it fails on the base64 descriptor that Confluent's serializer registered, which is
    what that format asks for anyway."""

    def get_schema(
        self,
        schema_id: int,
        subject_name: str | None = None,
        fmt: str | None = None,
        reference_format: str | None = None,
    ) -> Schema:
        return super().get_schema(schema_id, subject_name, None, reference_format)

    def get_version(
        self,
        subject_name: str,
        version: int | Literal["latest"] = "latest",
        deleted: bool = False,
        fmt: str | None = None,
    ) -> RegisteredSchema:
        return super().get_version(subject_name, version, deleted, None)


def _value_id(record: sample_data.Record) -> int:
    found = schema_id(record.value)
    assert found is not None, f"{record} carries no schema id"
    return found


def _decoded(bootstrap: str, registry: str, topic: str, partition: int) -> list[tuple[Any, Any]]:
    """The partition's keys and values as the registry's schemas decode them."""
    client = registry_client(registry)
    decode = AvroDeserializer(client)
    return [
        (
            decode(r.key, SerializationContext(topic, MessageField.KEY)),
            decode(r.value, SerializationContext(topic, MessageField.VALUE)),
        )
        for r in sample_data.read_partition(bootstrap, topic, partition)
    ]


def test_avro_records_decode_on_the_target_to_what_was_produced_through_an_evolution(
    kafka_clusters: dict[str, LocalCluster],
    registries: dict[str, LocalRegistry],
    spark: SparkSession,
    unique_name: str,
    tmp_path: Path,
) -> None:
    primary, backup = kafka_clusters["primary"], kafka_clusters["backup"]
    source_sr, target_sr = registries["primary"].url, registries["backup"].url
    # The target registry numbers schemas its own way: it already holds others.
    registry_client(target_sr).register_schema(
        f"{unique_name}-other-value", Schema(json.dumps({**KEY, "name": "Other"}), "AVRO")
    )
    create_topic(primary.bootstrap, unique_name, 2)
    first = [(i % 2, {"id": i, "item": f"item-{i}"}) for i in range(10)]
    _produce(primary.bootstrap, source_sr, unique_name, ORDER_V1, first)
    config = _config(tmp_path, kafka_clusters, registries, unique_name)

    run_flow(config, FLOW, "first", spark)
    # The schema evolves mid-stream: a second version, and records of both in the next run.
    later = [(i % 2, {"id": i, "item": f"item-{i}", "note": f"n{i}"}) for i in range(10, 16)]
    _produce(primary.bootstrap, source_sr, unique_name, ORDER_V2, later)
    _produce(primary.bootstrap, source_sr, unique_name, ORDER_V1, [(0, {"id": 16, "item": "item-16"})])
    run_flow(config, FLOW, "second", spark)
    run_plan = load_plan(config, config.flow(FLOW), "second")

    remote = f"primary.{unique_name}"
    for partition in (0, 1):
        produced = _decoded(primary.bootstrap, source_sr, unique_name, partition)
        assert _decoded(backup.bootstrap, target_sr, remote, partition) == produced
        assert len(produced) == (9 if partition == 0 else 8)
    target = registry_client(target_sr)
    assert target.get_versions(f"{remote}-value") == [1, 2]
    assert target.get_versions(f"{remote}-key") == [1]
    # The ids differ between the registries, and only the id bytes changed.
    source_records = sample_data.read_partition(primary.bootstrap, unique_name, 0)
    target_records = sample_data.read_partition(backup.bootstrap, remote, 0)
    assert {schema_id(r.value) for r in source_records} != {schema_id(r.value) for r in target_records}
    assert [r.value[5:] for r in target_records if r.value] == [
        r.value[5:] for r in source_records if r.value
    ]
    # Spark's verification compares the source's records as the copy mapped them.
    verify = plan_verification(config, FLOW, "verify")
    assert verify.schema_ids == run_plan.schema_ids
    verdicts = verify_ranges(spark, config.flow(FLOW), verify).partitions
    assert [(v.source.records, v.source == v.target) for v in verdicts] == [(9, True), (8, True)]


@pytest.mark.parametrize("on_error", ["fail", "isolate"])
def test_a_record_whose_schema_id_the_source_registry_lacks_is_never_copied(
    kafka_clusters: dict[str, LocalCluster],
    registries: dict[str, LocalRegistry],
    spark: SparkSession,
    unique_name: str,
    tmp_path: Path,
    on_error: str,
) -> None:
    """Partition 0 holds a value whose id no registry knows, partition 1 only good records: the record
    is never copied, and the message, the source registry asked, names no subject to include; with
    ``isolate`` partition 1 is copied, and the run fails naming partition 0."""
    primary, backup = kafka_clusters["primary"], kafka_clusters["backup"]
    create_topic(primary.bootstrap, unique_name, 2)
    good = [(p, {"id": p, "item": "a"}) for p in (0, 1)]
    _produce(primary.bootstrap, registries["primary"].url, unique_name, ORDER_V1, good)
    producer: Producer = sample_data.producer(primary.bootstrap)
    producer.produce(unique_name, value=b"\x00" + (987_654).to_bytes(4, "big") + b"\x02\x02x", partition=0)
    producer.flush(30)
    config = _config(
        tmp_path,
        kafka_clusters,
        registries,
        unique_name,
        f"{FLOW}.mirrorflow.on.partition.error = {on_error}",
    )

    with pytest.raises((SchemaIdError, PartitionsFailedError)) as caught:
        run_flow(config, FLOW, "dangling", spark)

    # The source registry was asked: no subject holds the id, so no subject is named to include.
    assert (
        f"{unique_name}-0 offset 1: its value carries schema id 987654, and no subject of the source "
        f"registry {registries['primary'].url} holds that id, so no sync can map it"
    ) in str(caught.value)
    assert "subjects.include" not in str(caught.value)
    remote = f"primary.{unique_name}"
    # The refused record never reaches the target. Under isolate the copy's transaction commits what
    # the partition wrote before it, if anything: its next run reads that back and skips it.
    assert _decoded(backup.bootstrap, registries["backup"].url, remote, 0) in ([], [({"id": 0}, good[0][1])])
    copied = sample_data.read_partition(backup.bootstrap, remote, 1)
    if on_error == "fail":
        assert isinstance(caught.value, SchemaIdError) and copied == []
    else:
        assert isinstance(caught.value, PartitionsFailedError)
        assert _decoded(backup.bootstrap, registries["backup"].url, remote, 1) == [({"id": 1}, good[1][1])]


Strategy = Callable[[SerializationContext | None, str | None], str | None]
Serialize = Callable[[dict[str, Any], SerializationContext], bytes | None]


def _avro(
    client: SchemaRegistryClient, schema: dict[str, Any], strategy: Strategy | None = None
) -> Serialize:
    """Confluent's Avro serializer of ``schema`` registering under ``strategy``'s subjects (its
    default: TopicNameStrategy)."""
    conf: dict[str, Strategy] = {"subject.name.strategy": strategy} if strategy else {}
    serialize: Serialize = AvroSerializer(client, json.dumps(schema), conf=conf)
    return serialize


def test_records_of_every_subject_name_strategy_decode_on_the_target_to_what_was_produced(
    kafka_clusters: dict[str, LocalCluster],
    registries: dict[str, LocalRegistry],
    unique_name: str,
    spark: SparkSession,
    tmp_path: Path,
) -> None:
    """Values serialized under TopicNameStrategy, RecordNameStrategy and TopicRecordNameStrategy, keys
    under TopicRecordNameStrategy: each schema travels under its strategy's subject (a record's keeps
    its name, the topic's are renamed for the remote topic) and every key and value decodes on the
    target to what was produced, and verifies. Every value topic is declared framed by a pattern
    (``.*``)."""
    primary, backup = kafka_clusters["primary"], kafka_clusters["backup"]
    source_sr, target_sr = registries["primary"].url, registries["backup"].url
    namespace = "ns" + re.sub(r"\W", "_", unique_name)  # record subjects are the registry's, not the topic's
    payment = {**ORDER_V1, "name": "Payment", "namespace": namespace}
    refund = {**ORDER_V1, "name": "Refund", "namespace": namespace}
    key = {**KEY, "namespace": namespace}
    target = registry_client(target_sr)
    target.register_schema(f"{unique_name}-other-value", Schema(json.dumps({**KEY, "name": "Other"}), "AVRO"))
    create_topic(primary.bootstrap, unique_name, 1)
    client = registry_client(source_sr)
    keys = _avro(client, key, topic_record_subject_name_strategy)
    values = [
        (_avro(client, ORDER_V1), {"id": 1, "item": "order"}),
        (_avro(client, payment, record_subject_name_strategy), {"id": 2, "item": "payment"}),
        (_avro(client, refund, topic_record_subject_name_strategy), {"id": 3, "item": "refund"}),
    ]
    producer = sample_data.producer(primary.bootstrap)
    for serialize, row in values:
        producer.produce(
            unique_name,
            key=keys({"id": row["id"]}, SerializationContext(unique_name, MessageField.KEY)),
            value=serialize(row, SerializationContext(unique_name, MessageField.VALUE)),
        )
    producer.flush(30)
    config = _config(
        tmp_path,
        kafka_clusters,
        registries,
        unique_name,
        f"{FLOW}.{SR}framed.value.topics = .*\n",
        framed="key",
    )

    run_flow(config, FLOW, "strategies", spark)

    remote = f"primary.{unique_name}"
    produced = _decoded(primary.bootstrap, source_sr, unique_name, 0)
    assert [v for _, v in produced] == [row for _, row in values]
    assert _decoded(backup.bootstrap, target_sr, remote, 0) == produced
    assert {f"{remote}-value", f"{namespace}.Payment", f"{remote}-{namespace}.Refund"} <= set(
        target.get_subjects()
    )
    assert target.get_versions(f"{remote}-{namespace}.OrderKey") == [1]
    # Spark's verification finds each strategy's subjects on the target, as the copy mapped them.
    verdicts = verify_ranges(spark, config.flow(FLOW), plan_verification(config, FLOW, "verify")).partitions
    assert [(v.source.records, v.source == v.target) for v in verdicts] == [(3, True)]


def test_plain_and_undeclared_sides_pass_byte_for_byte_and_a_source_id_stops_only_its_partition(
    kafka_clusters: dict[str, LocalCluster],
    registries: dict[str, LocalRegistry],
    unique_name: str,
    spark: SparkSession,
    tmp_path: Path,
) -> None:
    """``<name>-plain``: Avro values (declared framed), int64 keys declared plain, each key's bytes
    looking framed with the id of the topic's own key subject: every key passes byte for byte.
    ``<name>-mixed``, values undeclared: on partition 0 an Avro value, whose id the source registry
    holds (refused: only that partition stops, under isolate); on partition 1 int64 values looking
    framed with an id no subject holds (passed byte for byte)."""
    primary, backup = kafka_clusters["primary"], kafka_clusters["backup"]
    source_sr, target_sr = registries["primary"].url, registries["backup"].url
    plain, mixed = f"{unique_name}-plain", f"{unique_name}-mixed"
    create_topic(primary.bootstrap, plain, 1)
    create_topic(primary.bootstrap, mixed, 2)
    client = registry_client(source_sr)
    key_id = client.register_schema(f"{plain}-key", Schema(json.dumps(KEY), "AVRO"))
    int64_keys = [(key_id << 24 | i).to_bytes(8, "big") for i in range(3)]  # 0, key_id, then i
    assert {schema_id(k) for k in int64_keys} == {key_id}
    orders = _avro(client, ORDER_V1)
    producer = sample_data.producer(primary.bootstrap)
    for i, k in enumerate(int64_keys):
        row = {"id": i, "item": "plain"}
        producer.produce(plain, key=k, value=orders(row, SerializationContext(plain, MessageField.VALUE)))
    framed = orders({"id": 9, "item": "mixed"}, SerializationContext(mixed, MessageField.VALUE))
    producer.produce(mixed, key=b"framed", value=framed, partition=0)
    int64_values = [(987_654 << 24 | i).to_bytes(8, "big") for i in range(2)]
    for v in int64_values:
        producer.produce(mixed, key=b"int64", value=v, partition=1)
    producer.flush(30)
    config = _config(
        tmp_path,
        kafka_clusters,
        registries,
        f"{plain}, {mixed}",
        f"{FLOW}.{SR}framed.value.topics = {plain}\n{FLOW}.{SR}plain.key.topics = {plain}\n"
        f"{FLOW}.mirrorflow.on.partition.error = isolate\n",
        framed="",
    )

    with pytest.raises(PartitionsFailedError) as caught:
        run_flow(config, FLOW, "sides", spark)

    message = str(caught.value)
    assert "1 partitions failed" in message
    assert (
        f"{mixed}-0 offset 0: its value looks like Confluent's wire format, with schema id "
        f"{schema_id(framed)}, which the source registry's subject {mixed}-value holds, and the flow "
        f"declares {mixed}'s values neither framed nor plain"
    ) in message
    assert f"add {mixed} to {SR}framed.value.topics" in message
    copied = sample_data.read_partition(backup.bootstrap, f"primary.{plain}", 0)
    assert [r.key for r in copied] == int64_keys
    assert [v for _, v in _decoded(backup.bootstrap, target_sr, f"primary.{plain}", 0)] == [
        {"id": i, "item": "plain"} for i in range(3)
    ]
    assert sample_data.read_partition(backup.bootstrap, f"primary.{mixed}", 0) == []
    assert [
        r.value for r in sample_data.read_partition(backup.bootstrap, f"primary.{mixed}", 1)
    ] == int64_values


def test_protobuf_records_with_a_referenced_schema_decode_on_the_target_to_what_was_produced(
    kafka_clusters: dict[str, LocalCluster],
    registries: dict[str, LocalRegistry],
    spark: SparkSession,
    unique_name: str,
    tmp_path: Path,
) -> None:
    """Values in Protobuf (declared framed), keys plain strings (undeclared: they pass as they are);
    Order's second version mid-stream. Every target value's id names, in the target registry, the
    very schema its source id names in the source's, with the reference renamed nowhere (a file's
    subject)."""
    primary, backup = kafka_clusters["primary"], kafka_clusters["backup"]
    source_sr, target_sr = registries["primary"].url, registries["backup"].url
    create_topic(primary.bootstrap, unique_name, 1)
    (order_v1, money_v1), (order_v2, money_v2) = map(_protobuf_classes, (ORDER_PROTO_V1, ORDER_PROTO_V2))
    produced = [
        order_v1(id=1, price=money_v1(currency="EUR", cents=100)),
        order_v1(id=2),
        order_v2(id=3, price=money_v2(currency="USD", cents=250), note="v2"),
        order_v1(id=4, price=money_v1(currency="EUR", cents=1)),
    ]
    client = registry_client(source_sr)
    serializers = {cls: ProtobufSerializer(cls, client, PROTOBUF_CONF) for cls in (order_v1, order_v2)}
    producer = sample_data.producer(primary.bootstrap)
    context = SerializationContext(unique_name, MessageField.VALUE)
    for order in produced:
        value = serializers[type(order)](order, context)
        producer.produce(unique_name, key=f"order-{order.id}".encode(), value=value, partition=0)
    producer.flush(30)
    run_flow(_config(tmp_path, kafka_clusters, registries, unique_name, framed="value"), FLOW, "proto", spark)

    remote = f"primary.{unique_name}"
    target = registry_client(target_sr)
    decode = ProtobufDeserializer(order_v2, PROTOBUF_CONF, _AsStored({"url": target_sr, "timeout": 30}))
    mirrored = sample_data.read_partition(backup.bootstrap, remote, 0)
    assert [r.key for r in mirrored] == [f"order-{o.id}".encode() for o in produced]
    decoded = [decode(r.value, SerializationContext(remote, MessageField.VALUE)) for r in mirrored]
    assert [m.SerializeToString(deterministic=True) for m in decoded] == [
        o.SerializeToString(deterministic=True) for o in produced
    ]
    assert target.get_versions(f"{remote}-value") == [1, 2]
    sources = sample_data.read_partition(primary.bootstrap, unique_name, 0)
    for source_id, target_id in zip(map(_value_id, sources), map(_value_id, mirrored), strict=True):
        at_source, on_target = client.get_schema(source_id), target.get_schema(target_id)
        assert (on_target.schema_type, on_target.schema_str) == ("PROTOBUF", at_source.schema_str)
        assert on_target.references == at_source.references  # shop/money.proto, version 1, in both


@pytest.mark.parametrize("on_error", ["fail", "isolate"])
def test_a_dr_window_syncs_a_schema_registered_while_it_mirrors_before_copying_its_records(
    kafka_clusters: dict[str, LocalCluster],
    registries: dict[str, LocalRegistry],
    spark: SparkSession,
    unique_name: str,
    tmp_path: Path,
    on_error: str,
) -> None:
    """A window syncs the schemas when it starts, and next at MM2's topic refresh (10 minutes by
    default): the second version, registered while it mirrors, reaches the target registry because
    its first record carried an id the window's map lacked, and the window synced again: it copied
    the micro-batch again (``fail``), or the partition went on in the next one (``isolate``), which
    leaves no partition error behind."""
    primary, backup = kafka_clusters["primary"], kafka_clusters["backup"]
    source_sr, target_sr = registries["primary"].url, registries["backup"].url
    create_topic(primary.bootstrap, unique_name, 2)
    _produce(
        primary.bootstrap,
        source_sr,
        unique_name,
        ORDER_V1,
        [(i % 2, {"id": i, "item": "a"}) for i in range(4)],
    )
    dr = f"{FLOW}.mirrorflow.mode = dr\n{FLOW}.mirrorflow.dr.window.seconds = 20\n"
    dr += f"{FLOW}.mirrorflow.dr.idle.wait.ms = 100\n{FLOW}.mirrorflow.dr.handover.wait.seconds = 0\n"
    dr += f"{FLOW}.mirrorflow.on.partition.error = {on_error}\n"
    config = _config(tmp_path, kafka_clusters, registries, unique_name, dr)
    remote = f"primary.{unique_name}"

    target = registry_client(target_sr)
    with WindowThread(spark, config, FLOW) as window:
        window.start()
        deadline = time.monotonic() + 60
        while f"{remote}-value" not in target.get_subjects():  # the window's first sync
            assert time.monotonic() < deadline, "the window synced no schema within 60 s"
            time.sleep(0.2)
        later = [(i % 2, {"id": i, "item": "b", "note": f"n{i}"}) for i in range(4, 8)]
        _produce(primary.bootstrap, source_sr, unique_name, ORDER_V2, later)
        _wait_for_copies(backup, remote, 4)

    (summary,) = window.summaries
    assert isinstance(summary, WindowSummary) and summary.error is None, summary
    for partition in (0, 1):
        produced = _decoded(primary.bootstrap, source_sr, unique_name, partition)
        assert _decoded(backup.bootstrap, target_sr, remote, partition) == produced
        assert [v["id"] for _, v in produced] == [partition, partition + 2, partition + 4, partition + 6]
    assert target.get_versions(f"{remote}-value") == [1, 2]
    assert failed_partitions(OffsetsStore(config.offsets_db_url), FLOW) == []


def _wait_for_copies(cluster: LocalCluster, remote: str, per_partition: int) -> None:
    """Until both partitions of ``remote`` hold ``per_partition`` records."""
    deadline = time.monotonic() + 60
    while any(len(sample_data.read_partition(cluster.bootstrap, remote, p)) < per_partition for p in (0, 1)):
        assert time.monotonic() < deadline, f"{remote} does not hold {per_partition} records per partition"
        time.sleep(0.2)
