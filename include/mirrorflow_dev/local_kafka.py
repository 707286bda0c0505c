"""Independent single-node Apache Kafka clusters (combined KRaft broker + controller) on loopback.

Each cluster lives in its own *home* folder::

    home/server.properties   rewritten on every start (ports and extra properties may change)
    home/log4j2.properties   INFO to home/logs/server.log
    home/cluster.json        alias and ports of the last start, so ``running_cluster`` can describe it
    home/data/               log.dirs; formatted once, so a restart keeps topics and records
    home/logs/kafka.out      the JVM's stdout/stderr (errors from before log4j2 is configured)
    home/kafka.pid           present while the cluster is believed to run

Clients connect over PLAINTEXT, unless the cluster is started with a ``ScramSecurity``: then they
log in with SASL/SCRAM-SHA-512 as users created at format time, and Kafka's StandardAuthorizer
allows ``admin`` everything and any other user only what ACLs grant. A ``ScramSecurity`` with a
``LocalTls`` puts that login behind TLS (SASL_SSL); the cluster's private key is then in
``home/tls/server.pem``.

Invariants: brokers bind 127.0.0.1 only; every JVM gets -Xmx; a process is stopped by its PID only,
and only after /proc/<pid>/cmdline proves it is the ``kafka.Kafka`` of that home (a reused PID
belonging to something else is never signalled).
"""

from __future__ import annotations

import argparse
import base64
import datetime
import ipaddress
import json
import logging
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from mirrorflow_dev import paths

log = logging.getLogger(__name__)

PID_FILE = "kafka.pid"
STARTED_MARKER = "Kafka Server started"  # logged by KafkaRaftServer once the broker is STARTED
MAIN_CLASS = "kafka.Kafka"
DEFAULT_CLUSTERS = "primary:19092,backup:29092"
_ALIAS_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")

SCRAM_MECHANISM = "SCRAM-SHA-512"
SUPER_USER = "admin"
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
_SCRAM_LOGIN = "org.apache.kafka.common.security.scram.ScramLoginModule"
_PLAIN_LOGIN = "org.apache.kafka.common.security.plain.PlainLoginModule"
# Names and passwords go unquoted into the storage tool's --add-scram argument and quoted into JAAS
# strings: characters outside this set would need escaping in one or the other.
_CREDENTIAL_RE = re.compile(r"^[A-Za-z0-9_-]+$")

# Processes started by this Python process: we must wait() on them ourselves, or they linger as
# zombies that still look alive to kill(pid, 0).
_children: dict[int, subprocess.Popen[bytes]] = {}
_children_lock = threading.Lock()


class LocalKafkaError(RuntimeError):
    """A local cluster could not be started or stopped; the message carries the log tail."""


class ClusterStartTimeout(LocalKafkaError, TimeoutError):
    """The broker process kept running but did not become ready in time (it has been stopped)."""


@dataclass(frozen=True)
class LocalCluster:
    """A started cluster. ``pid`` is the JVM; ``home`` is absolute and owns all of its state."""

    alias: str
    port: int
    controller_port: int
    home: Path
    pid: int

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_file(self) -> Path:
        return self.home / "logs" / "server.log"


def _certificate(
    subject: str,
    public_key: ec.EllipticCurvePublicKey,
    issuer: str,
    issuer_key: ec.EllipticCurvePrivateKey,
    extensions: Sequence[tuple[x509.ExtensionType, bool]],
    days: int,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        # An hour back: a clock a little behind the one that signed must not reject the certificate.
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()), False)
    )
    for extension, critical in extensions:
        builder = builder.add_extension(extension, critical)
    return builder.sign(issuer_key, hashes.SHA256())


def _key_usage(*, signs_certificates: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=not signs_certificates,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=signs_certificates,
        crl_sign=signs_certificates,
        encipher_only=False,
        decipher_only=False,
    )


