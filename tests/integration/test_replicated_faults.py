"""Faults at production's shape: flows between three-node clusters (replication factor 3,
min.insync.replicas 2) whose brokers fail or move partitions in the middle of a copy: a partition
leader SIGKILLed on either side (and in the middle of a DR window), a rolling restart of the target,
the target short of in-sync replicas for a while, a follower frozen, leader elections looped, a
reassignment during a DR window. Each case checks the remote partitions record for record against
what the source holds (every record once, in source order) and the offsets table's progress and
batch log exactly.

The clusters forget a producer whose newest record timestamp is older than a day within a second
(``conftest.PRODUCTION_SHAPE``), as production brokers do within 10 minutes; the sample records are
from 2001. The copy's fence holds whatever the records' timestamps: a stale copy resumed after the
brokers forgot its writer's idempotent state is refused for its old epoch (the transaction
coordinator keeps it), and a batch whose answer a leader change lost is resent in the open
transaction, whose state the new leader holds.

Runs with ``make test-replicated`` (six broker JVMs), not in ``make test``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from arrivals import Producing
from kafka import KafkaAdminClient, TopicPartition
from mirror_helpers import (
    STALE_COPY,
    assert_same_records,
    assert_translates_to_copies,
    copy_without_spark,
    create_topic,
    write_mm2,
    written_end,
)
from pyspark.sql import SparkSession
from windows import WindowThread

from mirrorflow.app import batch_run
from mirrorflow.config.model import MirrorConfig
from mirrorflow.core.plan import transactional_id
from mirrorflow.core.window import WindowSummary
from mirrorflow.kafka.connection import kept_open
from mirrorflow.kafka.transactions import coordinator
from mirrorflow.store.offsets_store import OffsetsStore
from mirrorflow_dev import local_kafka, sample_data
from mirrorflow_dev.paths import REPO_ROOT
from mirrorflow_dev.replicated_kafka import ReplicatedCluster, kill_node, restart_node

pytestmark = [pytest.mark.kafka, pytest.mark.replicated]

FLOW = "primary->backup"
RECORDS = 3000
FAULT_AT = 300  # the remote partition's end when the fault starts
Clusters = dict[str, ReplicatedCluster]


@pytest.fixture
def write_replicated_config(tmp_path: Path, replicated_clusters: Clusters) -> Callable[[str], MirrorConfig]:
    """An mm2.properties for the three-node clusters, remote topics replicated three times."""
    return lambda extra: write_mm2(tmp_path, replicated_clusters, 3, extra)


def _wait_for(what: str, done: Callable[[], bool], timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if done():
                return
        except Exception:  # a request to a node just stopped, a metadata refresh
            pass
        assert time.monotonic() < deadline, f"no {what} after {timeout:.0f} s"
        time.sleep(0.25)


def _partitions(bootstrap: str) -> list[dict[str, Any]]:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=5000)
    try:
        return [p for t in admin.describe_topics() for p in t["partitions"]]
    finally:
        admin.close()


def _leader(cluster: ReplicatedCluster, topic: str) -> int:
    """The node leading partition 0 of ``topic``."""
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=5000)
    try:
        (described,) = admin.describe_topics([topic])
        return next(int(p["leader_id"]) for p in described["partitions"] if p["partition_index"] == 0)
    finally:
        admin.close()


@pytest.fixture
def restored(replicated_clusters: Clusters) -> Iterator[None]:
    """After the test, every node of both clusters runs again (a frozen one resumed, a stopped one
    restarted) and every partition has its three in-sync replicas, for the next test."""
    yield
    for alias, cluster in list(replicated_clusters.items()):
        for node in cluster.nodes:
            if local_kafka.running_pid(node.home) is None:
                cluster = cluster.with_node(restart_node(node))
            else:
                os.kill(node.pid, signal.SIGCONT)
        replicated_clusters[alias] = cluster
        _await_full_isr(cluster)


def _await_full_isr(cluster: ReplicatedCluster) -> None:
    """Until every partition of ``cluster`` has its three replicas in sync."""
    _wait_for(
        f"full ISR on {cluster.alias}",
        lambda: all(len(p["isr_nodes"]) == 3 for p in _partitions(cluster.bootstrap)),
        120,
    )


def _one_batch_per_record(clusters: Clusters, topic: str) -> None:
    """``RECORDS`` records in partition 0 of a new RF 3 topic, each its own batch: a copy of them
    takes thousands of produce requests, time for a fault in the middle."""
    create_topic(clusters["primary"].bootstrap, topic, 1, replication_factor=3)
    producer = sample_data.producer(
        clusters["primary"].bootstrap, {"batch.num.messages": "1", "linger.ms": "0"}
    )
    sample_data.produce(producer, topic, 0, (sample_data.sample_record(topic, 0, i) for i in range(RECORDS)))


def _run(config: MirrorConfig, run_id: str) -> str:
    """A whole run of the flow in this process, its copy as a copy task makes it (without Spark)."""
    flow = config.flow(FLOW)
    plan = batch_run.plan_run(config, FLOW, run_id)
    try:
        copied = batch_run.execute_copy(
            config,
            flow,
            plan,
            lambda: copy_without_spark(flow, plan),
        )
        batch_run.commit_run(config, FLOW, run_id)
        return copied
    finally:
        batch_run.release_run(config, FLOW, run_id)


def _copy_through(config: MirrorConfig, fault: Callable[[], None], remote: str) -> None:
    """Run run-1 in a thread; once the remote partition holds ``FAULT_AT`` records, run ``fault``
    (the copy must still be going then); the run must succeed."""
    outcome: list[BaseException | str] = []

    def run() -> None:
        try:
            outcome.append(_run(config, "run-1"))
        except BaseException as error:
            outcome.append(error)

    running = threading.Thread(target=run)
    running.start()
    try:
        _wait_for(
            f"{FAULT_AT} records on the target", lambda: written_end(config, FLOW, remote) >= FAULT_AT, 120
        )
        assert running.is_alive(), "the copy finished before the fault"
        fault()
    finally:
        running.join(300)
    assert outcome and isinstance(outcome[0], str), outcome


def _mirror_through(
    clusters: Clusters, write: Callable[[str], MirrorConfig], topic: str, fault: Callable[[], None]
) -> None:
    """``RECORDS`` one-record batches of a new topic copied by run-1 through ``fault``, then checked
    exactly (``_assert_exact``)."""
    _one_batch_per_record(clusters, topic)
    config = _config(write, topic)
    _copy_through(config, fault, f"primary.{topic}")
    _assert_exact(clusters, config, topic)


def _assert_exact(clusters: Clusters, config: MirrorConfig, topic: str) -> None:
    """The remote partition is the source's record for record; the batch log maps each record to its
    copy, and progress ends past the last."""
    remote = f"primary.{topic}"
    assert (
        assert_same_records(clusters["primary"].bootstrap, topic, clusters["backup"].bootstrap, remote, 1)
        == RECORDS
    )
    assert_translates_to_copies(config, FLOW, topic, remote, RECORDS)


def _config(write: Callable[[str], MirrorConfig], topic: str) -> MirrorConfig:
    return write(f"{FLOW}.enabled = true\n{FLOW}.topics = {topic}\n")


def test_the_target_leader_killed_mid_copy_loses_and_duplicates_nothing(
    replicated_clusters: Clusters,
    write_replicated_config: Callable[[str], MirrorConfig],
    restored: None,
    unique_name: str,
) -> None:
    backup, remote = replicated_clusters["backup"], f"primary.{unique_name}"
    killed: list[int] = []

    def kill_leader() -> None:
        killed.append(_leader(backup, remote))
        assert kill_node(backup.node(killed[0]))

    _mirror_through(replicated_clusters, write_replicated_config, unique_name, kill_leader)

    assert _leader(backup, remote) != killed[0]


def test_the_source_leader_killed_mid_copy_loses_and_duplicates_nothing(
    replicated_clusters: Clusters,
    write_replicated_config: Callable[[str], MirrorConfig],
    restored: None,
    unique_name: str,
) -> None:
    primary = replicated_clusters["primary"]

    def kill_leader() -> None:
        assert kill_node(primary.node(_leader(primary, unique_name)))

    _mirror_through(replicated_clusters, write_replicated_config, unique_name, kill_leader)


def test_a_rolling_restart_of_the_target_mid_copy_loses_and_duplicates_nothing(
    replicated_clusters: Clusters,
    write_replicated_config: Callable[[str], MirrorConfig],
    restored: None,
    unique_name: str,
) -> None:
    def rolling_restart() -> None:
        # As an operator rolls a cluster: each node stopped cleanly (its leaderships handed over),
        # started again, and every partition back in sync before the next.
        for node_id in (1, 2, 3):
            backup = replicated_clusters["backup"]
            assert local_kafka.stop_cluster(backup.node(node_id))
            replicated_clusters["backup"] = backup.with_node(restart_node(backup.node(node_id)))
            _await_full_isr(replicated_clusters["backup"])

    _mirror_through(replicated_clusters, write_replicated_config, unique_name, rolling_restart)


def test_the_target_short_of_in_sync_replicas_for_a_while_holds_the_copy_back_and_loses_nothing(
    replicated_clusters: Clusters,
    write_replicated_config: Callable[[str], MirrorConfig],
    restored: None,
    unique_name: str,
) -> None:
    backup, remote = replicated_clusters["backup"], f"primary.{unique_name}"

    def two_nodes_down() -> None:
        # Two of three replicas gone: min.insync.replicas 2 is unmet and acks=all writes are refused
        # (NOT_ENOUGH_REPLICAS) until one node is back, 15 s later.
        leader = _leader(backup, remote)
        followers = [n for n in (1, 2, 3) if n != leader]
        for node_id in followers:
            assert kill_node(backup.node(node_id))
        time.sleep(15)
        replicated_clusters["backup"] = backup.with_node(restart_node(backup.node(followers[0])))

    _mirror_through(replicated_clusters, write_replicated_config, unique_name, two_nodes_down)


def test_a_follower_frozen_for_45_s_mid_copy_loses_and_duplicates_nothing(
    replicated_clusters: Clusters,
    write_replicated_config: Callable[[str], MirrorConfig],
    restored: None,
    unique_name: str,
) -> None:
    """acks=all waits for the frozen follower, whose batch sits in the leader's log past its high
    watermark, until the controller fences the frozen node (it stopped heartbeating:
    broker.session.timeout.ms, 9 s) and drops it from the ISR; the answer then comes, within the
    request's 30 s."""
    backup, remote = replicated_clusters["backup"], f"primary.{unique_name}"

    def freeze_a_follower() -> None:
        leader = _leader(backup, remote)
        follower = backup.node(next(n for n in (1, 2, 3) if n != leader))
        os.kill(follower.pid, signal.SIGSTOP)
        time.sleep(45)
        os.kill(follower.pid, signal.SIGCONT)

    _mirror_through(replicated_clusters, write_replicated_config, unique_name, freeze_a_follower)


