"""A DR window's standing copy tasks on real brokers and real Spark: one Spark job serves every
micro-batch; a task's error reaches the window as the same class, a lost or frozen task as a
transient error, and the next micro-batch is copied by a fresh job."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable, Iterator

import psutil
import pytest
from mirror_helpers import create_topic, in_transaction
from pyspark.sql import SparkSession

from mirrorflow.app import batch_run
from mirrorflow.config.model import MirrorConfig
from mirrorflow.copy import spark_copy
from mirrorflow.copy.spark_copy import StandingCopy
from mirrorflow.errors import TargetStateError, TransientError
from mirrorflow.store.offsets_store import OffsetsStore
from mirrorflow.store.run_documents import save_document
from mirrorflow_dev import sample_data
from mirrorflow_dev.local_kafka import LocalCluster
from mirrorflow_dev.sample_data import sample_record

pytestmark = [pytest.mark.spark, pytest.mark.kafka]

FLOW = "primary->backup"
Clusters = dict[str, LocalCluster]
WriteConfig = Callable[[str], MirrorConfig]
Standing = tuple[MirrorConfig, StandingCopy]


@pytest.fixture
def standing(spark: SparkSession, write_config: WriteConfig, unique_name: str) -> Iterator[Standing]:
    config = write_config(f"{FLOW}.enabled = true\n{FLOW}.topics = {unique_name}-.*\n")
    copy = StandingCopy(spark.sparkContext, config.flow(FLOW))
    yield config, copy
    copy.close()
    assert spark.sparkContext.statusTracker().getActiveJobsIds() == []  # its tasks ended


def _micro_batch(config: MirrorConfig, run_id: str, copy: StandingCopy) -> int:
    """plan -> copy (one transaction) -> commit, as a window's micro-batch; the records it wrote."""
    try:
        plan = batch_run.plan_run(config, FLOW, run_id)
        result = in_transaction(config.flow(FLOW), copy)(plan)
        with OffsetsStore(config.offsets_db_url) as store:
            save_document(store, FLOW, run_id, "result", result.to_json())
        return batch_run.commit_run(config, FLOW, run_id).report.records
    finally:
        batch_run.release_run(config, FLOW, run_id)


def _the_one_job(spark: SparkSession) -> int:
    (job,) = spark.sparkContext.statusTracker().getActiveJobsIds()
    return int(job)


def test_one_job_of_standing_tasks_copies_every_micro_batch_exactly(
    kafka_clusters: Clusters, standing: Standing, spark: SparkSession, unique_name: str
) -> None:
    primary, backup = kafka_clusters["primary"], kafka_clusters["backup"]
    config, copy = standing
    topic = f"{unique_name}-a"
    create_topic(primary.bootstrap, topic, 3)
    jobs = set()
    for n in range(4):
        sample_data.produce_samples(primary.bootstrap, topic, 3, n * 30, 30)
        assert _micro_batch(config, f"window#{n}", copy) == 3 * 30
        jobs.add(_the_one_job(spark))
        for p in range(3):
            source = sample_data.read_partition(primary.bootstrap, topic, p)
            assert len(source) == (n + 1) * 30
            assert sample_data.read_partition(backup.bootstrap, f"primary.{topic}", p) == source
    assert len(jobs) == 1


