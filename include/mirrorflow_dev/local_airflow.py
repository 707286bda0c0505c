"""Airflow's all-in-one ``airflow standalone`` (API server, scheduler, DAG processor, triggerer)
wired to this repo, on this machine: `make airflow` and the tests that need a running scheduler.

It takes the same wiring as the compose stack (dags, plugins, MIRROR_CONFIG, MIRROR_STATE_DIR, the
Spark connection) from ``devenv.airflow_env``; only the metadata DB (SQLite in its home) and the
ports differ. Every process it starts is in one process group, stopped by that group's id.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import psutil

from mirrorflow.config.model import load_config
from mirrorflow.errors import ConfigError, TransientError
from mirrorflow_dev import local_kafka
from mirrorflow_dev.devenv import airflow_env
from mirrorflow_dev.paths import demo_config, state_root
from mirrorflow_dev.processes import free_port

USER = "admin"
_COMPONENTS = ("metadatabase", "scheduler", "triggerer", "dag_processor")


def executor_slots(config_path: Path) -> int:
    """Executor slots for the config's flows: a batch flow runs one task at a time, a DR flow two at
    its handovers (its running window and the next one, each holding a slot for its whole window),
    and two more serve the short tasks around them. Not more: the local executor forks every slot's
    worker when it starts. A config that does not load gets 4; Airflow's DAG file says why."""
    try:
        dr_flows = sum(flow.dr is not None for flow in load_config(config_path).flows)
    except ConfigError:
        return 4
    return max(4, 2 * dr_flows + 2)


class LocalAirflow:
    """``airflow standalone`` in ``home`` on ``port`` with one admin login (``USER`` / ``password``)."""

    def __init__(
        self,
        home: Path,
        config_path: Path,
        state_dir: Path,
        port: int,
        base: Mapping[str, str] = os.environ,
    ) -> None:
        self.home = home
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.password = secrets.token_urlsafe(12)
        self.env = {
            **airflow_env(home, config_path, state_dir, base),
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(port),
            "AIRFLOW__API__BASE_URL": self.url,
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.url}/execution/",
            # Their defaults (8793, 8794) are fixed ports: another Airflow on the machine would clash.
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW__CORE__PARALLELISM": str(executor_slots(config_path)),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{USER}:admin",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(home / "passwords.json"),
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
        }
        self._process: subprocess.Popen[bytes] | None = None
        self._token: str | None = None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def pid(self) -> int | None:
        """``airflow standalone``'s process id: the root of every Airflow process it runs."""
        return None if self._process is None else self._process.pid

    @property
    def log_file(self) -> Path:
        return self.home / "standalone.log"

    def start(self, timeout: float = 240.0) -> LocalAirflow:
        self.home.mkdir(parents=True, exist_ok=True)
        (self.home / "passwords.json").write_text(json.dumps({USER: self.password}))
        with self.log_file.open("ab") as out:
            self._process = subprocess.Popen(
                [str(Path(sys.executable).parent / "airflow"), "standalone"],
                env=self.env,
                cwd=self.home,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            self.wait_healthy(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def wait_healthy(self, timeout: float) -> None:
        """Until every component reports healthy to the API server."""
        deadline = time.monotonic() + timeout
        while True:
            if self._process is not None and self._process.poll() is not None:
                raise TransientError(f"airflow standalone exited; see {self.log_file}")
            try:
                with urllib.request.urlopen(f"{self.url}/api/v2/monitor/health", timeout=10) as response:
                    health = json.loads(response.read())
                if all(health.get(c, {}).get("status") == "healthy" for c in _COMPONENTS):
                    return
            except (OSError, ValueError):
                pass  # not listening yet
            if time.monotonic() > deadline:
                raise TransientError(
                    f"airflow standalone not healthy after {timeout:.0f} s; see {self.log_file}"
                )
            time.sleep(1)

    def api(self, method: str, path: str, body: Any = None) -> Any:
        """A call to the public REST API (``/api/v2/...``) as the admin."""
        request = urllib.request.Request(
            self.url + path,
            data=None if body is None else json.dumps(body).encode(),
            method=method,
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {self.token()}"},
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            text = response.read()
        return json.loads(text) if text else None

    def token(self) -> str:
        if self._token is None:
            request = urllib.request.Request(
                f"{self.url}/auth/token",
                data=json.dumps({"username": USER, "password": self.password}).encode(),
                headers={"Content-Type": "application/json"},
                method="POST",
            )
            with urllib.request.urlopen(request, timeout=30) as response:
                self._token = str(json.loads(response.read())["access_token"])
        return self._token

    def stop(self, timeout: float = 30.0, *, whole_tree: bool = True) -> None:
        """SIGTERM to the whole process group, SIGKILL for what is left after ``timeout``, as a
        service manager stops a service; with ``whole_tree``, the same, by PID, to every process under
        it then, since a task's supervisor runs the task in a process group of its own (what a
        service manager's stop leaves of a DR window ends itself: ``app.window_lease.watch_parent``)."""
        process, self._process = self._process, None
        if process is None:
            return
        try:
            tree = psutil.Process(process.pid).children(recursive=True) if whole_tree else []
        except psutil.NoSuchProcess:
            tree = []
        self._stop_group(process, timeout)
        for proc in tree:
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.terminate()
        _, alive = psutil.wait_procs(tree, timeout=timeout)
        for proc in alive:
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.kill()
        psutil.wait_procs(alive, timeout=10.0)

    @staticmethod
    def _stop_group(process: subprocess.Popen[bytes], timeout: float) -> None:
        for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(process.pid, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline and _group_alive(process.pid):
                process.poll()
                time.sleep(0.2)
            if not _group_alive(process.pid):
                break
        process.wait(timeout=10)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    """`make airflow`: the local clusters up, then Airflow in the foreground until Ctrl-C."""
    parser = argparse.ArgumentParser(prog="python -m mirrorflow_dev.local_airflow", description=main.__doc__)
    parser.add_argument("--port", type=int, default=int(os.environ.get("AIRFLOW_PORT", "8080")))
    args = parser.parse_args(argv)
    config = demo_config()
    assert config.path is not None
    if local_kafka.main(["up"]) != 0:
        return 1
    airflow = LocalAirflow(state_root() / "airflow", config.path, config.state_dir, args.port)
    # Airflow runs in its own process group: stop it however this process is asked to end.
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _exit_on_signal)
    airflow.start()
    print(
        f"Airflow is up at {airflow.url} (user {USER}, password {airflow.password}); log: {airflow.log_file}"
    )
    print("Ctrl-C stops Airflow; the clusters keep running (`make kafka-down`).")
    try:
        while airflow.running:
            time.sleep(1)
    except KeyboardInterrupt:
        pass
    finally:
        airflow.stop()
    return 0


def _exit_on_signal(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


if __name__ == "__main__":
    sys.exit(main())
