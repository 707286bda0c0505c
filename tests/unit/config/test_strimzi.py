"""Strimzi's KafkaMirrorMaker2 as input: the articles' specs, both API forms, secrets by reference,
and every spec field honoured, warned about or refused by name."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest

from mirrorflow.config.model import load_config, parse_config
from mirrorflow.config.strimzi import to_properties
from mirrorflow.errors import ConfigError
from mirrorflow_dev.paths import REPO_ROOT

SPECS = REPO_ROOT / "tests" / "strimzi"
ENV = {"MIRROR_STATE_DIR": "/var/lib/mirrorflow", "MIRROR_SECRETS_DIR": "/etc/secrets"}
FLOW = "my-cluster-source->my-cluster-target"


def test_the_articles_minimal_spec_is_one_flow_with_only_the_source_connector(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="mirrorflow.config.strimzi"):
        config = load_config(SPECS / "minimal.yaml", env=ENV)

    (flow,) = config.flows
    assert flow.name == FLOW
    assert (flow.source.bootstrap_servers, flow.target.bootstrap_servers) == (
        "my-cluster-source-kafka-bootstrap:9092",
        "my-cluster-target-kafka-bootstrap:9092",
    )
    assert (flow.topics, flow.emit_checkpoints, flow.emit_heartbeats) == ((".*",), False, False)
    assert caplog.messages == [
        "no effect here: spec.connectCluster, spec.version (Kubernetes deployment settings: Airflow and "
        "Spark run the flows)"
    ]


def test_a_spec_with_tls_client_authentication_reads_its_secrets_by_reference() -> None:
    text = to_properties((SPECS / "tls-auth.yaml").read_text(), "tls-auth.yaml", Path("/etc/secrets"))

    lines = text.splitlines()
    assert lines[2:4] == [
        "config.providers = dir",
        "config.providers.dir.class = org.apache.kafka.common.config.provider.DirectoryConfigProvider",
    ]
    assert [line for line in lines if line.startswith("my-cluster-source.")] == [
        "my-cluster-source.bootstrap.servers = my-cluster-source-kafka-bootstrap:9093",
        "my-cluster-source.ssl.truststore.type = PEM",
        "my-cluster-source.ssl.truststore.location = /etc/secrets/my-cluster-source-cluster-ca-cert/ca.crt",
        "my-cluster-source.ssl.keystore.type = PEM",
        "my-cluster-source.ssl.keystore.certificate.chain = ${dir:/etc/secrets/my-user-source:source.crt}",
        "my-cluster-source.ssl.keystore.key = ${dir:/etc/secrets/my-user-source:source.key}",
        "my-cluster-source.security.protocol = SSL",
    ]
    assert [line for line in lines if line.startswith(f"{FLOW}.")] == [
        f"{FLOW}.enabled = true",
        f"{FLOW}.topics = orders.*",
        f"{FLOW}.topics.exclude = orders-internal",
        f"{FLOW}.groups = billing|shipping",
        f"{FLOW}.replication.factor = 1",
        f"{FLOW}.offset-syncs.topic.replication.factor = 1",
        f"{FLOW}.sync.topic.acls.enabled = false",
        f"{FLOW}.checkpoints.topic.replication.factor = 1",
        f"{FLOW}.sync.group.offsets.enabled = true",
        f"{FLOW}.heartbeats.topic.replication.factor = 1",
    ]


def test_the_newer_form_with_a_target_and_sources_in_the_mirrors() -> None:
    config = parse_config(
        """\
apiVersion: kafka.strimzi.io/v1
kind: KafkaMirrorMaker2
metadata: {name: dr}
spec:
  target:
    alias: backup
    bootstrapServers: b1:9092
    groupId: mm2-connect
    authentication:
      type: scram-sha-512
      username: mirror
      passwordSecret: {secretName: mirror-user, password: password}
  mirrors:
  - source:
      alias: primary
      bootstrapServers: p1:9092
      authentication:
        type: plain
        username: mirror
        passwordSecret: {secretName: mirror-user, password: password}
    topicsPattern: orders, payments
    sourceConnector: {}
    heartbeatConnector: {}
