"""The settings a SASL/SCRAM (optionally TLS) local cluster is started, formatted and reached with,
and its certificates (no broker here)."""

from __future__ import annotations

import ipaddress
import re
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec

from mirrorflow.config.clients import kafka_python_config, librdkafka_config
from mirrorflow_dev.kafka_home import server_properties
from mirrorflow_dev.kafka_security import LocalTls, ScramSecurity

SECURITY = ScramSecurity({"admin": "admin-pw", "mirror": "mirror-pw"})
SCRAM_LOGIN = "org.apache.kafka.common.security.scram.ScramLoginModule required"
HOME = Path("/clusters/primary")


def test_the_listeners_become_sasl_with_an_authorizer_and_admin_as_the_only_super_user() -> None:
    props = server_properties(9092, 9093, HOME, security=SECURITY)

    secured = {k: v for k, v in props.items() if k not in server_properties(9092, 9093, HOME)}
    assert secured == {
        "sasl.enabled.mechanisms": "SCRAM-SHA-512,PLAIN",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": (
            f'{SCRAM_LOGIN} username="admin" password="admin-pw";'
        ),
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": (
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            'user_admin="admin-pw" user_mirror="mirror-pw";'
        ),
        "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
        "sasl.mechanism.controller.protocol": "PLAIN",
        "listener.name.controller.plain.sasl.jaas.config": (
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            'username="admin" password="admin-pw" user_admin="admin-pw";'
        ),
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin",
    }
    listeners = "SASL_PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093"
    assert (props["listeners"], props["advertised.listeners"]) == (listeners, listeners)
    assert (
        props["listener.security.protocol.map"] == "CONTROLLER:SASL_PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT"
    )
    assert props["inter.broker.listener.name"] == "SASL_PLAINTEXT"
    assert "allow.everyone.if.no.acl.found" not in props  # Kafka's default: false


def test_extra_properties_still_win_over_the_security_settings() -> None:
    props = server_properties(
        9092, 9093, HOME, extra={"super.users": "User:admin;User:ops"}, security=SECURITY
    )

    assert props["super.users"] == "User:admin;User:ops"


def test_format_args_create_every_user_with_scram_sha_512() -> None:
    assert SECURITY.format_args() == [
        "--add-scram",
        "SCRAM-SHA-512=[name=admin,password=admin-pw]",
        "--add-scram",
        "SCRAM-SHA-512=[name=mirror,password=mirror-pw]",
    ]


def test_client_settings_log_in_as_the_user_and_match_the_products_translation() -> None:
    java = SECURITY.client_properties("mirror")

    assert java == {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": f'{SCRAM_LOGIN} username="mirror" password="mirror-pw";',
    }
    assert SECURITY.kafka_python("mirror") == {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "mirror",
        "sasl_plain_password": "mirror-pw",
    }
    assert kafka_python_config({"bootstrap.servers": "h:1", **java}) == {
        "bootstrap_servers": ["h:1"],
        **SECURITY.kafka_python("mirror"),
    }
    assert librdkafka_config(java) == {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "mirror",
        "sasl.password": "mirror-pw",
    }


def test_generated_passwords_are_random_per_user_and_per_call() -> None:
    first, second = ScramSecurity.generate("mirror", "alice"), ScramSecurity.generate("mirror", "alice")

    assert list(first.passwords) == ["admin", "mirror", "alice"]
    passwords = [*first.passwords.values(), *second.passwords.values()]
    assert len(set(passwords)) == 6
    assert all(len(p) == 24 for p in passwords)


def test_passwords_stay_out_of_repr() -> None:
    assert repr(SECURITY) == "ScramSecurity()"


