"""A Spark standalone cluster on loopback for tests and the bench: a master and workers, each a
foreground `spark-class` JVM of the pyspark installed here, started in a folder of its own on free
ports and stopped by PID. The master's REST server can be on (``rest=True``): spark-submit in cluster
deploy mode and Airflow's driver tracking go through it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import pyspark

from mirrorflow_dev import processes
from mirrorflow_dev.processes import start_logged, stop_process

# spark-class ships with pyspark; the venv's bin/ has a copy that finds the same SPARK_HOME.
SPARK_CLASS = str(Path(sys.executable).parent / "spark-class")


class SparkStandalone:
    """A Spark standalone master and ``workers`` workers on loopback, each a foreground `spark-class`
    JVM in its own session (so a worker's executors share its process group), stopped by PID."""

    CORES = 1
    MEMORY = "1g"

    def __init__(
        self,
        home: Path,
        workers: int,
        timeout: float,
        *,
        rest: bool = False,
        worker_env: Mapping[str, str] | None = None,
    ) -> None:
        """``worker_env``: more environment for the workers, and so for the drivers and executors
        they start."""
        self.home, self.n_workers, self.timeout = home, workers, timeout
        self.worker_env = dict(worker_env or {})
        self.procs: list[subprocess.Popen[bytes]] = []
        self.workers: list[subprocess.Popen[bytes]] = []
        self.port, self.webui, rest_port, *self._worker_ports = processes.free_ports(3 + 2 * workers)
        self.url = f"spark://127.0.0.1:{self.port}"
        # The master's REST server: spark-submit in cluster deploy mode submits, polls and kills there.
        self.rest_port = rest_port if rest else None

    @property
    def rest_url(self) -> str | None:
        """The master's REST server as spark-submit's master URL; None when it is off."""
        return None if self.rest_port is None else f"spark://127.0.0.1:{self.rest_port}"

    def _spawn(self, name: str, args: Sequence[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        proc = start_logged([SPARK_CLASS, *args], self.home / "logs" / f"{name}.out", env, cwd=self.home)
        self.procs.append(proc)
        return proc

    def _env(self, name: str) -> dict[str, str]:
        env = {
            **os.environ,
            # pyspark's own SPARK_HOME, so spark-class need not find it with whatever python3 is on PATH
            "SPARK_HOME": str(Path(pyspark.__file__).resolve().parent),
            "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_LOG_DIR": str(self.home / "logs"),
            "SPARK_WORKER_DIR": str(self.home / name / "work"),
            "SPARK_LOCAL_DIRS": str(self.home / name / "local"),
            "SPARK_PID_DIR": str(self.home / "pids"),
        }
        for key in ("SPARK_WORKER_DIR", "SPARK_LOCAL_DIRS"):
            Path(env[key]).mkdir(parents=True, exist_ok=True)
        return env

    def _master_env(self) -> dict[str, str]:
        env = self._env("master")
        if self.rest_port is not None:
            env["SPARK_MASTER_OPTS"] = (
                f"-Dspark.master.rest.enabled=true -Dspark.master.rest.port={self.rest_port}"
            )
        return env

    def __enter__(self) -> SparkStandalone:
        try:
            self._spawn(
                "master",
                [
                    "org.apache.spark.deploy.master.Master",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                    "--webui-port",
                    str(self.webui),
                ],
                self._master_env(),
            )
            for i in range(self.n_workers):
                port, webui = self._worker_ports[2 * i], self._worker_ports[2 * i + 1]
                name = f"worker-{i + 1}"
                env = {**self._env(name), **self.worker_env}
                args = [
                    "org.apache.spark.deploy.worker.Worker",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(port),
                    "--webui-port",
                    str(webui),
                    "--cores",
                    str(self.CORES),
                    "--memory",
                    self.MEMORY,
                    "--work-dir",
                    env["SPARK_WORKER_DIR"],
                    self.url,
                ]
                self.workers.append(self._spawn(name, args, env))
            self._wait_alive()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def status(self) -> dict[str, Any]:
        """The master's /json/ (loopback web UI)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.webui}/json/", timeout=5) as resp:
            data: dict[str, Any] = json.load(resp)
        return data

    def alive_workers(self) -> int:
        return sum(1 for w in self.status().get("workers", []) if w.get("state") == "ALIVE")

    def applications(self) -> list[dict[str, Any]]:
        """Every application the master knows of, completed or active, with the facts worth keeping."""
        data = self.status()
        keep = ("id", "name", "state", "cores", "memoryperslave", "memoryperexecutor", "duration")
        return [
            {k: app[k] for k in keep if k in app}
            for app in [*data.get("completedapps", []), *data.get("activeapps", [])]
        ]

    def _wait_alive(self) -> None:
        deadline = time.monotonic() + self.timeout
        alive, last = 0, ""
        while time.monotonic() < deadline:
            dead = [p.args for p in self.procs if p.poll() is not None]
            if dead:
                raise RuntimeError(f"spark-class exited early: {dead}; see {self.home / 'logs'}")
            try:
                alive = self.alive_workers()
            except OSError as exc:  # the web UI is not up yet
                last = str(exc)
            else:
                if alive >= self.n_workers:
                    return
            time.sleep(0.5)
        raise RuntimeError(
            f"{alive} of {self.n_workers} Spark workers ALIVE after {self.timeout:.0f} s ({last}); "
            f"see {self.home / 'logs'}"
        )

    def stop(self) -> None:
        """Workers first (they stop their executors), then the master; each by PID / its own group."""
        for proc in reversed(self.procs):
            stop_process(proc, group=True)
