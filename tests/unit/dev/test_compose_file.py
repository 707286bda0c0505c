"""docker-compose.yaml: valid against the Compose Specification's JSON schema, and wired the way
mirrorflow needs it (Airflow services on one environment, the flow config, the offsets database, the
Spark master, the Kafka clusters, mounts and image versions), without Docker or a live cluster.

The schema is fetched by `make setup` (scripts/fetch_compose_schema.sh, pinned by sha256) into the
git-ignored .cache; without it these tests fail, never skip.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import itertools
import json
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlsplit

import jsonschema
import pytest
import yaml
from sqlalchemy.engine import make_url

from mirrorflow.config.model import MirrorConfig, parse_config
from mirrorflow_dev.local_airflow import LocalAirflow
from mirrorflow_dev.paths import KAFKA_VERSION, REPO_ROOT

COMPOSE_FILE = REPO_ROOT / "docker-compose.yaml"
SCHEMA_FILE = REPO_ROOT / ".cache" / "compose-spec" / "compose-spec.json"
FETCH_SCRIPT = REPO_ROOT / "scripts" / "fetch_compose_schema.sh"
DOCKERFILE = REPO_ROOT / "docker" / "airflow.Dockerfile"

AIRFLOW_COMMANDS = {
    "airflow-api-server": "api-server",
    "airflow-scheduler": "scheduler",
    "airflow-dag-processor": "dag-processor",
    "airflow-triggerer": "triggerer",
}
AIRFLOW_INIT = "airflow-init"
AIRFLOW_COMMON = "x-airflow-common"
SPARK_MASTER = "spark-master"
SPARK_WORKERS = ("spark-worker-1", "spark-worker-2")
PYTHON_ROOT = "/opt/mirrorflow/python"
SPARK_CONNECTION = {"conn_type": "spark", "host": "spark://spark-master", "port": 7077}
POSTGRES_INIT_DIR = "/docker-entrypoint-initdb.d"

# Compose interpolation: `$$` is a literal `$`; `${...}` and `$NAME` are variables.
_INTERPOLATION = re.compile(r"\$(?:(?P<escaped>\$)|\{(?P<braced>[^}]*)\}|(?P<named>[A-Za-z_][A-Za-z0-9_]*))")
_WITH_DEFAULT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*:-(?P<default>.*)", re.DOTALL)
_DRAFTS = (
    jsonschema.Draft202012Validator,
    jsonschema.Draft201909Validator,
    jsonschema.Draft7Validator,
    jsonschema.Draft6Validator,
    jsonschema.Draft4Validator,
    jsonschema.Draft3Validator,
)


@dataclass(frozen=True)
class Mount:
    """One entry of a service's `volumes`: a bind mount (``source`` a host path) or a named volume."""

    source: str
    target: str
    bind: bool


@dataclass(frozen=True)
class Compose:
    raw: dict[str, Any]  # as YAML gives it (merge keys resolved, anchors shared)
    resolved: dict[str, Any]  # interpolated as `docker compose` does with no variable set
    undefaulted: tuple[str, ...]  # variables used without a default

    @property
    def services(self) -> dict[str, Any]:
        services: dict[str, Any] = self.resolved["services"]
        return services

    def env(self, service: str) -> dict[str, str]:
        environment = self.services[service].get("environment", {})
        assert isinstance(environment, dict), f"{service}: environment must be a mapping"
        return {key: "" if value is None else str(value) for key, value in environment.items()}

    def mounts(self, service: str) -> list[Mount]:
        return [_mount(service, entry) for entry in self.services[service].get("volumes", [])]

    def host_path(self, service: str, container_path: str) -> Path:
        """Where ``container_path`` of ``service`` comes from in the repo, by its bind mounts."""
        path = PurePosixPath(container_path)
        for mount in self.mounts(service):
            if mount.bind and path.is_relative_to(mount.target):
                return _host(mount.source).joinpath(*path.relative_to(mount.target).parts)
        raise AssertionError(f"{service}: {container_path} is not under a bind mount of the repo")

    def command(self, service: str) -> list[str]:
        command = self.services[service].get("command")
        assert command is not None, f"{service} has no command"
        return command.split() if isinstance(command, str) else [str(part) for part in command]


