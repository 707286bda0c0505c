"""Schemas travel with the data, on real schema registries (Apicurio Registry's Confluent API, one per
cluster): records produced with Confluent's Avro serializer on the source, a schema evolving
mid-stream, decode on the target with the target's registry to exactly what was produced, although
the two registries number the schemas differently; a record whose id the source registry does not
hold is never copied."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from mirror_helpers import create_topic, run_flow, write_mm2
from pyspark.sql import SparkSession

from mirrorflow.app.runner import load_plan
from mirrorflow.app.verify import plan_verification
from mirrorflow.copy.spark_verify import verify_ranges
from mirrorflow.core.schema_ids import schema_id
from mirrorflow.errors import PartitionsFailedError, SchemaIdError
from mirrorflow_dev import sample_data
from mirrorflow_dev.local_kafka import LocalCluster
from mirrorflow_dev.local_registry import LocalRegistry

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

FLOW = "primary->backup"
ORDER_V1 = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [{"name": "id", "type": "long"}, {"name": "item", "type": "string"}],
}
# The next version: a field added with a default (backward compatible).
ORDER_V2 = {**ORDER_V1, "fields": [*ORDER_V1["fields"], {"name": "note", "type": "string", "default": ""}]}
KEY = {"type": "record", "name": "OrderKey", "namespace": "shop", "fields": [{"name": "id", "type": "long"}]}


def registry_client(url: str) -> SchemaRegistryClient:
    """Confluent's client, failing a request the registry does not answer within 30 s."""
    return SchemaRegistryClient({"url": url, "timeout": 30})


def _config(
    tmp_path: Path,
    clusters: dict[str, LocalCluster],
    registries: dict[str, LocalRegistry],
    topic: str,
    extra: str = "",
) -> Any:
    return write_mm2(
        tmp_path,
        {"primary": clusters["primary"], "backup": clusters["backup"]},
        1,
        f"{FLOW}.enabled = true\n{FLOW}.topics = {topic}\n"
        f"{FLOW}.mirrorflow.schema.registry.source.url = {registries['primary'].url}\n"
        f"{FLOW}.mirrorflow.schema.registry.target.url = {registries['backup'].url}\n{extra}",
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
    """Partition 0 holds a value whose id no registry knows, partition 1 only good records: nothing
    of partition 0 is copied; with ``isolate`` partition 1 is, and the run fails naming partition 0."""
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

    assert f"{unique_name}-0 offset 1: the record's value carries schema id 987654" in str(caught.value)
    remote = f"primary.{unique_name}"
    assert sample_data.read_partition(backup.bootstrap, remote, 0) == []
    copied = sample_data.read_partition(backup.bootstrap, remote, 1)
    if on_error == "fail":
        assert isinstance(caught.value, SchemaIdError) and copied == []
    else:
        assert isinstance(caught.value, PartitionsFailedError)
        assert _decoded(backup.bootstrap, registries["backup"].url, remote, 1) == [({"id": 1}, good[1][1])]