""",
        env={**ENV, "MIRROR_SECRETS_DIR": str(REPO_ROOT / "tests" / "strimzi" / "secrets")},
    )

    (flow,) = config.flows
    assert (flow.name, flow.topics, flow.emit_heartbeats, flow.emit_checkpoints) == (
        "primary->backup",
        ("orders", "payments"),
        True,
        False,
    )
    assert flow.target.client["security.protocol"] == "SASL_PLAINTEXT"
    assert flow.target.client["sasl.mechanism"] == "SCRAM-SHA-512"
    assert flow.source.client["sasl.mechanism"] == "PLAIN"
    # The password was read from the secret's file.
    assert 'password="not-a-real-password";' in flow.source.client["sasl.jaas.config"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            ("topicsPattern", "topicsPatern"),
            "spec.mirrors[0].topicsPatern: unknown field of a Strimzi KafkaMirrorMaker2; did you mean "
            "`topicsPattern`?",
        ),
        (
            ("type: tls", "type: custom"),
            "spec.clusters[0].authentication.type: authentication type 'custom' is not supported (custom "
            "logins cannot be used by the Python clients); use tls, scram-sha-256, scram-sha-512, plain, "
            "oauth",
        ),
        (
            ('targetCluster: "my-cluster-target"', 'targetCluster: "elsewhere"'),
            "spec.mirrors[0].targetCluster: no cluster 'elsewhere' in spec.clusters (my-cluster-source, "
            "my-cluster-target); add it or fix the alias",
        ),
        (
            ("sync.group.offsets.enabled: true", "replication.factor: 3"),
            "spec.mirrors[0].checkpointConnector.config.replication.factor: my-cluster-source->my-cluster-"
            "target.replication.factor is set to '1' by spec.mirrors[0].sourceConnector.config."
            "replication.factor and to '3' here; keep one",
        ),
        (
            ("      tasksMax: 2\n", "      tasksMax: 2\n      topic.filter.class: com.example.F\n"),
            "spec.mirrors[0].sourceConnector.topic.filter.class: unknown field of a Strimzi "
            "KafkaMirrorMaker2",
        ),
    ],
    ids=["typo", "custom-login", "unknown-cluster", "conflicting-connector-configs", "config-outside-config"],
)
def test_a_bad_spec_is_an_error_naming_the_field(change: tuple[str, str], message: str) -> None:
    text = (SPECS / "tls-auth.yaml").read_text()
    assert change[0] in text

    with pytest.raises(ConfigError) as caught:
        to_properties(text.replace(change[0], change[1], 1), "tls-auth.yaml", Path("/etc/secrets"))

    assert str(caught.value) == message


def test_a_connector_key_is_classified_as_any_mm2_key() -> None:
    text = (
        (SPECS / "minimal.yaml")
        .read_text()
        .replace("sourceConnector: {}", "sourceConnector:\n      config:\n        topcis: x")
    )

    with pytest.raises(ConfigError, match=rf"^{FLOW}\.topcis: unknown key.*did you mean `{FLOW}\.topics`\?$"):
        parse_config(text, path=Path("/x/mm2.yaml"), env=ENV)


def test_strimzi_to_properties_prints_the_properties_it_means() -> None:
    printed = subprocess.run(
        [sys.executable, "-m", "mirrorflow", "strimzi-to-properties", str(SPECS / "minimal.yaml"),
         "--secrets", "/etc/secrets"],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip

    assert printed.splitlines()[2:] == [
        "clusters = my-cluster-source, my-cluster-target",
        "my-cluster-source.bootstrap.servers = my-cluster-source-kafka-bootstrap:9092",
        "my-cluster-target.bootstrap.servers = my-cluster-target-kafka-bootstrap:9092",
        f"{FLOW}.enabled = true",
        f"{FLOW}.emit.checkpoints.enabled = false",
        f"{FLOW}.emit.heartbeats.enabled = false",
    ]


OAUTH_SPEC = """\
apiVersion: kafka.strimzi.io/v1
kind: KafkaMirrorMaker2
metadata:
  name: oauth
spec:
  target:
    alias: central
    bootstrapServers: central-kafka-bootstrap:9092
    authentication:
      type: oauth
      tokenEndpointUri: https://sso.example.com/realms/kafka/protocol/openid-connect/token
      clientId: mirror-maker
      clientSecret:
        secretName: mirror-maker-oauth
        key: secret
      scope: kafka
      readTimeoutSeconds: 20
      maxTokenExpirySeconds: 300
  mirrors:
  - source:
      alias: edge
      bootstrapServers: edge-kafka-bootstrap:9092
    sourceConnector: {}
