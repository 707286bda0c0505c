"""Replicated Apache Kafka clusters on loopback, production's shape: three combined KRaft nodes (broker
and controller each) whose controllers are a static voter set, with production's replication defaults
(``kafka_home.REPLICATED_DEFAULTS``: every partition on three nodes, acks=all needs two of them), for
tests of leader changes: a node can be killed as a crash would and restarted on its data.

Node ``i`` (1..3) of cluster ``alias`` is a ``local_kafka`` broker of its own home,
``root/<alias>/node-<i>``, named ``<alias>-node-<i>``; that module's invariants hold for each node
(loopback only, -Xmx, signalled by PID only after the /proc identity check).

Invariants: the nodes of a cluster are formatted once, with one cluster id and one voter set; a node
restarts in its own home on its own ports (the voter set names its controller port), never reformatted.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mirrorflow_dev import local_kafka
from mirrorflow_dev.kafka_home import REPLICATED_NODES, LocalKafkaError, random_cluster_id
from mirrorflow_dev.local_kafka import LocalCluster

# Six JVMs (two clusters) may run at once on a 2-core, small machine: a node gets less than a
# single-node cluster's 512 MB.
NODE_HEAP_MB = 384


@dataclass(frozen=True)
class ReplicatedCluster:
    """A started cluster: ``nodes[i]`` is node id ``i + 1``. A node restarted later is a new object
    (a new PID): ``with_node`` gives the cluster with it."""

    alias: str
    nodes: tuple[LocalCluster, ...]

    @property
    def bootstrap(self) -> str:
        return ",".join(node.bootstrap for node in self.nodes)

    def node(self, node_id: int) -> LocalCluster:
        """The node of this Kafka node id (the broker id that metadata names as leader or replica)."""
        if not 1 <= node_id <= len(self.nodes):
            raise KeyError(f"{self.alias} has no node {node_id}")
        return self.nodes[node_id - 1]

    def with_node(self, node: LocalCluster) -> ReplicatedCluster:
        """This cluster with ``node`` (e.g. from ``restart_node``) in place of the node of its home."""
        if all(n.home != node.home for n in self.nodes):
            raise ValueError(f"{node.home} is not a node of {self.alias}")
        return dataclasses.replace(self, nodes=tuple(node if n.home == node.home else n for n in self.nodes))


def node_homes(alias: str, root: Path) -> list[Path]:
    return [(root / alias / f"node-{i}").resolve() for i in range(1, REPLICATED_NODES + 1)]


def start_replicated_cluster(
    alias: str,
    ports: Sequence[int],
    root: Path,
    *,
    heap_mb: int = NODE_HEAP_MB,
    **kw: Any,
) -> ReplicatedCluster:
    """Start the three nodes of cluster ``alias`` in parallel and return once every one is ready (as
    ``local_kafka.start_cluster`` says: its own "Kafka Server started", and its metadata lists it
    unfenced). ``ports``: six free ports, node ``i``'s client port then its controller port.

    ``kw`` goes to each node's ``start_cluster`` (extra_properties, security, timeout, ...). All or
    nothing: if a node fails, every node is stopped and the first node's error raised. The nodes must
    start together: none is ready before a majority of the voters runs.
    """
    if len(ports) != 2 * REPLICATED_NODES or len(set(ports)) != len(ports):
        raise ValueError(f"{alias}: need {2 * REPLICATED_NODES} distinct ports, got {list(ports)}")
    homes = node_homes(alias, root)
    for home in homes:
        # Checked before any start, so that the all-or-nothing stop below never hits a broker that
        # ran before this call.
        pid = local_kafka.running_pid(home)
        if pid is not None:
            raise LocalKafkaError(f"{alias}: a broker already runs in {home} (pid {pid})")
    voters = {i: ports[2 * i - 1] for i in range(1, REPLICATED_NODES + 1)}
    cluster_id = random_cluster_id()
    cluster: ReplicatedCluster | None = None
    try:
        with ThreadPoolExecutor(max_workers=REPLICATED_NODES) as pool:
            futures = [
                pool.submit(
                    local_kafka.start_cluster,
                    f"{alias}-node-{i}",
                    ports[2 * i - 2],
                    ports[2 * i - 1],
                    home,
                    heap_mb=heap_mb,
                    node_id=i,
                    voters=voters,
                    cluster_id=cluster_id,
                    **kw,
                )
                for i, home in enumerate(homes, 1)
            ]
        errors = [e for f in futures if (e := f.exception()) is not None]
        if errors:
            raise errors[0]
        cluster = ReplicatedCluster(alias, tuple(f.result() for f in futures))
        return cluster
    finally:
        if cluster is None:
            # Also on Ctrl-C: by the homes' PID files, which name the JVMs this call started.
            local_kafka.stop_clusters(homes)


def stop_replicated_cluster(cluster: ReplicatedCluster, timeout: float = 30.0) -> None:
    """Stop every node by PID, in parallel: by its home's PID file, so that a node restarted since
    ``cluster`` was returned is stopped too. Raises after trying all of them."""
    local_kafka.stop_clusters([n.home for n in cluster.nodes], timeout)


def kill_node(node: LocalCluster) -> bool:
    """SIGKILL one node, as a crash would (no controlled shutdown: its leaderships move only once
    the controller fences it, after broker.session.timeout.ms), by PID after the identity check, and
    reap it. False if it was not running."""
    return local_kafka.stop_cluster(node, kill=True)


def restart_node(
    node: LocalCluster,
    *,
    heap_mb: int = NODE_HEAP_MB,
    client_config: Mapping[str, Any] | None = None,
    timeout: float = 60.0,
    full_jit: bool = False,
) -> LocalCluster:
    """Start a stopped or killed node again in its home, on its ports and data, and return it once
    ready: its own "Kafka Server started" and its metadata lists it unfenced. Its replicas may still
    be catching up then (out of the ISR). ``client_config``: the login for that metadata request (a
    secured cluster's super user, as ``start_cluster`` derives it from ``security``)."""
    return local_kafka.start_prepared(
        node, heap_mb=heap_mb, client_config=client_config, timeout=timeout, full_jit=full_jit
    )