@dataclass(frozen=True)
class LocalTls:
    """A throwaway certificate authority and a server certificate for 127.0.0.1 that it signed, in PEM.

    ``ca_file`` holds the CA's certificate only (public): clients trust it, and so do the brokers'
    own inter-broker clients. ``server_pem`` is the server's private key (unencrypted PKCS#8: its
    password would sit next to it in server.properties) followed by its certificate chain, the form
    of Kafka's ``ssl.keystore.type=PEM``; each cluster gets it as ``home/tls/server.pem``, readable by
    the owner only, when it starts. The CA's private key is never written anywhere, so nothing else
    can be signed by it. The server certificate names 127.0.0.1 as an IP SAN, so every client keeps
    hostname verification on.
    """

    ca_file: Path
    server_pem: bytes = field(repr=False)

    @classmethod
    def generate(cls, folder: Path, days: int = 7) -> LocalTls:
        """A new CA and server key (EC P-256), valid for ``days``; writes ``folder/ca.pem``."""
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_name = "mirrorflow throwaway test CA"
        ca = _certificate(
            ca_name,
            ca_key.public_key(),
            ca_name,
            ca_key,
            [
                (x509.BasicConstraints(ca=True, path_length=0), True),
                (_key_usage(signs_certificates=True), True),
                (x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False),
            ],
            days,
        )
        server_key = ec.generate_private_key(ec.SECP256R1())
        server = _certificate(
            "127.0.0.1",
            server_key.public_key(),
            ca_name,
            ca_key,
            [
                (x509.SubjectAlternativeName([x509.IPAddress(ipaddress.IPv4Address("127.0.0.1"))]), False),
                (x509.BasicConstraints(ca=False, path_length=None), True),
                (_key_usage(signs_certificates=False), True),
                (x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), False),
            ],
            days,
        )
        ca_pem = ca.public_bytes(serialization.Encoding.PEM)
        key_pem = server_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        folder.mkdir(parents=True, exist_ok=True)
        ca_file = folder / "ca.pem"
        ca_file.write_bytes(ca_pem)
        return cls(ca_file.resolve(), key_pem + server.public_bytes(serialization.Encoding.PEM) + ca_pem)

    @staticmethod
    def keystore_file(home: Path) -> Path:
        return home / "tls" / "server.pem"

    def install(self, home: Path) -> None:
        """Write the server's key and certificate chain into ``home``, readable by the owner only."""
        path = self.keystore_file(home)
        path.parent.mkdir(mode=0o700, exist_ok=True)
        # Created with its final mode: the key is never readable by others, not even for a moment.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(self.server_pem)


