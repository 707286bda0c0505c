"""The dags folder parsed as Airflow's DagBag parses it, for tests: no metadata database needed.

Airflow reads AIRFLOW_HOME once, when it is first imported, so importing this module points it at a
private temporary folder unless Airflow is already imported.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from mirrorflow_dev.paths import REPO_ROOT

DAGS_FOLDER = REPO_ROOT / "dags"
DAG_FILE = DAGS_FOLDER / "mirror_flows.py"
# Every DAG file reads the config: an invalid one is the import error of each.
DAG_FILES = (DAG_FILE, DAGS_FOLDER / "mirror_cutover.py", DAGS_FOLDER / "mirror_failover.py")
PLUGINS_FOLDER = REPO_ROOT / "plugins" / "mirrorflow_airflow"

if "airflow" not in sys.modules:
    _home = tempfile.mkdtemp(prefix="mirrorflow-airflow-home-")
    atexit.register(shutil.rmtree, _home, ignore_errors=True)
    os.environ["AIRFLOW_HOME"] = _home
    os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(DAGS_FOLDER)
    os.environ["AIRFLOW__CORE__PLUGINS_FOLDER"] = str(PLUGINS_FOLDER)
    os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"


def dagbag_class() -> type[Any]:
    """Airflow's DagBag, once Airflow is known to use a temporary home (never a real one)."""
    from airflow import configuration
    from airflow.dag_processing.dagbag import DagBag

    home = Path(configuration.AIRFLOW_HOME).resolve()
    if not home.is_relative_to(Path(tempfile.gettempdir()).resolve()):
        pytest.fail(
            f"Airflow was imported with AIRFLOW_HOME={home} before {__name__} could point it at a "
            "temporary folder; set AIRFLOW_HOME in a conftest.py instead",
            pytrace=False,
        )
    return DagBag


def parse_dags(config: Path, state_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The DagBag of the dags folder with MIRROR_CONFIG = ``config`` and MIRROR_STATE_DIR = ``state_dir``."""
    monkeypatch.setenv("MIRROR_CONFIG", str(config))
    monkeypatch.setenv("MIRROR_STATE_DIR", str(state_dir))
    monkeypatch.delenv("MIRROR_OFFSETS_DB_URL", raising=False)
    return dagbag_class()(dag_folder=str(DAGS_FOLDER))


def import_error_line(bag: Any) -> str:
    """The last line of the dag files' import error (``<exception class>: <message>``); fails the test
    unless every dag file, and only they, failed to import, all with that line, and no DAG was loaded."""
    assert bag.dag_ids == []
    assert sorted(bag.import_errors) == sorted(str(f) for f in DAG_FILES)
    (line,) = {str(error).rstrip().splitlines()[-1] for error in bag.import_errors.values()}
    return line
