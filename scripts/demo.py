"""The demo: two local clusters, sample topics, one Airflow run of the flow, and what it mirrored.

Run by `make demo`. Every run appends new records to the sample topics and mirrors only those, so
running it again shows the incremental copy. The clusters stay up afterwards (`make kafka-down`).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from mirrorflow.app.run_folder import metrics_file
from mirrorflow.config.model import FlowConfig, MirrorConfig
from mirrorflow.kafka.admin import ClusterAdmin, NewTopic
from mirrorflow.kafka.heartbeats import freshness_seconds
from mirrorflow.store.offsets_store import OffsetsStore
from mirrorflow_dev import local_kafka, sample_data
from mirrorflow_dev.devenv import airflow_env
from mirrorflow_dev.paths import demo_config

FLOW = "primary->backup"
# topic -> (partitions, configs). Names ending in -internal are never mirrored (MM2's rule).
TOPICS = {"orders": (3, {"max.message.bytes": "2097152"}), "payments": (2, {}), "audit-internal": (1, {})}
RECORDS_PER_PARTITION = 1000


def main() -> int:
    config = demo_config()
    flow = config.flow(FLOW)
    print(f"config: {config.path}")
    if local_kafka.main(["up"]) != 0:
        return 1
    seed_topics(flow)
    if not run_dag(config, flow):
        return 1
    show_mirror(flow)
    show_last_run(config, flow)
    print("\nThe clusters keep running: `make demo` copies only what is new, `make kafka-down` stops them.")
    return 0


def seed_topics(flow: FlowConfig) -> None:
    """Create the sample topics on the source once; append the next sample records to each partition."""
    with ClusterAdmin(flow.source) as admin:
        existing = admin.topics()
        admin.create_topics({t: NewTopic(n, 1, c) for t, (n, c) in TOPICS.items() if t not in existing})
        ends = admin.latest_offsets([(t, p) for t, (n, _) in TOPICS.items() for p in range(n)])
    producer = sample_data.producer(flow.source.bootstrap_servers)
    for (topic, partition), end in sorted(ends.items()):
        batch = range(end, end + RECORDS_PER_PARTITION)
        sample_data.produce(
            producer, topic, partition, (sample_data.sample_record(topic, partition, i) for i in batch)
        )
    print(f"appended {RECORDS_PER_PARTITION} records to each partition of {', '.join(TOPICS)} on primary")


def run_dag(config: MirrorConfig, flow: FlowConfig) -> bool:
    assert config.path is not None
    env = airflow_env(config.state_dir / "airflow", config.path, config.state_dir)
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    airflow = str(Path(sys.executable).parent / "airflow")
    log = config.state_dir / "demo-airflow.log"
    print(f"running DAG {flow.dag_id} with `airflow dags test` (log: {log}) ...")
    with log.open("w") as out:
        for args in (["db", "migrate"], ["dags", "test", flow.dag_id]):
            done = subprocess.run(
                [airflow, *args], env=env, stdout=out, stderr=out, cwd=config.state_dir, check=False
            )
            if done.returncode != 0:
                tail = "\n".join(log.read_text().splitlines()[-40:])
                print(f"`airflow {' '.join(args)}` failed; the end of {log}:\n{tail}")
                return False
    return True


def show_mirror(flow: FlowConfig) -> None:
    """Per partition: records on the source, on the target, and whether they are identical."""
    src, dst = flow.source.bootstrap_servers, flow.target.bootstrap_servers
    rows = [("source topic", "partition", "records", "remote topic", "records", "identical")]
    for topic, (partitions, _) in TOPICS.items():
        remote = flow.replication_policy.format_remote_topic(flow.source.alias, topic)
        mirrored = flow.should_replicate_topic(topic)
        for p in range(partitions):
            source = sample_data.read_partition(src, topic, p)
            target = sample_data.read_partition(dst, remote, p) if mirrored else []
            rows.append(
                (topic, str(p), str(len(source)), remote if mirrored else "(not mirrored)", str(len(target)),
                 "yes" if source == target else "-" if not mirrored else "NO")
            )  # fmt: skip
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    print(f"\nflow {flow.name}: {flow.source.alias} ({src}) -> {flow.target.alias} ({dst})")
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())


def show_last_run(config: MirrorConfig, flow: FlowConfig) -> None:
    with OffsetsStore(config.offsets_db_url) as store:
        batches = store.batches(flow.name)
    if batches:
        last = max(batches, key=lambda b: b.committed_at)
        copied = sum(b.records for b in batches if b.run_id == last.run_id)
        print(f"\nrun {last.run_id} copied {copied} records (offsets table: {config.offsets_db_url})")
    age = freshness_seconds(flow)
    print(f"freshness: newest mirrored heartbeat {'none yet' if age is None else f'{age:.1f} s old'}")
    print(f"metrics for Prometheus: {metrics_file(config.state_dir, flow.name, 'source')}")


if __name__ == "__main__":
    sys.exit(main())