@dataclass(frozen=True)
class ScramSecurity:
    """SASL users, an authorizer and a super user for a local cluster, optionally behind TLS.

    The client and inter-broker listener is SASL_PLAINTEXT with SCRAM-SHA-512, or SASL_SSL with
    ``tls``; ``passwords`` (user -> password, ``admin`` included) are written to the metadata log
    when the storage is formatted.
    The controller listener is SASL_PLAINTEXT with PLAIN and the single static user ``admin``: KRaft
    supports SCRAM on broker listeners only (KIP-900).
    ``admin`` is the only super user, and the broker itself logs in as ``admin``; no one can connect
    without a password and, as ``allow.everyone.if.no.acl.found`` stays false, other users may only
    do what ACLs grant them.
    """

    passwords: Mapping[str, str] = field(repr=False)
    tls: LocalTls | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if SUPER_USER not in self.passwords:
            raise ValueError(f"the super user {SUPER_USER!r} needs a password")
        for user, password in self.passwords.items():
            if not (_CREDENTIAL_RE.match(user) and _CREDENTIAL_RE.match(password)):
                raise ValueError(f"user {user!r}: names and passwords must match {_CREDENTIAL_RE.pattern}")

    @classmethod
    def generate(cls, *users: str, tls: LocalTls | None = None) -> ScramSecurity:
        """``admin`` and ``users``, each with a random password (never the same twice)."""
        return cls({user: secrets.token_urlsafe(18) for user in (SUPER_USER, *users)}, tls)

    @property
    def protocol(self) -> str:
        """The security protocol of the client listener, which is also its listener name."""
        return "SASL_PLAINTEXT" if self.tls is None else "SASL_SSL"

    def server_properties(self, port: int, controller_port: int, home: Path) -> dict[str, str]:
        """Listener, SASL, TLS and authorizer settings of a cluster in ``home``; they replace the
        PLAINTEXT ones."""
        protocol = self.protocol
        client = f"{protocol}://127.0.0.1:{port}"
        controller = f"CONTROLLER://127.0.0.1:{controller_port}"
        password = self.passwords[SUPER_USER]
        props = {
            "listeners": f"{client},{controller}",
            "advertised.listeners": f"{client},{controller}",
            "listener.security.protocol.map": f"CONTROLLER:SASL_PLAINTEXT,{protocol}:{protocol}",
            "inter.broker.listener.name": protocol,
            "sasl.enabled.mechanisms": SCRAM_MECHANISM,
            "sasl.mechanism.inter.broker.protocol": SCRAM_MECHANISM,
            f"listener.name.{protocol.lower()}.scram-sha-512.sasl.jaas.config": self.jaas_config(SUPER_USER),
            "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
            "sasl.mechanism.controller.protocol": "PLAIN",
            # username/password: the broker's login to the controller; user_admin: the accepted one.
            "listener.name.controller.plain.sasl.jaas.config": (
                f'{_PLAIN_LOGIN} required username="{SUPER_USER}" password="{password}" '
                f'user_{SUPER_USER}="{password}";'
            ),
            "authorizer.class.name": STANDARD_AUTHORIZER,
            "super.users": f"User:{SUPER_USER}",
        }
        if self.tls is not None:
            props |= {
                "ssl.keystore.type": "PEM",
                "ssl.keystore.location": str(LocalTls.keystore_file(home)),
                # What the broker's own inter-broker client trusts.
                "ssl.truststore.type": "PEM",
                "ssl.truststore.location": str(self.tls.ca_file),
            }
        return props

    def format_args(self) -> list[str]:
        """StorageTool format arguments that create the SCRAM users."""
        return [
            arg
            for user, password in sorted(self.passwords.items())
            for arg in ("--add-scram", f"{SCRAM_MECHANISM}=[name={user},password={password}]")
        ]

    def jaas_config(self, user: str, password: str | None = None) -> str:
        """The JAAS login of ``user``; ``password`` replaces theirs, e.g. by a config provider reference."""
        secret = self.passwords[user] if password is None else password
        return f'{_SCRAM_LOGIN} required username="{user}" password="{secret}";'

    def client_properties(self, user: str) -> dict[str, str]:
        """Java client properties (MM2's keys, without a cluster alias) that log in as ``user``."""
        props = {
            "security.protocol": self.protocol,
            "sasl.mechanism": SCRAM_MECHANISM,
            "sasl.jaas.config": self.jaas_config(user),
        }
        if self.tls is not None:
            props |= {"ssl.truststore.type": "PEM", "ssl.truststore.location": str(self.tls.ca_file)}
        return props

    def kafka_python(self, user: str) -> dict[str, Any]:
        """kafka-python settings that log in as ``user`` (bootstrap servers not included)."""
        conf: dict[str, Any] = {
            "security_protocol": self.protocol,
            "sasl_mechanism": SCRAM_MECHANISM,
            "sasl_plain_username": user,
            "sasl_plain_password": self.passwords[user],
        }
        if self.tls is not None:
            conf["ssl_cafile"] = str(self.tls.ca_file)
        return conf


