"""The verify step on real brokers: an exact mirror verifies with exact counts and digests; a remote
copy that differs (a record's headers reordered, a record missing) is reported per range with
both sides' counts and digests; the job runs through spark-submit as the DAG would run it.

Expected digests are computed from the records as produced (``sample_record``), never from what
Spark read, so a reader that dropped, reordered or altered records could not pass.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest
from mirror_helpers import create_topic, delete_records, run_flow, transactional_producer, wait_end
from pyspark.sql import SparkSession

from mirrorflow.app.dag_spec import flow_dag_spec, spark_jars
from mirrorflow.app.verify import load_verify_result, plan_verification, write_verify_plan
from mirrorflow.config.model import MirrorConfig
from mirrorflow.copy.spark_verify import verify_ranges
from mirrorflow.core.digest import SideDigest, digest_records
from mirrorflow.core.progress import Batch
from mirrorflow.core.verdicts import PartitionVerdict, VerifyResult
from mirrorflow.core.verify_plan import VerifyPlan, VerifyRange, verify_plan
from mirrorflow.store.offsets_store import OffsetsStore
from mirrorflow.store.run_documents import find_document
from mirrorflow_dev import sample_data
from mirrorflow_dev.local_kafka import LocalCluster
from mirrorflow_dev.paths import REPO_ROOT
from mirrorflow_dev.sample_data import Record, sample_record

pytestmark = [pytest.mark.spark, pytest.mark.kafka]

FLOW = "primary->backup"
Clusters = dict[str, LocalCluster]
WriteConfig = Callable[[str], MirrorConfig]


def _config(write_config: WriteConfig, topic: str) -> MirrorConfig:
    return write_config(f"{FLOW}.enabled = true\n{FLOW}.topics = {topic}\n")


def _samples(topic: str, partition: int, indexes: Iterable[int]) -> list[Record]:
    return [sample_record(topic, partition, i) for i in indexes]


def _digest(records: Iterable[Record]) -> SideDigest:
    return digest_records((r.key, r.value, r.headers, r.timestamp) for r in records)


def test_an_exact_mirror_verifies_range_by_range_with_exact_counts_and_digests(
    kafka_clusters: Clusters, write_config: WriteConfig, spark: SparkSession, unique_name: str
) -> None:
    primary = kafka_clusters["primary"]
    topic, remote = unique_name, f"primary.{unique_name}"
    config = _config(write_config, topic)
    flow = config.flow(FLOW)
    create_topic(primary.bootstrap, topic, 3)
    sample_data.produce_samples(primary.bootstrap, topic, 3, 0, 25)
    run_flow(config, FLOW, "run-1", spark)
    # Partitions 0 and 1: samples 25-39. Partition 2, offset by offset: 25-29 samples 25-29 committed
    # in a transaction, 30 its marker, 31-32 aborted records, 33 their marker, 34-43 samples 30-39.
    plain = sample_data.producer(primary.bootstrap)
    for partition in (0, 1):
        sample_data.produce(plain, topic, partition, _samples(topic, partition, range(25, 40)))
    tx = transactional_producer(primary.bootstrap, unique_name)
    tx.begin_transaction()
    sample_data.produce(tx, topic, 2, _samples(topic, 2, range(25, 30)))
    tx.commit_transaction(30)
    wait_end(primary.bootstrap, topic, 2, 31)
    tx.begin_transaction()
    sample_data.produce(tx, topic, 2, _samples(topic, 2, range(1000, 1002)))
    tx.abort_transaction(30)
    wait_end(primary.bootstrap, topic, 2, 34)
    sample_data.produce(plain, topic, 2, _samples(topic, 2, range(30, 40)))
    run_flow(config, FLOW, "run-2", spark)
    # Retention moved two log starts: into the first batch of partition 0, and onto an aborted
    # record of partition 2, whose first record left is sample 30 at offset 34, target offset 31.
    # Run 1's commit marker is at target offset 25 of every partition.
    delete_records(primary.bootstrap, {(topic, 0): 10, (topic, 2): 32})

    plan = plan_verification(config, FLOW, "verify-1")

    assert plan == VerifyPlan(
        FLOW,
        "verify-1",
        (
            VerifyRange(topic, 0, remote, 10, 40, 10, 41, target_gaps=((25, 26),)),
            VerifyRange(topic, 1, remote, 0, 40, 0, 41, target_gaps=((25, 26),)),
            VerifyRange(topic, 2, remote, 32, 44, 31, 41),
        ),
    )
    result = verify_ranges(spark, flow, plan)

    expected = [_digest(_samples(topic, 0, range(10, 40))), _digest(_samples(topic, 1, range(40)))]
    expected.append(_digest(_samples(topic, 2, range(30, 40))))
    assert [d.records for d in expected] == [30, 40, 10]
    assert result == VerifyResult(
        FLOW, "verify-1", tuple(PartitionVerdict(r, d, d) for r, d in zip(plan.ranges, expected, strict=True))
    )
    assert result.mismatches == ()


def _forged_remote(backup: LocalCluster, name: str, partitions: dict[int, list[Record]]) -> None:
    """A remote topic written by hand: what a faulty mirror could have left."""
    create_topic(backup.bootstrap, name, len(partitions))
    producer = sample_data.producer(backup.bootstrap)
    for partition, records in partitions.items():
        sample_data.produce(producer, name, partition, records)


def _faulty_mirror(kafka_clusters: Clusters, topic: str) -> tuple[VerifyPlan, list[list[Record]]]:
    """A source topic of 3 partitions x 12 samples and a hand-written remote copy that the batch log
    claims to be exact: partition 0 exact, partition 1 with sample 5's three headers in reverse
    order, partition 2 without sample 7 (lost by the mirror). Returns the verify plan and the remote
    records."""
    primary, backup = kafka_clusters["primary"], kafka_clusters["backup"]
    remote = f"forged.{topic}"
    create_topic(primary.bootstrap, topic, 3)
    sample_data.produce_samples(primary.bootstrap, topic, 3, 0, 12)
    copies = [_samples(topic, p, range(12)) for p in range(3)]
    reordered = copies[1][5]
    assert len(reordered.headers) == 3 and reordered.headers != reordered.headers[::-1]
    copies[1][5] = dataclasses.replace(reordered, headers=reordered.headers[::-1])
    del copies[2][7]
    _forged_remote(backup, remote, dict(enumerate(copies)))
    # What the mirror would have committed: one batch per partition, the whole range each.
    log = [Batch(topic, p, remote, 0, 12, 0, len(copies[p]), len(copies[p]), 0) for p in range(3)]
    plan = verify_plan(FLOW, "verify-1", log, {(topic, p): 0 for p in range(3)})
    assert [r.records for r in plan.ranges] == [12, 12, 11]
    return plan, copies


def test_a_differing_remote_copy_is_reported_per_range_with_both_sides(
    kafka_clusters: Clusters, write_config: WriteConfig, spark: SparkSession, unique_name: str
) -> None:
    topic = unique_name
    flow = _config(write_config, topic).flow(FLOW)
    plan, copies = _faulty_mirror(kafka_clusters, topic)

    result = verify_ranges(spark, flow, plan)

    source = [_digest(_samples(topic, p, range(12))) for p in range(3)]
    target = [_digest(records) for records in copies]
    assert source[0] == target[0]
    assert result == VerifyResult(
        FLOW,
        "verify-1",
        tuple(PartitionVerdict(r, s, t) for r, s, t in zip(plan.ranges, source, target, strict=True)),
    )
    assert result.mismatches == result.partitions[1:]
    # Same count, different digest: only the header order differs. A record short on the target.
    assert [(v.source.records, v.target.records) for v in result.mismatches] == [(12, 12), (12, 11)]
    assert result.partitions[1].source.digest != result.partitions[1].target.digest

    # Two ranges of one partition (a gap between them): read in two layers, digested apart.
    split = VerifyPlan(
        FLOW,
        "verify-2",
        tuple(VerifyRange(topic, 0, f"forged.{topic}", a, b, a, b) for a, b in ((0, 5), (7, 12))),
    )
    parts = verify_ranges(spark, flow, split)
    digests = [_digest(_samples(topic, 0, range(a, b))) for a, b in ((0, 5), (7, 12))]
    assert parts.partitions == tuple(
        PartitionVerdict(r, d, d) for r, d in zip(split.ranges, digests, strict=True)
    )


def _spark_submit(config: MirrorConfig, run_id: str) -> subprocess.CompletedProcess[str]:
    """The verify job's command, as SparkSubmitOperator would build it from the copy task's spec
    with the verify job as its application (dag_spec has no verify spec yet)."""
    flow = config.flow(FLOW)
    spec = dataclasses.replace(
        flow_dag_spec(config, flow, run_id).copy,
        application=str(REPO_ROOT / "jobs" / "mirror_verify.py"),
        name=f"verify {flow.name}",
    )
    conf = [arg for k, v in spec.conf.items() for arg in ("--conf", f"{k}={v}")]
    cmd = [
        str(Path(sys.executable).parent / "spark-submit"),
        "--master", "local[2]", *conf, "--conf", "spark.driver.host=127.0.0.1",
        "--jars", spark_jars(), "--name", spec.name, spec.application, *spec.application_args,
    ]  # fmt: skip
    env = {**os.environ, **spec.env_vars, "SPARK_LOCAL_IP": "127.0.0.1"}
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, check=False)


# The verify job as spark-submit starts it: make test keeps the cutover's verify step, which Airflow
# submits (tests/integration/test_cutover.py), and a difference reported range by range (above).
@pytest.mark.extended
def test_the_verify_job_runs_through_spark_submit_and_succeeds_on_a_difference(
    kafka_clusters: Clusters, write_config: WriteConfig, unique_name: str
) -> None:
    topic = unique_name
    config = _config(write_config, topic)
    flow = config.flow(FLOW)
    plan, copies = _faulty_mirror(kafka_clusters, topic)
    write_verify_plan(config, flow, plan)

    done = _spark_submit(config, "verify-1")

    # spark-submit passes on the Python job's stdout and stderr as its own stdout.
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    result = load_verify_result(config, flow, "verify-1")
    assert [(v.source.records, v.target.records, v.matches) for v in result.partitions] == [
        (12, 12, True),
        (12, 12, False),
        (12, 11, False),
    ]
    assert [v.target for v in result.partitions] == [_digest(records) for records in copies]
    summary = [line for line in done.stdout.splitlines() if line.startswith("verified flow")]
    assert summary == [result.summary()]
    assert summary[0].startswith(
        f"verified flow {FLOW} run verify-1: 3 ranges, 36 source records, 35 target records, 1 match, "
        f"2 differ: {topic}-1 [0, 12) -> forged.{topic}-1 [0, 12): DIFFER (source 12 records "
    )

    # No plan for the run: the job fails, before Spark starts, and writes no result.
    missing = _spark_submit(config, "verify-2")
    assert missing.returncode != 0
    assert (
        f"mirrorflow.errors.PlanError: the verify plan of run verify-2 of flow {FLOW} in the offsets "
        "database does not exist" in missing.stdout
    )
    with OffsetsStore(config.offsets_db_url) as store:
        assert find_document(store, FLOW, "verify-2", "verify_result") is None
