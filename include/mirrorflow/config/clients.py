"""Client settings for the three Kafka clients this product uses, derived from one cluster's settings.

The config holds Java client properties, as MirrorMaker 2's does. Spark's JVM reader (verify) takes
them as they are; kafka-python (the record copy and the control plane) and librdkafka (heartbeats,
offset syncs, checkpoints, small reads) need them translated.
Only the keys below are translated; the README lists them. A setting that would make the Python
clients behave differently from the JVM reader (a truststore they cannot read) is a ``ConfigError``,
never dropped.
"""

from __future__ import annotations

import os
import secrets
import ssl
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs12

from mirrorflow.config.oauth import jaas_options, java_oauth, librdkafka_oauth, oauth_login
from mirrorflow.errors import ConfigError

# Java client keys that librdkafka understands under the same name and meaning.
_LIBRDKAFKA_SAME = frozenset(
    {
        "bootstrap.servers",
        "client.id",
        "security.protocol",
        "sasl.mechanism",
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

# Java client keys librdkafka knows under another name.
_LIBRDKAFKA_RENAMED = {"max.request.size": "message.max.bytes"}

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
# How long a batch run's transaction may stay open, unless the target's producer sets
# transaction.timeout.ms: the most brokers allow unless raised (their transaction.max.timeout.ms).
TRANSACTION_TIMEOUT_MS_DEFAULT = 900_000


def transaction_timeout_ms(producer_props: Mapping[str, str]) -> int:
    """A batch run's transaction timeout on the target of ``producer_props`` (checked when the
    config is loaded)."""
    return int(producer_props.get("transaction.timeout.ms", TRANSACTION_TIMEOUT_MS_DEFAULT))


def _jaas_credentials(props: Mapping[str, str]) -> dict[str, str]:
    _, options = jaas_options(props.get("sasl.jaas.config", ""))
    return {k: options[k] for k in ("username", "password") if k in options}


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


@dataclass(frozen=True)
class ClientCertificate:
    """The client certificate (mutual TLS) of Java's keystore settings: a ``PEM`` keystore, a file
    (``location``) or inline (``key_pem`` and ``chain_pem``, Java's ``ssl.keystore.key`` and
    ``ssl.keystore.certificate.chain``) holding the private key and its certificate chain
    (``password``: the key's, ``ssl.key.password``), or a ``PKCS12`` store file (``password``: the
    store's)."""

    location: str | None
    kind: str
    password: str | None = field(default=None, repr=False)
    key_pem: str | None = field(default=None, repr=False)
    chain_pem: str | None = None


def _certificate(
    props: Mapping[str, str], written_as: Callable[[str], str] = _as_is
) -> ClientCertificate | None:
    """The client certificate, None without one; errors name keys by ``written_as``."""
    location = props.get("ssl.keystore.location") or None
    key_pem, chain_pem = (
        props.get("ssl.keystore.key") or None,
        props.get("ssl.keystore.certificate.chain") or None,
    )
    if location is None and key_pem is None and chain_pem is None:
        return None
    kind = props.get("ssl.keystore.type", "JKS").upper()  # Java's default
    store_password, key_password = props.get("ssl.keystore.password"), props.get("ssl.key.password")
    if kind == "PEM" and store_password:
        raise ConfigError(
            "a PEM keystore has no store password (Java refuses one too); put the private key's "
            "password in ssl.key.password",
            key=written_as("ssl.keystore.password"),
        )
    if key_pem is not None or chain_pem is not None:
        # Java's rules for a keystore given inline.
        written = written_as("ssl.keystore.key" if key_pem else "ssl.keystore.certificate.chain")
        if location is not None or kind != "PEM":
            raise ConfigError(
                "an inline keystore (ssl.keystore.key and ssl.keystore.certificate.chain) takes "
                "ssl.keystore.type = PEM and no ssl.keystore.location",
                key=written,
            )
        if key_pem is None or chain_pem is None:
            missing = "ssl.keystore.certificate.chain" if key_pem else "ssl.keystore.key"
            raise ConfigError(
                "an inline keystore needs ssl.keystore.key and ssl.keystore.certificate.chain; set "
                + missing,
                key=written,
            )
        return ClientCertificate(None, kind, key_password or None, key_pem, chain_pem)
    if kind == "PEM":
        return ClientCertificate(location, kind, key_password or None)
    if kind == "PKCS12":
        if store_password and key_password and store_password != key_password:
            raise ConfigError(
                "the record copy and the librdkafka writers read a PKCS12 keystore with one password: "
                "give its key the store's password (or remove this key)",
                key=written_as("ssl.key.password"),
            )
        return ClientCertificate(location, kind, store_password or key_password or None)
    kind_key = written_as("ssl.keystore.type") if "ssl.keystore.type" in props else "Java's default"
    raise ConfigError(
        f"{location} is a {kind} keystore ({kind_key}), which the record copy (kafka-python) and the "
        "librdkafka writers cannot read; convert it to PKCS12 (`keytool -importkeystore -srckeystore "
        f"{location} -destkeystore client.p12 -deststoretype PKCS12`), point this key at that file and "
        "set ssl.keystore.type = PKCS12",
        key=written_as("ssl.keystore.location"),
    )


def _ssl_context(cert: ClientCertificate, ca_file: str | None, check_hostname: bool | None) -> ssl.SSLContext:
    """An SSL context trusting ``ca_file`` (the system's CAs when None) that presents a certificate
    kafka-python cannot take as files: a PKCS12 store's or an inline one."""
    context = ssl.create_default_context(cafile=ca_file)
    context.check_hostname = check_hostname is not False
    password: bytes | None
    if cert.kind == "PKCS12":
        pem, password = _pkcs12_pem(cert)
    else:
        pem = f"{cert.key_pem}\n{cert.chain_pem}\n".encode()
        password = cert.password.encode() if cert.password else None
    # Python's ssl loads a certificate chain from a file only: a private one that lives for this call.
    fd, path = tempfile.mkstemp(suffix=".pem")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(pem)
        context.load_cert_chain(path, password=password)
    except ssl.SSLError as error:
        raise ConfigError(
            f"cannot load the client certificate ({error}); check ssl.keystore.key, "
            "ssl.keystore.certificate.chain and ssl.key.password",
            key="ssl.keystore.key",
        ) from error
    finally:
        os.unlink(path)
    return context


def _pkcs12_pem(cert: ClientCertificate) -> tuple[bytes, bytes]:
    """The store's key, encrypted with a password used once, and its chain, in PEM; and that password."""
    assert cert.location is not None
    try:
        key, certificate, chain = pkcs12.load_key_and_certificates(
            Path(cert.location).read_bytes(), cert.password.encode() if cert.password else None
        )
    except (OSError, ValueError) as error:
        raise ConfigError(
            f"cannot read the PKCS12 keystore {cert.location} ({error}); check the file and "
            "ssl.keystore.password",
            key="ssl.keystore.location",
        ) from error
    if key is None or certificate is None:
        raise ConfigError(
            f"{cert.location} holds no private key and certificate", key="ssl.keystore.location"
        )
    once = secrets.token_bytes(32)
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(once),
    ) + b"".join(c.public_bytes(serialization.Encoding.PEM) for c in (certificate, *chain))
    return pem, once


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
    _certificate(props, written_as)
    oauth_login(props, written_as)


def copy_ignored(producer_props: Mapping[str, str], written_as: Callable[[str], str]) -> list[str]:
    """The producer settings, named as written, that the record copy does not apply."""
    return sorted(written_as(k) for k in producer_props if k in COPY_KEEPS_SOURCE_BATCHES)


def librdkafka_config(props: Mapping[str, str]) -> dict[str, str]:
    conf = {k: v for k, v in props.items() if k in _LIBRDKAFKA_SAME}
    conf.update({_LIBRDKAFKA_RENAMED[k]: v for k, v in props.items() if k in _LIBRDKAFKA_RENAMED})
    conf.update({f"sasl.{k}": v for k, v in _jaas_credentials(props).items()})
    login = oauth_login(props)
    if login is not None:
        conf.update(librdkafka_oauth(login))
    ca_file, check_hostname = _tls(props)
    if ca_file is not None:
        conf["ssl.ca.location"] = ca_file
    if check_hostname is not None:
        conf["ssl.endpoint.identification.algorithm"] = "https" if check_hostname else "none"
    cert = _certificate(props)
    if cert is not None and cert.kind == "PEM":
        if cert.location is not None:
            conf["ssl.certificate.location"] = conf["ssl.key.location"] = cert.location
        else:
            conf["ssl.key.pem"], conf["ssl.certificate.pem"] = cert.key_pem or "", cert.chain_pem or ""
        if cert.password:
            conf["ssl.key.password"] = cert.password
    elif cert is not None and cert.location is not None:
        conf["ssl.keystore.location"] = cert.location
        if cert.password:
            conf["ssl.keystore.password"] = cert.password
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
    cert = _certificate(props)
    if cert is not None and cert.location is not None and cert.kind == "PEM":
        conf["ssl_certfile"] = conf["ssl_keyfile"] = cert.location
        if cert.password:
            conf["ssl_password"] = cert.password
    elif cert is not None:
        conf["ssl_context"] = _ssl_context(cert, ca_file, check_hostname)
    return conf


def spark_reader_options(props: Mapping[str, str]) -> dict[str, str]:
    """``kafka.``-prefixed consumer options for Spark's Kafka source."""
    login = oauth_login(props)
    java = props if login is None else java_oauth(props, login)
    return {f"kafka.{k}": v for k, v in java.items() if k not in _SPARK_MANAGED}