# --------------------------------------------------------------------------------------- ports


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (another process may still take it)."""
    return free_ports(1)[0]


def free_ports(n: int) -> list[int]:
    """``n`` distinct free ports: all sockets stay bound until every port is chosen."""
    socks: list[socket.socket] = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        # Java binds with SO_REUSEADDR, so a TIME_WAIT left by a previous broker must not count.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


# ----------------------------------------------------------------------------------- processes


def process_alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie (an exited child nobody reaped yet)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    # The state letter follows the command name, which is in parentheses and may hold spaces.
    state = stat.rpartition(")")[2].split()[:1]
    return bool(state) and state[0] not in ("Z", "X")


def _is_broker_of(pid: int, home: Path) -> bool:
    """Whether ``pid`` runs ``kafka.Kafka`` with this home's server.properties (PID-reuse guard)."""
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return False
    return MAIN_CLASS in args and str(home / "server.properties") in args


def _read_pid(home: Path) -> int | None:
    try:
        return int((home / PID_FILE).read_text().strip())
    except (OSError, ValueError):
        return None


def running_pid(home: Path) -> int | None:
    """The PID of this home's broker if it runs; a stale or foreign PID file yields None."""
    home = home.resolve()
    pid = _read_pid(home)
    if pid is None or not process_alive(pid) or not _is_broker_of(pid, home):
        return None
    return pid


def running_cluster(home: Path) -> LocalCluster | None:
    """Describe the cluster running in ``home`` (from cluster.json), or None if it is not running."""
    home = home.resolve()
    pid = running_pid(home)
    if pid is None:
        return None
    try:
        meta = json.loads((home / "cluster.json").read_text())
        return LocalCluster(meta["alias"], int(meta["port"]), int(meta["controller_port"]), home, pid)
    except (OSError, ValueError, KeyError):
        return None


def wait_gone(pid: int, timeout: float) -> bool:
    """Poll until ``pid`` is gone or a zombie; False if it still runs after ``timeout`` seconds.

    For processes this Python process does not reap (not its children, or daemonized).
    """
    deadline = time.monotonic() + timeout
    while process_alive(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    return True


def _wait_gone(pid: int, timeout: float) -> bool:
    with _children_lock:
        child = _children.get(pid)
    if child is not None:
        try:
            child.wait(timeout)
        except subprocess.TimeoutExpired:
            return False
        with _children_lock:
            _children.pop(pid, None)
        return True
    return wait_gone(pid, timeout)


def _terminate(pid: int, timeout: float) -> None:
    """SIGTERM (clean shutdown), SIGKILL after ``timeout``; the caller has checked the identity."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    if _wait_gone(pid, timeout):
        return
    log.warning("kafka pid %s ignored SIGTERM for %.0fs, sending SIGKILL", pid, timeout)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    if not _wait_gone(pid, 10.0):
        raise LocalKafkaError(f"kafka pid {pid} survived SIGKILL")


def stop_cluster(cluster_or_home: LocalCluster | Path, timeout: float = 30.0) -> bool:
    """Stop one cluster by PID. Returns True if a running broker was stopped, False if none ran.

    The PID comes from the object or from home/kafka.pid. It is signalled only if it still is this
    home's ``kafka.Kafka``. The PID file is removed unless it names another broker that still runs
    in this home (a later start than the stale object passed in).
    """
    if isinstance(cluster_or_home, LocalCluster):
        home, pid = cluster_or_home.home.resolve(), cluster_or_home.pid
    else:
        home = cluster_or_home.resolve()
        pid = _read_pid(home) or 0
    stopped = False
    if pid > 0 and process_alive(pid) and _is_broker_of(pid, home):
        _terminate(pid, timeout)
        stopped = True
    else:
        with _children_lock:
            child = _children.pop(pid, None)
        if child is not None:
            child.poll()  # reap a child that already exited
    if _read_pid(home) in (pid, None) or running_pid(home) is None:
        (home / PID_FILE).unlink(missing_ok=True)
    return stopped


def stop_clusters(
    clusters: Mapping[str, LocalCluster] | Iterable[LocalCluster | Path], timeout: float = 30.0
) -> None:
    """Stop several clusters in parallel; raises the first error after trying all of them."""
    items = list(clusters.values()) if isinstance(clusters, Mapping) else list(clusters)
    if not items:
        return
    with ThreadPoolExecutor(max_workers=len(items)) as pool:
        futures = [pool.submit(stop_cluster, item, timeout) for item in items]
    errors = [e for f in futures if (e := f.exception()) is not None]
    if errors:
        raise LocalKafkaError(f"{len(errors)} cluster(s) failed to stop: {errors}") from errors[0]


# ------------------------------------------------------------------------------------- starting


def libs_present() -> bool:
    """Whether the Kafka broker jars were resolved (``make setup``)."""
    return any(paths.kafka_libs().glob("org.apache.kafka.kafka_2.13-*.jar"))


def _require_libs() -> Path:
    libs = paths.kafka_libs()
    if not libs_present():
        raise LocalKafkaError(f"Kafka jars not found in {libs}: run `make setup`")
    return libs


def java_executable() -> str:
    """``$JAVA_HOME/bin/java`` when set, else ``java`` on PATH."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").is_file():
        return str(Path(java_home) / "bin" / "java")
    found = shutil.which("java")
    if not found:
        raise LocalKafkaError("java not found on PATH (Kafka 4 needs Java 17+)")
    return found


