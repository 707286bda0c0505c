"""SASL/OAUTHBEARER logins (OIDC client credentials), read from a cluster's Java client settings as
MM2 takes them, for the three clients this product uses.

A Java client logs in with::

    sasl.mechanism = OAUTHBEARER
    sasl.jaas.config = org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required \
        clientId="mirror" clientSecret="${file:/etc/secrets/oidc.properties:secret}" scope="kafka";
    sasl.login.callback.handler.class = \
        org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler
    sasl.oauthbearer.token.endpoint.url = https://idp.example.com/realms/kafka/token

(Kafka 4.1's ``sasl.oauthbearer.client.credentials.client.id`` / ``.client.secret`` and
``sasl.oauthbearer.scope`` may stand for the JAAS options.) ``oauth_login`` reads that into an
``OAuthLogin``; librdkafka gets it as its own OIDC settings (``librdkafka_oauth``), Spark's Kafka
source (a Java client of Kafka 3.9) as the JAAS form (``java_oauth``), kafka-python a token provider
(``kafka.oauth_tokens``).

Invariants: only the client-credentials grant is taken; a login these clients cannot make as the Java
client would (another grant, unsecured tokens, a Java class of the user's) is a ``ConfigError`` naming
the key, never a silent difference; the secret is never shown (``repr`` masks it).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from mirrorflow.errors import ConfigError

OAUTHBEARER = "OAUTHBEARER"
LOGIN_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
# Kafka's OIDC login handler, by its current name and the one of Kafka 3.1-3.3.
LOGIN_HANDLERS = (
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler",
    "org.apache.kafka.common.security.oauthbearer.secured.OAuthBearerLoginCallbackHandler",
)
TOKEN_ENDPOINT = "sasl.oauthbearer.token.endpoint.url"
CLIENT_ID = "sasl.oauthbearer.client.credentials.client.id"
CLIENT_SECRET = "sasl.oauthbearer.client.credentials.client.secret"
SCOPE = "sasl.oauthbearer.scope"
LOGIN_HANDLER = "sasl.login.callback.handler.class"
CONNECT_TIMEOUT = "sasl.login.connect.timeout.ms"
READ_TIMEOUT = "sasl.login.read.timeout.ms"
# Java's login handler waits this long for the token endpoint when these keys are not set.
TIMEOUT_MS_DEFAULT = 10_000

_JAAS = re.compile(r"^\s*(?P<module>[\w.$]+)\s+(?P<flag>\w+)(?P<options>.*?);?\s*$", re.DOTALL)
_OPTION = re.compile(r'\s*(\w+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s;"]+))')


def _as_is(key: str) -> str:
    return key


@dataclass(frozen=True)
class OAuthLogin:
    """A client-credentials login: the token endpoint, the client and (optionally) the scope asked
    for; ``timeouts_s``: the endpoint's connect and read timeouts."""

    token_endpoint_url: str
    client_id: str
    client_secret: str = field(repr=False)
    scope: str | None = None
    timeouts_s: tuple[float, float] = (TIMEOUT_MS_DEFAULT / 1000, TIMEOUT_MS_DEFAULT / 1000)


def jaas_options(jaas: str) -> tuple[str, dict[str, str]]:
    """The login module and the options of a JAAS line (values unquoted, escapes resolved)."""
    match = _JAAS.match(jaas)
    if match is None:
        return "", {}
    # A quoted value's backslash escapes the next character.
    options = {
        name: bare or re.sub(r"\\(.)", r"\1", quoted)
        for name, quoted, bare in _OPTION.findall(match["options"])
    }
    return match["module"], options


