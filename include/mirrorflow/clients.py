"""Client settings for the three Kafka clients this product uses, derived from one cluster's settings.

The config holds Java client properties, as MirrorMaker 2's does. Spark's JVM reader takes them as
they are; librdkafka (the record writer) and kafka-python (the control plane) need them translated.
Only the keys below are translated; the README lists them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

# Java client keys that librdkafka understands under the same name and meaning.
_LIBRDKAFKA_SAME = frozenset(
    {
        "bootstrap.servers",
        "client.id",
        "security.protocol",
        "sasl.mechanism",
        "ssl.endpoint.identification.algorithm",
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

_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')


def _jaas_credentials(props: Mapping[str, str]) -> dict[str, str]:
    options = dict(_JAAS_OPTION.findall(props.get("sasl.jaas.config", "")))
    # JAAS values are quoted strings: a backslash escapes the next character.
    return {k: re.sub(r"\\(.)", r"\1", options[k]) for k in ("username", "password") if k in options}


def librdkafka_config(props: Mapping[str, str]) -> dict[str, str]:
    conf = {k: v for k, v in props.items() if k in _LIBRDKAFKA_SAME}
    conf.update({f"sasl.{k}": v for k, v in _jaas_credentials(props).items()})
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
    return conf


def spark_reader_options(props: Mapping[str, str]) -> dict[str, str]:
    """``kafka.``-prefixed consumer options for Spark's Kafka source."""
    return {f"kafka.{k}": v for k, v in props.items() if k not in _SPARK_MANAGED}
