"""The settings a SASL/SCRAM local cluster is started, formatted and reached with (no broker here)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mirrorflow.clients import kafka_python_config, librdkafka_config
from mirrorflow.local_kafka import ScramSecurity, server_properties

SECURITY = ScramSecurity({"admin": "admin-pw", "mirror": "mirror-pw"})
SCRAM_LOGIN = "org.apache.kafka.common.security.scram.ScramLoginModule required"


def test_the_listeners_become_sasl_with_an_authorizer_and_admin_as_the_only_super_user() -> None:
    props = server_properties(9092, 9093, Path("/data"), security=SECURITY)

    secured = {k: v for k, v in props.items() if k not in server_properties(9092, 9093, Path("/data"))}
    assert secured == {
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": (
            f'{SCRAM_LOGIN} username="admin" password="admin-pw";'
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
        9092, 9093, Path("/data"), extra={"super.users": "User:admin;User:ops"}, security=SECURITY
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
