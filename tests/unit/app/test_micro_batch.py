"""A DR window's micro-batches (``app.micro_batch``) driven against a session of plain values: what a
micro-batch does with its plan, which periodic steps it runs when, and how a record refused for a
schema id the window's map lacks goes on. The same steps on real brokers, Spark and registries:
tests/integration/test_dr_window.py and test_schemas.py."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest
from config_texts import ONE_FLOW

from mirrorflow.app.micro_batch import MicroBatches
from mirrorflow.app.remote_topics import RemoteTopics
from mirrorflow.config.model import FlowConfig, parse_config
from mirrorflow.core.plan import (
    CopyResult,
    Grant,
    PartitionFailure,
    PartitionPlan,
    PartitionResult,
    PartitionState,
    Plan,
    Writer,
)
from mirrorflow.core.planner import PlannerOutput
from mirrorflow.core.report import RunReport, build_report
from mirrorflow.errors import SchemaIdError

FLOW = "primary->backup"
REMOTE = "primary.t"
CREATED = "2026-11-28T10:00:00.000+00:00"


def dr_flow(extra: str = "") -> FlowConfig:
    text = ONE_FLOW + f"{FLOW}.mirrorflow.mode = dr\n{FLOW}.emit.checkpoints.enabled = false\n" + extra
    return parse_config(text, env={}).flow(FLOW)


@dataclass
class FakeStore:
    """The offsets store's calls a micro-batch makes, recorded."""

    calls: list[str] = field(default_factory=list)

    def now(self) -> datetime:
        return datetime(2026, 11, 28, 10, 0, tzinfo=UTC)

    def anchor(self, *_: Any) -> None:
        self.calls.append("anchor")

    def advance_recovery_point(self, flow: str, run_id: str, as_of: datetime, *, holder: str) -> None:
        self.calls.append(f"recovery point {run_id}")

    def coalesce_batches(self, *_: Any) -> int:
        self.calls.append("coalesce")
        return 0

    def record_partition_metrics(self, flow: str, run_id: str, reports: list[Any], *, holder: str) -> None:
        self.calls.append(f"metrics history {run_id} {sorted((p.partition, p.records) for p in reports)}")


