"""Where a config keeps its state: the state folder (configured, from the environment, or Airflow's
home by default), the offsets database's URL, the config file's own path and encoding, and the shipped
config."""

from __future__ import annotations

import logging
from pathlib import Path
from types import MappingProxyType

import pytest
from config_texts import BASE, NO_ENV, STATE_ENV, STATELESS

from mirrorflow.config.model import MirrorSettings, load_config, parse_config
from mirrorflow.config.state import one_machine_advice
from mirrorflow.errors import ConfigError
from mirrorflow_dev.paths import REPO_ROOT, demo_config_path


def test_state_dir_defaults_to_a_folder_in_airflows_home(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "mirrorflow.config.state")
    config = parse_config(STATELESS, env={"AIRFLOW_HOME": "/opt/airflow-home"})
    assert (config.state_dir, config.state_dir_chosen_by) == (Path("/opt/airflow-home/mirrorflow"), None)
    assert config.offsets_db_url == "sqlite:////opt/airflow-home/mirrorflow/offsets.db"
    assert caplog.messages == [
        "state folder /opt/airflow-home/mirrorflow (the default, in Airflow's home: set mirrorflow.state.dir "
        "or env MIRROR_STATE_DIR to choose one)"
    ]
    # Logged once per process: the DAG processor loads the config at every parse.
    parse_config(STATELESS, env={"AIRFLOW_HOME": "/opt/airflow-home"})
    assert len(caplog.messages) == 1
    # Without AIRFLOW_HOME, where Airflow's own home defaults to.
    assert parse_config(STATELESS, env=NO_ENV).state_dir == Path.home() / "airflow" / "mirrorflow"


def test_what_chose_the_state_dir() -> None:
    assert parse_config(BASE, env=NO_ENV).state_dir_chosen_by == "mirrorflow.state.dir"
    assert parse_config(BASE, env=STATE_ENV).state_dir_chosen_by == "env MIRROR_STATE_DIR"


@pytest.mark.parametrize(
    ("chosen_by", "url", "advice"),
    [
        (
            None,
            "sqlite:////home/a/airflow/mirrorflow/offsets.db",
            "fine on one machine; with several Airflow workers, or Spark's cluster deploy mode, set "
            "mirrorflow.state.dir (or env MIRROR_STATE_DIR) to a folder they all share and set "
            "mirrorflow.offsets.db.url (or env MIRROR_OFFSETS_DB_URL) to a PostgreSQL database",
        ),
        (
            "mirrorflow.state.dir",
            "sqlite:////shared/offsets.db",
            "fine on one machine; with several Airflow workers, or Spark's cluster deploy mode, set "
            "mirrorflow.offsets.db.url (or env MIRROR_OFFSETS_DB_URL) to a PostgreSQL database",
        ),
        (
            None,
            "postgresql://db/mirror",
            "fine on one machine; with several Airflow workers, or Spark's cluster deploy mode, set "
            "mirrorflow.state.dir (or env MIRROR_STATE_DIR) to a folder they all share",
        ),
        ("env MIRROR_STATE_DIR", "postgresql://db/mirror", None),
    ],
)
def test_check_config_says_what_serves_one_machine_only(
    chosen_by: str | None, url: str, advice: str | None
) -> None:
    assert one_machine_advice(chosen_by, url) == advice


def test_offsets_db_defaults_to_sqlite_in_the_state_dir() -> None:
    config = parse_config(BASE, env=NO_ENV)
    assert config.path is None
    assert config.state_dir == Path("/var/lib/mirrorflow")
    assert config.offsets_db_url == "sqlite:////var/lib/mirrorflow/offsets.db"


def test_state_dir_relative_to_the_config_file() -> None:
    config = parse_config(
        STATELESS + "mirrorflow.state.dir = ../state\n", path=Path("/etc/mirror/mm2.properties"), env=NO_ENV
    )
    assert config.state_dir == Path("/etc/mirror/../state")
    assert config.offsets_db_url == "sqlite:////etc/mirror/../state/offsets.db"


