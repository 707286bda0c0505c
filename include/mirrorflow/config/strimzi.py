"""Strimzi's ``KafkaMirrorMaker2`` resource as an MM2 config: the spec becomes the ``mm2.properties``
text it means (``to_properties``), which the loader then reads as any other, so every key of it is
classified as in ``mirrorflow.config.key_classes``.

Both forms are read: ``spec.clusters`` with ``connectCluster`` and mirrors naming ``sourceCluster``
and ``targetCluster`` (v1beta2), and ``spec.target`` with mirrors holding their ``source`` (the
newer one). A cluster's ``bootstrapServers``, ``tls.trustedCertificates``, ``authentication`` (tls,
scram-sha-256, scram-sha-512, plain, oauth: an OIDC client-credentials login) and ``config`` become its
client settings; a mirror's patterns become the flow's ``topics``/``groups`` lists, its connectors'
``config`` the flow's settings, and a
connector left out turns its part off (no ``heartbeatConnector``: no heartbeats; no
``checkpointConnector``: no checkpoints), as Strimzi deploys only the connectors it is given.

Kubernetes secrets are files here: a secret's key ``k`` of secret ``s`` is ``<secrets>/s/k`` (a
secret mounted as a folder). Passwords and private keys are read through the directory config
provider (``${dir:<secrets>/s:k}``), so the converted text holds references, never secrets.

Invariants: every field of the spec is honoured, warned about by name (Kubernetes deployment
settings: replicas, resources, ...) or refused with an error naming its path; an unknown field is an
error suggesting the closest known one.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from mirrorflow.config.key_classes import closest
from mirrorflow.config.oauth import (
    CONNECT_TIMEOUT,
    LOGIN_HANDLER,
    LOGIN_HANDLERS,
    OAUTHBEARER,
    READ_TIMEOUT,
    TOKEN_ENDPOINT,
    jaas_line,
)
from mirrorflow.errors import ConfigError

log = logging.getLogger(__name__)

KIND = "KafkaMirrorMaker2"
_PROVIDER = "dir"
_DIRECTORY_PROVIDER = "org.apache.kafka.common.config.provider.DirectoryConfigProvider"

# Deployment settings of the Kubernetes resource: what runs where, not what is mirrored.
_DEPLOYMENT = frozenset(
    {
        "version", "replicas", "image", "resources", "livenessProbe", "readinessProbe", "jvmOptions",
        "jmxOptions", "logging", "clientRackInitImage", "rack", "tracing", "template",
        "externalConfiguration", "metricsConfig", "connectCluster",
    }
)  # fmt: skip
_SPEC = frozenset({"clusters", "mirrors", "target"}) | _DEPLOYMENT
_CLUSTER = frozenset({"alias", "bootstrapServers", "tls", "authentication", "config"})
# The newer form's target also names the Connect group's own topics: Connect's business.
_TARGET = _CLUSTER | {"groupId", "configStorageTopic", "offsetStorageTopic", "statusStorageTopic"}
_PATTERNS = {
    "topicsPattern": "topics",
    "topicsExcludePattern": "topics.exclude",
    "topicsBlacklistPattern": "topics.exclude",
    "groupsPattern": "groups",
    "groupsExcludePattern": "groups.exclude",
    "groupsBlacklistPattern": "groups.exclude",
}
_CONNECTORS = ("sourceConnector", "checkpointConnector", "heartbeatConnector")
_MIRROR = frozenset({"sourceCluster", "targetCluster", "source", *_CONNECTORS, *_PATTERNS})
_CONNECTOR = frozenset({"config", "tasksMax", "pause", "state", "autoRestart", "listOffsets", "alterOffsets"})
_AUTH_TYPES = ("tls", "scram-sha-256", "scram-sha-512", "plain", "oauth")
# Strimzi's OAuth client fields: those a client-credentials login takes, those it does without (warned),
# and the other grants and token sources, which it cannot use (refused).
_OAUTH_FIELDS = frozenset(
    {
        "type",
        "clientId",
        "clientSecret",
        "tokenEndpointUri",
        "scope",
        "connectTimeoutSeconds",
        "readTimeoutSeconds",
    }
)
_OAUTH_NO_EFFECT = frozenset(
    {
        "enableMetrics",
        "maxTokenExpirySeconds",
        "accessTokenIsJwt",
        "httpRetries",
        "httpRetryPauseMs",
        "includeAcceptHeader",
    }
)
_OAUTH_REFUSED = frozenset(
    {
        "accessToken", "refreshToken", "username", "passwordSecret", "clientAssertion", "clientAssertionPath",
        "clientAssertionType", "clientAssertionLocation", "accessTokenLocation", "audience", "saslExtensions",
        "tlsTrustedCertificates", "disableTlsHostnameVerification",
    }
)  # fmt: skip
_LOGIN = {
    "scram-sha-256": ("SCRAM-SHA-256", "org.apache.kafka.common.security.scram.ScramLoginModule"),
    "scram-sha-512": ("SCRAM-SHA-512", "org.apache.kafka.common.security.scram.ScramLoginModule"),
    "plain": ("PLAIN", "org.apache.kafka.common.security.plain.PlainLoginModule"),
}


def is_strimzi(text: str, path: Path | None) -> bool:
    """Whether a config file is a Strimzi resource: by its extension, or by its ``kind``."""
    if path is not None and path.suffix.lower() in (".yaml", ".yml"):
        return True
    return any(line.strip() == f"kind: {KIND}" for line in text.splitlines())


ENV_SECRETS_DIR = "MIRROR_SECRETS_DIR"


def secrets_folder(base: Path, env: Mapping[str, str]) -> Path:
    """Where Kubernetes secrets are: env ``MIRROR_SECRETS_DIR``, else ``secrets`` beside the spec."""
    return Path(env[ENV_SECRETS_DIR]).absolute() if env.get(ENV_SECRETS_DIR) else base / "secrets"


def to_properties(text: str, source: str, secrets: Path) -> str:
    """The ``mm2.properties`` text of the ``KafkaMirrorMaker2`` in ``text`` (named ``source`` in
    messages), its secrets read from folders under ``secrets``."""
    try:
        resource = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise ConfigError(f"{source} is not valid YAML: {error}") from error
    if not isinstance(resource, dict) or resource.get("kind") != KIND:
        raise ConfigError(f"{source} is not a Strimzi {KIND} resource (its kind is not {KIND})")
    spec = resource.get("spec")
    if not isinstance(spec, dict):
        raise ConfigError(f"{source} has no spec", key="spec")
    return _Converter(secrets, str(resource.get("metadata", {}).get("name", "?")), source).convert(spec)


class _Converter:
    def __init__(self, secrets: Path, name: str, source: str) -> None:
        self.secrets = secrets.absolute()
        self.lines: dict[str, tuple[str, str]] = {}  # key -> (value, where in the spec)
        self.header = [
            f"# {KIND} {name} ({source}), as MM2 properties.",
            f"# Kubernetes secrets are read from {self.secrets}/<secret>/<key>.",
        ]
        self.uses_secrets = False

    def convert(self, spec: Mapping[str, Any]) -> str:
        self._fields(spec, "spec", _SPEC)
        unused = sorted(f"spec.{k}" for k in spec if k in _DEPLOYMENT)
        if unused:
            log.warning(
                "no effect here: %s (Kubernetes deployment settings: Airflow and Spark run the flows)",
                ", ".join(unused),
            )
        mirrors = _list(spec.get("mirrors"), "spec.mirrors")
        if not mirrors:
            raise ConfigError("no mirrors: add one with sourceCluster and targetCluster", key="spec.mirrors")
        clusters: dict[str, tuple[Mapping[str, Any], str]] = {}
        target_alias = None
        if "target" in spec:
            target = _mapping(spec["target"], "spec.target")
            self._fields(target, "spec.target", _TARGET)
            target_alias = _required(target, "alias", "spec.target")
            clusters[target_alias] = (target, "spec.target")
            for field in sorted(set(target) - _CLUSTER):
                log.warning("no effect here: spec.target.%s (the Connect group's own settings)", field)
        for i, cluster in enumerate(_list(spec.get("clusters"), "spec.clusters")):
            where = f"spec.clusters[{i}]"
            cluster = _mapping(cluster, where)
            self._fields(cluster, where, _CLUSTER)
            alias = _required(cluster, "alias", where)
            if alias in clusters:
                raise ConfigError(f"cluster {alias!r} is listed twice; keep one", key=f"{where}.alias")
            clusters[alias] = (cluster, where)
        flows = []
        for i, mirror in enumerate(mirrors):
            where = f"spec.mirrors[{i}]"
            mirror = _mapping(mirror, where)
            self._fields(mirror, where, _MIRROR)
            if "source" in mirror:
                source_cluster = _mapping(mirror["source"], f"{where}.source")
                self._fields(source_cluster, f"{where}.source", _CLUSTER)
                source = _required(source_cluster, "alias", f"{where}.source")
                clusters.setdefault(source, (source_cluster, f"{where}.source"))
            else:
                source = _required(mirror, "sourceCluster", where)
            target = mirror.get("targetCluster", target_alias)
            if target is None:
                raise ConfigError("name the target cluster: add targetCluster", key=f"{where}.targetCluster")
            for alias, field in ((source, "sourceCluster"), (target, "targetCluster")):
                if alias not in clusters:
                    raise ConfigError(
                        f"no cluster {alias!r} in spec.clusters ({', '.join(clusters)}); add it or fix the "
                        "alias",
                        key=f"{where}.{field}",
                    )
            flows.append((f"{source}->{target}", mirror, where))
        self._set("clusters", ", ".join(clusters), "spec.clusters")
        for alias, (cluster, where) in clusters.items():
            self._cluster(alias, cluster, where)
        for flow, mirror, where in flows:
            self._mirror(flow, mirror, where)
        providers = (
            [f"config.providers = {_PROVIDER}", f"config.providers.{_PROVIDER}.class = {_DIRECTORY_PROVIDER}"]
            if self.uses_secrets
            else []
        )
        body = [f"{_escape_key(k)} = {_escape(v)}" for k, (v, _) in self.lines.items()]
        return "\n".join([*self.header, *providers, *body]) + "\n"

    def _fields(self, value: Mapping[str, Any], where: str, known: frozenset[str]) -> None:
        for field in value:
            if field not in known:
                hint = closest(str(field), known)
                raise ConfigError(
                    "unknown field of a Strimzi " + KIND + (f"; did you mean `{hint}`?" if hint else ""),
                    key=f"{where}.{field}",
                )

    def _set(self, key: str, value: Any, where: str) -> None:
        text = _text(value, where)
        if key in self.lines and self.lines[key][0] != text:
            raise ConfigError(
                f"{key} is set to {self.lines[key][0]!r} by {self.lines[key][1]} and to {text!r} here; "
                "keep one",
                key=where,
            )
        self.lines[key] = (text, where)

    def _secret(self, ref: Mapping[str, Any], where: str, field: str) -> str:
        """A reference to key ``ref[field]`` of secret ``ref['secretName']``."""
        self.uses_secrets = True
        folder = self.secrets / _required(ref, "secretName", where)
        return f"${{{_PROVIDER}:{folder}:{_required(ref, field, where)}}}"

    def _cluster(self, alias: str, cluster: Mapping[str, Any], where: str) -> None:
        self._set(f"{alias}.bootstrap.servers", _required(cluster, "bootstrapServers", where), where)
        tls = cluster.get("tls")
        auth = cluster.get("authentication")
        if tls is not None:
            tls = _mapping(tls, f"{where}.tls")
            self._fields(tls, f"{where}.tls", frozenset({"trustedCertificates"}))
            certs = _list(tls.get("trustedCertificates"), f"{where}.tls.trustedCertificates")
            if len(certs) > 1:
                raise ConfigError(
                    "more than one trusted certificate: put the CA certificates in one PEM file, a key of "
                    "one "
                    "secret, and name only that",
                    key=f"{where}.tls.trustedCertificates",
                )
            for i, cert in enumerate(certs):
                cwhere = f"{where}.tls.trustedCertificates[{i}]"
                cert = _mapping(cert, cwhere)
                self._fields(cert, cwhere, frozenset({"secretName", "certificate", "pattern"}))
                if "pattern" in cert:
                    raise ConfigError(
                        "name the certificate (`certificate`) instead of a pattern", key=f"{cwhere}.pattern"
                    )
                path = (
                    self.secrets
                    / _required(cert, "secretName", cwhere)
                    / _required(cert, "certificate", cwhere)
                )
                self._set(f"{alias}.ssl.truststore.type", "PEM", cwhere)
                self._set(f"{alias}.ssl.truststore.location", str(path), cwhere)
        protocol = "SSL" if tls is not None else "PLAINTEXT"
        if auth is not None:
            protocol = self._authentication(
                alias, _mapping(auth, f"{where}.authentication"), f"{where}.authentication", tls is not None
            )
        if protocol != "PLAINTEXT":
            self._set(f"{alias}.security.protocol", protocol, where)
        for key, value in _mapping(cluster.get("config", {}), f"{where}.config").items():
            self._set(f"{alias}.{key}", value, f"{where}.config.{key}")

    def _authentication(self, alias: str, auth: Mapping[str, Any], where: str, tls: bool) -> str:
        """Set the cluster's login; returns its security protocol."""
        kind = _required(auth, "type", where)
        if kind not in _AUTH_TYPES:
            raise ConfigError(
                f"authentication type {kind!r} is not supported (custom logins cannot be used by the "
                f"Python clients); use {', '.join(_AUTH_TYPES)}",
                key=f"{where}.type",
            )
        if kind == "oauth":
            self._oauth(alias, auth, where)
            return "SASL_SSL" if tls else "SASL_PLAINTEXT"
        if kind == "tls":
            self._fields(auth, where, frozenset({"type", "certificateAndKey"}))
            if not tls:
                raise ConfigError(
                    "tls authentication needs TLS: add tls.trustedCertificates", key=f"{where}.type"
                )
            pair = _mapping(auth.get("certificateAndKey"), f"{where}.certificateAndKey")
            self._fields(pair, f"{where}.certificateAndKey", frozenset({"secretName", "certificate", "key"}))
            self._set(f"{alias}.ssl.keystore.type", "PEM", where)
            self._set(
                f"{alias}.ssl.keystore.certificate.chain",
                self._secret(pair, f"{where}.certificateAndKey", "certificate"),
                where,
            )
            self._set(
                f"{alias}.ssl.keystore.key", self._secret(pair, f"{where}.certificateAndKey", "key"), where
            )
            return "SSL"
        self._fields(auth, where, frozenset({"type", "username", "passwordSecret"}))
        mechanism, login = _LOGIN[kind]
        user = _required(auth, "username", where)
        password = self._secret(
            _mapping(auth.get("passwordSecret"), f"{where}.passwordSecret"),
            f"{where}.passwordSecret",
            "password",
        )
        self._set(f"{alias}.sasl.mechanism", mechanism, where)
        self._set(
            f"{alias}.sasl.jaas.config", f'{login} required username="{user}" password="{password}";', where
        )
        return "SASL_SSL" if tls else "SASL_PLAINTEXT"

    def _oauth(self, alias: str, auth: Mapping[str, Any], where: str) -> None:
        """An OIDC client-credentials login, as Kafka's own OAUTHBEARER settings."""
        refused = sorted(set(auth) & _OAUTH_REFUSED)
        if refused:
            raise ConfigError(
                "OAuth logs in here with client credentials only (clientId, clientSecret, "
                "tokenEndpointUri, scope), its token endpoint's certificate checked against the system's "
                "CAs; remove the field",
                key=f"{where}.{refused[0]}",
            )
        self._fields(auth, where, _OAUTH_FIELDS | _OAUTH_NO_EFFECT)
        unused = sorted(f"{where}.{f}" for f in set(auth) & _OAUTH_NO_EFFECT)
        if unused:
            log.warning("no effect here: %s (Strimzi's OAuth client library settings)", ", ".join(unused))
        secret = self._secret(
            _mapping(auth.get("clientSecret"), f"{where}.clientSecret"), f"{where}.clientSecret", "key"
        )
        scope = _text(auth["scope"], f"{where}.scope") if "scope" in auth else None
        self._set(f"{alias}.sasl.mechanism", OAUTHBEARER, where)
        self._set(
            f"{alias}.sasl.jaas.config",
            jaas_line(str(_required(auth, "clientId", where)), secret, scope),
            where,
        )
        self._set(f"{alias}.{LOGIN_HANDLER}", LOGIN_HANDLERS[0], where)
        self._set(f"{alias}.{TOKEN_ENDPOINT}", _required(auth, "tokenEndpointUri", where), where)
        for field, key in (("connectTimeoutSeconds", CONNECT_TIMEOUT), ("readTimeoutSeconds", READ_TIMEOUT)):
            if field in auth:
                seconds = _text(auth[field], f"{where}.{field}")
                if not seconds.isdigit() or int(seconds) < 1:
                    raise ConfigError(f"expected whole seconds, got {seconds!r}", key=f"{where}.{field}")
                self._set(f"{alias}.{key}", int(seconds) * 1000, f"{where}.{field}")

    def _mirror(self, flow: str, mirror: Mapping[str, Any], where: str) -> None:
        self._set(f"{flow}.enabled", "true", where)
        for field, key in _PATTERNS.items():
            if field in mirror:
                if "Blacklist" in field:
                    # Strimzi's own deprecation.
                    log.warning(
                        "%s.%s is deprecated; use %s", where, field, field.replace("Blacklist", "Exclude")
                    )
                self._set(f"{flow}.{key}", mirror[field], f"{where}.{field}")
        if "sourceConnector" not in mirror:
            raise ConfigError(
                "a mirror without a sourceConnector copies nothing; add `sourceConnector: {}`",
                key=f"{where}.sourceConnector",
            )
        for connector, off in (
            ("checkpointConnector", "emit.checkpoints.enabled"),
            ("heartbeatConnector", "emit.heartbeats.enabled"),
        ):
            if connector not in mirror:
                self._set(f"{flow}.{off}", "false", f"{where} (no {connector})")
        for connector in _CONNECTORS:
            if connector not in mirror:
                continue
            cwhere = f"{where}.{connector}"
            settings = _mapping(mirror[connector] or {}, cwhere)
            self._fields(settings, cwhere, _CONNECTOR)
            for field in sorted(set(settings) - {"config"}):
                log.warning(
                    "no effect here: %s.%s (Connect's connector settings: Airflow runs the flows, Spark "
                    "sizes the copy)",
                    cwhere,
                    field,
                )
            for key, value in _mapping(settings.get("config", {}), f"{cwhere}.config").items():
                self._set(f"{flow}.{key}", value, f"{cwhere}.config.{key}")


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"expected a mapping, got {type(value).__name__}", key=where)
    return value


def _list(value: Any, where: str) -> Sequence[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ConfigError(f"expected a list, got {type(value).__name__}", key=where)
    return value


def _required(value: Mapping[str, Any], field: str, where: str) -> str:
    if value.get(field) in (None, ""):
        raise ConfigError(f"{field} is required here", key=f"{where}.{field}")
    return str(value[field])


def _text(value: Any, where: str) -> str:
    """A YAML scalar as a properties value (booleans as Java writes them)."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, dict | list):
        raise ConfigError(f"expected a single value, got a {type(value).__name__}", key=where)
    return str(value)


def _escape(value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")
    return "\\" + escaped if escaped.startswith((" ", "\t")) else escaped


def _escape_key(key: str) -> str:
    return "".join("\\" + c if c in "=: \\" else c for c in key)
