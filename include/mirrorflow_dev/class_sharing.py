"""Class-data sharing (a JDK CDS archive) for the JVMs the tests start by the hundred: Kafka brokers
(and their storage format) and Spark drivers. Loading classes from a shared archive instead of the
jars cuts a broker's start-up CPU from about 3.5 s to 2 s and a small spark-submit's from about 11 s
to 7 s, on 2 cores that the suite keeps busy.

``python -m mirrorflow_dev.class_dump`` (``make setup`` runs it) dumps one archive per kind into
``<jvm cache>/cds/``. ``options(kind)`` is then what a JVM of that kind adds: nothing while its
archive is missing. An archive belongs to the java and the class path it was dumped with; a JVM
that finds them changed warns once and loads from the jars (setup dumps it again). Only the dev
tooling and the tests use them: the product's jobs and the bench's contenders start as users start
them.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from mirrorflow_dev import paths

# The archive a kind's JVMs dump at exit while ``dumping`` runs, in this process.
_dumping: dict[str, Path] = {}
# The JIT's first tier only (C1): a JVM that lives seconds to minutes spends a third less CPU on
# compiling (a small spark-submit about 5.7 s instead of 8.2 s), beside the suite's other JVMs.
QUICK_JIT = "-XX:TieredStopAtLevel=1"


def archive(kind: str) -> Path:
    return paths.jvm_cache() / "cds" / f"{kind}.jsa"


def options(kind: str) -> list[str]:
    """The JVM options of a ``kind`` JVM: dump its archive, share it, or neither."""
    if kind in _dumping:
        return [f"-XX:ArchiveClassesAtExit={_dumping[kind]}"]
    shared = archive(kind)
    return [f"-XX:SharedArchiveFile={shared}"] if shared.exists() else []


def spark_submit_opts(base: str = "") -> str:
    """``SPARK_SUBMIT_OPTS`` (spark-submit's driver JVM in client mode) with the Spark archive and the
    JIT's first tier only."""
    return " ".join([base, QUICK_JIT, *options("spark")]).strip()


@contextlib.contextmanager
def dumping(kind: str) -> Iterator[Path]:
    """While the block runs, JVMs of ``kind`` started by this process dump their classes at exit
    into a new archive, which replaces the kind's archive once the block ended without an error."""
    target = archive(kind)
    target.parent.mkdir(parents=True, exist_ok=True)
    fresh = target.with_suffix(f".{os.getpid()}.jsa")
    _dumping[kind] = fresh
    try:
        yield fresh
    finally:
        del _dumping[kind]
    if not fresh.exists():
        raise RuntimeError(f"no {kind} JVM dumped its classes into {fresh}")
    fresh.replace(target)