def test_offsets_db_url_from_file() -> None:
    config = parse_config(BASE + "mirrorflow.offsets.db.url = postgresql://db/mirror\n", env=NO_ENV)
    assert config.offsets_db_url == "postgresql://db/mirror"


def test_env_overrides_state_dir_and_offsets_db_url() -> None:
    text = STATELESS + "mirrorflow.state.dir = /from/file\nmirrorflow.offsets.db.url = sqlite:///file.db\n"
    config = parse_config(text, env={"MIRROR_STATE_DIR": "/from/env"})
    assert config.state_dir == Path("/from/env")
    assert config.offsets_db_url == "sqlite:///file.db"
    config = parse_config(text, env={"MIRROR_OFFSETS_DB_URL": "postgresql://env/db"})
    assert config.state_dir == Path("/from/file")
    assert config.offsets_db_url == "postgresql://env/db"
    config = parse_config(STATELESS, env={"MIRROR_STATE_DIR": "/from/env"})
    assert config.offsets_db_url == "sqlite:////from/env/offsets.db"


def test_load_config_path_argument_beats_env(tmp_path: Path) -> None:
    given, from_env = tmp_path / "given.properties", tmp_path / "env.properties"
    given.write_text(BASE + "replication.factor = 4\n")
    from_env.write_text(BASE + "replication.factor = 5\n")
    env = {"MIRROR_CONFIG": str(from_env)}
    assert load_config(given, env=env).flows[0].replication_factor == 4
    assert load_config(str(given), env=env).path == given
    loaded = load_config(env=env)
    assert loaded.path == from_env
    assert loaded.flows[0].replication_factor == 5


def test_load_config_without_a_path_needs_mirror_config() -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(env=NO_ENV)
    assert str(caught.value) == (
        "no configuration: set env MIRROR_CONFIG to the path of your mm2.properties (for the demo's, "
        "run make demo or make airflow from the repository, which set it)"
    )


def test_load_config_state_dir_relative_to_file(tmp_path: Path) -> None:
    path = tmp_path / "conf" / "mm2.properties"
    path.parent.mkdir()
    path.write_text(STATELESS + "mirrorflow.state.dir = state\n")
    assert load_config(path, env=NO_ENV).state_dir == tmp_path / "conf" / "state"


def test_load_config_missing_file_says_which_path_and_env_var(tmp_path: Path) -> None:
    missing = tmp_path / "nope.properties"
    with pytest.raises(ConfigError) as caught:
        load_config(env={"MIRROR_CONFIG": str(missing)})
    assert str(caught.value) == (
        f"config file {missing} (env MIRROR_CONFIG) does not exist; "
        "pass the path of an mm2.properties file or set MIRROR_CONFIG to one"
    )
    with pytest.raises(ConfigError, match=r"\(the path given\) does not exist"):
        load_config(missing, env=NO_ENV)


def test_load_config_rejects_non_utf8(tmp_path: Path) -> None:
    path = tmp_path / "latin1.properties"
    path.write_bytes(BASE.encode() + b"topics = caf\xe9\n")
    with pytest.raises(ConfigError, match="is not UTF-8 text"):
        load_config(path, env=NO_ENV)


def test_shipped_config_has_exactly_primary_to_backup() -> None:
    config = load_config(demo_config_path(), env=NO_ENV)
    assert config.state_dir == REPO_ROOT / "config" / ".." / ".state"
    assert [flow.name for flow in config.flows] == ["primary->backup"]
    flow = config.flow("primary->backup")
    assert flow.dag_id == "mirror_primary_to_backup"
    assert flow.source.bootstrap_servers == "127.0.0.1:19092"
    assert flow.target.bootstrap_servers == "127.0.0.1:29092"
    assert flow.topics == (".*",)
    assert flow.replication_factor == 1
    assert flow.settings == MirrorSettings(None, 1_000_000, "spark_default", "client", MappingProxyType({}))
