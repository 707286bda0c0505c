"""Java client properties translated for librdkafka, kafka-python and Spark's Kafka source."""

from __future__ import annotations

import re

import pytest

from mirrorflow.config.clients import (
    check_translatable,
    kafka_python_config,
    librdkafka_config,
    spark_reader_options,
)
from mirrorflow.errors import ConfigError

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
    "ssl.truststore.type": "PEM",
    "ssl.truststore.location": "/etc/kafka/ca.pem",
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
        "ssl.ca.location": "/etc/kafka/ca.pem",
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
        "ssl_cafile": "/etc/kafka/ca.pem",
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
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.location": "/etc/kafka/ca.pem",
        "kafka.acks": "all",
        "kafka.max.poll.records": "500",
    }


@pytest.mark.parametrize(
    ("algorithm", "librdkafka", "check_hostname"),
    [("https", "https", True), ("HTTPS", "https", True), ("", "none", False)],
    ids=["https", "upper-case", "empty-disables"],
)
def test_host_name_verification_follows_javas_endpoint_identification_algorithm(
    algorithm: str, librdkafka: str, check_hostname: bool
) -> None:
    props = {"bootstrap.servers": "h:1", "ssl.endpoint.identification.algorithm": algorithm}

    assert librdkafka_config(props) == {
        "bootstrap.servers": "h:1",
        "ssl.endpoint.identification.algorithm": librdkafka,
    }
    assert kafka_python_config(props) == {"bootstrap_servers": ["h:1"], "ssl_check_hostname": check_hostname}


def test_a_pem_truststore_becomes_the_ca_file_of_both_python_clients() -> None:
    props = {
        "bootstrap.servers": "h:1",
        "security.protocol": "SSL",
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": "/etc/kafka/ca.pem",
    }

    assert librdkafka_config(props) == {
        "bootstrap.servers": "h:1",
        "security.protocol": "SSL",
        "ssl.ca.location": "/etc/kafka/ca.pem",
    }
    assert kafka_python_config(props) == {
        "bootstrap_servers": ["h:1"],
        "security_protocol": "SSL",
        "ssl_cafile": "/etc/kafka/ca.pem",
    }


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            {"ssl.truststore.location": "/etc/kafka/truststore.jks"},
            "primary.ssl.truststore.location: /etc/kafka/truststore.jks is a JKS truststore (Java's "
            "default), which the record writer (librdkafka) and the control plane (kafka-python) cannot "
            "read; export its CA certificates to a PEM file (e.g. `keytool -exportcert -rfc -keystore "
            "/etc/kafka/truststore.jks -alias <CA alias> -file ca.pem`), point this key at that file and "
            "set ssl.truststore.type = PEM",
        ),
        (
            {"ssl.truststore.type": "PKCS12", "ssl.truststore.location": "/etc/kafka/truststore.p12"},
            "primary.ssl.truststore.location: /etc/kafka/truststore.p12 is a PKCS12 truststore "
            "(primary.ssl.truststore.type), which the record writer",
        ),
        (
            {"ssl.endpoint.identification.algorithm": "ldaps"},
            "primary.ssl.endpoint.identification.algorithm: expected https, or empty to skip host name "
            "verification, got 'ldaps'",
        ),
    ],
    ids=["jks-by-default", "pkcs12", "other-algorithm"],
)
def test_tls_settings_the_python_clients_cannot_take_are_config_errors_naming_the_key(
    settings: dict[str, str], message: str
) -> None:
    props = {"bootstrap.servers": "h:1", **settings}

    for translate in (librdkafka_config, kafka_python_config):
        with pytest.raises(ConfigError, match=re.escape(message.replace("primary.", ""))):
            translate(props)
    with pytest.raises(ConfigError, match=re.escape(message)):
        check_translatable(props, lambda key: f"primary.{key}")
