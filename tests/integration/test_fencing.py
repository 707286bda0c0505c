"""Fencing on real brokers: a copy of a flow stopped in the middle of its writes (SIGSTOP), a newer
copy of the same plan taking over, then the old one resumed (SIGCONT). The newer copy's fence of
the flow's transactional id aborted what the old one wrote, and the target refuses the old one's
epoch from then on (``copy.flow_transaction``), so the remote topic's committed records are what one
copy would have left."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable

import pytest
from mirror_helpers import STALE_COPY, assert_same_records, copy_without_spark, create_topic, written_end

from mirrorflow.app import batch_run
from mirrorflow.config.model import MirrorConfig
from mirrorflow_dev import sample_data
from mirrorflow_dev.local_kafka import LocalCluster
from mirrorflow_dev.paths import REPO_ROOT

pytestmark = pytest.mark.kafka

FLOW = "primary->backup"
RECORDS = 3000


def _one_batch_per_record(bootstrap: str, topic: str) -> None:
    """``RECORDS`` records in partition 0, each its own batch: a copy of them takes thousands of
    produce requests, time enough to stop it in the middle."""
    producer = sample_data.producer(bootstrap, {"batch.num.messages": "1", "linger.ms": "0"})
    sample_data.produce(producer, topic, 0, (sample_data.sample_record(topic, 0, i) for i in range(RECORDS)))


def test_a_copy_stopped_mid_write_and_resumed_after_a_newer_one_took_over_appends_nothing(
    kafka_clusters: dict[str, LocalCluster],
    write_config: Callable[[str], MirrorConfig],
    unique_name: str,
) -> None:
    primary, backup = kafka_clusters["primary"], kafka_clusters["backup"]
    topic, remote = unique_name, f"primary.{unique_name}"
    create_topic(primary.bootstrap, topic, 1)
    _one_batch_per_record(primary.bootstrap, topic)
    config = write_config(f"{FLOW}.enabled = true\n{FLOW}.topics = {topic}\n")
    assert config.path is not None
    plan = batch_run.plan_run(config, FLOW, "run-1")
    assert [p.source_end for p in plan.partitions] == [RECORDS]

    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "include")}
    old = subprocess.Popen(
        [sys.executable, "-c", STALE_COPY, str(config.path), FLOW, "run-1"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while (end := written_end(config, FLOW, remote)) < 200:
            assert old.poll() is None, f"the old copy ended before it was stopped: {old.communicate()}"
            assert time.monotonic() < deadline, "the old copy wrote nothing"
            time.sleep(0.01)
        os.kill(old.pid, signal.SIGSTOP)
        # A request already sent when the copy stopped may still be appended: wait for the end to
        # stay put.
        stopped_at = -1
        while (settled := written_end(config, FLOW, remote)) != stopped_at:
            stopped_at = settled
            time.sleep(0.5)
        assert end <= stopped_at < RECORDS, "the old copy finished before it was stopped"

        # The newer copy of the same plan aborts what the old one wrote (uncommitted) and writes
        # every record after the abort marker.
        (result,) = copy_without_spark(config.flow(FLOW), plan).partitions
        assert (result.records, result.skipped) == (RECORDS, 0)
        assert result.target_gaps == ((0, stopped_at + 1),)
    finally:
        os.kill(old.pid, signal.SIGCONT)
    _, err = old.communicate(timeout=120)

    # Woken up, the old copy's next batch is refused for its old epoch: it fails, having added nothing
    # (past the newer copy's records: its commit marker).
    assert old.returncode != 0
    assert "a newer attempt of the flow fenced its writer" in err, err[-3000:]
    assert written_end(config, FLOW, remote) == stopped_at + 1 + RECORDS + 1
    assert assert_same_records(primary.bootstrap, topic, backup.bootstrap, remote, 1) == RECORDS