@pytest.mark.parametrize(
    ("passwords", "message"),
    [
        ({"mirror": "pw"}, "the super user 'admin' needs a password"),
        ({"admin": "pw", "bob,x": "pw"}, "user 'bob,x': names and passwords must match"),
        ({"admin": 'p"w'}, "user 'admin': names and passwords must match"),
        ({"admin": ""}, "user 'admin': names and passwords must match"),
    ],
    ids=["no-admin", "comma-in-name", "quote-in-password", "empty-password"],
)
def test_users_that_cannot_be_written_safely_are_refused(passwords: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        ScramSecurity(passwords)


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> LocalTls:
    return LocalTls.generate(tmp_path_factory.mktemp("tls"))


def test_with_tls_the_client_listener_is_sasl_ssl_with_the_key_in_the_home_and_the_ca_trusted(
    tls: LocalTls,
) -> None:
    security = ScramSecurity(SECURITY.passwords, tls)

    props = server_properties(9092, 9093, HOME, security=security)

    listeners = "SASL_SSL://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093"
    assert {k: props[k] for k in props if k.startswith(("listener", "advertised", "inter.", "ssl."))} == {
        "listeners": listeners,
        "advertised.listeners": listeners,
        "listener.security.protocol.map": "CONTROLLER:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
        "inter.broker.listener.name": "SASL_SSL",
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": (
            f'{SCRAM_LOGIN} username="admin" password="admin-pw";'
        ),
        "listener.name.sasl_ssl.plain.sasl.jaas.config": (
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            'user_admin="admin-pw" user_mirror="mirror-pw";'
        ),
        "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.controller.plain.sasl.jaas.config": (
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            'username="admin" password="admin-pw" user_admin="admin-pw";'
        ),
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": "/clusters/primary/tls/server.pem",
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(tls.ca_file),
    }


def test_with_tls_clients_trust_the_ca_and_the_products_translation_gives_the_same_settings(
    tls: LocalTls,
) -> None:
    security = ScramSecurity(SECURITY.passwords, tls)

    java = security.client_properties("mirror")

    assert java == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": f'{SCRAM_LOGIN} username="mirror" password="mirror-pw";',
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(tls.ca_file),
    }
    assert security.kafka_python("mirror") == {
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "mirror",
        "sasl_plain_password": "mirror-pw",
        "ssl_cafile": str(tls.ca_file),
    }
    assert kafka_python_config({"bootstrap.servers": "h:1", **java}) == {
        "bootstrap_servers": ["h:1"],
        **security.kafka_python("mirror"),
    }
    assert librdkafka_config(java)["ssl.ca.location"] == str(tls.ca_file)


def test_the_server_certificate_names_127_0_0_1_and_is_signed_by_the_ca_whose_key_is_nowhere(
    tls: LocalTls,
) -> None:
    ca_pem = tls.ca_file.read_bytes()
    (ca,) = x509.load_pem_x509_certificates(ca_pem)
    server, chain_ca = x509.load_pem_x509_certificates(tls.server_pem)

    server.verify_directly_issued_by(ca)
    assert chain_ca == ca
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(
        x509.IPAddress
    ) == [ipaddress.IPv4Address("127.0.0.1")]
    assert b"PRIVATE KEY" not in ca_pem
    assert tls.server_pem.count(b"-----BEGIN PRIVATE KEY-----") == 1  # the server's, unencrypted PKCS#8
    assert list(tls.ca_file.parent.iterdir()) == [tls.ca_file]
    assert repr(tls) == f"LocalTls(ca_file={tls.ca_file!r})"
    assert repr(ScramSecurity(SECURITY.passwords, tls)) == "ScramSecurity()"
    assert isinstance(server.public_key(), ec.EllipticCurvePublicKey)


def test_install_writes_the_key_and_chain_into_the_home_readable_by_the_owner_only(
    tls: LocalTls, tmp_path: Path
) -> None:
    tls.install(tmp_path)
    tls.install(tmp_path)  # a restart rewrites it

    keystore = tmp_path / "tls" / "server.pem"
    assert keystore == LocalTls.keystore_file(tmp_path)
    assert keystore.read_bytes() == tls.server_pem
    assert stat.S_IMODE(keystore.stat().st_mode) == 0o600
    assert stat.S_IMODE(keystore.parent.stat().st_mode) == 0o700


def test_a_jaas_config_can_carry_a_reference_instead_of_the_password() -> None:
    assert SECURITY.jaas_config("mirror", "${file:/creds.properties:password}") == (
        f'{SCRAM_LOGIN} username="mirror" password="${{file:/creds.properties:password}}";'
    )
