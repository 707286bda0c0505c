"""Security for the local clusters: a throwaway certificate authority with broker and client
certificates (``LocalTls``), SASL users (SCRAM and PLAIN) with an authorizer (``ScramSecurity``), an
SSL listener with client certificates required or not (``TlsSecurity``), and OIDC logins
(OAUTHBEARER) whose tokens the brokers check against an OIDC server's keys (``OAuthSecurity``), for
brokers started by ``local_kafka`` and the clients that talk to them."""

from __future__ import annotations

import datetime
import ipaddress
import os
import re
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from mirrorflow.config.oauth import LOGIN_HANDLERS, OAUTHBEARER, jaas_line
from mirrorflow.kafka.oauth_tokens import python_client_config

SCRAM_MECHANISM = "SCRAM-SHA-512"
PLAIN_MECHANISM = "PLAIN"
SUPER_USER = "admin"
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
_SCRAM_LOGIN = "org.apache.kafka.common.security.scram.ScramLoginModule"
_PLAIN_LOGIN = "org.apache.kafka.common.security.plain.PlainLoginModule"
# Names and passwords go unquoted into the storage tool's --add-scram argument and quoted into JAAS
# strings: characters outside this set would need escaping in one or the other.
_CREDENTIAL_RE = re.compile(r"^[A-Za-z0-9_-]+$")


def _certificate(
    subject: str,
    public_key: ec.EllipticCurvePublicKey,
    issuer: str,
    issuer_key: ec.EllipticCurvePrivateKey,
    extensions: Sequence[tuple[x509.ExtensionType, bool]],
    days: int,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        # An hour back: a clock a little behind the one that signed must not reject the certificate.
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()), False)
    )
    for extension, critical in extensions:
        builder = builder.add_extension(extension, critical)
    return builder.sign(issuer_key, hashes.SHA256())


def _key_usage(*, signs_certificates: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=not signs_certificates,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=signs_certificates,
        crl_sign=signs_certificates,
        encipher_only=False,
        decipher_only=False,
    )


@dataclass(frozen=True)
class LocalTls:
    """A throwaway certificate authority and a server certificate for 127.0.0.1 that it signed, in PEM.

    ``ca_file`` holds the CA's certificate only (public): clients trust it, and so do the brokers'
    own inter-broker clients. ``server_pem`` is the server's private key (unencrypted PKCS#8: its
    password would sit next to it in server.properties) followed by its certificate chain, the form
    of Kafka's ``ssl.keystore.type=PEM``; each cluster gets it as ``home/tls/server.pem``, readable by
    the owner only, when it starts. The CA's private key is never written anywhere, so nothing else
    can be signed by it. The server certificate names 127.0.0.1 as an IP SAN, so every client keeps
    hostname verification on.
    """

    ca_file: Path
    server_pem: bytes = field(repr=False)
    # Client name -> its unencrypted private key (PKCS#8) and certificate chain, in PEM.
    clients: Mapping[str, bytes] = field(default_factory=dict, repr=False)

    @classmethod
    def generate(cls, folder: Path, days: int = 7, clients: Sequence[str] = ()) -> LocalTls:
        """A new CA and server key (EC P-256), valid for ``days``, and a client certificate (CN =
        name, the broker's principal ``User:CN=<name>``) for each of ``clients``; writes
        ``folder/ca.pem`` and each client's ``client_file``."""
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_name = "mirrorflow throwaway test CA"
        ca = _certificate(
            ca_name,
            ca_key.public_key(),
            ca_name,
            ca_key,
            [
                (x509.BasicConstraints(ca=True, path_length=0), True),
                (_key_usage(signs_certificates=True), True),
                (x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False),
            ],
            days,
        )
        server_key = ec.generate_private_key(ec.SECP256R1())
        server = _certificate(
            "127.0.0.1",
            server_key.public_key(),
            ca_name,
            ca_key,
            [
                (x509.SubjectAlternativeName([x509.IPAddress(ipaddress.IPv4Address("127.0.0.1"))]), False),
                (x509.BasicConstraints(ca=False, path_length=None), True),
                (_key_usage(signs_certificates=False), True),
                # Client too: with client certificates required, the broker presents it to itself.
                (
                    x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                    False,
                ),
            ],
            days,
        )
        ca_pem = ca.public_bytes(serialization.Encoding.PEM)
        folder.mkdir(parents=True, exist_ok=True)
        ca_file = folder / "ca.pem"
        ca_file.write_bytes(ca_pem)
        client_pems = {}
        for name in clients:
            client_key = ec.generate_private_key(ec.SECP256R1())
            client = _certificate(
                name,
                client_key.public_key(),
                ca_name,
                ca_key,
                [
                    (x509.BasicConstraints(ca=False, path_length=None), True),
                    (_key_usage(signs_certificates=False), True),
                    (x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), False),
                ],
                days,
            )
            client_pems[name] = _pem(client_key) + client.public_bytes(serialization.Encoding.PEM) + ca_pem
        server_pem = _pem(server_key) + server.public_bytes(serialization.Encoding.PEM) + ca_pem
        tls = cls(ca_file.resolve(), server_pem, client_pems)
        for name in clients:
            write_private(tls.client_file(name), client_pems[name])
        return tls

    def client_file(self, name: str) -> Path:
        """The client's unencrypted key and certificate chain (Kafka's ``ssl.keystore.type=PEM``)."""
        return self.ca_file.parent / "clients" / f"{name}.pem"

    def client_key_and_chain(self, name: str) -> tuple[bytes, bytes]:
        """The client's unencrypted key and its certificate chain, in PEM, apart (a Strimzi user's
        secret holds them as two files)."""
        key, chain = self._client(name)
        return _pem(key), _chain_pem(chain)

    def client_pem(self, name: str, password: str) -> bytes:
        """The client's key, encrypted with ``password`` (``ssl.key.password``), and its chain."""
        key, chain = self._client(name)
        encrypted = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(password.encode()),
        )
        return encrypted + _chain_pem(chain)

    def client_pkcs12(self, name: str, password: str) -> bytes:
        """The client's key and certificate in a PKCS12 store protected by ``password``."""
        key, chain = self._client(name)
        return pkcs12.serialize_key_and_certificates(
            name.encode(), key, chain[0], chain[1:], serialization.BestAvailableEncryption(password.encode())
        )

    def _client(self, name: str) -> tuple[ec.EllipticCurvePrivateKey, list[x509.Certificate]]:
        pem = self.clients[name]
        key = serialization.load_pem_private_key(pem, None)
        assert isinstance(key, ec.EllipticCurvePrivateKey)
        return key, x509.load_pem_x509_certificates(pem)

    def broker_properties(self, home: Path) -> dict[str, str]:
        """The TLS settings of a broker in ``home``: its key (``install``) and what its own
        inter-broker client trusts."""
        return {
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(LocalTls.keystore_file(home)),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.ca_file),
        }

    @staticmethod
    def keystore_file(home: Path) -> Path:
        return home / "tls" / "server.pem"

    def install(self, home: Path) -> None:
        """Write the server's key and certificate chain into ``home``, readable by the owner only."""
        write_private(self.keystore_file(home), self.server_pem)


