"""OAUTHBEARER logins read from Java client settings, and what each client gets of them."""

from __future__ import annotations

import logging

import pytest

from mirrorflow.config.clients import kafka_python_config, librdkafka_config, spark_reader_options
from mirrorflow.config.model import parse_config
from mirrorflow.config.oauth import OAuthLogin, jaas_options, oauth_login
from mirrorflow.errors import ConfigError

MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
HANDLER = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"
ENDPOINT = "https://idp.example.com/realms/kafka/protocol/openid-connect/token"
PROPS = {
    "bootstrap.servers": "h:1",
    "security.protocol": "SASL_SSL",
    "sasl.mechanism": "OAUTHBEARER",
    "sasl.jaas.config": f'{MODULE} required clientId="mirror" clientSecret="s3\\"cr=t;" scope="kafka";',
    "sasl.login.callback.handler.class": HANDLER,
    "sasl.oauthbearer.token.endpoint.url": ENDPOINT,
}


def test_a_client_credentials_login_from_the_jaas_line() -> None:
    login = oauth_login(PROPS)

    assert login == OAuthLogin(ENDPOINT, "mirror", 's3"cr=t;', "kafka", (10.0, 10.0))
    assert 's3"cr=t;' not in repr(login)


def test_kafka_4_1_keys_stand_for_the_jaas_options_and_the_timeouts_are_read() -> None:
    props = {
        **PROPS,
        "sasl.jaas.config": f"{MODULE} required ;",
        "sasl.oauthbearer.client.credentials.client.id": "other",
        "sasl.oauthbearer.client.credentials.client.secret": "pw",
        "sasl.oauthbearer.scope": "mirror",
        "sasl.login.connect.timeout.ms": "2000",
        "sasl.login.read.timeout.ms": "5000",
    }

    assert oauth_login(props) == OAuthLogin(ENDPOINT, "other", "pw", "mirror", (2.0, 5.0))


def test_other_mechanisms_have_no_oauth_login() -> None:
    assert oauth_login({**PROPS, "sasl.mechanism": "SCRAM-SHA-512"}) is None