def test_a_copy_frozen_past_the_brokers_expiry_check_and_resumed_appends_nothing(
    replicated_clusters: Clusters,
    write_replicated_config: Callable[[str], MirrorConfig],
    restored: None,
    unique_name: str,
) -> None:
    """A copy SIGSTOPped mid-write, its lock released, a newer run of the flow committed, the
    brokers' expiry check passed, then the copy resumed (a frozen worker, a lost executor's task
    still running): the remote partition stays exactly the source's, and the next run succeeds."""
    topic, remote = unique_name, f"primary.{unique_name}"
    _one_batch_per_record(replicated_clusters, topic)
    config = _config(write_replicated_config, topic)
    assert config.path is not None
    batch_run.plan_run(config, FLOW, "run-1")
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "include")}
    stale = subprocess.Popen(
        [sys.executable, "-c", STALE_COPY, str(config.path), FLOW, "run-1"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        _wait_for("200 records on the target", lambda: written_end(config, FLOW, remote) >= 200, 120)
        os.killpg(stale.pid, signal.SIGSTOP)
        assert written_end(config, FLOW, remote) < RECORDS, "the stale copy finished before it was frozen"
        batch_run.release_run(config, FLOW, "run-1")
        _run(config, "run-2")
        after_newer = written_end(config, FLOW, remote)
        time.sleep(5)  # past the brokers' expiry check (every second)
    finally:
        os.killpg(stale.pid, signal.SIGCONT)
    _, err = stale.communicate(timeout=120)

    assert "a newer attempt of the flow fenced its writer" in err, err[-3000:]
    assert written_end(config, FLOW, remote) == after_newer
    _assert_exact(replicated_clusters, config, topic)
    assert _run(config, "run-3") == f"copied 0 records for {FLOW}"


def _window_through(
    clusters: Clusters,
    config: MirrorConfig,
    topic: str,
    spark: SparkSession,
    fault: Callable[[], None],
    producing_s: float = 30,
) -> None:
    """A DR window (``_dr_config``) while records arrive on three partitions for its first
    ``producing_s``, and at least as long as ``fault`` takes; 10 s in, ``fault``. The window must end
    without an error, every record mirrored once and in order, its micro-batches' batch log one row
    per partition."""
    primary, backup = clusters["primary"], clusters["backup"]
    with (
        WindowThread(spark, config, FLOW, timeout=300) as window,
        Producing(primary.bootstrap, topic, 3) as producing,
    ):
        window.start()
        started = time.monotonic()
        time.sleep(10)
        fault()
        time.sleep(max(0.0, started + producing_s - time.monotonic()))

    (summary,) = window.summaries
    assert isinstance(summary, WindowSummary) and summary.error is None, summary
    produced, remote = producing.count, f"primary.{topic}"
    assert assert_same_records(primary.bootstrap, topic, backup.bootstrap, remote, 3) == 3 * produced
    for p in range(3):
        assert_translates_to_copies(config, FLOW, topic, remote, produced, p)
    with OffsetsStore(config.offsets_db_url) as store:
        assert [(b.partition, b.source_start, b.source_end, b.target_start) for b in store.batches(FLOW)] == [
            (p, 0, produced, 0) for p in range(3)
        ]


def _dr_config(
    write: Callable[[str], MirrorConfig], clusters: Clusters, topic: str, window_s: int = 40
) -> MirrorConfig:
    create_topic(clusters["primary"].bootstrap, topic, 3, replication_factor=3)
    return write(
        f"{FLOW}.enabled = true\n{FLOW}.topics = {topic}\n{FLOW}.mirrorflow.mode = dr\n"
        f"{FLOW}.mirrorflow.dr.window.seconds = {window_s}\n{FLOW}.mirrorflow.dr.idle.wait.ms = 100\n"
        f"{FLOW}.mirrorflow.dr.handover.wait.seconds = 0\n"
    )


def _frozen(node: local_kafka.LocalCluster, seconds: float) -> None:
    """``node``'s broker SIGSTOPped for ``seconds``: its connections hang, nothing is refused, and the
    controller moves its leaderships once it stops heartbeating."""
    os.kill(node.pid, signal.SIGSTOP)
    try:
        time.sleep(seconds)
    finally:
        os.kill(node.pid, signal.SIGCONT)


def test_the_target_leader_frozen_70_s_mid_dr_window_is_waited_out(
    replicated_clusters: Clusters,
    write_replicated_config: Callable[[str], MirrorConfig],
    restored: None,
    spark: SparkSession,
    unique_name: str,
) -> None:
    """Longer than a micro-batch's transaction may stay open (60 s): its coordinator aborts it, and
    the window's writer finds itself fenced. That is its coordinator's abort, not a newer writer: the
    window waits it out, fences anew and mirrors on, losing and duplicating nothing."""
    backup, remote = replicated_clusters["backup"], f"primary.{unique_name}"
    config = _dr_config(write_replicated_config, replicated_clusters, unique_name, window_s=120)

    def freeze_leader() -> None:
        _frozen(backup.node(_leader(backup, remote)), 70)

    _window_through(replicated_clusters, config, unique_name, spark, freeze_leader, producing_s=100)


def test_the_transaction_coordinator_frozen_mid_dr_window_is_waited_out(
    replicated_clusters: Clusters,
    write_replicated_config: Callable[[str], MirrorConfig],
    restored: None,
    spark: SparkSession,
    unique_name: str,
) -> None:
    """The broker coordinating the flow's transactions frozen for 45 s while the window begins and
    commits micro-batches: requests to it go unanswered (an EndTxn among them, when it lands there)
    until the coordinator moves; the window waits it out and mirrors on."""
    backup = replicated_clusters["backup"]
    config = _dr_config(write_replicated_config, replicated_clusters, unique_name, window_s=90)

    def freeze_coordinator() -> None:
        _frozen(backup.node(_coordinator(backup, transactional_id(FLOW))), 45)

    _window_through(replicated_clusters, config, unique_name, spark, freeze_coordinator, producing_s=70)


def _coordinator(cluster: ReplicatedCluster, txn_id: str) -> int:
    """The node coordinating ``txn_id``'s transactions."""
    with kept_open({"bootstrap.servers": cluster.bootstrap}, "target", ()) as connection:
        return coordinator(connection, txn_id)


def test_the_target_leader_killed_mid_dr_window_loses_and_duplicates_nothing(
    replicated_clusters: Clusters,
    write_replicated_config: Callable[[str], MirrorConfig],
    restored: None,
    spark: SparkSession,
    unique_name: str,
) -> None:
    backup, remote = replicated_clusters["backup"], f"primary.{unique_name}"
    config = _dr_config(write_replicated_config, replicated_clusters, unique_name)
    killed: list[int] = []

    def kill_leader() -> None:
        killed.append(_leader(backup, remote))
        assert kill_node(backup.node(killed[0]))

    _window_through(replicated_clusters, config, unique_name, spark, kill_leader)

    assert _leader(backup, remote) != killed[0]


def _reassign(cluster: ReplicatedCluster, topic: str, replicas: list[int]) -> None:
    """Partition 0 of ``topic`` moved onto ``replicas`` (the first one preferred as leader), waiting
    until the reassignment is complete and the preferred replica leads."""
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=10000)
    tp = TopicPartition(topic, 0)
    try:
        assert admin.alter_partition_reassignments({tp: replicas}) == {tp: None}
        _wait_for("the reassignment's end", lambda: not admin.list_partition_reassignments([tp]))
        admin.elect_leaders(0, {topic: [0]})
        _wait_for(f"node {replicas[0]} leading", lambda: _leader(cluster, topic) == replicas[0])
    finally:
        admin.close()


def test_a_reassignment_on_the_target_mid_dr_window_loses_and_duplicates_nothing(
    replicated_clusters: Clusters,
    write_replicated_config: Callable[[str], MirrorConfig],
    restored: None,
    spark: SparkSession,
    unique_name: str,
) -> None:
    """The remote partition's replicas move off its leader (leadership moves with them), then back
    onto it (it copies the partition again and leads again)."""
    backup, remote = replicated_clusters["backup"], f"primary.{unique_name}"
    config = _dr_config(write_replicated_config, replicated_clusters, unique_name)

    def move_off_and_back() -> None:
        leader = _leader(backup, remote)
        others = [n for n in (1, 2, 3) if n != leader]
        _reassign(backup, remote, others)
        _reassign(backup, remote, [leader, *others])

    _window_through(replicated_clusters, config, unique_name, spark, move_off_and_back)


def test_leader_elections_looped_on_the_target_mid_copy_lose_and_duplicate_nothing(
    replicated_clusters: Clusters,
    write_replicated_config: Callable[[str], MirrorConfig],
    restored: None,
    unique_name: str,
) -> None:
    """The remote partition's leadership moved to the next replica six times in a row, each by
    reordering its replicas and electing the preferred one."""
    backup, remote = replicated_clusters["backup"], f"primary.{unique_name}"

    def elections() -> None:
        for _ in range(6):
            leader = _leader(backup, remote)
            _reassign(backup, remote, [leader % 3 + 1, (leader + 1) % 3 + 1, leader])

    _mirror_through(replicated_clusters, write_replicated_config, unique_name, elections)