def _pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _chain_pem(chain: Sequence[x509.Certificate]) -> bytes:
    return b"".join(c.public_bytes(serialization.Encoding.PEM) for c in chain)


def write_private(path: Path, data: bytes) -> None:
    """Write ``data`` (a private key) to ``path``, readable by the owner only."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    # Created with its final mode: the key is never readable by others, not even for a moment.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


@dataclass(frozen=True)
class ScramSecurity:
    """SASL users, an authorizer and a super user for a local cluster, optionally behind TLS.

    The client and inter-broker listener is SASL_PLAINTEXT with SCRAM-SHA-512 (and PLAIN, for clients:
    the same users and passwords), or SASL_SSL with ``tls``; ``passwords`` (user -> password,
    ``admin`` included) are written to the metadata log when the storage is formatted.
    The controller listener is SASL_PLAINTEXT with PLAIN and the single static user ``admin``: KRaft
    supports SCRAM on broker listeners only (KIP-900).
    ``admin`` is the only super user, and the broker itself logs in as ``admin``; no one can connect
    without a password and, as ``allow.everyone.if.no.acl.found`` stays false, other users may only
    do what ACLs grant them.
    """

    passwords: Mapping[str, str] = field(repr=False)
    tls: LocalTls | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if SUPER_USER not in self.passwords:
            raise ValueError(f"the super user {SUPER_USER!r} needs a password")
        for user, password in self.passwords.items():
            if not (_CREDENTIAL_RE.match(user) and _CREDENTIAL_RE.match(password)):
                raise ValueError(f"user {user!r}: names and passwords must match {_CREDENTIAL_RE.pattern}")

    @classmethod
    def generate(cls, *users: str, tls: LocalTls | None = None) -> ScramSecurity:
        """``admin`` and ``users``, each with a random password (never the same twice)."""
        return cls({user: secrets.token_urlsafe(18) for user in (SUPER_USER, *users)}, tls)

    @property
    def protocol(self) -> str:
        """The security protocol of the client listener, which is also its listener name."""
        return "SASL_PLAINTEXT" if self.tls is None else "SASL_SSL"

    def server_properties(self, port: int, controller_port: int, home: Path) -> dict[str, str]:
        """Listener, SASL, TLS and authorizer settings of a cluster in ``home``; they replace the
        PLAINTEXT ones."""
        protocol = self.protocol
        client = f"{protocol}://127.0.0.1:{port}"
        controller = f"CONTROLLER://127.0.0.1:{controller_port}"
        password = self.passwords[SUPER_USER]
        props = {
            "listeners": f"{client},{controller}",
            "advertised.listeners": f"{client},{controller}",
            "listener.security.protocol.map": f"CONTROLLER:SASL_PLAINTEXT,{protocol}:{protocol}",
            "inter.broker.listener.name": protocol,
            "sasl.enabled.mechanisms": f"{SCRAM_MECHANISM},{PLAIN_MECHANISM}",
            "sasl.mechanism.inter.broker.protocol": SCRAM_MECHANISM,
            f"listener.name.{protocol.lower()}.scram-sha-512.sasl.jaas.config": self.jaas_config(SUPER_USER),
            # PLAIN's users are the JAAS entries of the listener.
            f"listener.name.{protocol.lower()}.plain.sasl.jaas.config": (
                f"{_PLAIN_LOGIN} required "
                + " ".join(f'user_{user}="{password}"' for user, password in sorted(self.passwords.items()))
                + ";"
            ),
            "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
            "sasl.mechanism.controller.protocol": "PLAIN",
            # username/password: the broker's login to the controller; user_admin: the accepted one.
            "listener.name.controller.plain.sasl.jaas.config": (
                f'{_PLAIN_LOGIN} required username="{SUPER_USER}" password="{password}" '
                f'user_{SUPER_USER}="{password}";'
            ),
            "authorizer.class.name": STANDARD_AUTHORIZER,
            "super.users": f"User:{SUPER_USER}",
        }
        if self.tls is not None:
            props |= self.tls.broker_properties(home)
        return props

    def format_args(self) -> list[str]:
        """StorageTool format arguments that create the SCRAM users."""
        return [
            arg
            for user, password in sorted(self.passwords.items())
            for arg in ("--add-scram", f"{SCRAM_MECHANISM}=[name={user},password={password}]")
        ]

    def jaas_config(self, user: str, password: str | None = None, mechanism: str = SCRAM_MECHANISM) -> str:
        """The JAAS login of ``user``; ``password`` replaces theirs, e.g. by a config provider reference."""
        secret = self.passwords[user] if password is None else password
        login = _PLAIN_LOGIN if mechanism == PLAIN_MECHANISM else _SCRAM_LOGIN
        return f'{login} required username="{user}" password="{secret}";'

    def client_properties(self, user: str, mechanism: str = SCRAM_MECHANISM) -> dict[str, str]:
        """Java client properties (MM2's keys, without a cluster alias) that log in as ``user``."""
        props = {
            "security.protocol": self.protocol,
            "sasl.mechanism": mechanism,
            "sasl.jaas.config": self.jaas_config(user, mechanism=mechanism),
        }
        if self.tls is not None:
            props |= {"ssl.truststore.type": "PEM", "ssl.truststore.location": str(self.tls.ca_file)}
        return props

    def kafka_python(self, user: str) -> dict[str, Any]:
        """kafka-python settings that log in as ``user`` (bootstrap servers not included)."""
        conf: dict[str, Any] = {
            "security_protocol": self.protocol,
            "sasl_mechanism": SCRAM_MECHANISM,
            "sasl_plain_username": user,
            "sasl_plain_password": self.passwords[user],
        }
        if self.tls is not None:
            conf["ssl_cafile"] = str(self.tls.ca_file)
        return conf


@dataclass(frozen=True)
class TlsSecurity:
    """A cluster whose client and inter-broker listener is SSL with the server certificate of ``tls``.
    With ``client_certificates`` (mutual TLS) every client must present a certificate (``tls`` holds
    the clients'), and a client is the principal ``User:CN=<name>``; without, TLS encrypts and
    authenticates the server only. No authorizer: who may do what is ``ScramSecurity``'s business."""

    tls: LocalTls = field(repr=False)
    client_certificates: bool = True
    protocol = "SSL"

    def server_properties(self, port: int, controller_port: int, home: Path) -> dict[str, str]:
        client = f"SSL://127.0.0.1:{port}"
        controller = f"CONTROLLER://127.0.0.1:{controller_port}"
        return {
            "listeners": f"{client},{controller}",
            "advertised.listeners": f"{client},{controller}",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,SSL:SSL",
            "inter.broker.listener.name": "SSL",
            "ssl.client.auth": "required" if self.client_certificates else "none",
            **self.tls.broker_properties(home),
        }

    def format_args(self) -> list[str]:
        return []

    def client_properties(self, user: str) -> dict[str, str]:
        """Java client properties trusting the CA, presenting ``user``'s certificate (an unencrypted
        PEM keystore) where the cluster asks for one."""
        props = {
            "security.protocol": "SSL",
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.tls.ca_file),
        }
        if self.client_certificates:
            props |= {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(self.tls.client_file(user))}
        return props

    def kafka_python(self, user: str) -> dict[str, Any]:
        conf = {"security_protocol": "SSL", "ssl_cafile": str(self.tls.ca_file)}
        if self.client_certificates:
            client = str(self.tls.client_file(user))
            conf |= {"ssl_certfile": client, "ssl_keyfile": client}
        return conf


