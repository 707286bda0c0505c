"""Bad input, one table row each: malformed or dangerous configs (states a run finds broken are
test_bad_input.py's). Each row says the message, which names the key and what to do:
``load_config`` raises ``ConfigError`` naming the key, at DAG parse time; rows marked ``dag`` are also
checked as the import error Airflow's DagBag reports for dags/mirror_flows.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from config_texts import KNOWN_SETTINGS
from dag_parsing import import_error_line, parse_dags

from mirrorflow.config.model import load_config
from mirrorflow.errors import ConfigError

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
        "primary->backup.mirrorflow.shedule: unknown mirrorflow setting; known settings: " + KNOWN_SETTINGS,
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


def test_the_table_covers_at_least_18_rows_and_8_import_errors() -> None:
    assert len(CONFIG_CASES) >= 18
    assert len([c for c in CONFIG_CASES if c.dag]) >= 8
