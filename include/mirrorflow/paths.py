"""Where the project's files live on this machine. Every location can be moved by an env variable."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]

KAFKA_VERSION = "4.3.1"
SPARK_VERSION = "4.0.0"


def jvm_cache() -> Path:
    """Git-ignored folder that Maven fills with jars (``make setup``)."""
    return Path(os.environ.get("MIRROR_JVM_CACHE", REPO_ROOT / ".cache" / "jvm"))


def kafka_libs() -> Path:
    """Kafka broker, tools and MirrorMaker 2 jars: one folder per Kafka version, never mixed."""
    return jvm_cache() / f"kafka-{KAFKA_VERSION}"


def spark_kafka_jars() -> list[Path]:
    """Spark's Kafka connector jars for the pinned Spark version, for ``spark.jars``."""
    folder = jvm_cache() / f"spark-kafka-{SPARK_VERSION}"
    return sorted(folder.glob("*.jar"))


def default_config_path() -> Path:
    """The demo configuration shipped with the repo."""
    return REPO_ROOT / "config" / "mm2.properties"
