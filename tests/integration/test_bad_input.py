"""Bad input, one table row each: malformed or dangerous configs, and states a run finds broken. Each
row says where the error must surface and the message, which names the culprit and what to do.

Where errors surface:

- ``load``: ``load_config`` raises ``ConfigError`` naming the key, at DAG parse time; rows marked
  ``dag`` are also checked as the import error Airflow's DagBag reports for dags/mirror_flows.py.
- ``plan``, ``commit``, ``checkpoint``: the run step, on the session's clusters. Afterwards nothing
  is half-applied: every table of the offsets database is as before, the lock is not held after a
  failed plan, and after a failed commit the run still holds it and the release task gives it back.

Not covered: a missing credentials file. The config cannot reference files yet (no ``${file:...}``
config providers).

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
from dag_parsing import import_error_line, parse_dags
from mirror_helpers import commit_group, create_topic
from sqlalchemy import create_engine, select, text

from mirrorflow.app import runner
from mirrorflow.app.runner import checkpoint_run
from mirrorflow.config.model import MirrorConfig, load_config
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
from mirrorflow.store import cli, schema
from mirrorflow.store.database import redact_url
from mirrorflow.store.offsets_store import OffsetsStore
from mirrorflow.store.run_documents import DocumentName, describe, find_document, save_document
from mirrorflow_dev import sample_data
from mirrorflow_dev.local_kafka import LocalCluster
from mirrorflow_dev.processes import free_ports

FLOW = "primary->backup"
RUN = "manual__bad-input"
EARLIER_RUN = "manual__earlier"
# Stands for text of a database driver in an expected message.
ANY = "…"

# ------------------------------------------------------------------------------------ config rows

BASE = """\
clusters = primary, backup
primary.bootstrap.servers = 127.0.0.1:9
backup.bootstrap.servers = 127.0.0.1:9
primary->backup.enabled = true
"""


@dataclass(frozen=True)
class ConfigCase:
    """``lines`` appended to BASE make the config file (None: there is no file); ``message`` is the
    error's exact text, ``{config}`` standing for the file's path; ``dag``: also check it as an
    Airflow import error."""

    name: str
    lines: str | None
    key: str | None
    message: str
    dag: bool = False


CONFIG_CASES = [
    ConfigCase(
        "unknown-alias",
        "primary->nowhere.enabled = true",
        "primary->nowhere.enabled",
        "primary->nowhere.enabled: flow keys look like `<source>-><target>.<setting>` with both aliases "
        "listed in clusters (primary, backup), but 'nowhere' is not; add it to clusters or fix the alias",
        dag=True,
    ),
    ConfigCase(
        "flow-to-itself",
        "backup->backup.enabled = true",
        "backup->backup.enabled",
        "backup->backup.enabled: a flow from 'backup' to itself is not possible; remove the key",
        dag=True,
    ),
    ConfigCase(
        "bad-regex",
        "primary->backup.topics = orders, pay(ments",
        "primary->backup.topics",
        "primary->backup.topics: invalid regular expression 'pay(ments' (missing ), unterminated "
        "subpattern at position 3); fix it or remove it from the list",
        dag=True,
    ),
    # Java's Properties would keep the last line: the flow silently off.
    ConfigCase(
        "duplicate-key",
        "primary->backup.enabled = false",
        "primary->backup.enabled",
        "primary->backup.enabled: duplicate key in {config}: line 4 and line 5; keep one of them (each "
        "key may appear only once)",
        dag=True,
    ),
    ConfigCase(
        "negative-number",
        "primary->backup.replication.factor = -2",
        "primary->backup.replication.factor",
        "primary->backup.replication.factor: expected a positive whole number, or -1 for the brokers' "
        "default.replication.factor, got '-2'; set e.g. 2",
    ),
    ConfigCase(
        "non-numeric",
        "mirrorflow.task.retries = many",
        "mirrorflow.task.retries",
        "mirrorflow.task.retries: expected a whole number of at least 0, got 'many'; set e.g. 2",
        dag=True,
    ),
    ConfigCase(
        "non-numeric-client-timeout",
        "primary.admin.request.timeout.ms = 30s",
        "primary.admin.request.timeout.ms",
        "primary.admin.request.timeout.ms: expected a positive whole number, got '30s'; set e.g. 30000",
    ),
    ConfigCase(
        "not-a-boolean",
        "emit.checkpoints.enabled = yes",
        "emit.checkpoints.enabled",
        "emit.checkpoints.enabled: expected true or false, got 'yes'",
    ),
    ConfigCase(
        "unknown-policy-class",
        "replication.policy.class = com.example.CustomReplicationPolicy",
        "replication.policy.class",
        "replication.policy.class: unknown replication policy 'com.example.CustomReplicationPolicy'; use "
        "one of: org.apache.kafka.connect.mirror.DefaultReplicationPolicy, DefaultReplicationPolicy, "
        "default, org.apache.kafka.connect.mirror.IdentityReplicationPolicy, IdentityReplicationPolicy, "
        "identity",
        dag=True,
    ),
    ConfigCase(
        "empty-separator",
        "primary->backup.replication.policy.separator =",
        "primary->backup.replication.policy.separator",
        "primary->backup.replication.policy.separator: the separator must not be empty; remove the key "
        "to use '.'",
    ),
    ConfigCase(
        "unknown-choice",
        "offset-syncs.topic.location = both",
        "offset-syncs.topic.location",
        "offset-syncs.topic.location: expected source or target, got 'both'",
    ),
    ConfigCase(
        "empty-bootstrap-override",
        "primary->backup.target.cluster.bootstrap.servers =",
        "primary->backup.target.cluster.bootstrap.servers",
        "primary->backup.target.cluster.bootstrap.servers: cluster 'backup' has no bootstrap servers; add "
        "`primary->backup.target.cluster.bootstrap.servers = host:9092`",
    ),
    ConfigCase(
        "misspelt-setting",
        "primary->backup.mirrorflow.shedule = @daily",
        "primary->backup.mirrorflow.shedule",
        "primary->backup.mirrorflow.shedule: unknown mirrorflow setting; known settings: "
        "mirrorflow.schedule, mirrorflow.max.records.per.partition, mirrorflow.spark.conn.id, "
        "mirrorflow.spark.deploy.mode, "
        "mirrorflow.copy.timeout.seconds, mirrorflow.task.retries, mirrorflow.lock.wait.seconds, "
        "mirrorflow.airflow.queue, mirrorflow.airflow.pool, mirrorflow.reverse.checkpoints.enabled, "
        "mirrorflow.on.source.data.loss, mirrorflow.on.partition.error, "
        "mirrorflow.alert.lag.max.records, mirrorflow.alert.heartbeat.age.max.seconds, "
        "mirrorflow.alert.notifier, mirrorflow.mode, mirrorflow.dr.window.seconds, "
        "mirrorflow.dr.idle.wait.ms, mirrorflow.dr.trigger.interval.ms, "
        "mirrorflow.dr.handover.wait.seconds, "
        "mirrorflow.spark.conf.<spark key>, "
        "mirrorflow.schema.registry.source.url, mirrorflow.schema.registry.source.basic.auth.user.info, "
        "mirrorflow.schema.registry.source.ssl.ca.location, "
        "mirrorflow.schema.registry.source.ssl.certificate.location, "
        "mirrorflow.schema.registry.source.ssl.key.location, mirrorflow.schema.registry.target.url, "
        "mirrorflow.schema.registry.target.basic.auth.user.info, "
        "mirrorflow.schema.registry.target.ssl.ca.location, "
        "mirrorflow.schema.registry.target.ssl.certificate.location, "
        "mirrorflow.schema.registry.target.ssl.key.location, mirrorflow.schema.registry.subjects.include, "
        "mirrorflow.schema.registry.subjects.exclude, "
        "mirrorflow.schema.registry.subject.name.strategies, "
        "mirrorflow.schema.registry.framed.key.topics, mirrorflow.schema.registry.framed.value.topics, "
        "mirrorflow.schema.registry.plain.key.topics, mirrorflow.schema.registry.plain.value.topics, "
        "mirrorflow.state.dir, "
        "mirrorflow.offsets.db.url",
    ),
    ConfigCase(
        "top-level-setting-per-flow",
        "primary->backup.mirrorflow.state.dir = /srv/mirror",
        "primary->backup.mirrorflow.state.dir",
        "primary->backup.mirrorflow.state.dir: mirrorflow.state.dir applies to all flows; set it at top "
        "level, without a flow prefix",
    ),
    ConfigCase(
        "offsets-db-not-a-url",
        "mirrorflow.offsets.db.url = /var/lib/mirror/offsets.db",
        "mirrorflow.offsets.db.url",
        "mirrorflow.offsets.db.url: not a usable database URL (Could not parse SQLAlchemy URL from given "
        "URL string); write a SQLAlchemy URL, e.g. postgresql+psycopg2://user:password@host:5432/mirror "
        "or sqlite:////absolute/path/offsets.db",
        dag=True,
    ),
    ConfigCase(
        "offsets-db-unknown-dialect",
        "mirrorflow.offsets.db.url = postgres://mirror:s3cret@db:5432/mirror",
        "mirrorflow.offsets.db.url",
        "mirrorflow.offsets.db.url: not a usable database URL (Can't load plugin: sqlalchemy.dialects:"
        "postgres); write a SQLAlchemy URL, e.g. postgresql+psycopg2://user:password@host:5432/mirror "
        "or sqlite:////absolute/path/offsets.db",
    ),
    ConfigCase(
        "malformed-escape",
        "topics = caf\\u00e",
        None,
        "malformed \\uXXXX escape in {config} at line 5; write \\u and four hex digits, or \\\\u for a "
        "backslash followed by u",
    ),
    ConfigCase(
        "missing-config-file",
        None,
        None,
        "config file {config} (env MIRROR_CONFIG) does not exist; pass the path of an mm2.properties "
        "file or set MIRROR_CONFIG to one",
        dag=True,
    ),
]


def config_file(case: ConfigCase, folder: Path) -> Path:
    path = folder / "mm2.properties"
    if case.lines is not None:
        path.write_text(BASE + case.lines + "\n")
    return path


@pytest.mark.parametrize("case", CONFIG_CASES, ids=lambda case: case.name)
def test_config_error_at_load_names_the_key(case: ConfigCase, tmp_path: Path) -> None:
    path = config_file(case, tmp_path)

    with pytest.raises(ConfigError) as caught:
        # A state folder, as the DAG's parse gets one: without it that error comes first.
        load_config(env={"MIRROR_CONFIG": str(path), "MIRROR_STATE_DIR": str(tmp_path / "state")})

    assert caught.value.key == case.key
    assert str(caught.value) == case.message.format(config=path)


@pytest.mark.airflow  # Airflow's DagBag parses the dags folder
@pytest.mark.parametrize("case", [c for c in CONFIG_CASES if c.dag], ids=lambda case: case.name)
def test_config_error_is_a_dag_import_error(
    case: ConfigCase, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = config_file(case, tmp_path)

    bag = parse_dags(path, tmp_path / "state", monkeypatch)

    message = case.message.format(config=path)
    assert import_error_line(bag) == f"mirrorflow.errors.ConfigError: {message}"


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
        store.acquire_lock(FLOW, EARLIER_RUN, 600)
        store.anchor(FLOW, EARLIER_RUN, [PartitionProgress(scene.topic, 0, 0, target)])
        store.release_lock(FLOW, EARLIER_RUN)


def progress_corrupted(scene: Scene) -> None:
    anchored(scene)
    scene.sql("UPDATE mirror_progress SET next_source_offset = -7 WHERE topic = '{topic}'")


def progress_past_remote_end(scene: Scene) -> None:
    anchored(scene, target=999)


def batch_log_corrupted(scene: Scene) -> None:
    """An earlier run committed the partition's 5 records; then its sync points were cut short."""
    anchored(scene)
    with scene.store() as store:
        store.acquire_lock(FLOW, EARLIER_RUN, 600)
        store.commit(FLOW, EARLIER_RUN, [Batch(scene.topic, 0, f"primary.{scene.topic}", 0, 5, 0, 5, 5, 320)])
        store.release_lock(FLOW, EARLIER_RUN)
    scene.sql("UPDATE mirror_batches SET sync_points = '[[0, 0' WHERE topic = '{topic}'")
    # A group positioned on the partition: a checkpoint pass reads the rows its position needs.
    source = scene.config.clusters["primary"].bootstrap_servers
    commit_group(source, f"{scene.topic}-group", {(scene.topic, 0): 3})


