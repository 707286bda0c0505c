"""Checks that a run leaked a secret nowhere: its output, the files of its Airflow home and state
folder, its XComs and its offsets database; and ``airflow dags test`` of a DAG that must succeed."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from mirror_helpers import airflow

from mirrorflow.config.model import MirrorConfig

PROVIDERS = [
    "config.providers = file",
    "config.providers.file.class = org.apache.kafka.common.config.provider.FileConfigProvider",
]


def holding(secret: bytes, folder: Path) -> list[str]:
    """Every file under ``folder`` whose bytes contain ``secret``."""
    return [str(path) for path in sorted(folder.rglob("*")) if path.is_file() and secret in path.read_bytes()]


def sqlite_dump(path: Path) -> str:
    connection = sqlite3.connect(path)
    try:
        return "\n".join(connection.iterdump())
    finally:
        connection.close()


def xcoms_of(airflow_db: Path) -> list[tuple[str, str, str]]:
    """(task id, key, value as stored) of every XCom."""
    connection = sqlite3.connect(airflow_db)
    try:
        rows = connection.execute("SELECT task_id, key, value FROM xcom").fetchall()
    finally:
        connection.close()
    return [(str(task), str(key), str(value)) for task, key, value in rows]


def dag_test(env: dict[str, str], cwd: Path, dag_id: str) -> str:
    """`airflow dags test` of ``dag_id``, which must succeed; returns what it printed."""
    run = airflow(env, cwd, "dags", "test", dag_id)
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-8000:]
    return output


def assert_nowhere(
    password: str, output: str, home: Path, config: MirrorConfig, xcoms: list[tuple[str, str, str]]
) -> None:
    """``password`` is not in the run's output, files, XComs and offsets database."""
    secret = password.encode()
    assert password not in output
    assert holding(secret, home) == []
    assert holding(secret, config.state_dir) == []
    assert not [(task, key) for task, key, value in xcoms if password in value]
    offsets_db = config.state_dir / "offsets.db"
    assert config.offsets_db_url == f"sqlite:///{offsets_db}"
    assert password not in sqlite_dump(offsets_db)