def test_a_tasks_error_is_raised_as_its_class_and_a_fresh_job_copies_the_next_micro_batch(
    kafka_clusters: Clusters,
    standing: Standing,
    spark: SparkSession,
    write_config: WriteConfig,
    unique_name: str,
) -> None:
    primary, backup = kafka_clusters["primary"], kafka_clusters["backup"]
    config, copy = standing
    poisoned, fine = f"{unique_name}-a", f"{unique_name}-b"
    create_topic(primary.bootstrap, poisoned, 1)
    sample_data.produce_samples(primary.bootstrap, poisoned, 1, 0, 10)
    copy.await_tasks()  # its job is submitted from a thread: active once its tasks are up
    first_job = _the_one_job(spark)
    # Someone else's records where the copy would write: a task's own, classified error.
    foreign = [sample_record("elsewhere", 0, i) for i in range(2)]
    plan = batch_run.plan_run(config, FLOW, "window#0")
    try:
        sample_data.produce(sample_data.producer(backup.bootstrap), f"primary.{poisoned}", 0, foreign)
        with pytest.raises(TargetStateError, match=rf"remote partition primary\.{poisoned}-0 offset 0 holds"):
            in_transaction(config.flow(FLOW), copy)(plan)
    finally:
        batch_run.release_run(config, FLOW, "window#0")
    assert spark.sparkContext.statusTracker().getActiveJobsIds() == []  # the failed job's tasks ended
    assert sample_data.read_partition(backup.bootstrap, f"primary.{poisoned}", 0) == foreign

    # The flow's next micro-batch (of its other topic only, the same clusters): a fresh job copies it.
    create_topic(primary.bootstrap, fine, 2)
    sample_data.produce_samples(primary.bootstrap, fine, 2, 0, 15)
    only_fine = write_config(f"{FLOW}.enabled = true\n{FLOW}.topics = {fine}\n")
    assert _micro_batch(only_fine, "window#1", copy) == 30
    assert _the_one_job(spark) != first_job
    for p in range(2):
        source = sample_data.read_partition(primary.bootstrap, fine, p)
        assert sample_data.read_partition(backup.bootstrap, f"primary.{fine}", p) == source


def _python_workers() -> list[psutil.Process]:
    """The Spark session's Python workers: the children of its pyspark daemon."""
    here = psutil.Process(os.getpid())
    daemons = [p for p in here.children(recursive=True) if "pyspark.daemon" in _cmdline(p)]
    forked = [d for d in daemons if "pyspark.daemon" not in _cmdline(d.parent())]
    return [worker for daemon in forked for worker in daemon.children()]


def _cmdline(process: psutil.Process | None) -> str:
    """A process's command line; empty for one gone or a zombie (other tests' children may be)."""
    try:
        return " ".join(process.cmdline()) if process is not None else ""
    except psutil.Error:
        return ""


@pytest.mark.parametrize(
    ("sent", "error"),
    [
        (signal.SIGKILL, r"copy task \d of the window is gone|copy tasks failed"),  # as the OOM killer would
        (signal.SIGSTOP, r"copy task \d of the window said nothing for 2 s"),  # as a host that vanished
    ],
    ids=["killed", "frozen"],
)
def test_a_lost_or_frozen_task_is_a_transient_error_and_a_fresh_job_copies_the_next_micro_batch(
    kafka_clusters: Clusters,
    standing: Standing,
    spark: SparkSession,
    unique_name: str,
    monkeypatch: pytest.MonkeyPatch,
    sent: signal.Signals,
    error: str,
) -> None:
    primary, backup = kafka_clusters["primary"], kafka_clusters["backup"]
    config, copy = standing
    monkeypatch.setattr(spark_copy, "SILENT_S", 2.0)
    topic = f"{unique_name}-a"
    create_topic(primary.bootstrap, topic, 2)
    sample_data.produce_samples(primary.bootstrap, topic, 2, 0, 20)
    assert _micro_batch(config, "window#0", copy) == 40
    lost = _the_one_job(spark)
    workers = _python_workers()
    assert workers
    try:
        for worker in workers:
            with contextlib.suppress(psutil.NoSuchProcess):
                worker.send_signal(sent)
        sample_data.produce_samples(primary.bootstrap, topic, 2, 20, 20)
        with pytest.raises(TransientError, match=error):
            _micro_batch(config, "window#1", copy)
    finally:
        for worker in workers:
            with contextlib.suppress(psutil.NoSuchProcess):
                worker.send_signal(signal.SIGKILL)
    assert _micro_batch(config, "window#2", copy) == 40  # planned again from the last commit

    assert _the_one_job(spark) != lost
    for p in range(2):
        source = sample_data.read_partition(primary.bootstrap, topic, p)
        assert len(source) == 40
        assert sample_data.read_partition(backup.bootstrap, f"primary.{topic}", p) == source
