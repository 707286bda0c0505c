"""A flow's session (``app.flow_session.FlowSession``) with fakes for both clusters and a SQLite offsets
database: the plan's reads (committed progress before either cluster's offsets, its start and end,
partitions the target lacks yet) and how a plan refused for bad target state reports a lock taken
over; the flow's lock taken and given back; schema ids put on a plan; the commit's warning about a
copy stopped at its transaction's deadline. The same steps on real brokers and Spark:
tests/integration/test_runs.py (a concurrent run, a copy stopped at its deadline),
tests/integration/test_bad_input.py (a truncated remote topic) and tests/integration/test_schemas.py."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import cast

import pytest
from config_texts import ONE_FLOW

from mirrorflow.app import flow_session
from mirrorflow.app.flow_session import FlowSession
from mirrorflow.app.remote_topics import RemoteTopics
from mirrorflow.config.model import FlowConfig, MirrorConfig, parse_config
from mirrorflow.config.run_options import DEFAULT_OPTIONS
from mirrorflow.core.plan import CopyResult, PartitionPlan, PartitionResult, PartitionState, Plan
from mirrorflow.core.progress import Batch, PartitionProgress
from mirrorflow.core.schema_ids import SchemaIdMap
from mirrorflow.core.topic_partitions import TP
from mirrorflow.errors import CommitConflictError, FlowLockedError, TargetStateError
from mirrorflow.kafka.admin import ClusterAdmin
from mirrorflow.kafka.internal_topics import InternalTopicWriter
from mirrorflow.store.flow_lock import acquire_lock, force_release_lock, lock_holder
from mirrorflow.store.offsets_store import OffsetsStore

FLOW = "primary->backup"
REMOTE = "primary.t"
TOPICS = RemoteTopics({"t": 2}, {}, {"t": REMOTE}, {}, {}, {})
CREATED = "2026-11-28T10:00:00.000+00:00"
REGISTRIES = (
    "mirrorflow.schema.registry.source.url = http://sr.primary:8081\n"
    "mirrorflow.schema.registry.target.url = http://sr.backup:8081\n"
)


def mirror_config(tmp_path: Path, extra: str = "") -> MirrorConfig:
    db = f"mirrorflow.offsets.db.url = sqlite:///{tmp_path / 'offsets.db'}\n"
    return parse_config(ONE_FLOW + db + extra, env={})


class FakeAdmin:
    """One cluster's offsets as plain values; each read recorded in ``calls`` with the partitions
    asked (a partition not in ``offsets`` is a KeyError: it was never meant to be asked)."""

    def __init__(self, name: str, calls: list[tuple[str, list[TP]]], **offsets: Mapping[TP, int]) -> None:
        self.name, self.calls, self.offsets = name, calls, offsets

    def _read(self, kind: str, tps: Iterable[TP]) -> dict[TP, int]:
        asked = list(tps)
        self.calls.append((f"{self.name} {kind}", asked))
        return {tp: self.offsets[kind][tp] for tp in asked}

    def earliest_offsets(self, tps: Iterable[TP]) -> dict[TP, int]:
        return self._read("earliest", tps)

    def latest_offsets(self, tps: Iterable[TP]) -> dict[TP, int]:
        return self._read("latest", tps)

    def written_offsets(self, tps: Iterable[TP]) -> dict[TP, int]:
        return self._read("written", tps)


class FakeStore:
    """The offsets store's reads a plan makes, recorded in the admins' ``calls``."""

    def __init__(self, calls: list[tuple[str, list[TP]]], progress: Mapping[TP, PartitionProgress]) -> None:
        self.calls, self._progress = calls, dict(progress)

    def progress(self, flow: str) -> dict[TP, PartitionProgress]:
        self.calls.append(("store progress", []))
        return dict(self._progress)

    def topic_ids(self, flow: str) -> dict[str, str]:
        return {}


def with_clusters(session: FlowSession, calls: list[tuple[str, list[TP]]], target_end: int) -> None:
    """Source t-0 holds [2, 20) and t-1 [3, 9); the target's t-0 is written up to ``target_end``, its
    t-1 is empty."""
    source = FakeAdmin(
        "source", calls, earliest={("t", 0): 2, ("t", 1): 3}, latest={("t", 0): 20, ("t", 1): 9}
    )
    session.source = cast(ClusterAdmin, source)
    session.target = cast(
        ClusterAdmin, FakeAdmin("target", calls, written={(REMOTE, 0): target_end, (REMOTE, 1): 0})
    )


def test_a_plan_reads_progress_first_and_runs_from_it_to_the_sources_end() -> None:
    session = FlowSession(parse_config(ONE_FLOW, env={}), FLOW, "run-1")
    calls: list[tuple[str, list[TP]]] = []
    session.store = cast(OffsetsStore, FakeStore(calls, {("t", 0): PartitionProgress("t", 0, 5, 7)}))
    with_clusters(session, calls, target_end=7)

    # t-1 is new and its remote partition is still to be created: it starts at 0 on the target.
    planned = session.plan("run-1", DEFAULT_OPTIONS, TOPICS, absent=frozenset({(REMOTE, 1)}))

    assert calls[0] == ("store progress", [])
    assert {what for what, _ in calls[1:]} == {"source earliest", "source latest", "target written"}
    assert ("target written", [(REMOTE, 0)]) in calls  # never asks for a partition that is absent
    assert planned.plan.partitions == (
        PartitionPlan("t", 0, 5, 20, REMOTE, 7),
        PartitionPlan("t", 1, 3, 9, REMOTE, 0),
    )
    assert planned.anchors == (PartitionProgress("t", 1, 3, 0),)
    assert not planned.plan.narrowed


@pytest.mark.parametrize("locked", [True, False], ids=["holding-its-lock", "without-a-lock"])
def test_a_plan_refused_for_a_truncated_remote_partition_says_so_unless_its_lock_was_taken_over(
    tmp_path: Path, locked: bool
) -> None:
    with FlowSession(mirror_config(tmp_path), FLOW, "run-1") as session:
        acquire_lock(session.store, FLOW, "run-1", 3600)
        session.store.anchor(FLOW, "run-1", [PartitionProgress("t", 0, 5, 7)])
        if not locked:
            # A plan made by a session that holds no lock (run-2's lock is nothing of its own).
            force_release_lock(session.store, FLOW)
            acquire_lock(session.store, FLOW, "run-2", 3600)
        session.locked = locked
        with_clusters(session, [], target_end=3)

        with pytest.raises(TargetStateError, match=r"primary\.t-0 ends at offset 3, before the 7"):
            session.plan("run-1", DEFAULT_OPTIONS, TOPICS)


def test_a_plan_refused_after_the_lock_was_taken_over_says_the_lock_was_lost(tmp_path: Path) -> None:
    with FlowSession(mirror_config(tmp_path), FLOW, "run-1") as session:
        session.take_lock()
        session.store.anchor(FLOW, "run-1", [PartitionProgress("t", 0, 5, 7)])
        # run-2 took the flow over and its writes moved the target past what run-1 knows: here a
        # target that contradicts run-1's view of progress.
        force_release_lock(session.store, FLOW)
        acquire_lock(session.store, FLOW, "run-2", 3600)
        with_clusters(session, [], target_end=3)

        with pytest.raises(CommitConflictError, match=r"run run-1 cannot plan: .*run run-2 holds it"):
            session.plan("run-1", DEFAULT_OPTIONS, TOPICS)


def test_a_session_holds_the_lock_from_take_lock_to_release_and_another_is_refused(tmp_path: Path) -> None:
    config = mirror_config(tmp_path, "mirrorflow.lock.wait.seconds = 0\n")
    with FlowSession(config, FLOW, "run-1") as first, FlowSession(config, FLOW, "run-2") as second:
        assert (first.locked, first.holder) == (False, None)

        first.take_lock()
        assert (first.locked, first.holder, lock_holder(first.store, FLOW)) == (True, "run-1", "run-1")
        with pytest.raises(FlowLockedError, match="locked by run run-1"):
            second.take_lock()
        assert (second.locked, second.holder) == (False, None)
        assert second.release() is False
        assert lock_holder(first.store, FLOW) == "run-1"

        assert first.release() is True
        assert (first.locked, first.holder, lock_holder(first.store, FLOW)) == (False, None, None)
        assert first.release() is False


def test_without_registries_schemas_are_not_synced_and_a_plan_is_kept_as_is(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def never(flow: FlowConfig, remote_names: Mapping[str, str]) -> SchemaIdMap:
        raise AssertionError("a flow without registries has no schemas to sync")

    monkeypatch.setattr(flow_session, "sync_schemas", never)
    session = FlowSession(parse_config(ONE_FLOW, env={}), FLOW, "run-1")
    session.schema_ids = SchemaIdMap(ids=((1, 101),))
    plan = Plan(FLOW, "run-1", CREATED, ())

    assert session.sync_schemas({"t": REMOTE}) is False
    assert session.with_schema_ids(plan) is plan


def test_a_schema_sync_says_whether_the_map_grew_and_a_plan_gets_the_newest_map(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    first = SchemaIdMap(ids=((1, 101),), held=((1, "t-value"),))
    same_ids = SchemaIdMap(ids=((1, 101),), held=((1, "t-value"), (2, "u-value")))
    grown = SchemaIdMap(ids=((1, 101), (2, 102)), held=((1, "t-value"), (2, "u-value")))
    synced = iter([first, same_ids, grown])
    asked: list[Mapping[str, str]] = []

    def fake_sync(flow: FlowConfig, remote_names: Mapping[str, str]) -> SchemaIdMap:
        asked.append(remote_names)
        return next(synced)

    monkeypatch.setattr(flow_session, "sync_schemas", fake_sync)
    session = FlowSession(parse_config(ONE_FLOW + REGISTRIES, env={}), FLOW, "run-1")
    plan = Plan(FLOW, "run-1", CREATED, ())

    assert session.sync_schemas({"t": REMOTE}) is True
    # The same ids: nothing a refused record could now go on with; the newest map is kept anyway.
    assert session.sync_schemas({"t": REMOTE}) is False
    assert session.with_schema_ids(plan).schema_ids == same_ids
    assert session.sync_schemas({"t": REMOTE}) is True
    assert session.with_schema_ids(plan).schema_ids == grown
    assert asked == [{"t": REMOTE}] * 3


def test_a_commit_warns_of_a_copy_stopped_at_its_deadline_and_writes_the_offset_syncs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    emitted: list[tuple[list[Batch], InternalTopicWriter | None]] = []

    def fake_emit(flow: FlowConfig, batches: list[Batch], writer: InternalTopicWriter | None = None) -> int:
        emitted.append((batches, writer))
        return len(batches)

    monkeypatch.setattr(flow_session, "emit_offset_syncs", fake_emit)
    states = tuple(PartitionState("t", p, REMOTE, 0, 100, 0) for p in (0, 1, 2))
    plan = Plan(
        FLOW, "run-1", CREATED, tuple(PartitionPlan("t", p, 0, 100, REMOTE, 0) for p in (0, 1, 2)), states
    )
    # t-0 stopped 60 offsets short of its plan and t-2 30: 2 partitions, 90 offsets.
    result = CopyResult(
        FLOW,
        "run-1",
        (
            PartitionResult("t", 0, 40, 0, 400, 0, source_end=40),
            PartitionResult("t", 1, 100, 0, 1000, 0),
            PartitionResult("t", 2, 70, 0, 700, 0, source_end=70),
        ),
    )
    with FlowSession(mirror_config(tmp_path), FLOW, "run-1") as session:
        session.internal = writer = InternalTopicWriter()
        session.take_lock()
        session.store.anchor(FLOW, "run-1", [PartitionProgress("t", p, 0, 0) for p in (0, 1, 2)])

        with caplog.at_level(logging.INFO, logger=flow_session.__name__):
            report = session.commit(plan, result)

        progress = session.store.progress(FLOW)
    assert [(p.partition, p.records, p.lag) for p in report.partitions] == [
        (0, 40, 60),
        (1, 100, 0),
        (2, 70, 30),
    ]
    assert {tp: (p.next_source_offset, p.next_target_offset) for tp, p in progress.items()} == {
        ("t", 0): (40, 40),
        ("t", 1): (100, 100),
        ("t", 2): (70, 70),
    }
    assert [[(b.partition, b.source_end) for b in batches] for batches, _ in emitted] == [
        [(0, 40), (1, 100), (2, 70)]
    ]
    assert emitted[0][1] is writer
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "run run-1: the copy stopped at its transaction's deadline" in warnings[0]
    assert "in 2 partitions, 90 planned offsets short" in warnings[0]


def test_a_commit_of_a_whole_copy_warns_of_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(flow_session, "emit_offset_syncs", lambda flow, batches, writer=None: 0)
    plan = Plan(
        FLOW,
        "run-1",
        CREATED,
        (PartitionPlan("t", 0, 0, 100, REMOTE, 0),),
        (PartitionState("t", 0, REMOTE, 0, 100, 0),),
    )
    result = CopyResult(FLOW, "run-1", (PartitionResult("t", 0, 100, 0, 1000, 0),))
    with FlowSession(mirror_config(tmp_path), FLOW, "run-1") as session:
        session.internal = InternalTopicWriter()
        session.take_lock()
        session.store.anchor(FLOW, "run-1", [PartitionProgress("t", 0, 0, 0)])

        with caplog.at_level(logging.INFO, logger=flow_session.__name__):
            session.commit(plan, result)

    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert any("run run-1 committed, 0 offset syncs written" in r.getMessage() for r in caplog.records)