_OAUTH_VALIDATOR = "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"


@dataclass(frozen=True)
class OAuthSecurity:
    """OAUTHBEARER logins (OIDC client credentials) on the client and inter-broker listener
    (SASL_PLAINTEXT): the brokers check each token's signature against the OIDC server's keys
    (``jwks_endpoint_url``), its expiry and that it names ``audience`` among its ``aud``, and log in
    to each other as ``broker_client``. No
    authorizer: a client whose token is accepted may do anything. ``reauth_ms`` is the brokers'
    ``connections.max.reauth.ms``: a connection must log in again within it (and within its token's
    lifetime) or be closed; 0 keeps a login for the connection's life. The controller listener stays
    PLAINTEXT on loopback. Kafka 4 brokers reach only the OIDC URLs their JVM allows
    (``jvm_properties``)."""

    token_endpoint_url: str
    jwks_endpoint_url: str
    broker_client: str
    broker_secret: str = field(repr=False)
    audience: str
    reauth_ms: int = 0
    # No TLS: local_kafka installs a server certificate only where a security has one.
    tls: None = None

    @property
    def protocol(self) -> str:
        return "SASL_PLAINTEXT"

    def server_properties(self, port: int, controller_port: int, home: Path) -> dict[str, str]:
        listener = "listener.name.sasl_plaintext.oauthbearer."
        client = f"SASL_PLAINTEXT://127.0.0.1:{port}"
        controller = f"CONTROLLER://127.0.0.1:{controller_port}"
        return {
            "listeners": f"{client},{controller}",
            "advertised.listeners": f"{client},{controller}",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
            "inter.broker.listener.name": "SASL_PLAINTEXT",
            "sasl.enabled.mechanisms": OAUTHBEARER,
            "sasl.mechanism.inter.broker.protocol": OAUTHBEARER,
            f"{listener}sasl.jaas.config": jaas_line(self.broker_client, self.broker_secret),
            f"{listener}sasl.server.callback.handler.class": _OAUTH_VALIDATOR,
            f"{listener}sasl.login.callback.handler.class": LOGIN_HANDLERS[0],
            "sasl.oauthbearer.token.endpoint.url": self.token_endpoint_url,
            "sasl.oauthbearer.jwks.endpoint.url": self.jwks_endpoint_url,
            "sasl.oauthbearer.expected.audience": self.audience,
            "connections.max.reauth.ms": str(self.reauth_ms),
        }

    def format_args(self) -> list[str]:
        return []

    def jvm_properties(self) -> list[str]:
        """The OIDC server's URLs, which Kafka 4 reaches only when its JVM allows them."""
        return [
            f"-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls={self.token_endpoint_url},{self.jwks_endpoint_url}"
        ]

    def client_properties(self, client_id: str, secret: str) -> dict[str, str]:
        """Java client properties (MM2's keys, without a cluster alias) that log in as ``client_id``;
        ``secret`` may be a config provider reference."""
        return {
            "security.protocol": self.protocol,
            "sasl.mechanism": OAUTHBEARER,
            "sasl.jaas.config": jaas_line(client_id, secret),
            "sasl.login.callback.handler.class": LOGIN_HANDLERS[0],
            "sasl.oauthbearer.token.endpoint.url": self.token_endpoint_url,
        }

    def kafka_python(self, user: str) -> dict[str, Any]:
        """kafka-python settings that log in as the brokers' own client (``user`` is the super user
        of the other securities; here every accepted login may do anything)."""
        conf = python_client_config(
            {"bootstrap.servers": "-", **self.client_properties(self.broker_client, self.broker_secret)}
        )
        del conf["bootstrap_servers"]
        return conf


# What secures a local cluster, if anything.
BrokerSecurity = ScramSecurity | TlsSecurity | OAuthSecurity