def planned_then(change: Callable[[Scene], None]) -> Callable[[Scene], None]:
    """The plan task of RUN succeeded (the run holds the lock), then ``change`` broke its files."""

    def setup(scene: Scene) -> None:
        runner.plan_run(scene.config, FLOW, RUN)
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
    "plan": lambda config: runner.plan_run(config, FLOW, RUN),
    "commit": lambda config: runner.commit_run(config, FLOW, RUN),
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


def test_the_table_covers_at_least_22_rows_and_5_import_errors() -> None:
    assert len(CONFIG_CASES) + len(STATE_CASES) >= 22
    assert len([c for c in CONFIG_CASES if c.dag]) >= 5


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


def tables(url: str) -> dict[str, list[tuple[object, ...]]]:
    """Every row of every table of the offsets database."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return {
                table.name: sorted((tuple(row) for row in conn.execute(select(table))), key=repr)
                for table in schema.metadata.sorted_tables
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
            OffsetsStore(state_url).lock_info(FLOW)  # the schema exists before the row's setup
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
    before = None if scene.state_url is None else tables(scene.state_url)

    with pytest.raises(case.error) as caught:
        STEPS[case.step](scene.config)

    assert type(caught.value) is case.error
    assert_message(str(caught.value), case.message.format(**scene.names))
    if scene.state_url is None:
        return  # nothing to look at: the database was never reached
    after = tables(scene.state_url)
    assert after == before
    if case.step == "commit":
        # The release task (the DAG's teardown) gives the lock back whatever the commit did.
        assert [row[:2] for row in after["mirror_locks"]] == [(FLOW, RUN)]
        assert runner.release_run(scene.config, FLOW, RUN)
        assert tables(scene.state_url)["mirror_locks"] == []
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
        runner.plan_run(scene.config, FLOW, RUN)

    command = re.search(r"\((python -m mirrorflow\.store [^)]*)\)", str(caught.value))
    assert command is not None
    words = shlex.split(command.group(1))
    assert words[:4] == ["python", "-m", "mirrorflow.store", "forget-topic"]
    assert cli.main([*words[3:], "--db", scene.config.offsets_db_url]) == 0

    plan = runner.plan_run(scene.config, FLOW, RUN)
    assert [(p.topic, p.source_start, p.source_end) for p in plan.partitions] == [(scene.topic, 0, 5)]
