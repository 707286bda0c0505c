"""The product works outside a checkout: installed from the repository (as `pip install .` installs
it) into a fresh environment, it imports, parses its DAGs from where it was installed with the config
MIRROR_CONFIG names, and finds its Spark jobs there. The dev tooling is not part of it."""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from mirrorflow_dev.paths import REPO_ROOT

pytestmark = pytest.mark.airflow

CONFIG = """\
clusters = east, west
east.bootstrap.servers = 127.0.0.1:1
west.bootstrap.servers = 127.0.0.1:2
east->west.enabled = true
mirrorflow.state.dir = state
"""

PROBE = """
import importlib.util, json, sys
import mirrorflow, mirrorflow_airflow, mirrorflow_dags, mirrorflow_jobs
from airflow.dag_processing.dagbag import DagBag

bag = DagBag(dag_folder=mirrorflow_dags.__path__[0])
flow = bag.dags["mirror_east_to_west"]
print(json.dumps({
    "files": [m.__file__ for m in (mirrorflow, mirrorflow_airflow, mirrorflow_dags, mirrorflow_jobs)],
    "dags": sorted(bag.dag_ids),
    "errors": {k: str(v) for k, v in bag.import_errors.items()},
    "copy": flow.get_task("copy").application,
    "dev": importlib.util.find_spec("mirrorflow_dev") is not None,
}))
"""


def test_the_installed_product_parses_its_dags_and_finds_its_jobs(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = Path(
        subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    # Its third-party packages are this environment's (no download), never this checkout's mirrorflow:
    # a path line in a .pth file does not run that folder's own .pth files (the editable install's).
    (site / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(
        [
            *(sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps"),
            *("--no-build-isolation", "--target", str(site), str(REPO_ROOT)),
        ],
        check=True,
        cwd=tmp_path,
    )
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "mm2.properties").write_text(CONFIG)
    env = {
        "PATH": f"{venv / 'bin'}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "AIRFLOW_HOME": str(tmp_path / "airflow"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "MIRROR_CONFIG": str(outside / "mm2.properties"),
    }
    probe = subprocess.run(
        [python, "-c", PROBE], env=env, cwd=outside, capture_output=True, text=True, timeout=300
    )
    assert probe.returncode == 0, probe.stderr
    found = json.loads(probe.stdout.strip().splitlines()[-1])
    assert all(Path(f).is_relative_to(site) for f in found["files"]), found["files"]
    assert found["errors"] == {}
    assert found["dags"] == [
        "mirror_east_to_west",
        "mirror_east_to_west_cutover",
        "mirror_east_to_west_failover",
    ]
    assert found["copy"] == str(site / "mirrorflow_jobs" / "mirror_copy.py")
    assert Path(found["copy"]).is_file()
    assert found["dev"] is False