def _mount(service: str, entry: str | dict[str, Any]) -> Mount:
    if isinstance(entry, dict):
        return Mount(str(entry.get("source", "")), str(entry["target"]), entry["type"] == "bind")
    parts = entry.split(":")
    assert len(parts) in (2, 3), f"{service}: volume {entry!r} is not source:target[:mode]"
    source = parts[0]
    return Mount(source, parts[1], source.startswith((".", "/", "~")))


def _host(source: str) -> Path:
    return (COMPOSE_FILE.parent / source).resolve()


def _interpolate(value: Any, undefaulted: list[str]) -> Any:
    """``value`` with every variable replaced by its default; a variable without one is recorded."""
    if isinstance(value, dict):
        return {key: _interpolate(item, undefaulted) for key, item in value.items()}
    if isinstance(value, list):
        return [_interpolate(item, undefaulted) for item in value]
    if not isinstance(value, str):
        return value

    def replace(match: re.Match[str]) -> str:
        if match["escaped"]:
            return "$"
        with_default = _WITH_DEFAULT.fullmatch(match["braced"] or "")
        if with_default is None:
            undefaulted.append(match[0])
            return ""
        return with_default["default"]

    return _INTERPOLATION.sub(replace, value)


@pytest.fixture(scope="module")
def compose() -> Compose:
    """docker-compose.yaml as YAML reads it, and as compose resolves it with no variable set."""
    raw = yaml.safe_load(COMPOSE_FILE.read_text(encoding="utf-8"))
    assert isinstance(raw, dict), f"{COMPOSE_FILE} is not a mapping"
    undefaulted: list[str] = []
    resolved = _interpolate(raw, undefaulted)
    return Compose(raw, resolved, tuple(undefaulted))


@functools.cache
def compose_schema() -> dict[str, Any]:
    """The pinned Compose Specification schema: exactly the file scripts/fetch_compose_schema.sh
    installs (its SCHEMA_SHA256), else the calling test fails (not errors, never skips) telling to
    run `make setup`."""
    pinned = re.search(r"^SCHEMA_SHA256=([0-9a-f]{64})$", FETCH_SCRIPT.read_text(encoding="utf-8"), re.M)
    assert pinned, f"{FETCH_SCRIPT} pins no SCHEMA_SHA256"
    fix = "run `make setup` (scripts/fetch_compose_schema.sh fetches it)"
    if not SCHEMA_FILE.is_file():
        pytest.fail(f"the Compose Specification schema is missing ({SCHEMA_FILE}): {fix}", pytrace=False)
    data = SCHEMA_FILE.read_bytes()
    if hashlib.sha256(data).hexdigest() != pinned[1]:
        pytest.fail(f"{SCHEMA_FILE} is not the schema pinned in {FETCH_SCRIPT.name}: {fix}", pytrace=False)
    schema = json.loads(data)
    assert isinstance(schema, dict)
    return schema


def _schema_key(uri: str) -> str:
    """A meta-schema URI without scheme, fragment or trailing slash: `$schema` is written both as
    http://json-schema.org/draft-07/schema# and https://json-schema.org/draft-07/schema."""
    parts = urlsplit(uri)
    return parts.netloc + parts.path.rstrip("/")


def declared_validator(schema: Mapping[str, Any]) -> Any:
    """The jsonschema validator class of the draft that the schema's `$schema` names."""
    declared = schema.get("$schema")
    assert isinstance(declared, str), "the Compose schema declares no $schema"
    for validator in _DRAFTS:
        if _schema_key(validator.ID_OF(validator.META_SCHEMA)) == _schema_key(declared):
            return validator
    raise AssertionError(f"the Compose schema declares {declared}, a draft jsonschema does not know")


def schema_errors(schema: Mapping[str, Any], document: Mapping[str, Any]) -> list[str]:
    validator = declared_validator(schema)
    validator.check_schema(schema)
    errors = validator(schema).iter_errors(document)
    return sorted(
        f"{'/'.join(map(str, error.absolute_path)) or '<top>'}: {error.message}" for error in errors
    )


# --- the Compose Specification ------------------------------------------------------------------


def test_every_variable_has_a_default(compose: Compose) -> None:
    """`docker compose up` works with no .env: each ${VAR} carries its development default."""
    assert compose.undefaulted == ()


