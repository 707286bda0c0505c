"""Where this product keeps its state: the state folder (run folders, metrics files, reports) and the
offsets database's URL, each from env or the config file's top level (``mirrorflow.state.dir``,
``mirrorflow.offsets.db.url``: ``config.keys.TOP_LEVEL_SETTINGS``).

Invariants: env wins over the file, so that one file serves deployments that keep their state in
different places; a URL is checked for its syntax and dialect without connecting (the one use of
SQLAlchemy outside ``store``), so that a bad one is a DAG import error rather than a failed run, and
is never repeated in a message: it may hold a password.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from mirrorflow.config.keys import OFFSETS_DB_URL, STATE_DIR
from mirrorflow.errors import ConfigError

ENV_STATE_DIR = "MIRROR_STATE_DIR"
ENV_OFFSETS_DB_URL = "MIRROR_OFFSETS_DB_URL"


def state_dir(top: Mapping[str, str], env: Mapping[str, str], base: Path) -> Path:
    """Env ``MIRROR_STATE_DIR`` (relative to the current directory) > ``mirrorflow.state.dir``
    (relative to the config file's folder); one of them must say where.
    """
    if env.get(ENV_STATE_DIR):
        return Path(env[ENV_STATE_DIR]).absolute()
    if top.get(STATE_DIR):
        return base / top[STATE_DIR]
    raise ConfigError(
        f"no state folder: set {STATE_DIR} (relative to the config file's folder) or env "
        f"{ENV_STATE_DIR} to a folder the Airflow workers share; it holds the metrics files, cutover and "
        "failover reports and, unless mirrorflow.offsets.db.url is set, the SQLite offsets database"
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
