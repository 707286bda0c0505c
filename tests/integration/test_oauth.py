"""The throwaway OIDC server (Keycloak: loopback only, client-credentials tokens with the claims Kafka's
OAUTHBEARER validator checks, keys served for RS256, refused secrets, PID-safe stop, clear failures),
and flows between clusters whose clients log in with OAUTHBEARER (OIDC client credentials) at a real
OIDC server (Keycloak), the brokers checking each token against its keys and making every connection
log in again within ``REAUTH_MS``: every client of the product (the copy's and the control plane's
kafka-python, librdkafka's writers, Spark's Kafka source) logs in, renews its token, and leaks
neither the secret nor a token. One module, so that one test worker starts the server once."""

from __future__ import annotations

import base64
import json
import os
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from arrivals import Producing
from leak_checks import PROVIDERS, assert_nowhere, dag_test, sqlite_dump, xcoms_of
from mirror_helpers import assert_same_records, commit_group, local_clusters, migrated_airflow
from pyspark.sql import SparkSession
from secured_helpers import create_secured_topic, secured_config
from strimzi_examples import FORMS, SOURCE, TARGET, assert_example_mirrors, local_example, write_secret
from windows import WindowThread

from mirrorflow.app.dag_spec import ENV_JVM_CACHE
from mirrorflow.app.verify import plan_verification
from mirrorflow.config.clients import librdkafka_config
from mirrorflow.copy.spark_verify import verify_ranges
from mirrorflow.core.window import WindowSummary
from mirrorflow.errors import ConfigError
from mirrorflow.kafka.admin import ClusterAdmin
from mirrorflow.store.offsets_store import OffsetsStore
from mirrorflow_dev import local_keycloak, sample_data
from mirrorflow_dev.java21 import java21_home
from mirrorflow_dev.kafka_security import OAuthSecurity
from mirrorflow_dev.local_kafka import LocalCluster
from mirrorflow_dev.local_keycloak import AUDIENCE, LocalKeycloak, LocalKeycloakError

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.airflow]

FLOW = "primary->backup"
# The brokers make a connection log in again within this (or its token's lifetime, if shorter).
REAUTH_MS = 10_000
# The mirror's tokens in the DR window: renewed at 80 % of this, several times in the window.
SHORT_TOKEN_S = 15
_JWT = re.compile(r"eyJ[\w-]+\.eyJ[\w-]+\.[\w-]+")

Clusters = dict[str, LocalCluster]


# --- the OIDC server

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
    assert claims["exp"] - claims["iat"] == keycloak.token_lifespan_s
    # The answer counts from when it was sent: a second later on a busy machine.
    assert keycloak.token_lifespan_s - answer["expires_in"] in (0, 1)
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
    assert claims["exp"] - claims["iat"] == 61
    assert 61 - answer["expires_in"] in (0, 1)


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
    assert Path(jvm.exe()).is_relative_to(java21_home())
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


# --- flows logging in with OAUTHBEARER


@pytest.fixture(scope="module")
def oauth_clusters(
    keycloak: LocalKeycloak, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Clusters, OAuthSecurity]]:
    security = OAuthSecurity(
        keycloak.token_endpoint_url,
        keycloak.jwks_endpoint_url,
        "kafka-broker",
        keycloak.add_client("kafka-broker"),
        AUDIENCE,
        reauth_ms=REAUTH_MS,
    )
    with local_clusters(
        ("primary", "backup"), tmp_path_factory.mktemp("oauth"), security=security
    ) as started:
        yield started, security


def _our_tokens(keycloak: LocalKeycloak, *texts: str) -> list[str]:
    """The JWTs in ``texts`` that ``keycloak`` issued (Airflow has tokens of its own)."""
    found = []
    for text in texts:
        for token in _JWT.findall(text):
            if _claims(token).get("iss") == keycloak.issuer:
                found.append(token)
    return found


def _mirror_login(security: OAuthSecurity, client_id: str, secret: str, folder: Path) -> dict[str, str]:
    """The client properties of ``client_id``, its secret read through a file config provider."""
    creds = folder / "secrets" / "mirror.properties"
    creds.parent.mkdir(parents=True, exist_ok=True)
    creds.write_text(f"secret = {secret}\n")
    return security.client_properties(client_id, f"${{file:{creds}:secret}}")