def test_valid_against_the_compose_specification(compose: Compose) -> None:
    assert declared_validator(compose_schema()) is jsonschema.Draft7Validator  # what the pinned one declares
    assert schema_errors(compose_schema(), compose.resolved) == []


def test_the_schema_check_catches_a_misspelt_key(compose: Compose) -> None:
    broken = copy.deepcopy(compose.resolved)
    broken["services"]["postgres"]["enviroment"] = broken["services"]["postgres"].pop("environment")
    assert schema_errors(compose_schema(), broken) == [
        "services/postgres: 'enviroment' does not match any of the regexes: '^x-'"
    ]


# What `make airflow` and the stack must both set for the DAGs to run.
STACK_WIRING = {
    "AIRFLOW__CORE__DAGS_FOLDER",
    "AIRFLOW__CORE__PLUGINS_FOLDER",
    "AIRFLOW__CORE__LOAD_EXAMPLES",
    "AIRFLOW__CORE__EXECUTION_API_SERVER_URL",
    "AIRFLOW_CONN_SPARK_DEFAULT",
}


# --- Airflow -----------------------------------------------------------------------------------


def test_airflow_services_share_one_image_and_environment(compose: Compose) -> None:
    assert {*AIRFLOW_COMMANDS, AIRFLOW_INIT} <= set(compose.services)
    common = compose.raw[AIRFLOW_COMMON]
    for name in (*AIRFLOW_COMMANDS, AIRFLOW_INIT):
        service = compose.raw["services"][name]
        # The same YAML node (<<: *airflow-common), not a copy that could drift.
        assert service["environment"] is common["environment"], name
        assert (service["build"], service["image"]) == (common["build"], common["image"]), name
        assert service["volumes"] is common["volumes"], name
    for name, command in AIRFLOW_COMMANDS.items():
        assert compose.command(name) == [command]
    assert compose.command(AIRFLOW_INIT) == ["airflow", "db", "migrate"]


def test_airflow_environment(compose: Compose) -> None:
    env = compose.env("airflow-scheduler")
    assert env["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor"
    assert env["AIRFLOW__CORE__LOAD_EXAMPLES"] == "False"
    # The metadata database is the postgres service's own database, as its superuser.
    postgres = compose.env("postgres")
    metadata_db = make_url(env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"])
    assert (metadata_db.drivername, metadata_db.host, metadata_db.port) == (
        "postgresql+psycopg2",
        "postgres",
        5432,
    )
    assert (metadata_db.username, metadata_db.password, metadata_db.database) == (
        postgres["POSTGRES_USER"],
        postgres["POSTGRES_PASSWORD"],
        postgres["POSTGRES_DB"],
    )
    assert env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] == "http://airflow-api-server:8080/execution/"
    assert "127.0.0.1:8080:8080" in compose.services["airflow-api-server"]["ports"]
    # Airflow reads the repo's dags and plugins, Python imports mirrorflow and its Airflow glue.
    scheduler = "airflow-scheduler"
    assert compose.host_path(scheduler, env["AIRFLOW__CORE__DAGS_FOLDER"]) == REPO_ROOT / "dags"
    assert (
        compose.host_path(scheduler, env["AIRFLOW__CORE__PLUGINS_FOLDER"])
        == REPO_ROOT / "plugins" / "mirrorflow_airflow"
    )
    assert env["PYTHONPATH"] == PYTHON_ROOT


def test_make_airflow_is_wired_as_the_stack(compose: Compose, tmp_path: Path) -> None:
    """`make airflow` (airflow standalone) sets no product wiring the stack lacks, and the same
    folders: only the metadata DB, the Spark master and the paths on this machine differ."""
    local = LocalAirflow(tmp_path, tmp_path / "mm2.properties", tmp_path / "state", 8080, base={}).env
    stack = compose.env("airflow-scheduler")
    wiring = {k for k in local if k.startswith("MIRROR_") or k in STACK_WIRING}
    assert wiring <= set(stack)
    for key in ("AIRFLOW__CORE__DAGS_FOLDER", "AIRFLOW__CORE__PLUGINS_FOLDER"):
        assert compose.host_path("airflow-scheduler", stack[key]) == Path(local[key])
    assert local["AIRFLOW__CORE__LOAD_EXAMPLES"] == stack["AIRFLOW__CORE__LOAD_EXAMPLES"]


def test_the_containers_see_the_product_packages_as_installed(compose: Compose) -> None:
    """The product's packages are mounted side by side under PYTHONPATH, each from the folder
    pyproject.toml installs it from (so the copy job's file is found in mirrorflow_jobs as in an
    install), and config/ beside them; nothing else of the repo."""
    package_dir = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"][
        "setuptools"
    ]["package-dir"]
    packages = {
        REPO_ROOT / (package_dir.get(name) or f"{package_dir['']}/{name}"): f"{PYTHON_ROOT}/{name}"
        for name in ("mirrorflow", "mirrorflow_airflow", "mirrorflow_dags", "mirrorflow_jobs")
    }
    for name in (*AIRFLOW_COMMANDS, AIRFLOW_INIT):
        mounted = {_host(m.source): m.target for m in compose.mounts(name) if m.bind}
        assert mounted == {**packages, REPO_ROOT / "config": "/opt/mirrorflow/config"}, name
    for name in SPARK_WORKERS:
        mounted = {_host(m.source): m.target for m in compose.mounts(name) if m.bind}
        assert mounted == {REPO_ROOT / "include" / "mirrorflow": f"{PYTHON_ROOT}/mirrorflow"}, name