def oauth_login(props: Mapping[str, str], written_as: Callable[[str], str] = _as_is) -> OAuthLogin | None:
    """The cluster's OAUTHBEARER login; None for another mechanism. Errors name keys by
    ``written_as``."""
    if props.get("sasl.mechanism") != OAUTHBEARER:
        return None
    # A key not written is named where the mechanism was: beside it, it would take effect.
    beside = written_as("sasl.mechanism")[: -len("sasl.mechanism")]

    def named(key: str) -> str:
        return written_as(key) if key in props else beside + key

    module, options = jaas_options(props.get("sasl.jaas.config", ""))
    jaas_key = named("sasl.jaas.config")
    if module != LOGIN_MODULE:
        raise ConfigError(
            f'OAUTHBEARER logs in with `{LOGIN_MODULE} required clientId="..." clientSecret="...";`'
            f", got {module or 'no login module'}",
            key=jaas_key,
        )
    unsecured = sorted(name for name in options if name.startswith("unsecuredLogin"))
    if unsecured:
        raise ConfigError(
            f"unsecured tokens ({', '.join(unsecured)}) are for tests of Kafka itself; log in with "
            "clientId and clientSecret at an OIDC token endpoint",
            key=jaas_key,
        )
    handler = props.get(LOGIN_HANDLER)
    if handler is not None and handler not in LOGIN_HANDLERS:
        raise ConfigError(
            f"the Python clients cannot load Java classes; OAUTHBEARER takes Kafka's {LOGIN_HANDLERS[0]} "
            "or no handler",
            key=named(LOGIN_HANDLER),
        )
    endpoint = props.get(TOKEN_ENDPOINT, "")
    parts = urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(
            f"OAUTHBEARER needs the OIDC server's token endpoint as an http(s) URL in {TOKEN_ENDPOINT}, "
            f"got {endpoint!r}",
            key=named(TOKEN_ENDPOINT),
        )
    client_id = props.get(CLIENT_ID) or options.get("clientId")
    secret = props.get(CLIENT_SECRET) or options.get("clientSecret")
    if not client_id or not secret:
        missing = "clientId" if not client_id else "clientSecret"
        raise ConfigError(
            f'OAUTHBEARER logs in with client credentials: add {missing}="..." to the JAAS line (the '
            "secret through a config provider, e.g. ${file:/path:key})",
            key=jaas_key,
        )
    return OAuthLogin(
        endpoint,
        client_id,
        secret,
        props.get(SCOPE) or options.get("scope") or None,
        (_seconds(props, CONNECT_TIMEOUT), _seconds(props, READ_TIMEOUT)),
    )


def _seconds(props: Mapping[str, str], key: str) -> float:
    # Checked as a positive whole number when the config was loaded (the key table's kind).
    return int(props.get(key, TIMEOUT_MS_DEFAULT)) / 1000


def librdkafka_oauth(login: OAuthLogin) -> dict[str, str]:
    """librdkafka's own OIDC login (it renews the token before it expires)."""
    conf = {
        "sasl.oauthbearer.method": "oidc",
        "sasl.oauthbearer.token.endpoint.url": login.token_endpoint_url,
        "sasl.oauthbearer.client.id": login.client_id,
        "sasl.oauthbearer.client.secret": login.client_secret,
    }
    if login.scope:
        conf["sasl.oauthbearer.scope"] = login.scope
    return conf


def java_oauth(props: Mapping[str, str], login: OAuthLogin) -> dict[str, str]:
    """The login as a Java client of Kafka 3.9 (Spark's Kafka source) takes it: client id, secret and
    scope in the JAAS line, Kafka's login handler; Kafka 4.1's keys for them left out."""
    kept = {k: v for k, v in props.items() if k not in (CLIENT_ID, CLIENT_SECRET, SCOPE)}
    return {
        **kept,
        "sasl.jaas.config": jaas_line(login.client_id, login.client_secret, login.scope),
        LOGIN_HANDLER: props.get(LOGIN_HANDLER, LOGIN_HANDLERS[0]),
    }


def jaas_line(client_id: str, client_secret: str, scope: str | None = None) -> str:
    """The JAAS line of a client-credentials login (``client_secret`` may be a config provider
    reference), its values quoted as ``jaas_options`` reads them back."""
    options = {"clientId": client_id, "clientSecret": client_secret}
    if scope:
        options["scope"] = scope
    written = " ".join(f'{name}="{_escaped(value)}"' for name, value in options.items())
    return f"{LOGIN_MODULE} required {written};"


def _escaped(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')