def server_properties(
    port: int,
    controller_port: int,
    home: Path,
    extra: Mapping[str, str] | None = None,
    security: ScramSecurity | None = None,
) -> dict[str, str]:
    """Combined KRaft single-node settings of a cluster in ``home``, secured by ``security`` if given;
    ``extra`` overrides or adds keys last."""
    plain = f"PLAINTEXT://127.0.0.1:{port}"
    controller = f"CONTROLLER://127.0.0.1:{controller_port}"
    props = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.bootstrap.servers": f"127.0.0.1:{controller_port}",
        "listeners": f"{plain},{controller}",
        "advertised.listeners": f"{plain},{controller}",
        "inter.broker.listener.name": "PLAINTEXT",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": str(home / "data"),
        "auto.create.topics.enable": "false",
        "offsets.topic.replication.factor": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        # Sample records carry old timestamps on purpose; time-based retention would delete them
        # while a test or the demo is still using them. Tests of expiry set retention per topic.
        "log.retention.ms": "-1",
    }
    if security is not None:
        props.update(security.server_properties(port, controller_port, home))
    props.update(extra or {})
    return props


def _write_properties(path: Path, props: Mapping[str, str]) -> None:
    # Java properties treat a backslash as an escape and a newline as the end of the value.
    lines = [
        f"{k}={v.replace(chr(92), chr(92) * 2).replace(chr(10), chr(92) + 'n')}" for k, v in props.items()
    ]
    path.write_text("\n".join(lines) + "\n")


_LOG4J2 = """\
# log4j2 properties format (log4j-core reads it without extra jars); selected by
# -Dlog4j2.configurationFile, as Kafka 4's bin scripts do with their log4j2.yaml.
status = warn
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = ${sys:kafka.logs.dir}/server.log
appender.file.append = true
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FILE
logger.request.name = kafka.request.logger
logger.request.level = WARN
logger.channel.name = kafka.network.RequestChannel$
logger.channel.level = WARN
"""


def _random_cluster_id() -> str:
    """Same format as ``StorageTool random-uuid`` (Kafka ``Uuid``: URL-safe base64, no padding).

    Generated here rather than by a second JVM launch, which costs about a second on 2 cores.
    Kafka rejects ids that start with "-" as command-line hostile, so we do too.
    """
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


def _jvm_logging(home: Path) -> list[str]:
    return [f"-Dlog4j2.configurationFile={home / 'log4j2.properties'}", f"-Dkafka.logs.dir={home / 'logs'}"]


