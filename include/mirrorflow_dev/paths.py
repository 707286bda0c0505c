"""Where this repository's files live when working from a checkout (demo, tests, bench). Every location
can be moved by an env variable. The product itself never uses these: it is told where things are
(MIRROR_CONFIG, MIRROR_STATE_DIR, MIRROR_JVM_CACHE)."""

from __future__ import annotations

import os
from pathlib import Path

from mirrorflow.app.dag_spec import ENV_JVM_CACHE, SPARK_VERSION, spark_kafka_folder
from mirrorflow.config.model import ENV_CONFIG, MirrorConfig, load_config

REPO_ROOT = Path(__file__).resolve().parents[2]

KAFKA_VERSION = "4.3.1"
__all__ = ["KAFKA_VERSION", "REPO_ROOT", "SPARK_VERSION"]


def jvm_cache() -> Path:
    """Git-ignored folder that Maven fills with jars (``make setup``)."""
    return Path(os.environ.get(ENV_JVM_CACHE, REPO_ROOT / ".cache" / "jvm"))


def kafka_libs() -> Path:
    """Kafka broker, tools and MirrorMaker 2 jars: one folder per Kafka version, never mixed."""
    return jvm_cache() / f"kafka-{KAFKA_VERSION}"


def spark_kafka_jars() -> list[Path]:
    """Spark's Kafka connector jars for the pinned Spark version, for ``spark.jars``."""
    return sorted(spark_kafka_folder(jvm_cache()).glob("*.jar"))


def demo_config_path() -> Path:
    """The demo configuration shipped with the repo: two local clusters, state in ``.state``."""
    return REPO_ROOT / "config" / "mm2.properties"


def demo_config() -> MirrorConfig:
    """The configuration env ``MIRROR_CONFIG`` names, else the demo's."""
    return load_config(os.environ.get(ENV_CONFIG) or demo_config_path())


def state_root() -> Path:
    """The checkout's git-ignored state folder: local clusters, Airflow homes, test artifacts."""
    return REPO_ROOT / ".state"