"""


def test_an_oauth_login_becomes_kafkas_own_oauthbearer_settings(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="mirrorflow.config.strimzi"):
        text = to_properties(OAUTH_SPEC, "oauth.yaml", Path("/etc/secrets"))

    assert [line for line in text.splitlines() if line.startswith("central.")] == [
        "central.bootstrap.servers = central-kafka-bootstrap:9092",
        "central.sasl.mechanism = OAUTHBEARER",
        "central.sasl.jaas.config = org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule "
        'required clientId="mirror-maker" clientSecret="${dir:/etc/secrets/mirror-maker-oauth:secret}" '
        'scope="kafka";',
        "central.sasl.login.callback.handler.class = "
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler",
        "central.sasl.oauthbearer.token.endpoint.url = "
        "https://sso.example.com/realms/kafka/protocol/openid-connect/token",
        "central.sasl.login.read.timeout.ms = 20000",
        "central.security.protocol = SASL_PLAINTEXT",
    ]
    assert caplog.messages == [
        "no effect here: spec.target.authentication.maxTokenExpirySeconds (Strimzi's OAuth client library "
        "settings)"
    ]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            ("      scope: kafka\n", "      refreshToken:\n        secretName: s\n        key: k\n"),
            "spec.target.authentication.refreshToken: OAuth logs in here with client credentials only "
            "(clientId, clientSecret, tokenEndpointUri, scope), its token endpoint's certificate checked "
            "against the system's CAs; remove the field",
        ),
        (
            ("      readTimeoutSeconds: 20\n", "      readTimeoutSeconds: soon\n"),
            "spec.target.authentication.readTimeoutSeconds: expected whole seconds, got 'soon'",
        ),
        (
            ("      clientId: mirror-maker\n", ""),
            "spec.target.authentication.clientId: clientId is required here",
        ),
    ],
    ids=["other-grant", "timeout", "no-client-id"],
)
def test_an_oauth_login_this_product_cannot_make_is_refused_naming_the_field(
    change: tuple[str, str], message: str
) -> None:
    assert change[0] in OAUTH_SPEC

    with pytest.raises(ConfigError) as caught:
        to_properties(OAUTH_SPEC.replace(*change), "oauth.yaml", Path("/etc/secrets"))

    assert str(caught.value) == message


EXAMPLES = SPECS / "examples"
EXAMPLE_ENV = {**ENV, "MIRROR_SECRETS_DIR": str(EXAMPLES / "secrets")}


def test_every_example_is_here_in_both_api_versions() -> None:
    names = sorted(path.stem for path in EXAMPLES.glob("*.yaml"))
    kinds = ("custom-replication-policy", "oauth", "plain", "scram", "sync-groups", "tls")

    assert names == [f"{kind}-{form}" for kind in kinds for form in ("v1", "v1beta2")]


@pytest.mark.parametrize("form", ["v1beta2", "v1"])
@pytest.mark.parametrize(
    ("kind", "remote", "client", "sync_groups"),
    [
        ("plain", "cluster-a.t", {}, False),
        ("sync-groups", "cluster-a.t", {}, True),
        ("custom-replication-policy", "t", {}, False),
        (
            "tls",
            "cluster-a.t",
            {
                "security.protocol": "SSL",
                "ssl.truststore.location": "/etc/secrets/cluster-b-cluster-ca-cert/ca.crt",
            },
            False,
        ),
        (
            "scram",
            "cluster-a.t",
            {
                "security.protocol": "SASL_SSL",
                "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
                'username="my-mirror-user" password="not-a-real-password";',
            },
            False,
        ),
        (
            "oauth",
            "cluster-a.t",
            {
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "OAUTHBEARER",
                "sasl.jaas.config": "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule "
                'required clientId="mirror-maker-cluster-b" clientSecret="not-a-real-secret-b" '
                'scope="kafka";',
                "sasl.oauthbearer.token.endpoint.url": (
                    "https://sso.example.com/realms/kafka/protocol/openid-connect/token"
                ),
            },
            False,
        ),
    ],
)
def test_each_example_loads_as_the_flow_it_means(
    kind: str, form: str, remote: str, client: dict[str, str], sync_groups: bool
) -> None:
    config = load_config(EXAMPLES / f"{kind}-{form}.yaml", env=EXAMPLE_ENV)

    (flow,) = config.flows
    assert flow.name == "cluster-a->cluster-b"
    assert flow.replication_policy.format_remote_topic("cluster-a", "t") == remote
    # -1 everywhere the examples write it: the brokers' default.
    assert (
        flow.replication_factor,
        flow.offset_syncs_topic_replication_factor,
        flow.checkpoints_topic_replication_factor,
    ) == (-1, -1, -1)
    assert (flow.emit_checkpoints, flow.sync_group_offsets, flow.emit_heartbeats) == (
        True,
        sync_groups,
        False,
    )
    assert not flow.sync_topic_acls
    target = {k: v for k, v in flow.target.client.items() if k in client}
    assert target == {k: v.replace("/etc/secrets", str(EXAMPLES / "secrets")) for k, v in client.items()}
