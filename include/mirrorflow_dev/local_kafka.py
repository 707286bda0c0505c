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
``home/tls/server.pem``. With a ``TlsSecurity`` clients connect over SSL, presenting a certificate
where it requires one.

Their JVMs run the JIT's first tier only (C1) unless started with ``full_jit``: a test or demo cluster
lives minutes and moves little, and C2's compiling is most of its start-up CPU and much of its idle
CPU; the bench starts its clusters with ``full_jit``, as production brokers run.

What a home holds before its broker starts (the jars, server.properties, JVM options, the storage
format) is ``kafka_home``'s. ``replicated_kafka`` starts three such brokers, each in a home of its own,
as the nodes of one cluster.

Invariants: brokers bind 127.0.0.1 only; every JVM gets -Xmx; a process is stopped by its PID only,
and only after /proc/<pid>/cmdline proves it is the ``kafka.Kafka`` of that home (a reused PID
belonging to something else is never signalled).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mirrorflow_dev import paths
from mirrorflow_dev.kafka_home import (
    LocalKafkaError,
    format_storage,
    java_executable,
    jvm_options,
    require_libs,
    server_properties,
    write_properties,
)
from mirrorflow_dev.kafka_security import SUPER_USER, BrokerSecurity, OAuthSecurity
from mirrorflow_dev.processes import port_in_use, process_alive, wait_gone

log = logging.getLogger(__name__)

PID_FILE = "kafka.pid"
STARTED_MARKER = "Kafka Server started"  # logged by KafkaRaftServer once the broker is STARTED
MAIN_CLASS = "kafka.Kafka"
DEFAULT_CLUSTERS = "primary:19092,backup:29092"
_ALIAS_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")

# Processes started by this Python process: we must wait() on them ourselves, or they linger as
# zombies that still look alive to kill(pid, 0).
_children: dict[int, subprocess.Popen[bytes]] = {}
_children_lock = threading.Lock()


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


# ----------------------------------------------------------------------------------- processes


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


def _terminate(pid: int, timeout: float, kill: bool = False) -> None:
    """SIGTERM (clean shutdown), SIGKILL after ``timeout``, or at once if ``kill``; the caller has
    checked the identity."""
    if not kill:
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


def stop_cluster(cluster_or_home: LocalCluster | Path, timeout: float = 30.0, *, kill: bool = False) -> bool:
    """Stop one cluster by PID. Returns True if a running broker was stopped, False if none ran.

    The PID comes from the object or from home/kafka.pid. It is signalled only if it still is this
    home's ``kafka.Kafka``. The PID file is removed unless it names another broker that still runs
    in this home (a later start than the stale object passed in). ``kill``: SIGKILL at once, a crash
    (no controlled shutdown hands its leaderships over; the next start recovers its logs).
    """
    if isinstance(cluster_or_home, LocalCluster):
        home, pid = cluster_or_home.home.resolve(), cluster_or_home.pid
    else:
        home = cluster_or_home.resolve()
        pid = _read_pid(home) or 0
    stopped = False
    if pid > 0 and process_alive(pid) and _is_broker_of(pid, home):
        _terminate(pid, timeout, kill)
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
    security: BrokerSecurity | None = None,
    client_config: Mapping[str, Any] | None = None,
    timeout: float = 60.0,
    full_jit: bool = False,
    node_id: int = 1,
    voters: Mapping[int, int] | None = None,
    cluster_id: str | None = None,
) -> LocalCluster:
    """Start one cluster in ``home`` and return once clients can use it.

    Ready means: the log written since this launch says "Kafka Server started" AND an admin
    metadata request (kafka-python, with ``client_config``; by default the super user's login when
    ``security`` is given) lists the broker unfenced. If the JVM exits first, LocalKafkaError
    carries the log tail; on timeout the JVM is stopped and ClusterStartTimeout carries the tail.
    Storage is formatted only once, so restarting on the same home keeps data (restart with the same
    controller port: the voter set recorded at format time names it) and the SCRAM users created
    then (restart with the same ``security``).

    ``node_id``, ``voters`` and ``cluster_id`` make it node ``node_id`` of a replicated cluster (see
    ``kafka_home.server_properties`` and ``format_storage``; ``replicated_kafka`` starts all of them):
    it becomes ready only once a majority of ``voters`` runs.
    """
    libs = require_libs()
    if not _ALIAS_RE.match(alias):
        raise ValueError(f"alias {alias!r} must match {_ALIAS_RE.pattern}")
    if (voters is None) != (cluster_id is None):
        raise ValueError(
            f"{alias}: a replicated node needs both voters and cluster_id, a single node neither"
        )
    home = home.resolve()
    deadline = time.monotonic() + timeout
    (home / "logs").mkdir(parents=True, exist_ok=True)
    _check_free(alias, port, controller_port, home)

    if security is not None and security.tls is not None:
        security.tls.install(home)
    props = server_properties(
        port, controller_port, home, extra_properties, security, node_id=node_id, voters=voters
    )
    write_properties(home / "server.properties", props)
    (home / "log4j2.properties").write_text(_LOG4J2)
    (home / "cluster.json").write_text(
        json.dumps({"alias": alias, "port": port, "controller_port": controller_port}) + "\n"
    )
    format_storage(
        home,
        libs,
        timeout=max(deadline - time.monotonic(), 1.0),
        extra_args=security.format_args() if security is not None else (),
        cluster_id=cluster_id,
    )
    if client_config is None and security is not None:
        client_config = security.kafka_python(SUPER_USER)
    # An OAuth cluster's JVM allows its OIDC server's URLs; it is not restarted (start_prepared).
    allowed = security.jvm_properties() if isinstance(security, OAuthSecurity) else []
    return _run(
        alias,
        port,
        controller_port,
        home,
        libs,
        heap_mb,
        client_config or {},
        deadline,
        timeout,
        full_jit,
        allowed,
    )


