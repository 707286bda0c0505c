"""Shared fixtures. Brokers start only when a test requests ``kafka_clusters``, the PostgreSQL server
only when one requests ``postgres_server``, Keycloak only when one requests ``keycloak``, the schema
registries only when one requests ``registries`` (each once per session).

A test using one of the server fixtures, directly or through another fixture, is marked for it
(``kafka``, ``spark``, ``postgres``, ``oauth``, ``registry``), so that ``-m "not (kafka or spark or
airflow or postgres or oauth or registry or browser or faults)"`` (``make test-unit``) leaves only the
tests that start nothing. Tests
that start servers of their own, or run Airflow, a browser or the fault injection, carry their marks
themselves.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import re
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from mirror_helpers import local_clusters, write_mm2
from mirror_helpers import replicated_clusters as start_replicated_clusters

from mirrorflow.app.dag_spec import ENV_JVM_CACHE
from mirrorflow.config.model import MirrorConfig
from mirrorflow_dev import class_sharing, kafka_home, local_keycloak, local_postgres, local_registry, paths
from mirrorflow_dev.local_kafka import LocalCluster
from mirrorflow_dev.local_keycloak import LocalKeycloak
from mirrorflow_dev.local_postgres import LocalPostgres
from mirrorflow_dev.local_registry import LocalRegistry
from mirrorflow_dev.replicated_kafka import ReplicatedCluster

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# The copy task's spark-submit (and the tests that build it) finds Spark's Kafka connector jars here, as
# a deployment sets it; from the checkout, they are the ones `make setup` resolved.
os.environ.setdefault(ENV_JVM_CACHE, str(paths.jvm_cache()))
# Every spark-submit of the tests (the copy and verify jobs, the Spark session) loads Spark's classes
# from the archive `make setup` dumped: seconds of CPU less per job on a machine the suite keeps busy.
os.environ["SPARK_SUBMIT_OPTS"] = class_sharing.spark_submit_opts(os.environ.get("SPARK_SUBMIT_OPTS", ""))

SESSION_ALIASES = ("primary", "backup")
REPLICATED_ALIASES = ("primary", "backup")
_names = itertools.count()

# The log cleaner looks for work every 100 ms instead of every 15 s: tests of compacted topics wait
# for it to compact a segment they rolled.
CLEANER = {"log.cleaner.backoff.ms": "100"}
# The three-node clusters look for expired producers every second, not every 10 minutes: a writer
# whose newest record timestamp is older than producer.id.expiration.ms (a day; the sample records
# are from 2001) is then forgotten within a second of each write, as a production broker forgets it
# within 10 minutes, and the fault cases meet that within their seconds.
PRODUCTION_SHAPE = {**CLEANER, "producer.id.expiration.check.interval.ms": "1000"}

# The session Keycloak's access tokens live this long: not Keycloak's default (300 s), so that a test
# sees the realm got the lifespan it was created with.
KEYCLOAK_TOKEN_LIFESPAN_S = 900

# The fixtures that start a server, and the mark a test using one gets.
SERVER_MARKS = {
    "kafka_clusters": "kafka",
    "spark": "spark",
    "postgres_server": "postgres",
    "replicated_clusters": "kafka",
    "keycloak": "oauth",
    "registries": "registry",
}

# Shared test bodies outside test modules still get pytest's assertion messages.
pytest.register_assert_rewrite("offsets_store_cases")


# Modules with a test of these marks run first, in this order: the longest ones (Airflow runs, the
# fault injection, then those with a server of their own, then those on the session's brokers), so
# that the workers end together on the quick modules instead of one finishing a long module alone.
LONG_FIRST = ("airflow", "faults", "registry", "oauth", "postgres", "kafka")


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        used = set(getattr(item, "fixturenames", ()))  # the test's whole fixture closure
        for fixture, mark in SERVER_MARKS.items():
            if fixture in used:
                item.add_marker(mark)
    rank: dict[str, int] = {}
    for item in items:
        marks = {m.name for m in item.iter_markers()}
        here = min((i for i, m in enumerate(LONG_FIRST) if m in marks), default=len(LONG_FIRST))
        rank[item.nodeid.split("::")[0]] = min(rank.get(item.nodeid.split("::")[0], here), here)
    items.sort(key=lambda item: rank[item.nodeid.split("::")[0]])  # stable: modules stay whole


# How many of the slowest test modules the end of every run lists, with their summed durations.
SLOWEST_MODULES = 20


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The slowest test modules (setup, call and teardown summed): where the suite's time goes."""
    spent: dict[str, float] = {}
    for reports in terminalreporter.stats.values():
        for report in reports:
            if isinstance(report, pytest.TestReport):
                module = report.nodeid.split("::")[0]
                spent[module] = spent.get(module, 0.0) + report.duration
    if not spent:
        return
    terminalreporter.write_sep("=", f"slowest {SLOWEST_MODULES} test modules")
    for module, seconds in sorted(spent.items(), key=lambda kv: -kv[1])[:SLOWEST_MODULES]:
        terminalreporter.write_line(f"{seconds:8.1f}s {module}")


