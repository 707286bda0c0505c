"""Every client security mode, each in a whole flow through real Airflow, and no secret leaks.

Clusters of each test's own, with TLS (a throwaway CA generated here, the brokers' certificate for
127.0.0.1):

- SASL_SSL with StandardAuthorizer: the mirror logs in to the source with SCRAM-SHA-512 and to the
  target with PLAIN, as ``mirror`` with the least-privilege grants of ``test_topic_acls.py`` (copy,
  ACL sync, heartbeats, checkpoints);
- SSL with client certificates required (mutual TLS): the mirror presents its certificate from a PEM
  keystore with an encrypted key to the source and from a PKCS12 store to the target; and (marker
  ``extended``, `make test-extended`) the config is the articles' Strimzi ``KafkaMirrorMaker2`` with
  TLS client authentication (``tests/strimzi/tls-auth.yaml``), whose key and certificate are files
  of secrets.

Every password, a random string, is in the config only by reference: ``${file:...}`` to a
credentials file outside the Airflow home and the state dir.

After ``airflow dags test`` ran plan -> copy (spark-submit) -> commit -> checkpoint -> release, the
password is nowhere in what the run leaves behind or prints: the command's output (which holds the
task logs, spark-submit's output included), every file under the Airflow home (its metadata DB, and
so the XComs) and the state dir (metrics, the offsets database with the run's plan and result), nor
in the XCom values and the offsets database's tables as read back.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
from leak_checks import PROVIDERS, assert_nowhere, dag_test, xcoms_of
from mirror_helpers import assert_same_records, commit_group, local_clusters, migrated_airflow
from secured_helpers import (
    MIRROR_HEARTBEAT_SOURCE_ACLS,
    MIRROR_HEARTBEAT_TARGET_ACLS,
    MIRROR_SOURCE_ACLS,
    MIRROR_TARGET_ACLS,
    create_acls,
    create_secured_topic,
    create_source_topic,
    secured_config,
)

from mirrorflow.app.run_folder import metrics_file
from mirrorflow.config.clients import librdkafka_config
from mirrorflow.config.model import load_config
from mirrorflow.store.offsets_store import OffsetsStore
from mirrorflow_dev import sample_data
from mirrorflow_dev.kafka_security import (
    PLAIN_MECHANISM,
    SUPER_USER,
    LocalTls,
    ScramSecurity,
    TlsSecurity,
    write_private,
)
from mirrorflow_dev.local_kafka import LocalCluster
from mirrorflow_dev.paths import REPO_ROOT

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.airflow]

FLOW = "primary->backup"
TOPIC = "payments"


@pytest.fixture
def clusters(tmp_path: Path) -> Iterator[tuple[dict[str, LocalCluster], ScramSecurity]]:
    security = ScramSecurity.generate("mirror", tls=LocalTls.generate(tmp_path / "tls"))
    with local_clusters(("primary", "backup"), tmp_path / "kafka", security=security) as started:
        create_acls(started["primary"], security, [*MIRROR_SOURCE_ACLS, *MIRROR_HEARTBEAT_SOURCE_ACLS])
        create_acls(started["backup"], security, [*MIRROR_TARGET_ACLS, *MIRROR_HEARTBEAT_TARGET_ACLS])
        yield started, security


def test_a_dag_run_over_sasl_ssl_with_scram_and_plain_and_the_password_by_reference_leaks_it_nowhere(
    clusters: tuple[dict[str, LocalCluster], ScramSecurity], tmp_path: Path
) -> None:
    started, security = clusters
    primary, backup = started["primary"], started["backup"]
    password = security.passwords["mirror"]
    admin_conf = librdkafka_config(security.client_properties(SUPER_USER))
    create_source_topic(primary, security, TOPIC, 3, {})
    sample_data.produce_samples(primary.bootstrap, TOPIC, 3, 0, 40, admin_conf)
    commit_group(primary.bootstrap, "billing", {(TOPIC, 0): 25, (TOPIC, 2): 40}, admin_conf)
    creds = tmp_path / "secrets" / "mirror.properties"
    creds.parent.mkdir()
    creds.write_text(f"password = {password}\n")
    reference = f"${{file:{creds}:password}}"
    clients = {
        "primary": {
            **security.client_properties("mirror"),
            "sasl.jaas.config": security.jaas_config("mirror", reference),
        },
        "backup": {
            **security.client_properties("mirror", PLAIN_MECHANISM),
            "sasl.jaas.config": security.jaas_config("mirror", reference, PLAIN_MECHANISM),
        },
    }
    config = secured_config(
        tmp_path, started, {}, TOPIC, heartbeats=True, extra=PROVIDERS, per_cluster=clients
    )
    assert config.path is not None and password not in config.path.read_text()
    home = tmp_path / "airflow"
    env = migrated_airflow(home, config, tmp_path)
    assert not [name for name, value in env.items() if password in value]

    output = dag_test(env, tmp_path, "mirror_primary_to_backup")

    assert (
        assert_same_records(primary.bootstrap, TOPIC, backup.bootstrap, f"primary.{TOPIC}", 3, admin_conf)
        == 120
    )
    store = OffsetsStore(config.offsets_db_url)
    assert [(b.topic, b.partition, b.source_start, b.source_end) for b in store.batches(FLOW)] == [
        ("heartbeats", 0, 0, 1),
        (TOPIC, 0, 0, 40),
        (TOPIC, 1, 0, 40),
        (TOPIC, 2, 0, 40),
    ]
    # Every task ran and returned, and the task logs in the output hold spark-submit's output.
    xcoms = xcoms_of(home / "airflow.db")
    returned = {task: json.loads(value) for task, key, value in xcoms if key == "return_value"}
    assert sorted(returned) == ["checkpoint", "commit", "plan", "release"]
    assert (returned["commit"]["records"], returned["checkpoint"]["emitted"]) == (121, 2)
    assert "copied 121 records for primary->backup" in output  # with the heartbeat
    # The run's files (its documents are in the offsets database) are where the search below looks.
    metrics = [metrics_file(config.state_dir, FLOW, kind).name for kind in ("checkpoint", "source")]
    state_files = sorted(path.name for path in config.state_dir.rglob("*") if path.is_file())
    assert state_files == sorted([*metrics, "offsets.db"])

    assert_nowhere(password, output, home, config, xcoms)


# Mutual TLS through an Airflow run: make test keeps a secret's run that leaks it nowhere (SASL, above),
# TLS to both clusters from the Strimzi example (tests/integration/test_strimzi_specs.py), and the
# keystores' loading (tests/unit/config/test_clients.py).
@pytest.mark.extended
def test_a_dag_run_over_mutual_tls_with_pem_and_pkcs12_keystores_leaks_their_secrets_nowhere(
    tmp_path: Path,
) -> None:
    tls = LocalTls.generate(tmp_path / "tls", clients=(SUPER_USER, "mirror"))
    security = TlsSecurity(tls)
    key_password, store_password = secrets.token_urlsafe(18), secrets.token_urlsafe(18)
    folder = tmp_path / "secrets"
    write_private(folder / "mirror.pem", tls.client_pem("mirror", key_password))
    write_private(folder / "mirror.p12", tls.client_pkcs12("mirror", store_password))
    creds = folder / "mirror.properties"
    write_private(creds, f"key = {key_password}\nstore = {store_password}\n".encode())
    trust = {
        "security.protocol": "SSL",
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(tls.ca_file),
    }
    clients = {
        "primary": {
            **trust,
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(folder / "mirror.pem"),
            "ssl.key.password": f"${{file:{creds}:key}}",
        },
        "backup": {
            **trust,
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.location": str(folder / "mirror.p12"),
            "ssl.keystore.password": f"${{file:{creds}:store}}",
        },
    }
    with local_clusters(("primary", "backup"), tmp_path / "kafka", security=security) as started:
        primary, backup = started["primary"], started["backup"]
        admin_conf = librdkafka_config(security.client_properties(SUPER_USER))
        create_secured_topic(primary, security, TOPIC, 2, {})
        sample_data.produce_samples(primary.bootstrap, TOPIC, 2, 0, 30, admin_conf)
        config = secured_config(
            tmp_path, started, {}, TOPIC, heartbeats=False, extra=PROVIDERS, per_cluster=clients
        )
        home = tmp_path / "airflow"
        env = migrated_airflow(home, config, tmp_path)

        output = dag_test(env, tmp_path, "mirror_primary_to_backup")

        assert (
            assert_same_records(primary.bootstrap, TOPIC, backup.bootstrap, f"primary.{TOPIC}", 2, admin_conf)
            == 60
        )
    xcoms = xcoms_of(home / "airflow.db")
    returned = {task: json.loads(value) for task, key, value in xcoms if key == "return_value"}
    assert returned["commit"]["records"] == 60
    for password in (key_password, store_password):
        assert_nowhere(password, output, home, config, xcoms)


# Mutual TLS from a Strimzi spec's secrets: make test keeps mutual TLS from keystores (above) and the
# Strimzi examples' TLS (tests/integration/test_strimzi_specs.py).
@pytest.mark.extended
def test_the_strimzi_spec_with_tls_client_authentication_runs_and_leaks_the_users_key_nowhere(
    tmp_path: Path,
) -> None:
    tls = LocalTls.generate(tmp_path / "tls", clients=(SUPER_USER, "mirror"))
    security = TlsSecurity(tls)
    with local_clusters(("primary", "backup"), tmp_path / "kafka", security=security) as started:
        primary, backup = started["primary"], started["backup"]
        admin_conf = librdkafka_config(security.client_properties(SUPER_USER))
        create_secured_topic(primary, security, TOPIC, 2, {})
        sample_data.produce_samples(primary.bootstrap, TOPIC, 2, 0, 30, admin_conf)
        # The user's key and certificate are two files of a secret, read inline.
        spec = _strimzi_spec(tmp_path / "strimzi", tls, primary.bootstrap, backup.bootstrap)
        strimzi = load_config(spec, env={"MIRROR_STATE_DIR": str(tmp_path / "strimzi-state")})
        strimzi_home = tmp_path / "strimzi-airflow"
        strimzi_output = dag_test(
            migrated_airflow(strimzi_home, strimzi, tmp_path),
            tmp_path,
            "mirror_my_cluster_source_to_my_cluster_target",
        )
        remote = f"my-cluster-source.{TOPIC}"
        assert assert_same_records(primary.bootstrap, TOPIC, backup.bootstrap, remote, 2, admin_conf) == 60
    private_key = tls.client_key_and_chain("mirror")[0].decode().splitlines()[1]
    assert_nowhere(private_key, strimzi_output, strimzi_home, strimzi, xcoms_of(strimzi_home / "airflow.db"))


def _strimzi_spec(folder: Path, tls: LocalTls, source: str, target: str) -> Path:
    """``tests/strimzi/tls-auth.yaml`` for these clusters and TOPIC, its secrets in ``folder/secrets``
    as Kubernetes mounts them: a folder per secret, a file per key."""
    key, chain = tls.client_key_and_chain("mirror")
    secrets = folder / "secrets"
    for side in ("source", "target"):
        write_private(secrets / f"my-user-{side}" / f"{side}.key", key)
        write_private(secrets / f"my-user-{side}" / f"{side}.crt", chain)
        write_private(secrets / f"my-cluster-{side}-cluster-ca-cert" / "ca.crt", tls.ca_file.read_bytes())
    text = (REPO_ROOT / "tests" / "strimzi" / "tls-auth.yaml").read_text()
    for old, new in (
        ("my-cluster-source-kafka-bootstrap:9093", source),
        ("my-cluster-target-kafka-bootstrap:9093", target),
        ('topicsPattern: "orders.*"', f'topicsPattern: "{TOPIC}"'),
    ):
        assert old in text
        text = text.replace(old, new)
    spec = folder / "mirror-maker.yaml"
    spec.write_text(text)
    return spec