def test_jaas_options_take_quoted_and_bare_values() -> None:
    assert jaas_options('m.Module required a="x \\"y\\"" b=plain c="";') == (
        "m.Module",
        {"a": 'x "y"', "b": "plain", "c": ""},
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"sasl.jaas.config": 'org.example.Login required clientId="a" clientSecret="b";'},
            "sasl.jaas.config: OAUTHBEARER logs in with `org.apache.kafka.common.security.oauthbearer."
            'OAuthBearerLoginModule required clientId="..." clientSecret="...";`, got org.example.Login',
        ),
        (
            {"sasl.jaas.config": f'{MODULE} required unsecuredLoginStringClaim_sub="me";'},
            "sasl.jaas.config: unsecured tokens (unsecuredLoginStringClaim_sub) are for tests of Kafka "
            "itself; log in with clientId and clientSecret at an OIDC token endpoint",
        ),
        (
            {
                "sasl.login.callback.handler.class": "io.strimzi.kafka.oauth.client."
                "JaasClientOauthLoginCallbackHandler"
            },
            "sasl.login.callback.handler.class: the Python clients cannot load Java classes; OAUTHBEARER "
            "takes Kafka's org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler or "
            "no handler",
        ),
        (
            {"sasl.oauthbearer.token.endpoint.url": "file:///tmp/token"},
            "sasl.oauthbearer.token.endpoint.url: OAUTHBEARER needs the OIDC server's token endpoint as an "
            "http(s) URL in sasl.oauthbearer.token.endpoint.url, got 'file:///tmp/token'",
        ),
        (
            {"sasl.jaas.config": f'{MODULE} required clientId="mirror";'},
            'sasl.jaas.config: OAUTHBEARER logs in with client credentials: add clientSecret="..." to the '
            "JAAS line (the secret through a config provider, e.g. ${file:/path:key})",
        ),
    ],
    ids=["login-module", "unsecured", "handler", "endpoint", "secret"],
)
def test_a_login_these_clients_cannot_make_is_refused_naming_the_key(
    change: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        oauth_login({**PROPS, **change})

    assert str(caught.value) == message


def test_each_client_gets_the_login_its_own_way() -> None:
    props = {**PROPS, "sasl.oauthbearer.client.credentials.client.id": "mirror"}

    assert librdkafka_config(props) == {
        "bootstrap.servers": "h:1",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "OAUTHBEARER",
        "sasl.oauthbearer.method": "oidc",
        "sasl.oauthbearer.token.endpoint.url": ENDPOINT,
        "sasl.oauthbearer.client.id": "mirror",
        "sasl.oauthbearer.client.secret": 's3"cr=t;',
        "sasl.oauthbearer.scope": "kafka",
    }
    # The token provider is added in the kafka layer (kafka.oauth_tokens).
    assert kafka_python_config(props) == {
        "bootstrap_servers": ["h:1"],
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "OAUTHBEARER",
    }
    # Spark's Kafka source runs a Kafka 3.9 client: the JAAS form, Kafka 4.1's keys left out.
    assert spark_reader_options(props) == {
        "kafka.bootstrap.servers": "h:1",
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "OAUTHBEARER",
        "kafka.sasl.jaas.config": (
            f'{MODULE} required clientId="mirror" clientSecret="s3\\"cr=t;" scope="kafka";'
        ),
        "kafka.sasl.login.callback.handler.class": HANDLER,
        "kafka.sasl.oauthbearer.token.endpoint.url": ENDPOINT,
    }


def test_an_mm2_file_with_an_oauth_cluster_loads_and_warns_of_the_validator_keys(
    caplog: pytest.LogCaptureFixture,
) -> None:
    text = (
        "clusters = a, b\na.bootstrap.servers = a1:9092\nb.bootstrap.servers = b1:9092\na->b.enabled = true\n"
        "config.providers = env\n"
        "config.providers.env.class = org.apache.kafka.common.config.provider.EnvVarConfigProvider\n"
        "b.security.protocol = SASL_PLAINTEXT\nb.sasl.mechanism = OAUTHBEARER\n"
        f'b.sasl.jaas.config = {MODULE} required clientId="mirror" clientSecret="${{env:SECRET}}";\n'
        f"b.sasl.login.callback.handler.class = {HANDLER}\n"
        f"b.sasl.oauthbearer.token.endpoint.url = {ENDPOINT}\n"
        "b.sasl.oauthbearer.expected.audience = kafka\n"
    )
    with caplog.at_level(logging.WARNING):
        config = parse_config(text, env={"MIRROR_STATE_DIR": "/s", "SECRET": "from-env"})

    assert oauth_login(config.flows[0].target.producer) == OAuthLogin(ENDPOINT, "mirror", "from-env")
    uses = {use.written: use.treatment.value for use in config.keys}
    assert uses["b.sasl.oauthbearer.token.endpoint.url"] == "honoured"
    assert uses["b.sasl.oauthbearer.expected.audience"] == "no effect"
    assert "from-env" not in caplog.text


def test_a_bad_oauth_login_fails_the_load_naming_the_key_as_written() -> None:
    text = (
        "clusters = a, b\na.bootstrap.servers = a1:9092\nb.bootstrap.servers = b1:9092\na->b.enabled = true\n"
        f'b.sasl.mechanism = OAUTHBEARER\nb.sasl.jaas.config = {MODULE} required clientId="mirror";\n'
    )
    with pytest.raises(ConfigError) as caught:
        parse_config(text, env={"MIRROR_STATE_DIR": "/s"})

    assert str(caught.value).startswith("b.sasl.oauthbearer.token.endpoint.url: OAUTHBEARER needs")