def _format_storage(home: Path, libs: Path, timeout: float, extra_args: Sequence[str] = ()) -> None:
    """Format data/ once: meta.properties marks a formatted dir, and reformatting would lose data."""
    if (home / "data" / "meta.properties").exists():
        return
    cmd = [
        java_executable(),
        "-Xmx256m",
        *_jvm_logging(home),
        "-cp",
        f"{libs}/*",
        "kafka.tools.StorageTool",
        "format",
        "--standalone",
        "-t",
        _random_cluster_id(),
        "-c",
        str(home / "server.properties"),
        *extra_args,
    ]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=home, check=False)
    if res.returncode != 0:
        raise LocalKafkaError(
            f"StorageTool format failed in {home} (rc {res.returncode}):\n{res.stdout}{res.stderr}"
        )


def _tail(home: Path, offset: int, lines: int = 40) -> str:
    """This launch's ERROR lines (the cause, often far above the end) and the last lines of output."""
    try:
        with (home / "logs" / "server.log").open("rb") as f:
            f.seek(offset)
            log_lines = f.read().decode(errors="replace").splitlines()
    except OSError:
        log_lines = []
    out_path = home / "logs" / "kafka.out"
    out_lines = out_path.read_text(errors="replace").splitlines()[-lines:] if out_path.exists() else []
    errors = [line for line in log_lines if "] ERROR " in line or "] FATAL " in line][:5]
    parts = [
        ("errors in server.log", errors),
        (f"{out_path} (JVM stdout/stderr)", out_lines),
        ("server.log", log_lines[-lines:]),
    ]
    return "\n".join(f"--- {title}\n" + "\n".join(body) for title, body in parts if body) or "(no log output)"


def _log_says_started(log_file: Path, offset: int) -> bool:
    try:
        with log_file.open("rb") as f:
            f.seek(offset)
            return STARTED_MARKER.encode() in f.read()
    except OSError:
        return False


def _metadata_ready(bootstrap: str, port: int, client_config: Mapping[str, Any]) -> bool:
    """An admin metadata request lists this broker, unfenced: clients can use the cluster now."""
    from kafka import KafkaAdminClient  # noqa: PLC0415  lazy: the CLI's status/down never need kafka-python

    try:
        admin = KafkaAdminClient(
            bootstrap_servers=bootstrap,
            request_timeout_ms=5000,
            bootstrap_timeout_ms=5000,
            **client_config,
        )
    except Exception:
        return False
    try:
        brokers = admin.describe_cluster()["brokers"]
        return any(b["port"] == port and not b.get("is_fenced") for b in brokers)
    except Exception:
        return False
    finally:
        admin.close()


