"""The faults the dr-faults scenario (``bench/dr_faults.py``) injects into a DR flow under the
scheduler, each by PID, each returning what it hit: the transaction coordinator's node crashed and
restarted, a remote leader frozen, the offsets database's server frozen, the lock-holding window's
driver frozen, and the compacted topic cleaned between a micro-batch's Kafka commit and its offsets
table commit (``clean_between``).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field

import compacted
import psutil
from confluent_kafka.admin import AdminClient
from fault_soak import DOWN_S
from rpo import TOPIC
from sqlalchemy import create_engine, text

from mirrorflow.core.plan import transactional_id
from mirrorflow.core.progress import run_of
from mirrorflow.kafka.connection import Connection
from mirrorflow.kafka.transactions import coordinator
from mirrorflow.store.flow_lock import lock_holder
from mirrorflow.store.offsets_store import OffsetsStore
from mirrorflow_dev import local_kafka, replicated_kafka
from mirrorflow_dev.local_airflow import LocalAirflow
from mirrorflow_dev.local_postgres import LocalPostgres
from mirrorflow_dev.replicated_kafka import ReplicatedCluster

FLOW = "source->target"
LEADER_FROZEN_S = 70.0
DATABASE_FROZEN_S = 40.0
DRIVER_FROZEN_S = 90.0
# How long the compaction fault waits for a copy past the offsets table, and then for the cleaner.
COPIED_TIMEOUT_S = 90.0
CLEANED_TIMEOUT_S = 240.0
OVERWRITE_EVERY_S = 10.0
# How long a fault waits for a window to hold the flow (between two, nobody holds it for a moment).
HOLDER_TIMEOUT_S = 120.0


@dataclass
class Deployment:
    """What the faults hit: the target cluster (``box[0]`` follows restarted nodes), the offsets
    database's server, Airflow, the compacted topic's producer; ``stop`` ends a fault early."""

    box: list[ReplicatedCluster]
    postgres: LocalPostgres
    airflow: LocalAirflow
    keyed: compacted.KeyedProducer
    source: str
    stop: threading.Event = field(default_factory=threading.Event)

    @property
    def target(self) -> str:
        return self.box[0].bootstrap


@contextmanager
def frozen(pids: Sequence[int]) -> Iterator[None]:
    """``pids`` stopped (SIGSTOP) in order for the block, and continued (SIGCONT) whatever happens."""
    stopped: list[int] = []
    try:
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
            stopped.append(pid)
        yield
    finally:
        for pid in reversed(stopped):
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


def _node_pid(cluster: ReplicatedCluster, node_id: int) -> int:
    node = cluster.node(node_id)
    if local_kafka.running_pid(node.home) != node.pid:
        raise RuntimeError(f"node {node_id} of {cluster.alias} does not run as pid {node.pid}")
    return node.pid


def restart_coordinator(d: Deployment) -> str:
    connection = Connection({"bootstrap.servers": d.target}, "target", ())
    try:
        node_id = coordinator(connection, transactional_id(FLOW))
    finally:
        connection.close()
    node = d.box[0].node(node_id)
    local_kafka.stop_cluster(node, kill=True)
    time.sleep(DOWN_S)
    d.box[0] = d.box[0].with_node(replicated_kafka.restart_node(node, timeout=120))
    return f"node {node_id} crashed, down {DOWN_S:.0f} s"


def freeze_leader(d: Deployment) -> str:
    remote = f"source.{TOPIC}"
    topics = AdminClient({"bootstrap.servers": d.target}).list_topics(remote, timeout=10).topics
    node_id = topics[remote].partitions[0].leader
    with frozen([_node_pid(d.box[0], node_id)]):
        d.stop.wait(LEADER_FROZEN_S)
    return f"node {node_id} (leader of {remote}-0) frozen"


def freeze_database(d: Deployment) -> str:
    server = psutil.Process(d.postgres.pid)
    if server.name() != "postgres" or str(d.postgres.data_dir) not in server.cmdline():
        raise RuntimeError(f"pid {d.postgres.pid} is not the PostgreSQL server of {d.postgres.data_dir}")
    # The server first, so that it starts no process the freeze would miss.
    pids = [server.pid, *(p.pid for p in server.children(recursive=True))]
    with frozen(pids):
        d.stop.wait(DATABASE_FROZEN_S)
    return f"{len(pids)} processes frozen"


def _holder(store: OffsetsStore, stop: threading.Event) -> str | None:
    """The run holding the flow's lock, once one does."""
    deadline = time.monotonic() + HOLDER_TIMEOUT_S
    while time.monotonic() < deadline and not stop.is_set():
        holder = lock_holder(store, FLOW)
        if holder is not None:
            return run_of(holder)
        stop.wait(0.5)
    return None


