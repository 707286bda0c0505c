"""Environment for running this repo's Airflow locally (demo, tests): one place, so both agree."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path

from mirrorflow.app.dag_spec import ENV_JVM_CACHE
from mirrorflow_dev.paths import REPO_ROOT, jvm_cache


def airflow_env(
    home: Path, config_path: Path, state_dir: Path, base: Mapping[str, str] = os.environ
) -> dict[str, str]:
    """Variables for `airflow` commands: a private AIRFLOW_HOME and metadata DB, this repo's dags and
    plugins, the flow config, and a `spark_default` connection to local Spark."""
    venv_bin = Path(sys.executable).parent
    return {
        **base,
        "AIRFLOW_HOME": str(home),
        # SQLite as Airflow's own default, but waiting up to a minute for a lock instead of 5 s: the
        # scheduler and a CLI command (backfill create, dags test) write to it at the same time.
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}?timeout=60",
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO_ROOT / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO_ROOT / "plugins" / "mirrorflow_airflow"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
        "AIRFLOW_CONN_SPARK_DEFAULT": base.get(
            "AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[*]"})
        ),
        "MIRROR_CONFIG": str(config_path),
        ENV_JVM_CACHE: str(jvm_cache()),
        "MIRROR_STATE_DIR": str(state_dir),
        "PATH": os.pathsep.join([str(venv_bin), base.get("PATH", "")]),
    }