def start_prepared(
    cluster: LocalCluster,
    *,
    heap_mb: int = 512,
    client_config: Mapping[str, Any] | None = None,
    timeout: float = 60.0,
    full_jit: bool = False,
) -> LocalCluster:
    """Start a stopped cluster again in its home as ``start_cluster`` left it (server.properties as
    they are, data as it is) and return once it is ready, as ``start_cluster`` says. For a node of a
    replicated cluster, whose properties (node id, voters) only its first start knows."""
    home = cluster.home.resolve()
    _check_free(cluster.alias, cluster.port, cluster.controller_port, home)
    deadline = time.monotonic() + timeout
    return _run(
        cluster.alias,
        cluster.port,
        cluster.controller_port,
        home,
        require_libs(),
        heap_mb,
        client_config or {},
        deadline,
        timeout,
        full_jit,
    )


def _check_free(alias: str, port: int, controller_port: int, home: Path) -> None:
    pid = running_pid(home)
    if pid is not None:
        raise LocalKafkaError(f"{alias}: a broker already runs in {home} (pid {pid})")
    for p in (port, controller_port):
        if port_in_use(p):
            raise LocalKafkaError(f"{alias}: port 127.0.0.1:{p} is already in use")


def _run(
    alias: str,
    port: int,
    controller_port: int,
    home: Path,
    libs: Path,
    heap_mb: int,
    client_config: Mapping[str, Any],
    deadline: float,
    timeout: float,
    full_jit: bool,
    jvm_properties: Sequence[str] = (),
) -> LocalCluster:
    """Launch the JVM of a prepared home and wait until it is ready or ``deadline`` (monotonic), the
    end of the caller's ``timeout``."""
    log_file = home / "logs" / "server.log"
    # Only log lines written after this launch count: a restart appends to the same file.
    offset = log_file.stat().st_size if log_file.exists() else 0
    cmd = [
        java_executable(),
        f"-Xms{heap_mb}m",
        f"-Xmx{heap_mb}m",
        "-XX:+UseG1GC",
        "-Djava.awt.headless=true",
        *jvm_options(home, full_jit),
        *jvm_properties,
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
            if seen_marker and _metadata_ready(cluster.bootstrap, port, client_config):
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
