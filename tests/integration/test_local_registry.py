"""The throwaway schema registries (Apicurio Registry serving Confluent's API): what Confluent's client
sees, loopback only on Java 21, PID-safe stop, clear failures, and the one difference from Confluent's
registry that the schema sync is built around: a schema cannot be registered under an id of the
caller's choosing, so ids differ between two registries and the copy maps them."""

from __future__ import annotations

import json
import os
import urllib.request
from pathlib import Path

import psutil
import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

from mirrorflow.app.dag_spec import ENV_JVM_CACHE
from mirrorflow_dev import local_registry
from mirrorflow_dev.java21 import java21_home
from mirrorflow_dev.local_registry import LocalRegistry, LocalRegistryError

AVRO = json.dumps({"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"}]})


def _put(url: str, body: dict[str, object], method: str = "POST") -> dict[str, object]:
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/vnd.schemaregistry.v1+json"},
        method=method,
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return dict(json.loads(response.read()))


def test_confluents_client_registers_and_reads_back_a_schema(
    registries: dict[str, LocalRegistry], unique_name: str
) -> None:
    client = SchemaRegistryClient({"url": registries["primary"].url})
    subject = f"{unique_name}-value"

    schema_id = client.register_schema(subject, Schema(AVRO, "AVRO"))

    assert json.loads(client.get_schema(schema_id).schema_str or "") == json.loads(AVRO)
    latest = client.get_latest_version(subject)
    assert (latest.schema_id, latest.version) == (schema_id, 1)
    assert subject not in SchemaRegistryClient({"url": registries["backup"].url}).get_subjects()


def test_a_schema_id_of_the_callers_choosing_is_not_honoured(
    registries: dict[str, LocalRegistry], unique_name: str
) -> None:
    """Confluent's registry takes an ``id`` (and ``version``) with a registration in IMPORT mode;
    Apicurio's Confluent API accepts the mode and the fields, and assigns its own id."""
    url = registries["backup"].url
    wanted = 987_654
    assert _put(f"{url}/mode/{unique_name}-value", {"mode": "IMPORT"}, "PUT") == {"mode": "IMPORT"}

    body = {"schema": AVRO, "id": wanted, "version": 3}
    answer = _put(f"{url}/subjects/{unique_name}-value/versions", body)

    assert answer["id"] != wanted
    assert SchemaRegistryClient({"url": url}).get_latest_version(f"{unique_name}-value").version == 1


def test_server_listens_on_loopback_only_and_runs_java_21(registries: dict[str, LocalRegistry]) -> None:
    for server in registries.values():
        jvm = psutil.Process(server.pid)
        assert Path(jvm.exe()).is_relative_to(java21_home())
        assert "-Xmx384m" in jvm.cmdline()
        listening = [c.laddr for c in jvm.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN]
        assert sorted(addr.port for addr in listening) == sorted((server.port, server.management_port))
        assert {addr.ip for addr in listening} <= {"127.0.0.1", "::ffff:127.0.0.1"}, listening


def test_stop_never_signals_a_foreign_pid(tmp_path: Path) -> None:
    home = tmp_path / "registry-home"
    home.mkdir()
    impostor = LocalRegistry(1, 2, os.getpid(), home)
    assert local_registry.stop_registry(impostor) is False  # this pytest process is not its registry
    assert not home.exists()


def test_missing_distribution_says_run_make_setup(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(ENV_JVM_CACHE, str(tmp_path))
    with pytest.raises(LocalRegistryError, match="run `make setup`"):
        local_registry.start_registry(tmp_path / "root")
    assert not (tmp_path / "root").exists()
