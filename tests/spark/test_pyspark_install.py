"""The full pinned pyspark is installed, not the Connect-only pyspark-client.

pyspark-client (pulled by the Airflow Spark provider) ships the same ``pyspark/`` package without the
JVM jars and with its own version: if it installed last, the version or the jars below give it away,
and a classic SparkSession (JVM, Python workers, Arrow) could not run at all.
"""

from __future__ import annotations

import importlib.metadata
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

import pyarrow as pa
import pyspark
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType

from mirrorflow_dev import paths

pytestmark = pytest.mark.spark


def _pinned_pyspark() -> str:
    text = (paths.REPO_ROOT / "requirements.txt").read_text()
    pins = re.findall(r"^pyspark==(\S+)\s*$", text, flags=re.MULTILINE)
    assert len(pins) == 1, f"requirements.txt must pin pyspark exactly once, found {pins}"
    return str(pins[0])


def test_pyspark_version_is_the_pin() -> None:
    pin = _pinned_pyspark()
    assert pyspark.__version__ == pin, (
        f"pyspark/ is version {pyspark.__version__}, requirements pin {pin}: pyspark-client probably "
        "installed over it; reinstall the pinned pyspark last (scripts/setup.sh)"
    )
    assert importlib.metadata.version("pyspark") == pin
    assert pin == paths.SPARK_VERSION, "the connector jars are resolved for paths.SPARK_VERSION"


def test_pyspark_ships_the_jvm_jars() -> None:
    jars = Path(pyspark.__file__).parent / "jars"
    assert jars.is_dir(), f"{jars} missing: this is the Connect-only pyspark-client"
    core = sorted(p.name for p in jars.glob("spark-core_*.jar"))
    assert core == [f"spark-core_2.13-{_pinned_pyspark()}.jar"]
    assert (jars / f"spark-sql_2.13-{_pinned_pyspark()}.jar").is_file()


def test_jvm_runs_the_pinned_spark(spark: SparkSession) -> None:
    assert spark.version == _pinned_pyspark()
    assert spark.sparkContext.master == "local[2]"


def test_python_udf_gives_exact_results(spark: SparkSession) -> None:
    square_plus_one = F.udf(lambda x: x * x + 1, LongType())
    rows = spark.range(0, 10, numPartitions=3).select(square_plus_one("id").alias("y")).collect()
    assert sorted(r.y for r in rows) == [x * x + 1 for x in range(10)]


def test_map_in_arrow_gives_exact_results(spark: SparkSession) -> None:
    def per_batch(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            ids = batch.column("id").to_pylist()
            yield pa.RecordBatch.from_pylist(
                [{"id": i, "tag": f"row-{i}", "blob": bytes([i % 256]) * 3} for i in ids],
                schema=pa.schema([("id", pa.int64()), ("tag", pa.string()), ("blob", pa.binary())]),
            )

    df = spark.range(0, 1000, numPartitions=4).mapInArrow(per_batch, "id bigint, tag string, blob binary")
    rows = sorted((r.id, r.tag, bytes(r.blob)) for r in df.collect())
    assert rows == [(i, f"row-{i}", bytes([i % 256]) * 3) for i in range(1000)]
