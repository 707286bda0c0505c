"""Java client properties translated for librdkafka, kafka-python and Spark's Kafka source."""

from __future__ import annotations

import datetime
import re
import ssl
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import NameOID

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
        "max.request.size": "5242880",
    }

    assert librdkafka_config(props) == {
        "message.max.bytes": "5242880",
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


def _self_signed() -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "mirror")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    return key, cert


def _client_pkcs12(folder: Path, password: bytes) -> Path:
    """A self-signed client certificate and its key in a PKCS12 store."""
    key, cert = _self_signed()
    path = folder / "client.p12"
    path.write_bytes(
        pkcs12.serialize_key_and_certificates(
            b"mirror", key, cert, None, serialization.BestAvailableEncryption(password)
        )
    )
    return path


def test_a_pem_keystore_is_the_certificate_and_key_file_of_both_python_clients() -> None:
    props = {
        **SASL_PROPS,
        "security.protocol": "SSL",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": "/etc/kafka/client.pem",
        "ssl.key.password": "k3y",
    }

    rdkafka, python = librdkafka_config(props), kafka_python_config(props)

    assert (rdkafka["ssl.certificate.location"], rdkafka["ssl.key.location"]) == (
        "/etc/kafka/client.pem",
    ) * 2
    assert rdkafka["ssl.key.password"] == "k3y"
    assert (python["ssl_certfile"], python["ssl_keyfile"], python["ssl_password"]) == (
        "/etc/kafka/client.pem",
        "/etc/kafka/client.pem",
        "k3y",
    )


def test_a_pkcs12_keystore_is_read_by_librdkafka_and_loaded_into_kafka_pythons_context(
    tmp_path: Path,
) -> None:
    store = _client_pkcs12(tmp_path, b"st0re")
    props = {
        "bootstrap.servers": "p1:9092",
        "security.protocol": "SSL",
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.location": str(store),
        "ssl.keystore.password": "st0re",
    }

    rdkafka, python = librdkafka_config(props), kafka_python_config(props)

    assert (rdkafka["ssl.keystore.location"], rdkafka["ssl.keystore.password"]) == (str(store), "st0re")
    context = python["ssl_context"]
    assert isinstance(context, ssl.SSLContext)
    assert context.check_hostname and context.verify_mode == ssl.CERT_REQUIRED
    # The short-lived PEM file it was loaded from is gone.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["client.p12"]
    with pytest.raises(ConfigError, match=r"^ssl\.keystore\.location: cannot read the PKCS12 keystore"):
        kafka_python_config({**props, "ssl.keystore.password": "wrong"})


@pytest.mark.parametrize(
    ("props", "key", "message"),
    [
        (
            {"ssl.keystore.location": "/k.jks"},
            "ssl.keystore.location",
            "/k.jks is a JKS keystore (Java's default), which the record copy (kafka-python) and the "
            "librdkafka writers cannot read; convert it to PKCS12 (`keytool -importkeystore -srckeystore "
            "/k.jks -destkeystore client.p12 -deststoretype PKCS12`), point this key at that file and set "
            "ssl.keystore.type = PKCS12",
        ),
        (
            {"ssl.keystore.location": "/k.pem", "ssl.keystore.type": "PEM", "ssl.keystore.password": "x"},
            "ssl.keystore.password",
            "a PEM keystore has no store password (Java refuses one too); put the private key's password in "
            "ssl.key.password",
        ),
        (
            {
                "ssl.keystore.location": "/k.p12",
                "ssl.keystore.type": "PKCS12",
                "ssl.keystore.password": "a",
                "ssl.key.password": "b",
            },
            "ssl.key.password",
            "the record copy and the librdkafka writers read a PKCS12 keystore with one password: give its "
            "key the store's password (or remove this key)",
        ),
    ],
    ids=["jks", "pem-with-store-password", "pkcs12-two-passwords"],
)
def test_keystores_the_python_clients_cannot_read_are_refused_naming_the_key(
    props: dict[str, str], key: str, message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        check_translatable(props, lambda k: f"primary.{k}")

    assert caught.value.key == f"primary.{key}"
    assert str(caught.value) == f"primary.{key}: {message}"


def test_an_inline_pem_keystore_reaches_librdkafka_as_strings_and_kafka_python_as_a_context() -> None:
    key, cert = _self_signed()
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"k3y"),
    ).decode()
    chain_pem = cert.public_bytes(serialization.Encoding.PEM).decode()
    props = {
        "bootstrap.servers": "p1:9092",
        "security.protocol": "SSL",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.key": key_pem,
        "ssl.keystore.certificate.chain": chain_pem,
        "ssl.key.password": "k3y",
    }

    rdkafka, python = librdkafka_config(props), kafka_python_config(props)

    assert (rdkafka["ssl.key.pem"], rdkafka["ssl.certificate.pem"], rdkafka["ssl.key.password"]) == (
        key_pem,
        chain_pem,
        "k3y",
    )
    assert isinstance(python["ssl_context"], ssl.SSLContext)
    with pytest.raises(ConfigError, match=r"^ssl\.keystore\.key: cannot load the client certificate"):
        kafka_python_config({**props, "ssl.key.password": "wrong"})