@pytest.fixture(scope="session")
def kafka_clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, LocalCluster]]:
    """Two independent single-node clusters ("primary", "backup") on free loopback ports.

    Shared by the whole session: tests must use ``unique_name`` for topics and groups. They are
    always stopped at session end, also when tests fail; missing jars fail loudly, never skip.
    """
    with _session_clusters(tmp_path_factory, SESSION_ALIASES) as clusters:
        yield clusters


@pytest.fixture(scope="session")
def three_clusters(
    kafka_clusters: dict[str, LocalCluster], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, LocalCluster]]:
    """The session's two clusters and a third, "dr", as shared as they are; started by the first test
    that asks for it (chains and fan-in need three), so the suite's other workers never pay for an
    idle broker."""
    with _session_clusters(tmp_path_factory, ("dr",)) as third:
        yield {**kafka_clusters, **third}


@contextlib.contextmanager
def _session_clusters(
    factory: pytest.TempPathFactory, aliases: Sequence[str]
) -> Iterator[dict[str, LocalCluster]]:
    if not kafka_home.libs_present():
        pytest.fail(f"Kafka jars missing in {paths.kafka_libs()}: run `make setup`", pytrace=False)
    with local_clusters(aliases, factory.mktemp("kafka"), CLEANER) as clusters:
        yield clusters


@pytest.fixture(scope="session")
def replicated_clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ReplicatedCluster]]:
    """Two independent three-node clusters ("primary", "backup"), production's shape: static KRaft
    voters, replication factor 3, min.insync.replicas 2 (``replicated_kafka``). Six JVMs: tests using
    them carry the ``replicated`` mark (``make test-replicated``), which keeps them out of ``make test``.

    Shared by the session like ``kafka_clusters``: a test that kills a node restarts it (and waits for
    its replicas to rejoin the ISR) before it ends. Stopped at session end by PID, restarted nodes too.
    """
    if not kafka_home.libs_present():
        pytest.fail(f"Kafka jars missing in {paths.kafka_libs()}: run `make setup`", pytrace=False)
    with start_replicated_clusters(
        REPLICATED_ALIASES, tmp_path_factory.mktemp("replicated"), PRODUCTION_SHAPE
    ) as clusters:
        yield clusters


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[LocalPostgres]:
    """One throwaway PostgreSQL server on a free loopback port, shared by the session.

    Stopped by its PID (and its files deleted) at session end, also when tests fail. Missing server
    binaries fail loudly, never skip: production runs on PostgreSQL.
    """
    try:
        server = local_postgres.start_postgres()
    except local_postgres.LocalPostgresError as error:
        pytest.fail(str(error), pytrace=False)
    try:
        yield server
    finally:
        local_postgres.stop_postgres(server)


