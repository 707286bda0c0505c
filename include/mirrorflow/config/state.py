"""Where this product keeps its state: the state folder (run folders, metrics files, reports) and the
offsets database's URL, each from env or the config file's top level (``mirrorflow.state.dir``,
``mirrorflow.offsets.db.url``: ``config.setting_keys.TOP_LEVEL_SETTINGS``), else a default that serves one
machine: the folder ``mirrorflow`` in Airflow's home (``AIRFLOW_HOME``, else Airflow's own default
``~/airflow``), and a SQLite file in it.

Invariants: env wins over the file, so that one file serves deployments that keep their state in
different places; a plain MM2 file needs no setting of ours to run on one machine, and where the
default folder is used it is logged (once per process) and ``check-config`` says when to replace it;
a URL is checked for its syntax and dialect without connecting (the one use of
SQLAlchemy outside ``store``), so that a bad one is a DAG import error rather than a failed run, and
is never repeated in a message: it may hold a password.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from mirrorflow.config.keys import OFFSETS_DB_URL, STATE_DIR
from mirrorflow.errors import ConfigError

log = logging.getLogger(__name__)

ENV_STATE_DIR = "MIRROR_STATE_DIR"
ENV_OFFSETS_DB_URL = "MIRROR_OFFSETS_DB_URL"
ENV_AIRFLOW_HOME = "AIRFLOW_HOME"
# The default state folder's name in Airflow's home.
DEFAULT_STATE_FOLDER = "mirrorflow"


@dataclass(frozen=True)
class StateDir:
    """The state folder and what chose it: env ``MIRROR_STATE_DIR``, the key, or ``None`` for the
    default."""

    path: Path
    chosen_by: str | None


def state_dir(top: Mapping[str, str], env: Mapping[str, str], base: Path) -> StateDir:
    """Env ``MIRROR_STATE_DIR`` (relative to the current directory) > ``mirrorflow.state.dir``
    (relative to the config file's folder) > ``<AIRFLOW_HOME>/mirrorflow`` (``~/airflow/mirrorflow``
    without ``AIRFLOW_HOME``, as Airflow's own home defaults)."""
    if env.get(ENV_STATE_DIR):
        return StateDir(Path(env[ENV_STATE_DIR]).absolute(), f"env {ENV_STATE_DIR}")
    if top.get(STATE_DIR):
        return StateDir(base / top[STATE_DIR], STATE_DIR)
    home = Path(env[ENV_AIRFLOW_HOME]) if env.get(ENV_AIRFLOW_HOME) else Path.home() / "airflow"
    default = (home / DEFAULT_STATE_FOLDER).absolute()
    _log_default(default)
    return StateDir(default, None)


@functools.cache
def _log_default(path: Path) -> None:
    # Once per process: the DAG processor loads the config at every parse.
    log.info(
        "state folder %s (the default, in Airflow's home: set %s or env %s to choose one)",
        path,
        STATE_DIR,
        ENV_STATE_DIR,
    )


def one_machine_advice(chosen_by: str | None, offsets_db_url: str) -> str | None:
    """What ``check-config`` says of a default state folder or a SQLite offsets database: each serves
    one machine only. None when neither is used."""
    fixes = []
    if chosen_by is None:
        fixes.append(f"set {STATE_DIR} (or env {ENV_STATE_DIR}) to a folder they all share")
    if offsets_db_url.startswith("sqlite"):
        fixes.append(f"set {OFFSETS_DB_URL} (or env {ENV_OFFSETS_DB_URL}) to a PostgreSQL database")
    if not fixes:
        return None
    return (
        "fine on one machine; with several Airflow workers, or Spark's cluster deploy mode, "
        + " and ".join(fixes)
    )


def offsets_db_url(top: Mapping[str, str], env: Mapping[str, str], state_dir: Path) -> str:
    """Env ``MIRROR_OFFSETS_DB_URL`` > ``mirrorflow.offsets.db.url`` > a SQLite file in the state dir.

    The URL's syntax and dialect are checked here, without connecting, so that a bad one is a DAG
    import error rather than a failed run.
    """
    key = ENV_OFFSETS_DB_URL if env.get(ENV_OFFSETS_DB_URL) else OFFSETS_DB_URL
    url = env.get(ENV_OFFSETS_DB_URL) or top.get(OFFSETS_DB_URL)
    if not url:
        return f"sqlite:///{state_dir / 'offsets.db'}"
    # Lazy: every process that imports the config model (a Spark job's Python workers among them)
    # would otherwise pay about 0.3 s of CPU for SQLAlchemy.
    from sqlalchemy.engine import make_url  # noqa: PLC0415
    from sqlalchemy.exc import ArgumentError  # noqa: PLC0415

    try:
        make_url(url).get_dialect()
    except (ArgumentError, ValueError) as error:
        # The URL itself is not repeated: it may hold a password.
        raise ConfigError(
            f"not a usable database URL ({error}); write a SQLAlchemy URL, e.g. "
            "postgresql+psycopg2://user:password@host:5432/mirror or sqlite:////absolute/path/offsets.db",
            key=key,
        ) from error
    return url