# --- the flow config ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def compose_config(compose: Compose) -> MirrorConfig:
    """MIRROR_CONFIG as the containers read it: the mounted repo file, with their environment."""
    env = compose.env("airflow-scheduler")
    path = compose.host_path("airflow-scheduler", env["MIRROR_CONFIG"])
    assert path == REPO_ROOT / "config" / "compose" / "mm2.properties"
    assert path.is_file(), f"{path} (MIRROR_CONFIG) is missing"
    return parse_config(path.read_text(encoding="utf-8"), path=path, env=env)


def test_config_parses_with_the_containers_environment(
    compose: Compose, compose_config: MirrorConfig
) -> None:
    env = compose.env("airflow-scheduler")
    assert [flow.name for flow in compose_config.flows] == ["primary->backup"]
    assert compose_config.state_dir == Path(env["MIRROR_STATE_DIR"])
    for flow in compose_config.flows:
        # The connection the copy task takes its Spark master from is defined in the environment.
        assert f"AIRFLOW_CONN_{flow.settings.spark_conn_id.upper()}" in env


def test_offsets_database_is_the_postgres_services_second_database(
    compose: Compose, compose_config: MirrorConfig
) -> None:
    url = make_url(compose_config.offsets_db_url)
    assert (url.get_backend_name(), url.drivername) == ("postgresql", "postgresql+psycopg2")
    assert (url.host, url.port) == ("postgres", 5432)
    postgres = compose.env("postgres")
    assert url.password == postgres["MIRROR_OFFSETS_DB_PASSWORD"]
    assert url.database != postgres["POSTGRES_DB"]  # not inside Airflow's metadata database
    # Created on the first start by the init scripts mounted into the postgres service.
    init_dir = compose.host_path("postgres", POSTGRES_INIT_DIR)
    scripts = "".join(p.read_text(encoding="utf-8") for p in sorted(init_dir.iterdir()) if p.is_file())
    assert f"CREATE ROLE {url.username} LOGIN PASSWORD :'password';" in scripts
    assert f"CREATE DATABASE {url.database} OWNER {url.username};" in scripts
    assert '-v password="${MIRROR_OFFSETS_DB_PASSWORD:?' in scripts


def test_clusters_are_the_kafka_services(compose: Compose, compose_config: MirrorConfig) -> None:
    for alias, cluster in compose_config.clusters.items():
        for server in cluster.bootstrap_servers.split(","):
            host, port = server.strip().rsplit(":", 1)
            assert host in compose.services, f"{alias}: {host} is not a compose service"
            advertised = compose.env(host)["KAFKA_ADVERTISED_LISTENERS"].split(",")
            assert any(listener.endswith(f"://{host}:{port}") for listener in advertised), (alias, advertised)
            assert compose.services[host]["image"] == f"apache/kafka:{KAFKA_VERSION}"


