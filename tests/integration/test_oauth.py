"""Flows between clusters whose clients log in with OAUTHBEARER (OIDC client credentials) at a real
OIDC server (Keycloak), the brokers checking each token against its keys and making every connection
log in again within ``REAUTH_MS``: every client of the product (the copy's and the control plane's
kafka-python, librdkafka's writers, Spark's Kafka source) logs in, renews its token, and leaks
neither the secret nor a token."""

from __future__ import annotations

import base64
import json
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from arrivals import Producing
from leak_checks import PROVIDERS, assert_nowhere, dag_test, sqlite_dump, xcoms_of
from mirror_helpers import (
    assert_same_records,
    commit_group,
    create_secured_topic,
    local_clusters,
    migrated_airflow,
    secured_config,
)
from pyspark.sql import SparkSession

from mirrorflow.app import dr_window, runner
from mirrorflow.app.verify import plan_verification
from mirrorflow.config.clients import librdkafka_config
from mirrorflow.copy.spark_copy import StandingCopy
from mirrorflow.copy.spark_verify import verify_ranges
from mirrorflow.core.window import WindowSummary
from mirrorflow.errors import ConfigError
from mirrorflow.kafka.admin import ClusterAdmin
from mirrorflow.store.offsets_store import OffsetsStore
from mirrorflow_dev import sample_data
from mirrorflow_dev.kafka_security import OAuthSecurity
from mirrorflow_dev.local_kafka import LocalCluster
from mirrorflow_dev.local_keycloak import AUDIENCE, LocalKeycloak

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.airflow]

FLOW = "primary->backup"
# The brokers make a connection log in again within this (or its token's lifetime, if shorter).
REAUTH_MS = 10_000
# The mirror's tokens in the DR window: renewed at 80 % of this, several times in the window.
SHORT_TOKEN_S = 15
_JWT = re.compile(r"eyJ[\w-]+\.eyJ[\w-]+\.[\w-]+")

Clusters = dict[str, LocalCluster]


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
            payload = token.split(".")[1]
            claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
            if claims.get("iss") == keycloak.issuer:
                found.append(token)
    return found


def _mirror_login(security: OAuthSecurity, secret: str, folder: Path) -> dict[str, str]:
    """The mirror's client properties, its secret read through a file config provider."""
    creds = folder / "secrets" / "mirror.properties"
    creds.parent.mkdir(parents=True, exist_ok=True)
    creds.write_text(f"secret = {secret}\n")
    return security.client_properties("mirror", f"${{file:{creds}:secret}}")


def test_a_dag_run_logs_in_every_client_with_oidc_and_leaks_neither_secret_nor_token(
    oauth_clusters: tuple[Clusters, OAuthSecurity],
    keycloak: LocalKeycloak,
    spark: SparkSession,
    unique_name: str,
    tmp_path: Path,
) -> None:
    started, security = oauth_clusters
    primary, backup = started["primary"], started["backup"]
    secret = keycloak.add_client(f"mirror-{unique_name}")
    admin_conf = librdkafka_config(security.client_properties(security.broker_client, security.broker_secret))
    create_secured_topic(primary, security, unique_name, 3, {})
    sample_data.produce_samples(primary.bootstrap, unique_name, 3, 0, 40, admin_conf)
    commit_group(primary.bootstrap, f"{unique_name}-billing", {(unique_name, 0): 25}, admin_conf)
    login = _mirror_login(security, secret, tmp_path)
    login["sasl.jaas.config"] = login["sasl.jaas.config"].replace('"mirror"', f'"mirror-{unique_name}"')
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
    assert keycloak.token(client, secret)["expires_in"] == SHORT_TOKEN_S
    admin_conf = librdkafka_config(security.client_properties(security.broker_client, security.broker_secret))
    create_secured_topic(primary, security, unique_name, 3, {})
    login = _mirror_login(security, secret, tmp_path)
    login["sasl.jaas.config"] = login["sasl.jaas.config"].replace('"mirror"', f'"{client}"')
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
    copy = StandingCopy(spark.sparkContext, config.flow(FLOW))
    summaries: list[WindowSummary | BaseException] = []

    def window() -> None:
        try:
            summaries.append(dr_window.run_window(config, FLOW, "window-1", copy))
        except BaseException as error:
            summaries.append(error)

    try:
        copy.await_tasks()
        running = threading.Thread(target=window)
        with Producing(primary.bootstrap, unique_name, 3, admin_conf) as producing:
            running.start()
            time.sleep(30)
        running.join(120)
    finally:
        copy.close()
        runner.release_run(config, FLOW, "window-1")

    (summary,) = summaries
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
