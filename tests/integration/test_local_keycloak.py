"""The throwaway Keycloak: loopback only, client-credentials tokens with the claims Kafka's OAUTHBEARER
validator checks, keys served for RS256, refused secrets, PID-safe stop, clear failures."""

from __future__ import annotations

import base64
import json
import os
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import psutil
import pytest

from mirrorflow.app.dag_spec import ENV_JVM_CACHE
from mirrorflow_dev import local_keycloak
from mirrorflow_dev.local_keycloak import AUDIENCE, LocalKeycloak, LocalKeycloakError

# Claims Kafka's default JWT validator needs (sub is the broker's principal name) or reads (scope).
KAFKA_CLAIMS = ("sub", "exp", "iat", "iss", "scope")


def _claims(jwt: str, part: int = 1) -> dict[str, Any]:
    """The payload (``part`` 1) or the header (0) of a JWT, decoded without checking its signature."""
    segment = jwt.split(".")[part]
    return dict(json.loads(base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4))))


def _get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=30) as response:
        return json.loads(response.read())


def _post_form(url: str, form: dict[str, str]) -> Any:
    data = urllib.parse.urlencode(form).encode()
    with urllib.request.urlopen(urllib.request.Request(url, data=data), timeout=30) as response:
        return json.loads(response.read())


def test_client_credentials_token_carries_the_claims_kafka_checks(
    keycloak: LocalKeycloak, unique_name: str
) -> None:
    secret = keycloak.add_client(unique_name)
    answer = keycloak.token(unique_name, secret)
    claims = _claims(answer["access_token"])

    assert set(KAFKA_CLAIMS) <= claims.keys(), claims
    assert isinstance(claims["sub"], str) and claims["sub"]
    assert claims["iss"] == keycloak.issuer == f"http://127.0.0.1:{keycloak.port}/realms/{keycloak.realm}"
    assert keycloak.token_lifespan_s != 300  # Keycloak's default: the realm must have been given it
    assert claims["exp"] - claims["iat"] == keycloak.token_lifespan_s == answer["expires_in"]
    assert isinstance(claims["scope"], str)
    assert claims["azp"] == unique_name
    audience = claims["aud"] if isinstance(claims["aud"], list) else [claims["aud"]]
    assert AUDIENCE in audience
    assert answer["token_type"] == "Bearer"
    # Each client is its own principal: another client's token has another sub.
    other = keycloak.add_client(f"{unique_name}-other")
    assert _claims(keycloak.token(f"{unique_name}-other", other)["access_token"])["sub"] != claims["sub"]


def test_a_client_may_get_shorter_lived_tokens(keycloak: LocalKeycloak, unique_name: str) -> None:
    secret = keycloak.add_client(unique_name, token_lifespan_s=61)
    answer = keycloak.token(unique_name, secret)
    claims = _claims(answer["access_token"])
    assert claims["exp"] - claims["iat"] == 61 == answer["expires_in"]


def test_discovery_and_jwks_serve_an_rs256_signing_key(keycloak: LocalKeycloak) -> None:
    discovery = _get_json(f"{keycloak.issuer}/.well-known/openid-configuration")
    assert discovery["issuer"] == keycloak.issuer
    assert discovery["token_endpoint"] == keycloak.token_endpoint_url
    assert discovery["jwks_uri"] == keycloak.jwks_endpoint_url

    keys = _get_json(keycloak.jwks_endpoint_url)["keys"]
    signing = [k for k in keys if k.get("use") == "sig" and k.get("alg") == "RS256"]
    assert signing, keys
    assert signing[0]["kty"] == "RSA" and signing[0]["kid"]


def test_token_header_names_a_served_key(keycloak: LocalKeycloak, unique_name: str) -> None:
    token = keycloak.token(unique_name, keycloak.add_client(unique_name))["access_token"]
    header = _claims(token, part=0)
    assert header["alg"] == "RS256"
    assert header["kid"] in {k["kid"] for k in _get_json(keycloak.jwks_endpoint_url)["keys"]}


def test_wrong_secret_and_other_grants_are_refused(keycloak: LocalKeycloak, unique_name: str) -> None:
    secret = keycloak.add_client(unique_name)
    with pytest.raises(urllib.error.HTTPError) as refused:
        keycloak.token(unique_name, secret + "x")
    assert refused.value.code == 401
    with pytest.raises(urllib.error.HTTPError) as unknown:
        keycloak.token(f"{unique_name}-unknown", secret)
    assert unknown.value.code == 401
    # Only the client-credentials grant: the password grant is refused to the client.
    with pytest.raises(urllib.error.HTTPError) as password_grant:
        _post_form(
            keycloak.token_endpoint_url,
            {
                "grant_type": "password",
                "client_id": unique_name,
                "client_secret": secret,
                "username": f"service-account-{unique_name}",
                "password": secret,
            },
        )
    assert password_grant.value.code in (400, 401)
    assert json.loads(password_grant.value.read())["error"] == "unauthorized_client"


def test_server_listens_on_loopback_only_and_runs_java_21(keycloak: LocalKeycloak) -> None:
    script = psutil.Process(keycloak.pid)
    jvms = [p for p in [script, *script.children()] if p.name() == "java"]
    assert len(jvms) == 1, [p.cmdline() for p in [script, *script.children()]]
    jvm = jvms[0]
    assert Path(jvm.exe()).is_relative_to(local_keycloak.java_home())
    assert "-Xmx512m" in jvm.cmdline()
    listening = [c.laddr for c in jvm.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN]
    assert keycloak.port in {addr.port for addr in listening}
    assert {addr.ip for addr in listening} <= {"127.0.0.1", "::ffff:127.0.0.1"}, listening
    assert "admin_password" not in repr(keycloak)


def test_stop_never_signals_a_foreign_pid(tmp_path: Path) -> None:
    home = tmp_path / "keycloak-home"
    home.mkdir()
    impostor = LocalKeycloak(1, os.getpid(), home, "mirror", 300, "unused")
    assert local_keycloak.stop_keycloak(impostor) is False  # this pytest process is not its kc.sh
    assert not home.exists()


def test_missing_distribution_says_run_make_setup(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(ENV_JVM_CACHE, str(tmp_path))
    with pytest.raises(LocalKeycloakError, match="run `make setup`"):
        local_keycloak.start_keycloak(tmp_path / "root")
    assert not (tmp_path / "root").exists()
