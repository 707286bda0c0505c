"""Real single-node KRaft clusters from the Maven jars: independence, restart, CLI, PID safety."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition

from mirrorflow_dev import kafka_home, local_kafka, processes
from mirrorflow_dev.local_kafka import LocalCluster

pytestmark = pytest.mark.kafka

Record = tuple[bytes | None, bytes | None, list[tuple[str, bytes]], int]


def _records(tag: str, base_ts: int) -> list[Record]:
    return [
        (
            f"k{i}".encode(),
            f"{tag}-v{i}".encode(),
            [("origin", tag.encode()), ("seq", str(i).encode())],
            base_ts + i,
        )
        for i in range(3)
    ] + [(None, b"no-key", [], base_ts + 10)]


def _create_topic(bootstrap: str, topic: str) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics({topic: {"num_partitions": 1, "replication_factor": 1}}, wait_for_metadata=True)
    finally:
        admin.close()


def _produce(bootstrap: str, topic: str, records: list[Record]) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    try:
        for key, value, headers, ts in records:
            producer.send(topic, key=key, value=value, headers=headers, partition=0, timestamp_ms=ts)
        producer.flush(timeout=30)
    finally:
        producer.close()


def _consume(bootstrap: str, topic: str, count: int, timeout: float = 30.0) -> list[Record]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None)
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        got: list[Record] = []
        deadline = time.monotonic() + timeout
        while len(got) < count and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=500).values():
                for r in batch:
                    assert r.timestamp_type == 0, "CreateTime: the producer's timestamp is kept"
                    got.append((r.key, r.value, list(r.headers), r.timestamp))
        return got
    finally:
        consumer.close()


def _cluster_id_and_topics(bootstrap: str) -> tuple[str, set[str]]:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        return admin.describe_cluster()["cluster_id"], set(admin.list_topics())
    finally:
        admin.close()


def test_clusters_are_independent_and_round_trip_exactly(
    kafka_clusters: dict[str, LocalCluster], unique_name: str
) -> None:
    assert sorted(kafka_clusters) == ["backup", "primary"]
    base_ts = int(time.time() * 1000) - 3_600_000  # explicit, an hour before the send time
    for alias, cluster in kafka_clusters.items():
        topic = f"{unique_name}-{alias}"
        records = _records(alias, base_ts)
        _create_topic(cluster.bootstrap, topic)
        _produce(cluster.bootstrap, topic, records)
        assert _consume(cluster.bootstrap, topic, len(records)) == records

    ids = {}
    for alias, cluster in kafka_clusters.items():
        cluster_id, topics = _cluster_id_and_topics(cluster.bootstrap)
        ids[alias] = cluster_id
        ours = {t for t in topics if t.startswith(unique_name)}
        assert ours == {f"{unique_name}-{alias}"}, f"{alias} sees another cluster's topic: {ours}"
    assert len(set(ids.values())) == len(ids), f"cluster ids must differ: {ids}"


def test_restart_on_same_home_keeps_data_and_pid_is_gone(tmp_path: Path) -> None:
    home = tmp_path / "solo"
    port, controller_port = processes.free_ports(2)
    records = _records("before-restart", int(time.time() * 1000) - 60_000)
    first = local_kafka.start_cluster("solo", port, controller_port, home, heap_mb=256)
    second: LocalCluster | None = None
    try:
        assert (home / "kafka.pid").read_text().strip() == str(first.pid)
        assert local_kafka.running_cluster(home) == first
        meta = (home / "data" / "meta.properties").read_text()
        cluster_id, _ = _cluster_id_and_topics(first.bootstrap)
        _create_topic(first.bootstrap, "kept")
        _produce(first.bootstrap, "kept", records)

        assert local_kafka.stop_cluster(first) is True
        assert not processes.process_alive(first.pid)
        assert not Path(f"/proc/{first.pid}").exists(), "our own child must be reaped, not a zombie"
        assert not (home / "kafka.pid").exists()
        assert local_kafka.stop_cluster(home) is False, "stopping twice is a no-op"

        second = local_kafka.start_cluster("solo", port, controller_port, home, heap_mb=256)
        assert second.pid != first.pid
        assert (home / "data" / "meta.properties").read_text() == meta, "storage must not be reformatted"
        assert _cluster_id_and_topics(second.bootstrap)[0] == cluster_id
        assert _consume(second.bootstrap, "kept", len(records)) == records
        with pytest.raises(kafka_home.LocalKafkaError, match="already runs"):
            local_kafka.start_cluster("solo", port, controller_port, home, heap_mb=256)
    finally:
        local_kafka.stop_clusters([c for c in (first, second) if c is not None])
    assert second is not None and not processes.process_alive(second.pid)


def test_stop_never_signals_a_foreign_process_with_a_reused_pid(tmp_path: Path) -> None:
    home = tmp_path / "stale"
    home.mkdir()
    foreign = subprocess.Popen(["sleep", "60"])
    try:
        (home / "kafka.pid").write_text(f"{foreign.pid}\n")
        assert local_kafka.running_pid(home) is None
        assert local_kafka.stop_cluster(home) is False
        assert foreign.poll() is None, "an unrelated process must survive"
        assert not (home / "kafka.pid").exists(), "the stale PID file is dropped"
    finally:
        foreign.terminate()
        foreign.wait(10)


def _free_port_pairs(n: int) -> list[int]:
    """Ports p with p+1 also free (the CLI derives controller = port + 1)."""
    chosen: list[int] = []
    while len(chosen) < n:
        p = processes.free_port()
        if p + 1 > 65535 or any(abs(p - q) < 2 for q in chosen):
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", p + 1))
            except OSError:
                continue
        chosen.append(p)
    return chosen


def test_cli_up_status_down(tmp_path: Path) -> None:
    root = tmp_path / "state"
    p1, p2 = _free_port_pairs(2)
    env = {**os.environ, "MIRROR_KAFKA_HOME": str(root), "MIRROR_KAFKA_CLUSTERS": f"east:{p1},west:{p2}"}

    def cli(command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "mirrorflow_dev.local_kafka", command],
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )

    pids: dict[str, int] = {}
    try:
        up = cli("up")
        assert up.returncode == 0, up.stderr
        for alias, port in (("east", p1), ("west", p2)):
            pid = int((root / alias / "kafka.pid").read_text())
            pids[alias] = pid
            assert f"{alias}\t127.0.0.1:{port}\tstarted (pid {pid})" in up.stdout
            assert processes.process_alive(pid)

        again = cli("up")
        assert again.returncode == 0, again.stderr
        for alias, port in (("east", p1), ("west", p2)):
            assert f"{alias}\t127.0.0.1:{port}\talready running (pid {pids[alias]})" in again.stdout

        status = cli("status")
        assert status.returncode == 0
        assert f"east\t127.0.0.1:{p1}\trunning (pid {pids['east']})" in status.stdout

        down = cli("down")
        assert down.returncode == 0, down.stderr
        for alias, pid in pids.items():
            assert f"{alias}\tstopped (pid {pid})" in down.stdout
            assert not processes.process_alive(pid)
            assert not (root / alias / "kafka.pid").exists()

        stopped = cli("status")
        assert stopped.returncode == 3
        assert f"west\t127.0.0.1:{p2}\tstopped" in stopped.stdout
        assert cli("down").stdout.count("not running") == 2
    finally:
        local_kafka.stop_clusters([root / alias for alias in ("east", "west")])
    assert not any(processes.process_alive(pid) for pid in pids.values())


def test_cli_rejects_bad_cluster_spec(tmp_path: Path) -> None:
    env = {**os.environ, "MIRROR_KAFKA_HOME": str(tmp_path), "MIRROR_KAFKA_CLUSTERS": "primary=19092"}
    res = subprocess.run(
        [sys.executable, "-m", "mirrorflow_dev.local_kafka", "status"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert res.returncode == 2
    assert "alias:port" in res.stderr
