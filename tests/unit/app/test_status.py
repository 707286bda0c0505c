"""The status page's view model over a real SQLite offsets table filled through its public API, run
folders written as the batch run writes them, and heartbeat readers standing in for Kafka."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path

from mirrorflow.app import batch_run
from mirrorflow.app.status import flow_statuses
from mirrorflow.app.status_values import (
    AirflowRun,
    CheckpointStatus,
    Freshness,
    PartitionStatus,
    RunStatus,
    as_json,
)
from mirrorflow.config.model import FlowConfig, MirrorConfig, load_config
from mirrorflow.core.metrics import Stats
from mirrorflow.core.plan import CopyResult, PartitionPlan, Plan, SourceGap
from mirrorflow.core.progress import Batch, GroupPosition, PartitionProgress, RecordedGap
from mirrorflow.core.recovery_point import RecoveryPoint, RecoveryStep
from mirrorflow.core.report import PartitionReport
from mirrorflow.errors import SourceDataLostError, TransientError
from mirrorflow.store.checkpoint_log import record_checkpoints
from mirrorflow.store.flow_lock import acquire_lock, release_lock
from mirrorflow.store.offsets_store import OffsetsStore
from mirrorflow.store.run_documents import save_document

FLOW = "primary->backup"
T0 = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
LOST = "flow primary->backup run run-3: source records were deleted before they were copied"


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now

    def at(self, seconds: int) -> None:
        self.now = T0 + timedelta(seconds=seconds)


def _config(folder: Path, *extra: str) -> MirrorConfig:
    path = folder / "mm2.properties"
    path.write_text(
        "\n".join(
            [
                "clusters = primary, backup, dr",
                "primary.bootstrap.servers = 127.0.0.1:1",
                "backup.bootstrap.servers = 127.0.0.1:2",
                "dr.bootstrap.servers = 127.0.0.1:3",
                "primary->backup.enabled = true",
                f"mirrorflow.state.dir = {folder / 'state'}",
                *extra,
            ]
        )
        + "\n"
    )
    return load_config(path, env={})


def _saved_plan(config: MirrorConfig, run_id: str, at: int, partitions: tuple[PartitionPlan, ...]) -> Plan:
    """The plan as the plan task saves it."""
    plan = Plan(FLOW, run_id, (T0 + timedelta(seconds=at)).isoformat(timespec="seconds"), partitions)
    with OffsetsStore(config.offsets_db_url) as store:
        save_document(store, FLOW, run_id, "plan", plan.to_json())
    return plan


def _caught_up(flow: FlowConfig, committed: Mapping[tuple[str, int], int]) -> bool:
    """The live check of a source that holds nothing past committed progress."""
    return True


def _lost() -> CopyResult:
    raise SourceDataLostError(LOST)


def _fill(config: MirrorConfig) -> None:
    """run-1 copies orders-0 fully and orders-1 capped; run-2 skips a gap of orders-1 and copies the
    rest, then a group's checkpoints are emitted; run-3's copy finds source data lost; run-4 holds
    the lock, with nothing to copy."""
    clock = Clock()
    store = OffsetsStore(config.offsets_db_url, clock=clock)
    flow = config.flow(FLOW)
    _saved_plan(
        config,
        "run-1",
        0,
        (
            PartitionPlan("orders", 0, 0, 100, "primary.orders", 0),
            PartitionPlan("orders", 1, 0, 50, "primary.orders", 0),
        ),
    )
    acquire_lock(store, FLOW, "run-1", 600)
    store.anchor(FLOW, "run-1", [PartitionProgress("orders", 0, 0, 0), PartitionProgress("orders", 1, 0, 0)])
    clock.at(60)
    store.commit(
        FLOW,
        "run-1",
        [
            Batch("orders", 0, "primary.orders", 0, 100, 0, 100, 100, 1000),
            Batch("orders", 1, "primary.orders", 0, 50, 0, 50, 50, 500),
        ],
        [
            PartitionReport(
                "orders", 0, "primary.orders", records=100, bytes=1000,
                replication_latency=Stats(100, 5, 40, 2000, 10), write_ms=500,
            ),
            PartitionReport(
                "orders", 1, "primary.orders", records=50, skipped=10, bytes=500, lag=30,
                replication_latency=Stats(40, 4, 30, 400, 6), write_ms=250,
            ),
        ],
    )  # fmt: skip
    release_lock(store, FLOW, "run-1")

    _saved_plan(config, "run-2", 3600, (PartitionPlan("orders", 1, 60, 80, "primary.orders", 50),))
    clock.at(3600)
    acquire_lock(store, FLOW, "run-2", 600)
    clock.at(3660)
    store.commit(
        FLOW,
        "run-2",
        [Batch("orders", 1, "primary.orders", 60, 80, 50, 70, 20, 200)],
        [
            PartitionReport(
                "orders", 1, "primary.orders", records=20, bytes=200,
                replication_latency=Stats(20, 3, 9, 100, 4), write_ms=100,
            )
        ],
        [SourceGap("orders", 1, 50, 60, 50, 50)],
        mirrored_as_of=_at(3600),
    )  # fmt: skip
    clock.at(3670)
    record_checkpoints(
        store,
        FLOW,
        [
            GroupPosition("billing", "orders", 0, "primary.orders", 100, 100),
            GroupPosition("billing", "orders", 1, "primary.orders", 65, 55),
        ],
        latency_ms=12,
    )
    release_lock(store, FLOW, "run-2")

    lost = _saved_plan(config, "run-3", 7200, (PartitionPlan("orders", 1, 80, 90, "primary.orders", 70),))
    batch_run.execute_copy(config, flow, lost, _lost)  # notes the error for the commit task

    _saved_plan(config, "run-4", 7300, ())
    clock.at(7300)
    acquire_lock(store, FLOW, "run-4", 600)
    store.close()


def _at(seconds: int) -> datetime:
    return T0 + timedelta(seconds=seconds)


RUN_1 = RunStatus(
    "run-1", "committed", _at(0), _at(60), planned_partitions=2, records=150, bytes=1500, skipped=10,
    write_ms=500, lag=30, gaps=0,
)  # fmt: skip
RUN_2 = RunStatus(
    "run-2", "committed", _at(3600), _at(3660), planned_partitions=1, records=20, bytes=200, skipped=0,
    write_ms=100, lag=0, gaps=1,
)  # fmt: skip
RUN_3 = RunStatus(
    "run-3", "failed", _at(7200), None, planned_partitions=1, records=0, bytes=0, skipped=0, write_ms=0,
    lag=None, gaps=0, error=f"SourceDataLostError: {LOST}",
)  # fmt: skip
RUN_4 = RunStatus(
    "run-4", "running", _at(7300), None, planned_partitions=0, records=0, bytes=0, skipped=0, write_ms=0,
    lag=None, gaps=0,
)  # fmt: skip


def test_a_flow_that_ran_shows_its_partitions_runs_checkpoints_gaps_and_errors(tmp_path: Path) -> None:
    config = _config(tmp_path)
    _fill(config)

    (status,) = flow_statuses(config, source_check=_caught_up, heartbeat=lambda flow: 12.5)

    assert (status.name, status.dag_id, status.source, status.target) == (
        FLOW, "mirror_primary_to_backup", "primary", "backup",
    )  # fmt: skip
    assert status.partitions == (
        PartitionStatus(
            "orders", 0, "primary.orders", next_source_offset=100, next_target_offset=100, records=100,
            bytes=1000, lag=0, lag_run_id="run-1", replication_latency_max_ms=40, lost_offsets=0,
        ),
        # The gap [50, 60) moved progress without records; latency is the last write's (run-2).
        PartitionStatus(
            "orders", 1, "primary.orders", next_source_offset=80, next_target_offset=70, records=70,
            bytes=700, lag=0, lag_run_id="run-2", replication_latency_max_ms=9, lost_offsets=10,
        ),
    )  # fmt: skip
    assert (status.records, status.bytes, status.lag) == (170, 1700, 0)
    assert status.topics == (("orders", "primary.orders"),)
    assert status.runs == (RUN_4, RUN_3, RUN_2, RUN_1)
    # Partitions are written in parallel: the run's written records over its longest write.
    assert RUN_1.records_per_second == 280.0
    assert RUN_3.records_per_second is None
    assert status.locked_by == "run-4"
    assert status.freshness == Freshness("measured", age_seconds=12.5)
    assert status.freshness.text == "12.5 s"
    assert status.checkpoints_enabled
    assert status.checkpoints == (
        CheckpointStatus("billing", "orders", 0, "primary.orders", 100, 100, _at(3670), latency_ms=12),
        CheckpointStatus("billing", "orders", 1, "primary.orders", 65, 55, _at(3670), latency_ms=12),
    )
    assert status.gaps == (RecordedGap("orders", 1, 50, 60, 50, 50, run_id="run-2", recorded_at=_at(3660)),)
    assert status.errors == ()
    assert status.failed_runs == (RUN_3,)
    # run-2 (planned at 3600) left nothing behind; the source, read live, holds nothing more.
    assert status.recovery == RecoveryPoint("caught up", 0.0, _at(3600))
    assert status.recovery_history == (RecoveryStep(_at(3660).replace(second=0), 60.0, _at(3600)),)


def test_airflow_states_win_and_runs_it_alone_knows_are_listed_with_their_failed_tasks(
    tmp_path: Path,
) -> None:
    config = _config(tmp_path)
    _fill(config)
    airflow = {
        FLOW: [
            AirflowRun("manual__5", "failed", _at(8000), _at(8010), failed_tasks=("plan",)),
            AirflowRun("run-4", "running", _at(7290)),
            # The copy's note says more than the task that failed on it.
            AirflowRun("run-3", "failed", _at(7190), _at(7250), failed_tasks=("commit",)),
            AirflowRun("run-2", "success", _at(3590), _at(3700)),
        ]
    }

    (status,) = flow_statuses(config, airflow, source_check=_caught_up, heartbeat=lambda flow: 1.0)

    assert status.runs == (
        RunStatus(
            "manual__5", "failed", _at(8000), None, planned_partitions=None, records=0, bytes=0, skipped=0,
            write_ms=0, lag=None, gaps=0, error="failed task: plan", failed_tasks=("plan",),
        ),
        RunStatus(
            "run-4", "running", _at(7290), None, planned_partitions=0, records=0, bytes=0, skipped=0,
            write_ms=0, lag=None, gaps=0,
        ),
        RunStatus(
            "run-3", "failed", _at(7190), None, planned_partitions=1, records=0, bytes=0, skipped=0,
            write_ms=0, lag=None, gaps=0, error=f"SourceDataLostError: {LOST}", failed_tasks=("commit",),
        ),
        RunStatus(
            "run-2", "success", _at(3590), _at(3660), planned_partitions=1, records=20, bytes=200,
            skipped=0, write_ms=100, lag=0, gaps=1,
        ),
        RUN_1,
    )  # fmt: skip


def test_run_limit_keeps_the_newest_runs(tmp_path: Path) -> None:
    config = _config(tmp_path)
    _fill(config)

    (status,) = flow_statuses(config, source_check=_caught_up, heartbeat=None, run_limit=2)

    assert [r.run_id for r in status.runs] == ["run-4", "run-3"]
    assert status.freshness == Freshness("unknown", detail="not measured")


def test_without_an_offsets_database_yet_nothing_is_created(tmp_path: Path) -> None:
    config = _config(tmp_path)
    queued = AirflowRun("run-1", "queued", _at(0))

    (status,) = flow_statuses(config, {FLOW: [queued]}, source_check=_caught_up, heartbeat=lambda flow: None)

    assert status.partitions == () and status.checkpoints == () and status.gaps == ()
    assert status.runs == (
        RunStatus(
            "run-1", "queued", _at(0), None, planned_partitions=None, records=0, bytes=0, skipped=0,
            write_ms=0, lag=None, gaps=0,
        ),
    )  # fmt: skip
    assert status.errors == ()
    assert status.freshness.text == "no heartbeat mirrored yet"
    assert not (config.state_dir / "offsets.db").exists()


def test_an_unreachable_offsets_database_is_an_error_of_the_flow_and_its_runs_still_show(
    tmp_path: Path,
) -> None:
    config = _config(
        tmp_path, "mirrorflow.offsets.db.url = postgresql+psycopg2://mirror:secret@127.0.0.1:1/offsets"
    )
    running = AirflowRun("run-1", "running", _at(0))

    (status,) = flow_statuses(config, {FLOW: [running]}, source_check=_caught_up, heartbeat=lambda flow: None)

    (error,) = status.errors
    assert error.startswith(
        "TransientError: offsets database postgresql+psycopg2://mirror:***@127.0.0.1:1/offsets is unavailable"
    )
    assert "secret" not in error
    assert [(r.run_id, r.state) for r in status.runs] == [("run-1", "running")]


def test_unreadable_plans_are_named_and_the_rest_is_shown(tmp_path: Path) -> None:
    config = _config(tmp_path)
    _fill(config)
    with OffsetsStore(config.offsets_db_url) as store:
        save_document(store, FLOW, "run-9", "plan", "{not json")

    (status,) = flow_statuses(config, source_check=_caught_up, heartbeat=lambda flow: 1.0)

    (error,) = status.errors
    assert error.startswith(
        "the plan of run run-9 of flow primary->backup in the offsets database: not a valid plan"
    )
    assert [r.run_id for r in status.runs] == ["run-4", "run-3", "run-2", "run-1"]


def test_freshness_is_measured_absent_disabled_or_unknown_never_waited_for_long(tmp_path: Path) -> None:
    config = _config(
        tmp_path,
        "backup->primary.enabled = true",
        "primary->dr.enabled = true",
        "dr->backup.enabled = true",
        "backup->dr.enabled = true",
        "backup->dr.emit.heartbeats.enabled = false",
    )
    release = threading.Event()

    def read(flow: FlowConfig) -> float | None:
        if flow.name == "primary->backup":
            return 3.25
        if flow.name == "backup->primary":
            return None
        if flow.name == "primary->dr":
            raise TransientError("cannot read primary.heartbeats on dr: broker down")
        release.wait(30)  # dr->backup: a cluster that does not answer
        return 1.0

    started = time.monotonic()
    try:
        statuses = flow_statuses(config, source_check=_caught_up, heartbeat=read, live_timeout=0.5)
    finally:
        release.set()

    assert time.monotonic() - started < 5
    assert {s.name: s.freshness for s in statuses} == {
        "primary->backup": Freshness("measured", age_seconds=3.25),
        "backup->primary": Freshness("none yet"),
        "primary->dr": Freshness(
            "unknown", detail="TransientError: cannot read primary.heartbeats on dr: broker down"
        ),
        "dr->backup": Freshness("unknown", detail="no answer within 0.5 s"),
        "backup->dr": Freshness("disabled"),
    }
    assert {s.name: s.freshness.text for s in statuses} == {
        "primary->backup": "3.2 s",
        "backup->primary": "no heartbeat mirrored yet",
        "primary->dr": "unknown (TransientError: cannot read primary.heartbeats on dr: broker down)",
        "dr->backup": "unknown (no answer within 0.5 s)",
        "backup->dr": "heartbeats disabled (emit.heartbeats.enabled = false)",
    }


def test_only_the_flows_asked_for_are_read(tmp_path: Path) -> None:
    config = _config(tmp_path, "backup->primary.enabled = true")

    statuses = flow_statuses(
        config, flows={"backup->primary"}, source_check=_caught_up, heartbeat=lambda flow: 1.0
    )

    assert [s.name for s in statuses] == ["backup->primary"]


def test_as_json_spells_out_times_totals_and_rates(tmp_path: Path) -> None:
    config = _config(tmp_path, "emit.checkpoints.enabled = false")
    _fill(config)

    document = as_json(flow_statuses(config, source_check=_caught_up, heartbeat=lambda flow: 2.0))

    (flow,) = json.loads(json.dumps(document))["flows"]
    assert (flow["name"], flow["records"], flow["bytes"], flow["lag"]) == (FLOW, 170, 1700, 0)
    assert flow["checkpoints_enabled"] is False
    assert flow["freshness"] == {"state": "measured", "age_seconds": 2.0, "detail": "", "text": "2.0 s"}
    assert flow["runs"][3] == {
        "run_id": "run-1", "state": "committed", "started_at": "2030-01-02T03:04:05+00:00",
        "committed_at": "2030-01-02T03:05:05+00:00", "planned_partitions": 2, "records": 150, "bytes": 1500,
        "skipped": 10, "write_ms": 500, "lag": 30, "gaps": 0, "error": None, "failed_tasks": [],
        "records_per_second": 280.0,
    }  # fmt: skip
    assert flow["gaps"] == [
        {
            "topic": "orders", "partition": 1, "source_start": 50, "source_end": 60, "target_start": 50,
            "target_end": 50, "run_id": "run-2", "recorded_at": "2030-01-02T04:05:05+00:00",
        }
    ]  # fmt: skip


def test_the_recovery_point_is_the_age_of_the_last_whole_commit_and_0_only_when_the_source_says_so(
    tmp_path: Path,
) -> None:
    config = _config(tmp_path)
    as_of = datetime.now(UTC) - timedelta(seconds=30)
    with OffsetsStore(config.offsets_db_url) as store:
        acquire_lock(store, FLOW, "run-1", 600)
        store.anchor(FLOW, "run-1", [PartitionProgress("orders", 0, 0, 0)])
        store.commit(
            FLOW,
            "run-1",
            [Batch("orders", 0, "primary.orders", 0, 100, 0, 100, 100, 1000)],
            mirrored_as_of=as_of,
        )
    asked: list[Mapping[tuple[str, int], int]] = []

    def behind(flow: FlowConfig, committed: Mapping[tuple[str, int], int]) -> bool:
        asked.append(dict(committed))
        return False

    def down(flow: FlowConfig, committed: Mapping[tuple[str, int], int]) -> bool:
        raise TransientError("cluster primary could not list offsets: broker down")

    (status,) = flow_statuses(config, heartbeat=None, source_check=behind)
    assert asked == [{("orders", 0): 100}]
    assert (status.recovery.state, status.recovery.mirrored_as_of, status.recovery.live) == (
        "behind",
        as_of,
        "",
    )
    assert status.recovery.seconds is not None and 30 <= status.recovery.seconds < 40
    assert status.recovery.text.startswith("at most 3") and status.recovery.text.endswith(" s")

    (status,) = flow_statuses(config, heartbeat=None, source_check=down)
    assert (status.recovery.state, status.recovery.live) == (
        "behind", "source not read: TransientError: cluster primary could not list offsets: broker down"
    )  # fmt: skip
    (status,) = flow_statuses(config, heartbeat=None, source_check=None)
    assert (status.recovery.state, status.recovery.live) == ("behind", "not checked")

    # A flow that never caught up has no recovery point, until the source says nothing is left.
    (tmp_path / "other").mkdir()
    other = _config(tmp_path / "other")
    (status,) = flow_statuses(other, heartbeat=None, source_check=behind)
    assert status.recovery == RecoveryPoint("none yet")
    assert status.recovery.text == "none yet (no run has caught up with the source)"
    (status,) = flow_statuses(other, heartbeat=None, source_check=_caught_up)
    assert (status.recovery.state, status.recovery.text) == ("caught up", "0 s (caught up)")