@pytest.fixture(scope="session")
def keycloak(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKeycloak]:
    """One throwaway Keycloak (OIDC server) on a free loopback port with the realm ``mirror``, shared
    by the session: tests register clients of their own (``add_client`` with ``unique_name``).

    Stopped by its PID (and its files deleted) at session end, also when tests fail. A missing
    distribution or Java 21 fails loudly, never skips: the OAUTHBEARER tests need a real server.
    """
    try:
        server = local_keycloak.start_keycloak(
            tmp_path_factory.mktemp("keycloak"), token_lifespan_s=KEYCLOAK_TOKEN_LIFESPAN_S
        )
    except local_keycloak.LocalKeycloakError as error:
        pytest.fail(str(error), pytrace=False)
    try:
        yield server
    finally:
        local_keycloak.stop_keycloak(server)


@pytest.fixture(scope="session")
def registries(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, LocalRegistry]]:
    """A throwaway schema registry (Apicurio Registry) for each of the session's ``primary`` and
    ``backup`` clusters, shared by the session: tests use subjects of their own (``unique_name``).

    Stopped by their PIDs at session end, also when tests fail. A missing distribution or Java 21
    fails loudly, never skips: the schema tests need real registries.
    """
    try:
        with local_registry.running_registries(tmp_path_factory.mktemp("registries"), 2) as started:
            yield dict(zip(("primary", "backup"), started, strict=True))
    except local_registry.LocalRegistryError as error:
        pytest.fail(str(error), pytrace=False)


@pytest.fixture
def postgres_db_url(postgres_server: LocalPostgres) -> str:
    """A URL under which the session's server looks new and empty: a login role of this test's own,
    whose tables go to a schema of its own, so tests never share tables.

    Its sessions run at UTC+05:30, so a timestamp stored without its zone would read back shifted.
    """
    return local_postgres.create_user(postgres_server, f"test_{next(_names)}", {"timezone": "Asia/Kolkata"})


@pytest.fixture
def unique_name(request: pytest.FixtureRequest) -> str:
    """A topic/group-safe name unique to this test call, this process and this session."""
    base = re.sub(r"[^A-Za-z0-9-]+", "-", request.node.name).strip("-")[:150]
    return f"{base}-{os.getpid()}-{next(_names)}"


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """One local Spark session with the Kafka connector, bound to loopback, shared by the session."""
    from pyspark.sql import SparkSession

    jars = paths.spark_kafka_jars()
    if not jars:
        pytest.fail(
            f"Spark Kafka connector jars missing in {paths.jvm_cache()}: run `make setup`", pytrace=False
        )
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYSPARK_PYTHON"] = sys.executable  # workers must import mirrorflow from this venv
    session = (
        SparkSession.builder.master("local[2]")
        .appName("mirrorflow-tests")
        .config("spark.jars", ",".join(str(j) for j in jars))
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.sql.warehouse.dir", str(Path(tempfile.mkdtemp(prefix="mirrorflow-warehouse-"))))
        .getOrCreate()
    )
    try:
        yield session
    finally:
        session.stop()
        # py4j logs from __del__ at interpreter exit, after pytest closed the log stream.
        logging.getLogger("py4j").setLevel(logging.WARNING)


@pytest.fixture
def write_config(tmp_path: Path, kafka_clusters: dict[str, LocalCluster]) -> Callable[[str], MirrorConfig]:
    """Writes an mm2.properties for the session clusters (plus the given lines) and loads it.

    Each test gets its own state dir and offsets database, so tests never share progress.
    """
    return lambda extra: write_mm2(tmp_path, kafka_clusters, 1, extra)


@pytest.fixture
def write_config_of_three(
    tmp_path: Path, three_clusters: dict[str, LocalCluster]
) -> Callable[[str], MirrorConfig]:
    """``write_config`` over ``three_clusters``: for chains, fan-in and aggregation."""
    return lambda extra: write_mm2(tmp_path, three_clusters, 1, extra)
