"""The "Mirror status" page end to end: a flow really runs three times through a running Airflow
(`airflow standalone`, real Spark, real brokers), then headless Chromium (Debian's package) logs in
through Airflow's login form, follows the navigation link to the page and reads what it shows.

The browser is driven over the Chrome DevTools Protocol (its websocket, with the pinned
``websockets`` client). A screenshot of the page inside Airflow's UI is kept in
``.state/test-artifacts/status_page.png``.

The clusters are the test's own: the flow emits heartbeats (the page shows their age), and heartbeat
topics on the shared session clusters would be mirrored by every other test's flow.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import re
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from dashboard_queries import exported_names, metric_names, queries
from mirror_helpers import (
    assert_all_gone,
    commit_group,
    create_topic,
    delete_records,
    live_processes,
    local_clusters,
    running_airflow,
    wait_for_dag,
)
from websockets.sync.client import ClientConnection, connect

from mirrorflow.config.model import MirrorConfig, load_config
from mirrorflow.core.plan import Plan
from mirrorflow.store.offsets_store import OffsetsStore
from mirrorflow.store.run_documents import find_document
from mirrorflow.store.status_reads import recovery_history, recovery_point, totals
from mirrorflow_dev import sample_data
from mirrorflow_dev.local_airflow import USER, LocalAirflow
from mirrorflow_dev.local_kafka import LocalCluster
from mirrorflow_dev.paths import REPO_ROOT

pytestmark = [pytest.mark.kafka, pytest.mark.airflow, pytest.mark.browser]

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = REPO_ROOT / ".state" / "test-artifacts"
FLOW = "primary->backup"
DAG = "mirror_primary_to_backup"
TIME = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC")


# --------------------------------------------------------------------------------------- Chromium


class Chromium:
    """Headless Chromium in a process group of its own, with its profile, HOME and crash database in
    ``folder``; one page, driven over the DevTools protocol. Stopped by its PID (the group's id)."""

    def __init__(self, folder: Path, width: int = 1440, height: int = 1400) -> None:
        self.folder = folder
        self.size = (width, height)
        self._ids = itertools.count(1)
        self._process: subprocess.Popen[bytes] | None = None
        self._socket: ClientConnection | None = None

    def start(self, timeout: float = 60.0) -> Chromium:
        profile = self.folder / "profile"
        profile.mkdir(parents=True)
        env = {**os.environ, "HOME": str(self.folder), "XDG_CONFIG_HOME": str(self.folder / ".config")}
        with (self.folder / "chromium.log").open("wb") as log:
            self._process = subprocess.Popen(
                [
                    CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--disable-background-networking", "--no-first-run", f"--user-data-dir={profile}",
                    "--remote-debugging-port=0", f"--window-size={self.size[0]},{self.size[1]}",
                    "about:blank",
                ],
                env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        # Chromium writes the port it chose (0: a free one) to this file once it listens.
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + timeout
        while not (port_file.exists() and port_file.read_text().strip()):
            assert self._process.poll() is None, f"chromium exited; see {self.folder / 'chromium.log'}"
            assert time.monotonic() < deadline, f"chromium did not listen within {timeout:.0f} s"
            time.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as response:
            page = next(t for t in json.loads(response.read()) if t["type"] == "page")
        self._socket = connect(page["webSocketDebuggerUrl"], max_size=None, open_timeout=10)
        return self

    def send(self, method: str, **params: Any) -> dict[str, Any]:
        """One DevTools command; events arriving meanwhile are not subscribed to and skipped."""
        assert self._socket is not None
        call = next(self._ids)
        self._socket.send(json.dumps({"id": call, "method": method, "params": params}))
        while True:
            message = json.loads(self._socket.recv(timeout=60))
            if message.get("id") == call:
                assert "error" not in message, f"{method}: {message['error']}"
                result: dict[str, Any] = message["result"]
                return result

    def evaluate(self, expression: str) -> Any:
        """The JSON value of a JavaScript expression in the page (promises awaited)."""
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        assert "exceptionDetails" not in result, f"{expression}: {result['exceptionDetails']}"
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 60.0) -> Any:
        """Until ``expression`` is truthy; its value."""
        deadline = time.monotonic() + timeout
        while not (value := self.evaluate(expression)):
            assert time.monotonic() < deadline, f"not true after {timeout:.0f} s: {expression}"
            time.sleep(0.2)
        return value

    def open(self, url: str) -> None:
        self.send("Page.navigate", url=url)

    def screenshot(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(self.send("Page.captureScreenshot", format="png")["data"]))

    def stop(self) -> None:
        """SIGTERM to the browser's process group, SIGKILL if it lingers; then nothing started from
        ``folder`` is left (its crash handlers leave the group but exit with the browser)."""
        socket, self._socket = self._socket, None
        if socket is not None:
            socket.close()
        process, self._process = self._process, None
        if process is None:
            return
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(process.pid, sig)
            except ProcessLookupError:
                break
            try:
                process.wait(timeout=15)
                break
            except subprocess.TimeoutExpired:
                continue
        mine = str(self.folder)
        deadline = time.monotonic() + 15
        while (left := [p for p in live_processes() if mine in p.cmdline]) and time.monotonic() < deadline:
            time.sleep(0.2)
        for p in left:  # ours by the private folder in their command line
            os.kill(p.pid, signal.SIGKILL)
        assert_all_gone(lambda p: mine in p.cmdline, "Chromium processes")


@pytest.fixture
def chromium(tmp_path: Path) -> Iterator[Chromium]:
    assert Path(CHROMIUM).is_file(), f"{CHROMIUM} missing: apt-get install chromium (see scripts/setup.sh)"
    browser = Chromium(tmp_path / "chromium")
    try:
        yield browser.start()
    finally:
        browser.stop()


# ----------------------------------------------------------------------------------------- the flow


@pytest.fixture(scope="module")
def clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, LocalCluster]]:
    with local_clusters(("primary", "backup"), tmp_path_factory.mktemp("status-page")) as found:
        yield found


