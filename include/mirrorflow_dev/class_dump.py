"""Dump the shared-class archives of ``class_sharing``: a broker started and stopped, and a trivial
spark-submit, each dumping the classes it loaded when it exits. Again only when the java or the jars
changed (a stamp next to each archive).

    python -m mirrorflow_dev.class_dump     (``make setup`` runs it)
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pyspark

from mirrorflow_dev import class_sharing, local_kafka, paths
from mirrorflow_dev.kafka_home import java_executable
from mirrorflow_dev.processes import free_ports

_TRIVIAL_JOB = """
from pyspark.sql import SparkSession
spark = SparkSession.builder.getOrCreate()
assert spark.sparkContext.parallelize(range(4), 2).map(lambda x: x * 2).sum() == 12
spark.stop()
"""


def _stamp(jars: Path) -> str:
    """What an archive depends on: the java that dumps it and the jars on its class path, with the
    size and modification time the JVM checks (a reinstalled jar of the same size refuses it)."""
    java = subprocess.run([java_executable(), "-version"], capture_output=True, text=True, check=True).stderr
    listing = sorted(f"{p.name} {p.stat().st_size} {p.stat().st_mtime_ns}" for p in jars.glob("*.jar"))
    return hashlib.sha256("\n".join([java, *listing]).encode()).hexdigest()[:16]


def _dump_kafka() -> None:
    with tempfile.TemporaryDirectory() as root, class_sharing.dumping("kafka"):
        port, controller = free_ports(2)
        local_kafka.stop_cluster(local_kafka.start_cluster("cds", port, controller, Path(root) / "cds"))


def _dump_spark() -> None:
    with tempfile.TemporaryDirectory() as root, class_sharing.dumping("spark") as fresh:
        job = Path(root) / "trivial.py"
        job.write_text(_TRIVIAL_JOB)
        env = {
            **os.environ,
            "SPARK_SUBMIT_OPTS": f"-XX:ArchiveClassesAtExit={fresh}",
            "SPARK_LOCAL_IP": "127.0.0.1",
            "PYSPARK_PYTHON": sys.executable,
        }
        submit = Path(sys.executable).parent / "spark-submit"
        subprocess.run(
            [str(submit), "--master", "local[2]", "--conf", "spark.ui.enabled=false", str(job)],
            env=env, cwd=root, capture_output=True, check=True, timeout=300,
        )  # fmt: skip


def main() -> int:
    spark_jars = Path(pyspark.__file__).parent / "jars"
    for kind, jars, dump in (("kafka", paths.kafka_libs(), _dump_kafka), ("spark", spark_jars, _dump_spark)):
        archive = class_sharing.archive(kind)
        stamp_file, stamp = archive.with_suffix(".stamp"), _stamp(jars)
        if archive.exists() and stamp_file.exists() and stamp_file.read_text() == stamp:
            continue
        print(f"setup: dumping the {kind} JVMs' shared classes into {archive}", flush=True)
        dump()
        stamp_file.write_text(stamp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