def test_kafka_services_are_single_node_kraft_clusters(compose: Compose) -> None:
    kafka = [
        name for name, service in compose.services.items() if service["image"].startswith("apache/kafka:")
    ]
    assert kafka == ["kafka-primary", "kafka-backup"]
    cluster_ids = set()
    for name in kafka:
        env = compose.env(name)
        assert env["KAFKA_PROCESS_ROLES"] == "broker,controller"
        listeners = dict(_listener(entry) for entry in env["KAFKA_LISTENERS"].split(","))
        advertised = dict(_listener(entry) for entry in env["KAFKA_ADVERTISED_LISTENERS"].split(","))
        protocols = dict(entry.split(":") for entry in env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(","))
        assert set(listeners) == set(protocols) == {*advertised, env["KAFKA_CONTROLLER_LISTENER_NAMES"]}
        controller = listeners[env["KAFKA_CONTROLLER_LISTENER_NAMES"]]
        assert env["KAFKA_CONTROLLER_QUORUM_VOTERS"] == f"{env['KAFKA_NODE_ID']}@{name}:{controller[1]}"
        # In the stack by service name; from the host on the published loopback port.
        assert advertised[env["KAFKA_INTER_BROKER_LISTENER_NAME"]] == (name, "9092")
        host_name, host_port = advertised["HOST"]
        assert (host_name, listeners["HOST"][1]) == ("127.0.0.1", host_port)
        assert compose.services[name]["ports"] == [f"127.0.0.1:{host_port}:{host_port}"]
        assert compose.services[name]["hostname"] == name
        cluster_ids.add(env["CLUSTER_ID"])
    assert len(cluster_ids) == len(kafka)  # two clusters, not one cluster's two halves


def _listener(entry: str) -> tuple[str, tuple[str, str]]:
    """`NAME://host:port` as (NAME, (host, port))."""
    name, address = entry.split("://")
    host, port = address.rsplit(":", 1)
    return name, (host, port)


# --- Spark -------------------------------------------------------------------------------------


def test_spark_connection_names_the_master_service(compose: Compose) -> None:
    connection = json.loads(compose.env("airflow-scheduler")["AIRFLOW_CONN_SPARK_DEFAULT"])
    assert connection == SPARK_CONNECTION
    master = urlsplit(connection["host"]).hostname
    assert master == SPARK_MASTER
    assert master in compose.services
    assert _option_pairs(compose.command(SPARK_MASTER)) >= {("--host", SPARK_MASTER), ("--port", "7077")}
    master_url = f"spark://{SPARK_MASTER}:{connection['port']}"
    for worker in SPARK_WORKERS:
        command = compose.command(worker)
        assert command[-1] == master_url, worker
        # Executors advertise the worker's host name; the driver must be able to resolve it.
        assert ("--host", worker) in _option_pairs(command)
        assert compose.services[worker]["hostname"] == worker


def _option_pairs(command: list[str]) -> set[tuple[str, str]]:
    return set(itertools.pairwise(command))


def test_state_dir_is_one_named_volume_for_airflow_and_the_spark_workers(compose: Compose) -> None:
    state_dir = compose.env("airflow-scheduler")["MIRROR_STATE_DIR"]
    for name in (*AIRFLOW_COMMANDS, AIRFLOW_INIT, *SPARK_WORKERS):
        volumes = [m for m in compose.mounts(name) if m.target == state_dir]
        assert volumes == [Mount("mirrorflow-state", state_dir, bind=False)], name
    assert "mirrorflow-state" in compose.resolved["volumes"]


# --- dependencies, mounts, images --------------------------------------------------------------


def _dependencies(service: Mapping[str, Any]) -> dict[str, str]:
    depends_on = service.get("depends_on", {})
    if isinstance(depends_on, list):
        return dict.fromkeys(depends_on, "service_started")
    return {name: spec.get("condition", "service_started") for name, spec in depends_on.items()}


def test_depends_on_names_existing_services_and_can_be_met(compose: Compose) -> None:
    services = compose.services
    for name, service in services.items():
        for dependency, condition in _dependencies(service).items():
            assert dependency in services, f"{name} depends on {dependency}, which is not a service"
            target = services[dependency]
            if condition == "service_healthy":
                # Without a healthcheck, `up` fails the dependent service at once.
                assert "healthcheck" in target and not target["healthcheck"].get("disable"), (
                    name,
                    dependency,
                )
            if condition == "service_completed_successfully":
                # A restarted one-shot never counts as completed.
                assert target.get("restart") == "no", (name, dependency)
    for name in AIRFLOW_COMMANDS:
        dependencies = _dependencies(services[name])
        assert dependencies[AIRFLOW_INIT] == "service_completed_successfully", name
        assert dependencies["postgres"] == "service_healthy", name
    assert _dependencies(services[AIRFLOW_INIT]) == {"postgres": "service_healthy"}
    assert _unstartable(services) == set(), "depends_on has a cycle"