def _driver_of(root_pid: int, run_id: str) -> int | None:
    """The Python driver of ``run_id``'s window under ``root_pid``: ``mirror_dr.py ... --run-id <run>``
    (its spark-submit's JVM names the same arguments)."""
    for proc in psutil.Process(root_pid).children(recursive=True):
        try:
            args = proc.cmdline()
            if proc.name().startswith("python") and any(a.endswith("mirror_dr.py") for a in args):
                at = args.index("--run-id") + 1
                if args[at : at + 1] == [run_id]:
                    return int(proc.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError):
            continue
    return None


def freeze_driver(d: Deployment) -> str:
    assert d.airflow.pid is not None
    with OffsetsStore(d.postgres.url) as store:
        run_id = _holder(store, d.stop)
    pid = None if run_id is None else _driver_of(d.airflow.pid, run_id)
    if pid is None:
        return f"no window driver found holding the flow (holder {run_id}): nothing frozen"
    with frozen([pid]):
        d.stop.wait(DRIVER_FROZEN_S)
    return f"window {run_id}'s driver (pid {pid}) frozen"


def _seqs(held: dict[int, list[compacted.Held]]) -> set[int]:
    return {r.seq for records in held.values() for r in records}


def clean_between(d: Deployment) -> str:
    """The compaction fault (the module's doc): how many records the target held past the offsets
    table, and how many of them the source's cleaner had removed before a micro-batch read them back."""
    engine = create_engine(d.postgres.url)
    try:
        with engine.connect() as conn, conn.begin():
            rows = conn.execute(
                text(
                    "SELECT partition, next_target_offset FROM mirror_progress "
                    "WHERE flow = :flow AND topic = :topic FOR UPDATE"
                ),
                {"flow": FLOW, "topic": compacted.TOPIC},
            ).all()
            committed = {int(r.partition): int(r.next_target_offset) for r in rows}
            if len(committed) < compacted.PARTITIONS:
                return f"the offsets table holds no progress of every {compacted.TOPIC} partition yet"
            return _cleaned_past(d, committed)
    finally:
        engine.dispose()


def _cleaned_past(d: Deployment, committed: dict[int, int]) -> str:
    """While the offsets table's rows are held at ``committed`` (next target offsets): every key
    overwritten (some deleted) until those records are copied past the offsets table; overwritten
    again until the source's cleaner removed some of the records copied; once more, until a
    micro-batch copied that last overwrite: it planned after the cleaning, so it read back what the
    target holds past the committed position against the source as compacted."""
    remote = f"source.{compacted.TOPIC}"

    def copied() -> set[int]:
        return _seqs(compacted.read(d.target, remote, committed))

    def waited(done: Callable[[], bool], timeout: float, every_s: float, step: Callable[[], object]) -> bool:
        deadline = time.monotonic() + timeout
        while not done():
            if time.monotonic() > deadline or d.stop.wait(every_s):
                return False
            step()
        return True

    def copied_up_to(seq: int) -> Callable[[], bool]:
        return lambda: max(copied(), default=-1) >= seq

    # A micro-batch fails to commit the offsets table (its lock wait times out) after its Kafka
    # transaction committed; the next one copies the overwrites on, and so on.
    burst = d.keyed.overwrite(tombstones=compacted.KEYS // 10)
    if not waited(copied_up_to(burst), COPIED_TIMEOUT_S, 2, lambda: None):
        return f"{len(copied())} records copied past the offsets table in {COPIED_TIMEOUT_S:.0f} s"
    gone: set[int] = set()

    def cleaned() -> bool:
        gone.update(copied() - _seqs(compacted.read(d.source, compacted.TOPIC)))
        return bool(gone)

    # The cleaner removes a key's older records once a newer one is in a closed segment.
    if not waited(cleaned, CLEANED_TIMEOUT_S, OVERWRITE_EVERY_S, d.keyed.overwrite):
        return (
            f"{len(copied())} records copied past the offsets table, none cleaned"
            f" in {CLEANED_TIMEOUT_S:.0f} s"
        )
    if not waited(copied_up_to(d.keyed.overwrite()), COPIED_TIMEOUT_S, 2, lambda: None):
        return (
            f"{len(gone)} records copied past the offsets table cleaned from the source; no micro-batch "
            f"copied on in {COPIED_TIMEOUT_S:.0f} s"
        )
    return (
        f"{len(copied())} records copied past the offsets table, {len(gone)} of them cleaned from the "
        "source before a micro-batch read them back"
    )


INJECT: dict[str, Callable[[Deployment], str]] = {
    "coordinator": restart_coordinator,
    "leader": freeze_leader,
    "database": freeze_database,
    "driver": freeze_driver,
    "compaction": clean_between,
}