def start_cluster(
    alias: str,
    port: int,
    controller_port: int,
    home: Path,
    *,
    heap_mb: int = 512,
    extra_properties: Mapping[str, str] | None = None,
    security: ScramSecurity | None = None,
    client_config: Mapping[str, Any] | None = None,
    timeout: float = 60.0,
) -> LocalCluster:
    """Start one cluster in ``home`` and return once clients can use it.

    Ready means: the log written since this launch says "Kafka Server started" AND an admin
    metadata request (kafka-python, with ``client_config``; by default the super user's login when
    ``security`` is given) lists the broker unfenced. If the JVM exits first, LocalKafkaError
    carries the log tail; on timeout the JVM is stopped and ClusterStartTimeout carries the tail.
    Storage is formatted only once, so restarting on the same home keeps data (restart with the same
    controller port: the voter set recorded at format time names it) and the SCRAM users created
    then (restart with the same ``security``).
    """
    libs = _require_libs()
    if not _ALIAS_RE.match(alias):
        raise ValueError(f"alias {alias!r} must match {_ALIAS_RE.pattern}")
    home = home.resolve()
    deadline = time.monotonic() + timeout
    (home / "logs").mkdir(parents=True, exist_ok=True)
    pid = running_pid(home)
    if pid is not None:
        raise LocalKafkaError(f"{alias}: a broker already runs in {home} (pid {pid})")
    for p in (port, controller_port):
        if _port_in_use(p):
            raise LocalKafkaError(f"{alias}: port 127.0.0.1:{p} is already in use")

    if security is not None and security.tls is not None:
        security.tls.install(home)
    _write_properties(
        home / "server.properties", server_properties(port, controller_port, home, extra_properties, security)
    )
    (home / "log4j2.properties").write_text(_LOG4J2)
    (home / "cluster.json").write_text(
        json.dumps({"alias": alias, "port": port, "controller_port": controller_port}) + "\n"
    )
    _format_storage(
        home,
        libs,
        timeout=max(deadline - time.monotonic(), 1.0),
        extra_args=security.format_args() if security is not None else (),
    )
    if client_config is None and security is not None:
        client_config = security.kafka_python(SUPER_USER)

    log_file = home / "logs" / "server.log"
    # Only log lines written after this launch count: a restart appends to the same file.
    offset = log_file.stat().st_size if log_file.exists() else 0
    cmd = [
        java_executable(),
        f"-Xms{heap_mb}m",
        f"-Xmx{heap_mb}m",
        "-XX:+UseG1GC",
        "-Djava.awt.headless=true",
        *_jvm_logging(home),
        "-cp",
        f"{libs}/*",
        MAIN_CLASS,
        str(home / "server.properties"),
    ]
    with (home / "logs" / "kafka.out").open("ab") as out:
        # Own session: a Ctrl-C in the caller's terminal does not reach the broker, and the JVM
        # never inherits the caller's pipes (a CLI caller's output would otherwise never hit EOF).
        proc = subprocess.Popen(
            cmd,
            cwd=home,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    with _children_lock:
        _children[proc.pid] = proc
    tmp = home / f"{PID_FILE}.tmp"
    tmp.write_text(f"{proc.pid}\n")
    tmp.replace(home / PID_FILE)
    cluster = LocalCluster(alias, port, controller_port, home, proc.pid)
    started_at = time.monotonic()

    seen_marker = False
    try:
        while True:
            rc = proc.poll()
            if rc is not None:
                raise LocalKafkaError(
                    f"{alias}: kafka exited with code {rc} during startup\n{_tail(home, offset)}"
                )
            seen_marker = seen_marker or _log_says_started(log_file, offset)
            if seen_marker and _metadata_ready(cluster.bootstrap, port, client_config or {}):
                elapsed = time.monotonic() - started_at
                log.info("%s ready on %s in %.1fs (pid %s)", alias, cluster.bootstrap, elapsed, proc.pid)
                return cluster
            if time.monotonic() >= deadline:
                raise ClusterStartTimeout(
                    f"{alias}: not ready after {timeout:.0f}s (stopped it)\n{_tail(home, offset)}"
                )
            time.sleep(0.2)
    except BaseException:
        # Never leave a half-started broker behind (also on Ctrl-C); this also reaps and drops the PID file.
        stop_cluster(cluster)
        raise


def start_clusters(specs: Sequence[tuple[str, int, int]], root: Path, **kw: Any) -> dict[str, LocalCluster]:
    """Start ``(alias, port, controller_port)`` clusters in parallel, each in ``root/<alias>``.

    All or nothing: if one fails, those that started are stopped and the first error is raised.
    """
    aliases = [s[0] for s in specs]
    if len(set(aliases)) != len(aliases):
        raise ValueError(f"duplicate aliases in {aliases}")
    if not specs:
        return {}
    with ThreadPoolExecutor(max_workers=len(specs)) as pool:
        futures = {a: pool.submit(start_cluster, a, p, cp, root / a, **kw) for a, p, cp in specs}
    started = {a: f.result() for a, f in futures.items() if f.exception() is None}
    errors = [e for f in futures.values() if (e := f.exception()) is not None]
    if errors:
        stop_clusters(started)
        raise errors[0]
    return started


# ------------------------------------------------------------------------------------------ CLI


def cli_specs(value: str | None = None) -> list[tuple[str, int, int]]:
    """Parse ``alias:port,...`` (MIRROR_KAFKA_CLUSTERS); each controller port is port + 1."""
    text = value if value is not None else os.environ.get("MIRROR_KAFKA_CLUSTERS", DEFAULT_CLUSTERS)
    specs = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        alias, sep, port_text = item.partition(":")
        if not sep or not _ALIAS_RE.match(alias) or not port_text.isdigit() or not 0 < int(port_text) < 65535:
            raise ValueError(f"bad cluster spec {item!r}: expected alias:port (e.g. primary:19092)")
        specs.append((alias, int(port_text), int(port_text) + 1))
    if not specs or len({s[0] for s in specs}) != len(specs):
        raise ValueError(f"MIRROR_KAFKA_CLUSTERS={text!r}: need at least one cluster and unique aliases")
    return specs


def cli_root() -> Path:
    return Path(os.environ.get("MIRROR_KAFKA_HOME", paths.state_root() / "kafka")).resolve()


def _known_aliases(root: Path, specs: Sequence[tuple[str, int, int]]) -> list[str]:
    """Configured aliases, then any other home under root that still has a PID file."""
    aliases = [s[0] for s in specs]
    if root.is_dir():
        aliases += sorted(d.name for d in root.iterdir() if (d / PID_FILE).exists() and d.name not in aliases)
    return aliases


def main(argv: Sequence[str] | None = None) -> int:
    """``up`` / ``down`` / ``status``. Exit codes: 0 ok, 1 failure, 2 usage, 3 status: not all running."""
    parser = argparse.ArgumentParser(
        prog="python -m mirrorflow_dev.local_kafka",
        description="Local single-node Kafka clusters. Env: MIRROR_KAFKA_CLUSTERS "
        f"(default {DEFAULT_CLUSTERS}; controller = port+1), "
        "MIRROR_KAFKA_HOME (default <repo>/.state/kafka).",
    )
    parser.add_argument("command", choices=["up", "down", "status"])
    args = parser.parse_args(argv)
    try:
        specs = cli_specs()
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    root = cli_root()

    if args.command == "up":
        todo = []
        for alias, port, cport in specs:
            running = running_cluster(root / alias)
            if running is not None:
                print(f"{alias}\t{running.bootstrap}\talready running (pid {running.pid})")
            else:
                todo.append((alias, port, cport))
        try:
            started = start_clusters(todo, root)
        except (LocalKafkaError, OSError, ValueError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        for c in started.values():
            print(f"{c.alias}\t{c.bootstrap}\tstarted (pid {c.pid})")
        return 0

    if args.command == "status":
        all_running = True
        ports = {a: p for a, p, _ in specs}
        for alias in _known_aliases(root, specs):
            running = running_cluster(root / alias)
            if running is not None:
                print(f"{alias}\t{running.bootstrap}\trunning (pid {running.pid})")
            else:
                all_running = all_running and alias not in ports
                where = f"127.0.0.1:{ports[alias]}" if alias in ports else "-"
                print(f"{alias}\t{where}\tstopped")
        return 0 if all_running else 3

    aliases = _known_aliases(root, specs)
    pids = {a: running_pid(root / a) for a in aliases}
    with ThreadPoolExecutor(max_workers=max(len(aliases), 1)) as pool:  # each stop takes ~2 s
        futures = {a: pool.submit(stop_cluster, root / a) for a in aliases}
    failed = False
    for alias, fut in futures.items():
        err = fut.exception()
        if err is not None:
            print(f"{alias}\terror: {err}", file=sys.stderr)
            failed = True
        else:
            print(f"{alias}\tstopped (pid {pids[alias]})" if fut.result() else f"{alias}\tnot running")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
