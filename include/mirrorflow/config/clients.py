"""Client settings for the three Kafka clients this product uses, derived from one cluster's settings.

The config holds Java client properties, as MirrorMaker 2's does. Spark's JVM reader (verify) takes
them as they are; kafka-python (the record copy and the control plane) and librdkafka (heartbeats,
offset syncs, checkpoints, small reads) need them translated.
Only the keys below are translated; the README lists them. A setting that would make the Python
clients behave differently from the JVM reader (a truststore they cannot read) is a ``ConfigError``,
never dropped.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from mirrorflow.errors import ConfigError

# Java client keys that librdkafka understands under the same name and meaning.
_LIBRDKAFKA_SAME = frozenset(
    {
        "bootstrap.servers",
        "client.id",
        "security.protocol",
        "sasl.mechanism",
        "ssl.key.password",
        "acks",
        "linger.ms",
        "batch.size",
        "compression.type",
        "request.timeout.ms",
        "delivery.timeout.ms",
        "retry.backoff.ms",
        "metadata.max.age.ms",
        "socket.connection.setup.timeout.ms",
    }
)

# Spark's Kafka source refuses these consumer settings (it manages them itself).
_SPARK_MANAGED = frozenset(
    {
        "auto.offset.reset",
        "enable.auto.commit",
        "group.id",
        "interceptor.classes",
        "isolation.level",
        "key.deserializer",
        "value.deserializer",
    }
)

# Java's admin client default for request.timeout.ms (read by the control plane).
ADMIN_REQUEST_TIMEOUT_MS_DEFAULT = 30000

_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')


def _jaas_credentials(props: Mapping[str, str]) -> dict[str, str]:
    options = dict(_JAAS_OPTION.findall(props.get("sasl.jaas.config", "")))
    # JAAS values are quoted strings: a backslash escapes the next character.
    return {k: re.sub(r"\\(.)", r"\1", options[k]) for k in ("username", "password") if k in options}


def _as_is(key: str) -> str:
    return key


def _tls(
    props: Mapping[str, str], written_as: Callable[[str], str] = _as_is
) -> tuple[str | None, bool | None]:
    """The CA file to trust and whether to verify the broker's host name, from Java's TLS client
    settings; None where they are not set, so that each client keeps its default (the system's CAs,
    host names verified: Java's defaults too). Errors name keys by ``written_as``.
    """
    location = props.get("ssl.truststore.location") or None
    kind = props.get("ssl.truststore.type", "JKS")  # Java's default
    if location is not None and kind != "PEM":
        kind_key = written_as("ssl.truststore.type") if "ssl.truststore.type" in props else "Java's default"
        raise ConfigError(
            f"{location} is a {kind} truststore ({kind_key}), which the record writer (librdkafka) and "
            "the control plane (kafka-python) cannot read; export its CA certificates to a PEM file "
            f"(e.g. `keytool -exportcert -rfc -keystore {location} -alias <CA alias> -file ca.pem`), "
            "point this key at that file and set ssl.truststore.type = PEM",
            key=written_as("ssl.truststore.location"),
        )
    algorithm = props.get("ssl.endpoint.identification.algorithm")
    if algorithm is None:
        return location, None
    # Java: empty disables the check, HTTPS in any case enables it.
    if algorithm.lower() not in ("", "https"):
        raise ConfigError(
            f"expected https, or empty to skip host name verification, got {algorithm!r}",
            key=written_as("ssl.endpoint.identification.algorithm"),
        )
    return location, bool(algorithm)


# Producer tuning the record copy does not apply: it moves the source's record batches as they are
# (their batching and compression kept), idempotent with acks=all. The small control-plane writes
# (heartbeats, offset syncs, checkpoints) still take them.
COPY_KEEPS_SOURCE_BATCHES = frozenset(
    {"acks", "linger.ms", "batch.size", "compression.type", "retry.backoff.ms", "delivery.timeout.ms"}
)


def check_translatable(props: Mapping[str, str], written_as: Callable[[str], str]) -> None:
    """Raise ``ConfigError`` (naming keys by ``written_as``) for client settings that librdkafka and
    kafka-python cannot be given: called when the config is loaded, so that they fail it."""
    _tls(props, written_as)


def copy_ignored(producer_props: Mapping[str, str], written_as: Callable[[str], str]) -> list[str]:
    """The producer settings, named as written, that the record copy does not apply."""
    return sorted(written_as(k) for k in producer_props if k in COPY_KEEPS_SOURCE_BATCHES)


def librdkafka_config(props: Mapping[str, str]) -> dict[str, str]:
    conf = {k: v for k, v in props.items() if k in _LIBRDKAFKA_SAME}
    conf.update({f"sasl.{k}": v for k, v in _jaas_credentials(props).items()})
    ca_file, check_hostname = _tls(props)
    if ca_file is not None:
        conf["ssl.ca.location"] = ca_file
    if check_hostname is not None:
        conf["ssl.endpoint.identification.algorithm"] = "https" if check_hostname else "none"
    return conf


def kafka_python_config(props: Mapping[str, str]) -> dict[str, Any]:
    conf: dict[str, Any] = {"bootstrap_servers": props["bootstrap.servers"].split(",")}
    for key in ("security.protocol", "sasl.mechanism", "client.id"):
        if key in props:
            conf[key.replace(".", "_")] = props[key]
    creds = _jaas_credentials(props)
    if creds:
        conf["sasl_plain_username"] = creds.get("username")
        conf["sasl_plain_password"] = creds.get("password")
    ca_file, check_hostname = _tls(props)
    if ca_file is not None:
        conf["ssl_cafile"] = ca_file
    if check_hostname is not None:
        conf["ssl_check_hostname"] = check_hostname
    return conf


def spark_reader_options(props: Mapping[str, str]) -> dict[str, str]:
    """``kafka.``-prefixed consumer options for Spark's Kafka source."""
    return {f"kafka.{k}": v for k, v in props.items() if k not in _SPARK_MANAGED}
