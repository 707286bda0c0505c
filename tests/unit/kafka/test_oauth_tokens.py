"""The OAUTHBEARER token provider's renewal and sharing (the token endpoint itself is asked in
tests/integration/test_oauth.py, of a real OIDC server)."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest

from mirrorflow.config.oauth import OAuthLogin
from mirrorflow.kafka import oauth_tokens

LOGIN = OAuthLogin("http://127.0.0.1:1/token", "mirror", "pw")


def test_a_token_is_renewed_at_80_percent_of_its_lifetime(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    fetched: list[float] = []

    def fetch(login: OAuthLogin) -> tuple[str, float]:
        fetched.append(now[0])
        return f"token-{len(fetched)}", now[0] + oauth_tokens.RENEW_AT * 100

    monkeypatch.setattr("mirrorflow.kafka.oauth_tokens.time", SimpleNamespace(monotonic=lambda: now[0]))
    monkeypatch.setattr(oauth_tokens, "_fetch", fetch)
    provider = oauth_tokens.ClientCredentialsTokens(LOGIN)

    assert provider.token() == "token-1"
    now[0] += 79.9
    assert provider.token() == "token-1"
    now[0] += 0.1
    assert provider.token() == "token-2"
    assert fetched == [1000.0, 1080.0]


def test_one_provider_per_login_and_process() -> None:
    other = OAuthLogin("http://127.0.0.1:1/token", "other", "pw")

    assert oauth_tokens._provider(LOGIN) is oauth_tokens._provider(dataclasses.replace(LOGIN))
    assert oauth_tokens._provider(LOGIN) is not oauth_tokens._provider(other)
