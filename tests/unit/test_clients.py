"""Java client properties translated for librdkafka, kafka-python and Spark's Kafka source."""

from __future__ import annotations

import pytest

from mirrorflow.clients import kafka_python_config, librdkafka_config, spark_reader_options

PLAIN_JAAS = (
    'org.apache.kafka.common.security.plain.PlainLoginModule required username="alice" password="p@ss w=rd;";'
)
SCRAM_JAAS = (
    "org.apache.kafka.common.security.scram.ScramLoginModule required\n"
    '  username = "mirror-bot"\n'
    '  password = "s3cr3t"\n'
    '  tokenauth = "false";'
)

SASL_PROPS = {
    "bootstrap.servers": "p1:9092,p2:9093",
    "security.protocol": "SASL_SSL",
    "sasl.mechanism": "SCRAM-SHA-512",
    "sasl.jaas.config": SCRAM_JAAS,
    "client.id": "mirror",
    "ssl.truststore.location": "/etc/kafka/truststore.jks",
    "group.id": "ignored",
    "acks": "all",
}


@pytest.mark.parametrize(
    ("jaas", "username", "password"),
    [(PLAIN_JAAS, "alice", "p@ss w=rd;"), (SCRAM_JAAS, "mirror-bot", "s3cr3t")],
    ids=["plain", "scram"],
)
def test_sasl_credentials_come_from_the_jaas_config(jaas: str, username: str, password: str) -> None:
    props = {"bootstrap.servers": "h:1", "sasl.jaas.config": jaas}

    assert librdkafka_config(props) == {
        "bootstrap.servers": "h:1",
        "sasl.username": username,
        "sasl.password": password,
    }
    assert kafka_python_config(props) == {
        "bootstrap_servers": ["h:1"],
        "sasl_plain_username": username,
        "sasl_plain_password": password,
    }


def test_librdkafka_config_passes_known_keys_and_drops_java_only_ones() -> None:
    props = {
        **SASL_PROPS,
        "linger.ms": "5",
        "compression.type": "zstd",
        "ssl.endpoint.identification.algorithm": "https",
        "key.serializer": "org.apache.kafka.common.serialization.ByteArraySerializer",
        "max.in.flight.requests.per.connection": "1",
    }

    assert librdkafka_config(props) == {
        "bootstrap.servers": "p1:9092,p2:9093",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "client.id": "mirror",
        "acks": "all",
        "linger.ms": "5",
        "compression.type": "zstd",
        "ssl.endpoint.identification.algorithm": "https",
        "sasl.username": "mirror-bot",
        "sasl.password": "s3cr3t",
    }


def test_kafka_python_config_translates_names_and_splits_bootstrap_servers() -> None:
    assert kafka_python_config(SASL_PROPS) == {
        "bootstrap_servers": ["p1:9092", "p2:9093"],
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "client_id": "mirror",
        "sasl_plain_username": "mirror-bot",
        "sasl_plain_password": "s3cr3t",
    }


def test_without_jaas_config_there_are_no_credentials() -> None:
    props = {"bootstrap.servers": "h:1", "security.protocol": "PLAINTEXT"}

    assert librdkafka_config(props) == {"bootstrap.servers": "h:1", "security.protocol": "PLAINTEXT"}
    assert kafka_python_config(props) == {"bootstrap_servers": ["h:1"], "security_protocol": "PLAINTEXT"}


def test_spark_reader_options_prefix_every_key_and_drop_spark_managed_ones() -> None:
    props = {
        **SASL_PROPS,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": "false",
        "interceptor.classes": "com.example.Interceptor",
        "isolation.level": "read_committed",
        "key.deserializer": "org.apache.kafka.common.serialization.StringDeserializer",
        "value.deserializer": "org.apache.kafka.common.serialization.StringDeserializer",
        "max.poll.records": "500",
    }

    assert spark_reader_options(props) == {
        "kafka.bootstrap.servers": "p1:9092,p2:9093",
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": SCRAM_JAAS,
        "kafka.client.id": "mirror",
        "kafka.ssl.truststore.location": "/etc/kafka/truststore.jks",
        "kafka.acks": "all",
        "kafka.max.poll.records": "500",
    }