def _config(clusters: dict[str, LocalCluster], folder: Path, topic: str, group: str) -> MirrorConfig:
    lines = [
        "clusters = primary, backup",
        *(f"{alias}.bootstrap.servers = {c.bootstrap}" for alias, c in clusters.items()),
        "replication.factor = 1",
        "heartbeats.topic.replication.factor = 1",
        "checkpoints.topic.replication.factor = 1",
        "offset-syncs.topic.replication.factor = 1",
        f"mirrorflow.state.dir = {folder / 'state'}",
        "mirrorflow.task.retries = 0",
        f"{FLOW}.enabled = true",
        f"{FLOW}.topics = {topic}",
        f"{FLOW}.groups = {group}",
        f"{FLOW}.mirrorflow.on.source.data.loss = skip",
    ]
    path = folder / "mm2.properties"
    path.write_text("\n".join(lines) + "\n")
    return load_config(path, env={})


def _run(airflow: LocalAirflow, conf: dict[str, Any], timeout: float = 600.0) -> dict[str, Any]:
    """Trigger a run of the flow's DAG and wait until it ends."""
    run = airflow.api("POST", f"/api/v2/dags/{DAG}/dagRuns", {"logical_date": None, "conf": conf})
    deadline = time.monotonic() + timeout
    while True:
        found: dict[str, Any] = airflow.api("GET", f"/api/v2/dags/{DAG}/dagRuns/{run['dag_run_id']}")
        if found["state"] in ("success", "failed"):
            return found
        assert time.monotonic() < deadline, f"run {run['dag_run_id']} not done after {timeout:.0f} s"
        time.sleep(2)


def _produce(bootstrap: str, topic: str, partition: int, indexes: range) -> None:
    records = (sample_data.sample_record(topic, partition, i) for i in indexes)
    sample_data.produce(sample_data.producer(bootstrap), topic, partition, records)


# ------------------------------------------------------------------------------------------ reading

# What the page shows of a flow, read from the iframe Airflow embeds it in.
_READ_FLOW = """(() => {
  const doc = document.querySelector('iframe').contentDocument;
  const flow = doc.querySelector('section.flow[data-flow="primary->backup"]');
  const rows = name => [...flow.querySelectorAll(`table[data-table="${name}"] tbody tr`)]
    .map(r => [...r.cells].map(c => c.textContent));
  return {
    fields: Object.fromEntries([...flow.querySelectorAll('.cards [data-field]')]
      .map(e => [e.dataset.field, e.textContent])),
    errors: [...flow.querySelectorAll('[data-field="errors"] li')].map(e => e.textContent),
    bars: [...flow.querySelectorAll('svg[data-chart="throughput"] rect.bar')]
      .map(b => [b.dataset.run, b.dataset.records]),
    as_of: flow.querySelector('[data-field="mirrored-as-of"]').textContent,
    recovery_minutes: flow.querySelector('svg[data-chart="recovery"] polyline').dataset.minutes,
    partitions: rows('partitions'), runs: rows('runs'), checkpoints: rows('checkpoints'),
    gaps: rows('gaps'),
  };
})()"""


_FETCH_JSON = "fetch('/mirrorflow/api/flows').then(r => r.text())"