def test_a_dag_run_logs_in_every_client_with_oidc_and_leaks_neither_secret_nor_token(
    oauth_clusters: tuple[Clusters, OAuthSecurity],
    keycloak: LocalKeycloak,
    spark: SparkSession,
    unique_name: str,
    tmp_path: Path,
) -> None:
    started, security = oauth_clusters
    primary, backup = started["primary"], started["backup"]
    client = f"mirror-{unique_name}"
    secret = keycloak.add_client(client)
    admin_conf = librdkafka_config(security.client_properties(security.broker_client, security.broker_secret))
    create_secured_topic(primary, security, unique_name, 3, {})
    sample_data.produce_samples(primary.bootstrap, unique_name, 3, 0, 40, admin_conf)
    commit_group(primary.bootstrap, f"{unique_name}-billing", {(unique_name, 0): 25}, admin_conf)
    login = _mirror_login(security, client, secret, tmp_path)
    config = secured_config(tmp_path, started, login, unique_name, heartbeats=True, extra=PROVIDERS)
    assert config.path is not None and secret not in config.path.read_text()
    home = tmp_path / "airflow"
    env = migrated_airflow(home, config, tmp_path)

    output = dag_test(env, tmp_path, "mirror_primary_to_backup")

    remote = f"primary.{unique_name}"
    assert assert_same_records(primary.bootstrap, unique_name, backup.bootstrap, remote, 3, admin_conf) == 120
    with OffsetsStore(config.offsets_db_url) as store:
        assert [(b.topic, b.partition, b.source_end) for b in store.batches(FLOW)] == [
            ("heartbeats", 0, 1), (unique_name, 0, 40), (unique_name, 1, 40), (unique_name, 2, 40)
        ]  # fmt: skip
    xcoms = xcoms_of(home / "airflow.db")
    returned = {task: json.loads(value) for task, key, value in xcoms if key == "return_value"}
    # The checkpoint and the heartbeats went through librdkafka's own OIDC login.
    assert returned["checkpoint"]["emitted"] == 1
    # Spark's Kafka source (a Java client) reads both sides for verification with the same login.
    verdicts = verify_ranges(spark, config.flow(FLOW), plan_verification(config, FLOW, "verify-1")).partitions
    # (the heartbeat mirrored first)
    assert [(v.source.records, v.source == v.target) for v in verdicts] == [(1, True)] + [(40, True)] * 3

    assert_nowhere(secret, output, home, config, xcoms)
    files = [
        p.read_text(errors="replace")
        for folder in (home, config.state_dir)
        for p in folder.rglob("*")
        if p.is_file()
    ]
    assert _our_tokens(keycloak, output, *files, *(v for _, _, v in xcoms)) == []
    assert _our_tokens(keycloak, sqlite_dump(config.state_dir / "offsets.db")) == []


def test_a_dr_window_renews_its_tokens_while_the_brokers_make_it_log_in_again(
    oauth_clusters: tuple[Clusters, OAuthSecurity],
    keycloak: LocalKeycloak,
    spark: SparkSession,
    unique_name: str,
    tmp_path: Path,
) -> None:
    """A 40 s window with tokens living 15 s: each client renews its token at 12 s, and each
    connection logs in again (KIP-368) every 10 s or is closed; the window ends without an error,
    every record mirrored once and in order."""
    started, security = oauth_clusters
    primary, backup = started["primary"], started["backup"]
    client = f"mirror-dr-{unique_name}"
    secret = keycloak.add_client(client, token_lifespan_s=SHORT_TOKEN_S)
    assert SHORT_TOKEN_S - keycloak.token(client, secret)["expires_in"] in (0, 1)
    admin_conf = librdkafka_config(security.client_properties(security.broker_client, security.broker_secret))
    create_secured_topic(primary, security, unique_name, 3, {})
    login = _mirror_login(security, client, secret, tmp_path)
    config = secured_config(
        tmp_path,
        started,
        login,
        unique_name,
        heartbeats=True,
        extra=[
            *PROVIDERS,
            f"{FLOW}.mirrorflow.mode = dr",
            f"{FLOW}.mirrorflow.dr.window.seconds = 40",
            f"{FLOW}.mirrorflow.dr.handover.wait.seconds = 0",
        ],
    )
    producing = Producing(primary.bootstrap, unique_name, 3, admin_conf)
    with WindowThread(spark, config, FLOW) as window, producing:
        window.start()
        time.sleep(30)

    (summary,) = window.summaries
    assert isinstance(summary, WindowSummary) and summary.error is None, summary
    remote = f"primary.{unique_name}"
    assert (
        assert_same_records(primary.bootstrap, unique_name, backup.bootstrap, remote, 3, admin_conf)
        == 3 * producing.count
    )


def test_refused_client_credentials_are_a_config_error_naming_the_client_not_the_secret(
    oauth_clusters: tuple[Clusters, OAuthSecurity], keycloak: LocalKeycloak, tmp_path: Path, unique_name: str
) -> None:
    started, security = oauth_clusters
    keycloak.add_client(f"mirror-{unique_name}")
    wrong = "not-the-secret-of-this-client"
    props: dict[str, Any] = security.client_properties(f"mirror-{unique_name}", wrong)
    config = secured_config(tmp_path, started, props, unique_name, heartbeats=False)

    with pytest.raises(ConfigError) as caught:
        ClusterAdmin(config.flow(FLOW).target)

    message = str(caught.value)
    assert message.startswith(
        f"the OIDC token endpoint {keycloak.token_endpoint_url} (client 'mirror-{unique_name}') refused the "
        "client credentials: "
    )
    assert wrong not in message


def test_strimzis_oauth_example_mirrors(
    oauth_clusters: tuple[Clusters, OAuthSecurity],
    keycloak: LocalKeycloak,
    spark: SparkSession,
    tmp_path: Path,
) -> None:
    """Strimzi's ``type: oauth`` example, its token endpoint this server's, each side's client
    registered here with its secret in the example's secret."""
    started, security = oauth_clusters
    clusters = {SOURCE: started["primary"], TARGET: started["backup"]}
    for alias in (SOURCE, TARGET):
        secret = keycloak.add_client(f"mirror-maker-{alias}")
        write_secret(tmp_path, "mirror-maker-oauth", f"{alias}-secret", secret.encode())
    admin_conf = librdkafka_config(security.client_properties(security.broker_client, security.broker_secret))
    endpoint = (
        "https://sso.example.com/realms/kafka/protocol/openid-connect/token",
        keycloak.token_endpoint_url,
    )
    for form in FORMS:
        topic = f"strimzi-oauth-{form}"
        create_secured_topic(clusters[SOURCE], security, topic, 2, {})
        config = local_example(f"oauth-{form}", tmp_path, clusters, topic, [endpoint])

        assert_example_mirrors(config, clusters, spark, topic, f"{SOURCE}.{topic}", admin_conf)
