"""Bad input, one table row each: states a run finds broken (malformed or dangerous configs are
test_bad_config.py's). Each row says where the error must surface and the message, which names the
culprit and what to do.

Where errors surface:

- ``plan``, ``commit``, ``checkpoint``: the run step, on the session's clusters. Afterwards nothing
  is half-applied: every table of the offsets database is as before, the lock is not held after a
  failed plan, and after a failed commit the run still holds it and the release task gives it back.

Read-only databases are made honestly although tests run as root (for whom file permissions do not
stop writes): SQLite opened with ``mode=ro``, PostgreSQL sessions with
``default_transaction_read_only``, as on a hot standby.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from mirror_helpers import commit_group, create_topic
from sqlalchemy import create_engine, select, text

from mirrorflow.app import batch_run
from mirrorflow.app.batch_run import checkpoint_run
from mirrorflow.config.model import MirrorConfig
from mirrorflow.core.plan import CopyResult, Plan
from mirrorflow.core.progress import Batch, PartitionProgress
from mirrorflow.errors import (
    ConfigError,
    CorruptStateError,
    MirrorError,
    PlanError,
    TargetStateError,
    TransientError,
)
from mirrorflow.store import cli
from mirrorflow.store.database import redact_url
from mirrorflow.store.flow_lock import acquire_lock, lock_info, release_lock
from mirrorflow.store.offsets_store import OffsetsStore
from mirrorflow.store.run_documents import DocumentName, describe, find_document, save_document
from mirrorflow.store.tables import metadata
from mirrorflow_dev import sample_data
from mirrorflow_dev.local_kafka import LocalCluster
from mirrorflow_dev.processes import free_ports

FLOW = "primary->backup"
RUN = "manual__bad-input"
EARLIER_RUN = "manual__earlier"
# Stands for text of a database driver in an expected message.
ANY = "…"

# ------------------------------------------------------------------------------------- state rows


@dataclass(frozen=True)
class Scene:
    """One row's world: a flow over a fresh one-partition topic of 5 records on the session's
    clusters. ``names`` fill the row's templates; ``state_url`` reaches the flow's offsets database
    for writing (None: the row's database cannot be reached at all)."""

    config: MirrorConfig
    topic: str
    names: dict[str, str]
    state_url: str | None

    def document(self, name: DocumentName) -> str | None:
        """RUN's document ``name`` as saved (``store.run_documents``)."""
        with self.store() as store:
            return find_document(store, FLOW, RUN, name)

    def save(self, name: DocumentName, body: str) -> None:
        """Overwrite RUN's document ``name`` behind mirrorflow's back."""
        with self.store() as store:
            save_document(store, FLOW, RUN, name, body)

    def store(self) -> OffsetsStore:
        assert self.state_url is not None
        return OffsetsStore(self.state_url)

    def sql(self, statement: str) -> None:
        """Change the offsets database behind mirrorflow's back."""
        assert self.state_url is not None
        engine = create_engine(self.state_url)
        try:
            with engine.begin() as conn:
                conn.execute(text(statement.format(**self.names)))
        finally:
            engine.dispose()


def as_is(scene: Scene) -> None:
    """Nothing more to break."""


def anchored(scene: Scene, target: int = 0) -> None:
    """An earlier run anchored the partition at (source 0, ``target``) and finished."""
    with scene.store() as store:
        acquire_lock(store, FLOW, EARLIER_RUN, 600)
        store.anchor(FLOW, EARLIER_RUN, [PartitionProgress(scene.topic, 0, 0, target)])
        release_lock(store, FLOW, EARLIER_RUN)


def progress_corrupted(scene: Scene) -> None:
    anchored(scene)
    scene.sql("UPDATE mirror_progress SET next_source_offset = -7 WHERE topic = '{topic}'")


def progress_past_remote_end(scene: Scene) -> None:
    anchored(scene, target=999)


def batch_log_corrupted(scene: Scene) -> None:
    """An earlier run committed the partition's 5 records; then its sync points were cut short."""
    anchored(scene)
    with scene.store() as store:
        acquire_lock(store, FLOW, EARLIER_RUN, 600)
        store.commit(FLOW, EARLIER_RUN, [Batch(scene.topic, 0, f"primary.{scene.topic}", 0, 5, 0, 5, 5, 320)])
        release_lock(store, FLOW, EARLIER_RUN)
    scene.sql("UPDATE mirror_batches SET sync_points = '[[0, 0' WHERE topic = '{topic}'")
    # A group positioned on the partition: a checkpoint pass reads the rows its position needs.
    source = scene.config.clusters["primary"].bootstrap_servers
    commit_group(source, f"{scene.topic}-group", {(scene.topic, 0): 3})


def planned_then(change: Callable[[Scene], None]) -> Callable[[Scene], None]:
    """The plan task of RUN succeeded (the run holds the lock), then ``change`` broke its files."""

    def setup(scene: Scene) -> None:
        batch_run.plan_run(scene.config, FLOW, RUN)
        change(scene)

    return setup


def plan_of_another_flow(scene: Scene) -> None:
    plan = Plan.from_json(scene.document("plan") or "")
    scene.save("plan", replace(plan, flow="backup->primary", run_id="scheduled__other").to_json())


def plan_truncated(scene: Scene) -> None:
    scene.save("plan", (scene.document("plan") or "")[:40])


def plan_deleted(scene: Scene) -> None:
    scene.sql("DELETE FROM mirror_run_documents WHERE name = 'plan'")


def result_truncated(scene: Scene) -> None:
    scene.save("result", CopyResult(FLOW, RUN, ()).to_json()[:30])


def result_of_another_run(scene: Scene) -> None:
    scene.save("result", CopyResult(FLOW, "scheduled__other", ()).to_json())


STEPS: dict[str, Callable[[MirrorConfig], object]] = {
    "plan": lambda config: batch_run.plan_run(config, FLOW, RUN),
    "commit": lambda config: batch_run.commit_run(config, FLOW, RUN),
    "checkpoint": lambda config: checkpoint_run(config, FLOW, "checkpoints"),
}

REPAIR = (
    "mirrorflow never writes such a row: it was edited by hand or the database is damaged. Restore the "
    "offsets database from a backup, or forget the flow's state of the topic while no run is going "
    "(python -m mirrorflow.store forget-topic --flow 'primary->backup' --topic {topic}); the "
    "next run then mirrors the topic anew, after what its remote topic already holds."
)


@dataclass(frozen=True)
class StateCase:
    """``db`` (the configured offsets database) and ``state_db`` (a writable URL of the same database,
    None if there is none), ``config`` (more config lines) and ``message`` are templates of the
    scene's names; ``setup`` brings the bad state about; ``step`` must then fail with ``error`` and
    ``message`` exactly, where ``…`` stands for a database driver's text."""

    name: str
    setup: Callable[[Scene], None]
    step: str
    error: type[MirrorError]
    message: str
    config: str = ""
    db: str = "{sqlite}"
    state_db: str | None = "{sqlite}"

    @property
    def needs_postgres(self) -> bool:
        return "{postgres" in self.db


STATE_CASES = [
    StateCase(
        "unimportable-transform-hook",
        as_is,
        "plan",
        ConfigError,
        "transforms.parse.function: cannot load 'no_such_hooks:parse': No module named 'no_such_hooks'; put "
        "its module on the PYTHONPATH of every Airflow component and Spark executor (e.g. in plugins/ or "
        "include/, or spark.submit.pyFiles)",
        config="primary->backup.transforms = parse\nprimary->backup.transforms.parse.type = python\n"
        "primary->backup.transforms.parse.function = no_such_hooks:parse",
    ),
    StateCase(
        "unreachable-bootstrap",
        as_is,
        "plan",
        TransientError,
        "cluster primary (127.0.0.1:{closed_port}) is unreachable: KafkaTimeoutError: Unable to bootstrap "
        "from ['127.0.0.1:{closed_port}']; check its bootstrap.servers and that its brokers are up and "
        "reachable from this worker",
        config="primary->backup.source.cluster.bootstrap.servers = 127.0.0.1:{closed_port}\n"
        "primary->backup.source.admin.request.timeout.ms = 1000",
    ),
    StateCase(
        "offsets-db-folder-cannot-be-created",
        as_is,
        "plan",
        TransientError,
        "offsets database {blocked} is unavailable: cannot create its folder ([Errno 17] File exists: "
        "'{tmp}/not-a-folder'); create it, writable for this worker, or point mirrorflow.offsets.db.url "
        "elsewhere",
        db="{blocked}",
        state_db=None,
    ),
    StateCase(
        "offsets-db-unreachable",
        as_is,
        "plan",
        TransientError,
        "offsets database postgresql+psycopg2://mirror:***@127.0.0.1:{closed_port}/mirror is unavailable: "
        f"{ANY}; check that it is up and reachable from this worker",
        db="postgresql+psycopg2://mirror:s3cret@127.0.0.1:{closed_port}/mirror",
        state_db=None,
    ),
    StateCase(
        "offsets-db-read-only-sqlite",
        anchored,
        "plan",
        TransientError,
        "offsets database sqlite:///file%3A{tmp}/offsets.db?mode=ro&uri=true is read-only (attempt to "
        "write a readonly database); point mirrorflow.offsets.db.url at a writable database (a primary, "
        "not a replica) or give this worker write access to it",
        db="sqlite:///file:{tmp}/offsets.db?mode=ro&uri=true",
    ),
    StateCase(
        "offsets-db-read-only-postgres",
        anchored,
        "plan",
        TransientError,
        "offsets database {postgres_redacted}?options=-c+default_transaction_read_only%3Don is read-only "
        "(cannot execute UPDATE in a read-only transaction); point mirrorflow.offsets.db.url at a "
        "writable database (a primary, not a replica) or give this worker write access to it",
        db="{postgres}?options=-c%20default_transaction_read_only%3Don",
        state_db="{postgres}",
    ),
    StateCase(
        "progress-row-negative",
        progress_corrupted,
        "plan",
        CorruptStateError,
        "mirror_progress: flow primary->backup, partition {topic}-0: negative next source offset -7 or "
        "next target offset 0. " + REPAIR,
    ),
    StateCase(
        "progress-past-remote-end",
        progress_past_remote_end,
        "plan",
        TargetStateError,
        "flow primary->backup: remote partition primary.{topic}-0 ends at offset 0, before the 999 "
        "already mirrored into it: the remote topic was deleted, recreated or truncated. Nothing was "
        "copied. To mirror the topic anew: delete its remote topic on the target (or keep it, and the "
        "new records are appended after the old copy), forget the flow's state of the topic while no "
        "run of the flow is going (python -m mirrorflow.store forget-topic --flow "
        "'primary->backup' --topic {topic}), then run the flow again.",
    ),
    StateCase(
        "batch-log-row-malformed",
        batch_log_corrupted,
        "checkpoint",
        CorruptStateError,
        "mirror_batches: flow primary->backup, partition {topic}-0: the batch from source offset 0 is not "
        "valid (Expecting ',' delimiter: line 1 column 7 (char 6)). " + REPAIR,
    ),
    StateCase(
        "plan-of-another-flow",
        planned_then(plan_of_another_flow),
        "commit",
        PlanError,
        "{plan} belongs to flow 'backup->primary' run 'scheduled__other', not flow 'primary->backup' run "
        "'manual__bad-input'; re-run the plan task of this run",
    ),
    StateCase(
        "plan-truncated",
        planned_then(plan_truncated),
        "commit",
        PlanError,
        "{plan}: not a valid plan (Unterminated string starting at: line 3 column 10 (char 26)); re-run "
        "the plan task",
    ),
    StateCase(
        "plan-missing",
        planned_then(plan_deleted),
        "commit",
        PlanError,
        "{plan} does not exist; re-run the task that writes it",
    ),
    StateCase(
        "result-missing",
        planned_then(as_is),
        "commit",
        PlanError,
        "{result} does not exist; re-run the task that writes it",
    ),
    StateCase(
        "result-truncated",
        planned_then(result_truncated),
        "commit",
        PlanError,
        "{result}: not a valid copy result (Unterminated string starting at: line 3 column 10 (char 26)); "
        "re-run the copy task",
    ),
    StateCase(
        "result-of-another-run",
        planned_then(result_of_another_run),
        "commit",
        PlanError,
        "copy result is for flow 'primary->backup' run 'scheduled__other', the plan for flow "
        "'primary->backup' run 'manual__bad-input'; re-run the copy task",
    ),
]


def test_the_table_covers_at_least_15_rows() -> None:
    assert len(STATE_CASES) >= 15


def assert_message(actual: str, expected: str) -> None:
    """``actual == expected``, each ``…`` in ``expected`` standing for any text."""
    first, *rest = expected.split(ANY)
    assert actual.startswith(first), f"{actual!r} does not start with {first!r}"
    position = len(first)
    for piece in rest:
        found = actual.find(piece, position)
        assert found >= 0, f"{piece!r} missing from {actual[position:]!r}"
        position = found + len(piece)
    assert not rest or actual.endswith(rest[-1]), f"{actual!r} does not end with {rest[-1]!r}"
    assert rest or actual == expected


def rows_of(url: str) -> dict[str, list[tuple[object, ...]]]:
    """Every row of every table of the offsets database."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return {
                table.name: sorted((tuple(row) for row in conn.execute(select(table))), key=repr)
                for table in metadata.sorted_tables
            }
    finally:
        engine.dispose()


@pytest.fixture
def stage(
    kafka_clusters: dict[str, LocalCluster],
    write_config: Callable[[str], MirrorConfig],
    unique_name: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> Callable[[StateCase], Scene]:
    """Builds a row's scene and brings its bad state about."""

    def build(case: StateCase) -> Scene:
        topic = unique_name
        create_topic(kafka_clusters["primary"].bootstrap, topic, 1)
        sample_data.produce_samples(kafka_clusters["primary"].bootstrap, topic, 1, 0, 5)
        (tmp_path / "not-a-folder").write_text("")
        names = {
            "topic": topic,
            "tmp": str(tmp_path),
            "closed_port": str(free_ports(1)[0]),
            "sqlite": f"sqlite:///{tmp_path}/offsets.db",
            "blocked": f"sqlite:///{tmp_path}/not-a-folder/offsets.db",
        }
        if case.needs_postgres:
            names["postgres"] = request.getfixturevalue("postgres_db_url")
            names["postgres_redacted"] = redact_url(names["postgres"])
        config = write_config(
            f"primary->backup.enabled = true\nprimary->backup.topics = {topic}\n"
            f"mirrorflow.offsets.db.url = {case.db.format(**names)}\n{case.config.format(**names)}"
        )
        state_url = None if case.state_db is None else case.state_db.format(**names)
        scene = Scene(config, topic, names, state_url)
        names.update(plan=describe(FLOW, RUN, "plan"), result=describe(FLOW, RUN, "copy result"))
        if state_url is not None:
            lock_info(OffsetsStore(state_url), FLOW)  # the schema exists before the row's setup
        case.setup(scene)
        return scene

    return build


@pytest.mark.kafka
@pytest.mark.parametrize(
    "case",
    [
        pytest.param(case, id=case.name, marks=[pytest.mark.postgres] if case.needs_postgres else [])
        for case in STATE_CASES
    ],
)
def test_bad_state_stops_the_step_and_applies_nothing(
    case: StateCase, stage: Callable[[StateCase], Scene]
) -> None:
    scene = stage(case)
    before = None if scene.state_url is None else rows_of(scene.state_url)

    with pytest.raises(case.error) as caught:
        STEPS[case.step](scene.config)

    assert type(caught.value) is case.error
    assert_message(str(caught.value), case.message.format(**scene.names))
    if scene.state_url is None:
        return  # nothing to look at: the database was never reached
    after = rows_of(scene.state_url)
    assert after == before
    if case.step == "commit":
        # The release task (the DAG's teardown) gives the lock back whatever the commit did.
        assert [row[:2] for row in after["mirror_locks"]] == [(FLOW, RUN)]
        assert batch_run.release_run(scene.config, FLOW, RUN)
        assert rows_of(scene.state_url)["mirror_locks"] == []
    else:
        assert after["mirror_locks"] == []


@pytest.mark.kafka
def test_the_repair_named_for_a_corrupt_row_lets_the_flow_plan_again(
    stage: Callable[[StateCase], Scene],
) -> None:
    """The command in a CorruptStateError message, run as it is written, is the whole repair."""
    (case,) = [c for c in STATE_CASES if c.name == "progress-row-negative"]
    scene = stage(case)
    with pytest.raises(CorruptStateError) as caught:
        batch_run.plan_run(scene.config, FLOW, RUN)

    command = re.search(r"\((python -m mirrorflow\.store [^)]*)\)", str(caught.value))
    assert command is not None
    words = shlex.split(command.group(1))
    assert words[:4] == ["python", "-m", "mirrorflow.store", "forget-topic"]
    assert cli.main([*words[3:], "--db", scene.config.offsets_db_url]) == 0

    plan = batch_run.plan_run(scene.config, FLOW, RUN)
    assert [(p.topic, p.source_start, p.source_end) for p in plan.partitions] == [(scene.topic, 0, 5)]
