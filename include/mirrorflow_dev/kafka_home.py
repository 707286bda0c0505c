"""A local Kafka cluster's home before its broker starts: the broker jars and the java to run them,
``server.properties`` (combined KRaft on loopback: a single node, or one node of a replicated cluster),
the JVM options and the storage format. ``local_kafka`` starts and stops the brokers.

Invariants: data/ is formatted once; a restart never reformats it (that would lose its records). A
single node is its own dynamic quorum (``--standalone``); the nodes of a replicated cluster share a
static voter set (``controller.quorum.voters``) and one cluster id, given to each node's format.
"""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path

from mirrorflow_dev import class_sharing, paths
from mirrorflow_dev.kafka_security import BrokerSecurity


class LocalKafkaError(RuntimeError):
    """A local cluster could not be started or stopped; the message carries the log tail."""


def libs_present() -> bool:
    """Whether the Kafka broker jars were resolved (``make setup``)."""
    return any(paths.kafka_libs().glob("org.apache.kafka.kafka_2.13-*.jar"))


def require_libs() -> Path:
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


# A replicated cluster's defaults, as production runs them: every record on three nodes, and a write
# acknowledged by all (acks=all) only while two of them have it, so one node may fail at a time.
REPLICATED_DEFAULTS = {
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
    "offsets.topic.replication.factor": "3",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "share.coordinator.state.topic.replication.factor": "3",
    "share.coordinator.state.topic.min.isr": "2",
}
REPLICATED_NODES = 3


def server_properties(
    port: int,
    controller_port: int,
    home: Path,
    extra: Mapping[str, str] | None = None,
    security: BrokerSecurity | None = None,
    *,
    node_id: int = 1,
    voters: Mapping[int, int] | None = None,
) -> dict[str, str]:
    """Combined KRaft settings of a node in ``home``, secured by ``security`` if given; ``extra``
    overrides or adds keys last.

    Without ``voters``: a single-node cluster. With ``voters`` (node id -> controller port, at least
    three, ``node_id`` among them): node ``node_id`` of a replicated cluster whose controllers are a
    static voter set, with ``REPLICATED_DEFAULTS``.
    """
    plain = f"PLAINTEXT://127.0.0.1:{port}"
    controller = f"CONTROLLER://127.0.0.1:{controller_port}"
    if voters is None:
        quorum = {"node.id": "1", "controller.quorum.bootstrap.servers": f"127.0.0.1:{controller_port}"}
    else:
        if len(voters) < REPLICATED_NODES or voters.get(node_id) != controller_port:
            raise ValueError(
                f"node {node_id} (controller port {controller_port}) of voters {dict(voters)}: "
                f"need {REPLICATED_NODES}+ voters, this node among them"
            )
        quorum = {
            "node.id": str(node_id),
            "controller.quorum.voters": ",".join(f"{n}@127.0.0.1:{p}" for n, p in sorted(voters.items())),
        }
    props = {
        "process.roles": "broker,controller",
        **quorum,
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
        # The controller appends a no-op record to the metadata log this often when nothing else
        # happens (Kafka's default: every 500 ms), which an idle single-node cluster pays for in CPU.
        "metadata.max.idle.interval.ms": "10000",
        # Sample records carry old timestamps on purpose; time-based retention would delete them
        # while a test or the demo is still using them. Tests of expiry set retention per topic.
        "log.retention.ms": "-1",
    }
    if voters is not None:
        props.update(REPLICATED_DEFAULTS)
    if security is not None:
        props.update(security.server_properties(port, controller_port, home))
    props.update(extra or {})
    return props


def write_properties(path: Path, props: Mapping[str, str]) -> None:
    # Java properties treat a backslash as an escape and a newline as the end of the value.
    lines = [
        f"{k}={v.replace(chr(92), chr(92) * 2).replace(chr(10), chr(92) + 'n')}" for k, v in props.items()
    ]
    path.write_text("\n".join(lines) + "\n")


def random_cluster_id() -> str:
    """Same format as ``StorageTool random-uuid`` (Kafka ``Uuid``: URL-safe base64, no padding).

    Generated here rather than by a second JVM launch, which costs about a second on 2 cores.
    Kafka rejects ids that start with "-" as command-line hostile, so we do too.
    """
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


def jvm_options(home: Path, full_jit: bool = False) -> list[str]:
    """Logging into ``home``, the JIT's first tier only unless ``full_jit``, and the brokers' shared
    classes (``class_sharing``)."""
    return [
        *(() if full_jit else (class_sharing.QUICK_JIT,)),
        *class_sharing.options("kafka"),
        f"-Dlog4j2.configurationFile={home / 'log4j2.properties'}",
        f"-Dkafka.logs.dir={home / 'logs'}",
    ]


def format_storage(
    home: Path,
    libs: Path,
    timeout: float,
    extra_args: Sequence[str] = (),
    *,
    cluster_id: str | None = None,
) -> None:
    """Format data/ once: meta.properties marks a formatted dir, and reformatting would lose data.

    Without ``cluster_id``: a single node, a new cluster id, its own dynamic quorum (--standalone).
    With it: a node of a static voter set (server.properties names them), formatted with no quorum
    flag, as each of its nodes must be, under the id all of them share (kraft.version 0: the set
    never changes).
    """
    if (home / "data" / "meta.properties").exists():
        return
    cmd = [
        java_executable(),
        "-Xmx256m",
        *jvm_options(home),  # a one-shot tool: never worth C2's compiling
        "-cp",
        f"{libs}/*",
        "kafka.tools.StorageTool",
        "format",
        *(("--standalone", "-t", random_cluster_id()) if cluster_id is None else ("-t", cluster_id)),
        "-c",
        str(home / "server.properties"),
        *extra_args,
    ]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=home, check=False)
    if res.returncode != 0:
        raise LocalKafkaError(
            f"StorageTool format failed in {home} (rc {res.returncode}):\n{res.stdout}{res.stderr}"
        )
