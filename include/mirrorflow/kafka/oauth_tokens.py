"""OAUTHBEARER tokens for kafka-python: a cluster's client-credentials login (``config.oauth``) asked
of its OIDC token endpoint (Authlib's OAuth 2 client), and the kafka-python settings of a cluster
with its token provider (``python_client_config``).

Invariants:
- A token is renewed once 80 % of its lifetime has passed (Java's ``sasl.login.refresh.window.factor``
  default), so a connection opened or re-authenticated (KIP-368, which kafka-python does when the
  broker bounds its session) never presents an expired one.
- One token per login and process, shared by every client of the process (a Spark worker runs many
  copy tasks): the endpoint is asked once per renewal, not once per connection.
- The login is made when the client settings are built, before any broker is asked: refused
  credentials are a ``ConfigError`` naming the client id and the endpoint, an endpoint that does not
  answer a ``TransientError``. Neither the secret nor a token is ever logged or put in a message.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any

import requests
from authlib.integrations.requests_client import OAuth2Session, OAuthError
from kafka.net.sasl.oauth import AbstractTokenProvider

from mirrorflow.config.clients import kafka_python_config
from mirrorflow.config.oauth import OAuthLogin, oauth_login
from mirrorflow.errors import ConfigError, TransientError

# Java's sasl.login.refresh.window.factor default: renew at this share of the token's lifetime.
RENEW_AT = 0.8


class ClientCredentialsTokens(AbstractTokenProvider):  # type: ignore[misc]
    """The current access token of ``login``, renewed at ``RENEW_AT`` of its lifetime."""

    def __init__(self, login: OAuthLogin) -> None:
        super().__init__()
        self._login = login
        self._lock = threading.Lock()
        self._token = ""
        self._renew_at = 0.0

    def token(self) -> str:
        with self._lock:
            if time.monotonic() >= self._renew_at:
                self._token, self._renew_at = _fetch(self._login)
            return self._token


def _fetch(login: OAuthLogin) -> tuple[str, float]:
    """A new access token and the monotonic time to renew it at."""
    asked_at = time.monotonic()
    where = f"the OIDC token endpoint {login.token_endpoint_url} (client {login.client_id!r})"
    session = OAuth2Session(
        login.client_id,
        login.client_secret,
        scope=login.scope,
        token_endpoint_auth_method="client_secret_basic",
        default_timeout=login.timeouts_s,
    )
    try:
        with session:
            answer = session.fetch_token(login.token_endpoint_url, grant_type="client_credentials")
    except OAuthError as error:
        raise ConfigError(
            f"{where} refused the client credentials: {error.error}"
            f"{f' ({error.description})' if error.description else ''}; check clientId and clientSecret "
            "in the cluster's sasl.jaas.config, and that the client may use the client-credentials grant"
        ) from None
    except requests.RequestException as error:
        raise TransientError(f"{where} did not answer: {type(error).__name__}") from None
    token, lifetime = answer.get("access_token"), answer.get("expires_in")
    if not isinstance(token, str) or not isinstance(lifetime, int | float) or lifetime <= 0:
        raise ConfigError(f"{where} answered without an access token and its lifetime (expires_in)")
    return token, asked_at + RENEW_AT * lifetime


_providers: dict[OAuthLogin, ClientCredentialsTokens] = {}
_providers_lock = threading.Lock()


def _provider(login: OAuthLogin) -> ClientCredentialsTokens:
    with _providers_lock:
        return _providers.setdefault(login, ClientCredentialsTokens(login))


def python_client_config(props: Mapping[str, str]) -> dict[str, Any]:
    """kafka-python's settings for a cluster's client settings ``props``, with the token provider of
    an OAUTHBEARER login, which has logged in already."""
    conf = kafka_python_config(props)
    login = oauth_login(props)
    if login is not None:
        provider = _provider(login)
        provider.token()
        conf["sasl_oauth_token_provider"] = provider
    return conf