def _status_without_login(url: str) -> tuple[int, str]:
    """Status and Location of a request without credentials, redirects not followed."""

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: Any) -> None:
            return None

    try:
        with urllib.request.build_opener(NoRedirect).open(url, timeout=30) as response:
            return response.status, ""
    except urllib.error.HTTPError as error:
        return error.code, error.headers.get("Location", "")


def _log_in(browser: Chromium, airflow: LocalAirflow) -> None:
    """Through Airflow's login form, typed as a user types."""
    browser.open(f"{airflow.url}/")
    browser.wait_for("!!document.querySelector('input[name=password]')")
    for name, value in (("username", USER), ("password", airflow.password)):
        browser.evaluate(f"document.querySelector('input[name={name}]').focus()")
        browser.send("Input.insertText", text=value)
    browser.wait_for("!document.querySelector('button[type=submit]').disabled")
    browser.evaluate("document.querySelector('button[type=submit]').click()")
    browser.wait_for("location.pathname === '/' && !document.querySelector('input[name=password]')")


# ---------------------------------------------------------------------------------------------- test


def test_the_status_page_shows_a_flow_that_ran(
    clusters: dict[str, LocalCluster], chromium: Chromium, unique_name: str, tmp_path: Path
) -> None:
    started = time.monotonic()
    primary = clusters["primary"].bootstrap
    topic, group = unique_name, f"{unique_name}-group"
    create_topic(primary, topic, 2)
    sample_data.produce_samples(primary, topic, 2, 0, 100)
    config = _config(clusters, tmp_path, topic, group)
    store = OffsetsStore(config.offsets_db_url)

    with running_airflow(tmp_path / "airflow", config) as airflow:
        wait_for_dag(airflow, DAG)
        # Run 1 copies 100 records of each partition. Then partition 0 gets 50 more, of which the
        # first 20 are deleted before run 2 (a gap), partition 1 10 more; a group commits positions.
        first = _run(airflow, {})
        _produce(primary, topic, 0, range(100, 150))
        _produce(primary, topic, 1, range(100, 110))
        delete_records(primary, {(topic, 0): 120})
        commit_group(primary, group, {(topic, 0): 130, (topic, 1): 105})
        second = _run(airflow, {})
        # Run 3 asks for a topic the flow does not select: its plan task fails.
        third = _run(airflow, {"topics": ["no-such-topic"]})
        assert [r["state"] for r in (first, second, third)] == ["success", "success", "failed"]
        ids = [r["dag_run_id"] for r in (first, second, third)]

        (plugin,) = [p for p in airflow.api("GET", "/api/v2/plugins")["plugins"] if p["name"] == "mirrorflow"]
        assert [(v["name"], v["href"], v["url_route"]) for v in plugin["external_views"]] == [
            ("Mirror status", "/mirrorflow/", "mirror-status")
        ]
        assert airflow.api("GET", "/api/v2/plugins/importErrors")["import_errors"] == []
        # Without a login the page sends the browser to Airflow's login, the JSON says 401.
        status, location = _status_without_login(f"{airflow.url}/mirrorflow/")
        assert (status, location.split("?")[0]) == (303, "/auth/login")
        assert _status_without_login(f"{airflow.url}/mirrorflow/api/flows")[0] == 401

        _log_in(chromium, airflow)
        link = chromium.wait_for(
            "(a => a && [a.getAttribute('href'), a.textContent])"
            "(document.querySelector('a[href$=\"/plugin/mirror-status\"]'))"
        )
        assert link == ["/plugin/mirror-status", "Mirror status"]
        chromium.evaluate("document.querySelector('a[href$=\"/plugin/mirror-status\"]').click()")
        chromium.wait_for(
            "(f => !!f && !!f.contentDocument && !!f.contentDocument.querySelector('section.flow'))"
            "(document.querySelector('iframe'))"
        )
        assert chromium.evaluate("document.querySelector('iframe').getAttribute('src')").endswith(
            "/mirrorflow/"
        )
        shown = chromium.evaluate(_READ_FLOW)
        chromium.screenshot(ARTIFACTS / "status_page.png")
        in_json = json.loads(chromium.evaluate(_FETCH_JSON))
        # One more record on the source: the flow is behind by at most the age of run 2's plan.
        _produce(primary, topic, 1, range(110, 111))
        behind = json.loads(chromium.evaluate(_FETCH_JSON))["flows"][0]["recovery"]
        behind_at = time.time()

    counted = totals(store, FLOW)
    latency = {tp: w.replication_latency.max for tp, w in store.latest_writes(FLOW).items()}
    # From the metrics history: run 2's commit pruned run 1's batch-log rows below the lost records.
    bytes_of_run = {run: sum(p.bytes for p in store.partition_metrics(FLOW, run_id=run)) for run in ids[:2]}
    (gap,) = store.gaps(FLOW)
    remote = f"primary.{topic}"

    # Each run mirrors the heartbeat it emitted on the source with the data.
    def figures(tp: tuple[str, int]) -> list[str]:
        return [f"{counted[tp][1]:,}", "0", f"{latency[tp]:,}"]  # bytes, lag, latency max

    # Next target offsets: run 1's commit marker follows its records on each remote partition.
    assert shown["partitions"] == [
        ["heartbeats", "0", "primary.heartbeats", "2", "3", "2", *figures(("heartbeats", 0)), "0"],
        [topic, "0", remote, "150", "131", "130", *figures((topic, 0)), "20"],
        [topic, "1", remote, "110", "111", "110", *figures((topic, 1)), "0"],
    ]
    fields = shown["fields"]
    checkpoints = fields.pop("checkpoints")
    freshness = fields.pop("freshness")
    # Run 2 copied everything its plan saw, and the source (read when the page was built) holds
    # nothing more: the recovery point is 0, resting on run 2's plan time.
    as_of = datetime.fromisoformat(
        Plan.from_json(find_document(store, FLOW, ids[1], "plan") or "").created_at
    )
    assert recovery_point(store, FLOW) == as_of
    assert fields.pop("recovery") == "0 s (caught up)"
    assert shown["as_of"] == (
        f"Everything the source held at {as_of.strftime('%Y-%m-%d %H:%M:%S.%f')[:-3]} UTC is on the "
        "target. The source, read just now, holds nothing more."
    )
    # One history minute per minute in which runs 1 and 2 committed (1 or 2).
    history = recovery_history(store, FLOW, 10)
    assert shown["recovery_minutes"] == str(len(history)) and 1 <= len(history) <= 2
    assert (behind["state"], behind["mirrored_as_of"]) == ("behind", as_of.isoformat())
    assert 0 < behind_at - as_of.timestamp() - behind["seconds"] < 10
    # The Grafana dashboard reads only metrics the flow's metrics files hold.
    exported = set().union(
        *(exported_names(p.read_text()) for p in (config.state_dir / "metrics").glob("*.prom"))
    )
    assert set().union(*(metric_names(q) for q in queries())) <= exported
    assert fields == {
        "records": "242",
        "bytes": f"{sum(size for _, size in counted.values()):,}",
        "lag": "0",
        "gaps": "1",
        "failed-partitions": "0",
        "lock": "free",
    }
    assert re.fullmatch(rf"2 partitions of 1 group, last {TIME.pattern}", checkpoints), checkpoints
    assert re.fullmatch(r"\d+\.\d s", freshness), freshness
    # Run 3 failed before planning: it shows with its failed task, newest first.
    runs = [[row[0], row[1], *row[4:6], *row[7:]] for row in shown["runs"]]
    assert runs == [
        [ids[2], "failed", "0", "0", "", "0", "failed task: plan"],
        [ids[1], "success", "41", f"{bytes_of_run[ids[1]]:,}", "0", "1", ""],
        [ids[0], "success", "201", f"{bytes_of_run[ids[0]]:,}", "0", "0", ""],
    ]
    assert all(TIME.fullmatch(row[2]) for row in shown["runs"])
    assert [bool(TIME.fullmatch(row[3])) for row in shown["runs"]] == [False, True, True]
    assert shown["errors"] == [f"run {ids[2]}: failed task: plan"]
    assert shown["bars"] == [[ids[0], "201"], [ids[1], "41"], [ids[2], "0"]]
    # The group's position 130 of partition 0 lies after the gap: it resumes at target offset 111,
    # the copy of record 130, past run 1's commit marker at 100 (on partition 1 too).
    assert [row[:5] for row in shown["checkpoints"]] == [
        [group, f"{topic}-0", remote, "130", "111"],
        [group, f"{topic}-1", remote, "105", "106"],
    ]
    assert shown["gaps"] == [
        [
            f"{topic}-0",
            "[100, 120)",
            "20",
            "[100, 100)",
            ids[1],
            gap.recorded_at.strftime("%Y-%m-%d %H:%M:%S UTC"),
        ]
    ]
    (flow,) = in_json["flows"]
    assert (flow["name"], flow["records"], flow["lag"], len(flow["gaps"])) == (FLOW, 242, 0, 1)
    assert (ARTIFACTS / "status_page.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    print(f"status page test: {time.monotonic() - started:.0f} s")