def _unstartable(services: Mapping[str, Any]) -> set[str]:
    """The services that no start order reaches: those on or behind a depends_on cycle."""
    remaining = {name: set(_dependencies(service)) for name, service in services.items()}
    started: set[str] = set()
    while ready := {name for name, needs in remaining.items() if needs <= started}:
        started |= ready
        for name in ready:
            del remaining[name]
    return set(remaining)


def test_bind_mounts_and_build_files_exist_in_the_repo(compose: Compose) -> None:
    declared_volumes = set(compose.resolved.get("volumes") or {})
    for name in compose.services:
        for mount in compose.mounts(name):
            if mount.bind:
                host = _host(mount.source)
                assert host.is_relative_to(REPO_ROOT) and host.exists(), (
                    f"{name}: {mount.source} is not in the repo"
                )
            else:
                assert mount.source in declared_volumes, f"{name}: volume {mount.source} is not declared"
        build = compose.services[name].get("build")
        if build is not None:
            context = _host(build["context"])
            assert context == REPO_ROOT, name
            assert (context / build["dockerfile"]).is_file(), name


def _dockerfile_arg(name: str) -> str:
    found = re.search(rf"^ARG {name}=(\S+)$", DOCKERFILE.read_text(encoding="utf-8"), re.M)
    assert found, f"{DOCKERFILE} has no ARG {name} with a default"
    return found[1]


def _pinned(package: str) -> str:
    lines = (REPO_ROOT / "requirements.txt").read_text(encoding="utf-8").splitlines()
    (version,) = [line.split("==", 1)[1] for line in lines if line.startswith(f"{package}==")]
    return version


def test_images_match_the_pinned_versions(compose: Compose) -> None:
    python = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mypy"][
        "python_version"
    ]
    assert _dockerfile_arg("AIRFLOW_IMAGE") == f"apache/airflow:{_pinned('apache-airflow')}-python{python}"
    spark_image = _dockerfile_arg("SPARK_IMAGE")
    assert spark_image.startswith(f"apache/spark:{_pinned('pyspark')}-")
    assert compose.services[SPARK_MASTER]["image"] == spark_image
    targets = {
        name: compose.services[name]["build"]["target"] for name in (*AIRFLOW_COMMANDS, *SPARK_WORKERS)
    }
    assert targets == {
        **dict.fromkeys(AIRFLOW_COMMANDS, "airflow"),
        **dict.fromkeys(SPARK_WORKERS, "spark-worker"),
    }
    dockerfile = DOCKERFILE.read_text(encoding="utf-8")
    for stage in ("airflow", "spark-worker"):
        assert re.search(rf"^FROM \S+ AS {stage}$", dockerfile, re.M), stage
    assert "COPY --chown=airflow:0 requirements.txt /opt/mirrorflow/requirements.txt" in dockerfile
    assert "pip install -r /opt/mirrorflow/requirements.txt" in dockerfile


def test_dockerfile_copies_from_the_context_only_what_it_lets_in() -> None:
    """Each file the build copies from the repo exists and is let through the Dockerfile's own ignore
    file, which keeps the rest of the repo (.venv, .cache, .state) out of the build context."""
    ignore = DOCKERFILE.with_name(DOCKERFILE.name + ".dockerignore").read_text(encoding="utf-8").splitlines()
    assert "*" in ignore
    copied = []
    for line in DOCKERFILE.read_text(encoding="utf-8").splitlines():
        words = line.split()
        if words[:1] == ["COPY"] and not any(word.startswith("--from=") for word in words):
            copied += [word for word in words[1:-1] if not word.startswith("--")]
    assert copied == ["jvm/spark-kafka/pom.xml", "requirements.txt"]
    for source in copied:
        assert (REPO_ROOT / source).is_file(), source
        assert f"!{source}" in ignore, source