class FakeAdmin:
    def latest_offsets(self, tps: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        return dict.fromkeys(tps, 0)


class FakeSession:
    """A FlowSession of plain values: plans handed out in turn (each source end given), every step
    recorded in ``calls``; a schema sync maps more ids when the next of ``schemas_grow`` says so."""

    def __init__(self, flow: FlowConfig, ends: list[dict[int, int]]) -> None:
        self.flow, self.run_id, self.store = flow, "window-1", FakeStore()
        self.source = self.target = FakeAdmin()
        self.ends, self.committed = list(ends), {0: 0, 1: 0}
        self.schemas_grow: list[bool] = []
        self.calls = self.store.calls

    def emit_heartbeats(self) -> None:
        self.calls.append("heartbeats")

    def sync_topics(self) -> RemoteTopics:
        self.calls.append("topics")
        return RemoteTopics({"t": 2}, {}, {"t": REMOTE}, {}, {}, {})

    def sync_schemas(self, remote_names: dict[str, str]) -> bool:
        self.calls.append("schemas")
        return self.schemas_grow.pop(0) if self.schemas_grow else False

    def with_schema_ids(self, plan: Plan) -> Plan:
        return plan

    def open_offset_syncs(self) -> None:
        pass

    def heartbeat_age(self) -> float:
        return 0.5

    def plan(self, run_id: str, options: Any, topics: RemoteTopics) -> PlannerOutput:
        self.calls.append(f"plan {run_id}")
        ends = self.ends.pop(0)
        states = tuple(PartitionState("t", p, REMOTE, 0, ends[p], self.committed[p]) for p in (0, 1))
        partitions = tuple(
            PartitionPlan("t", s.partition, s.committed, s.end, REMOTE, s.committed) for s in states if s.lag
        )
        return PlannerOutput(Plan(FLOW, run_id, CREATED, partitions, states), ())

    def copy_in_process(self, plan: Plan) -> CopyResult:
        raise AssertionError("no plan here holds heartbeats only")

    def copy_in_transaction(self, plan: Plan, copy: Callable[[Grant], CopyResult]) -> CopyResult:
        self.calls.append("transaction")
        return copy(Grant("mirrorflow-primary->backup", Writer(7, 0)))

    def commit(self, plan: Plan, result: CopyResult, *, micro_batch: bool = False) -> RunReport:
        assert micro_batch
        self.calls.append(f"commit {plan.run_id}")
        report = build_report(plan, result)
        for r in result.partitions:
            if r.failure is None:
                self.committed[r.partition] += r.records
        return report

    def write_metrics(self, report: RunReport, heartbeat_age: float | None) -> None:
        self.calls.append(f"metrics file {report.run_id}")

    def sync_acls(self, remote_names: dict[str, str]) -> None:
        self.calls.append("acls")


def copied(plan: Plan, failing: dict[int, str] | None = None) -> CopyResult:
    """Every planned record copied, except the partitions ``failing`` names (with that error kind)."""
    failing = failing or {}
    results = []
    for p in plan.partitions:
        kind = failing.get(p.partition)
        if kind is not None:
            failure = PartitionFailure(kind, "refused")
            results.append(PartitionResult(p.topic, p.partition, 0, 0, 0, p.target_start, failure=failure))
        else:
            n = p.source_end - p.source_start
            results.append(PartitionResult(p.topic, p.partition, n, 0, 10 * n, p.target_start))
    return CopyResult(plan.flow, plan.run_id, tuple(results))


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def prepared(session: FakeSession, copy: Callable[[Plan, Grant], CopyResult]) -> tuple[MicroBatches, Clock]:
    """The session's micro-batches, prepared as a window prepares them before its turn."""
    clock = Clock()
    window = MicroBatches(session, copy, clock)  # type: ignore[arg-type]
    window.prepare()
    return window, clock


def test_a_micro_batch_with_nothing_to_copy_opens_no_transaction_and_proves_its_recovery_point() -> None:
    session = FakeSession(dr_flow(), [{0: 0, 1: 0}, {0: 0, 1: 0}, {0: 0, 1: 0}])
    window, clock = prepared(session, lambda plan, grant: pytest.fail("nothing to copy"))
    session.calls.clear()
    assert window.run(clock()) == 0
    # The recovery point the idle micro-batch proves, recorded at most once per recovery interval;
    # heartbeats once a second (``prepare`` emitted them).
    assert session.calls == [
        "plan window-1#0",
        "recovery point window-1#0",
        "metrics file window-1#0",
    ]
    session.calls.clear()
    clock.now += 0.5
    window.run(clock())
    assert session.calls == ["plan window-1#1"]
    clock.now += 0.5
    session.calls.clear()
    window.run(clock())
    assert session.calls == [
        "heartbeats",
        "plan window-1#2",
        "recovery point window-1#2",
        "metrics file window-1#2",
    ]
    assert window.counts.micro_batches == 3 and window.counts.spark_copies == 0


def test_records_are_copied_in_one_transaction_counted_and_their_history_written_at_intervals() -> None:
    session = FakeSession(dr_flow(), [{0: 3, 1: 0}, {0: 5, 1: 4}])
    window, clock = prepared(session, lambda plan, grant: copied(plan))
    session.calls.clear()
    assert window.run(clock()) == 3
    assert session.calls == [
        "plan window-1#0",
        "transaction",
        "commit window-1#0",
        "metrics file window-1#0",
    ]
    clock.now += 60.0  # a progress interval: the batch log merged, the history written
    session.calls.clear()
    assert window.run(clock()) == 6
    assert session.calls == [
        "heartbeats",
        "plan window-1#1",
        "transaction",
        "commit window-1#1",
        "metrics file window-1#1",
        "coalesce",
        "metrics history window-1#1 [(0, 5), (1, 4)]",
    ]
    counts = window.counts
    assert (counts.micro_batches, counts.spark_copies, counts.records, counts.bytes) == (2, 2, 9, 90)
    assert counts.lags == {("t", 0): 0, ("t", 1): 0} and counts.unrecorded == {}


def test_the_remote_topics_and_acls_are_synced_at_their_intervals_with_the_schemas() -> None:
    flow = dr_flow(f"{FLOW}.sync.topic.acls.enabled = true\nrefresh.topics.interval.seconds = 30\n")
    session = FakeSession(flow, [{0: 0, 1: 0}] * 3)
    window, clock = prepared(session, lambda plan, grant: copied(plan))
    assert session.calls[:4] == ["heartbeats", "topics", "schemas", "acls"]
    session.calls.clear()
    clock.now += 29.0
    window.run(clock())
    assert "topics" not in session.calls
    clock.now += 1.0
    session.calls.clear()
    window.run(clock())
    assert session.calls[:3] == ["heartbeats", "topics", "schemas"]


def test_a_copy_refused_for_an_unknown_schema_id_is_copied_again_once_the_schemas_map_more() -> None:
    refused = [True]

    def copy(plan: Plan, grant: Grant) -> CopyResult:
        if refused.pop(0) if refused else False:
            raise SchemaIdError("t-0 offset 0: schema id 42 is not in the map")
        return copied(plan)

    session = FakeSession(dr_flow(), [{0: 2, 1: 0}])
    window, clock = prepared(session, copy)
    session.calls.clear()
    session.schemas_grow = [True]
    assert window.run(clock()) == 2
    assert session.calls[:5] == [
        "plan window-1#0",
        "transaction",
        "schemas",
        "transaction",
        "commit window-1#0",
    ]
    assert window.counts.spark_copies == 2


def test_a_schema_id_no_sync_maps_fails_the_micro_batch() -> None:

    def copy(plan: Plan, grant: Grant) -> CopyResult:
        raise SchemaIdError("t-0 offset 0: schema id 42 is not in the map")

    session = FakeSession(dr_flow(), [{0: 2, 1: 0}])
    window, clock = prepared(session, copy)
    session.schemas_grow = [False]
    with pytest.raises(SchemaIdError):
        window.run(clock())
    assert session.calls[-2:] == ["transaction", "schemas"]


def test_a_partition_failed_on_its_own_is_left_out_unless_the_schemas_synced_again_cure_it() -> None:
    failing = [{0: "TransformError", 1: "SchemaIdError"}, {}]
    session = FakeSession(dr_flow(), [{0: 2, 1: 2}, {0: 4, 1: 4}])
    window, clock = prepared(session, lambda plan, grant: copied(plan, failing.pop(0)))
    session.schemas_grow = [True]
    assert window.run(clock()) == 0
    assert set(window.failed) == {("t", 0)}
    clock.now += 1.0
    # The next plan leaves partition 0 out; partition 1 starts where the refused copy did.
    assert window.run(clock()) == 4
    assert window.counts.lags == {("t", 0): 4, ("t", 1): 0}
