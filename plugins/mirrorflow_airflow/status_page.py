"""The "Mirror status" page: a FastAPI app mounted in Airflow's API server at ``/mirrorflow`` and an
external view in Airflow's navigation that embeds it.

Per flow it shows the totals, the freshness, recent runs with a throughput chart, each partition's
position and lag, checkpoints, the source gaps skipped and errors (``mirrorflow.app.status`` builds the
figures; this module adds Airflow's DAG runs and renders them). ``/mirrorflow/`` is server-side HTML
(inline CSS and SVG, no script); ``/mirrorflow/api/flows`` is JSON. Airflow embeds the page in a
sandboxed iframe that may not navigate the UI around it, so the page holds no links into Airflow.

Invariants:

- Importing this module does no I/O and imports nothing of Airflow's API server: every Airflow
  component imports the plugins folder. The config is read per request (``MIRROR_CONFIG``).
- Every page and JSON answer needs a logged-in Airflow user, checked by Airflow's own ``get_user``
  (session cookie or bearer token): without one the page redirects to Airflow's login, the JSON
  answers 401. A user sees a flow only if Airflow lets them read its DAG's runs.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from airflow.plugins_manager import AirflowPlugin
from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from mirrorflow.app.cutover import report_files
from mirrorflow.app.status import RUN_LIMIT, flow_statuses
from mirrorflow.app.status_values import AirflowRun, FlowStatus, RunStatus, as_json
from mirrorflow.config.model import MirrorConfig, load_config
from mirrorflow.errors import MirrorError

URL_PREFIX = "/mirrorflow"
TITLE = "Mirror status"
# Partitions shown per flow unless asked for more: a flow of thousands stays readable.
PARTITION_ROWS = 100
_NO_STORE = {"Cache-Control": "no-store"}

app = FastAPI(title=TITLE, docs_url=None, redoc_url=None, openapi_url=None)


# ------------------------------------------------------------------------------------------- routes


@app.get("/", response_class=HTMLResponse)
async def page(request: Request, refresh: int = 0, partitions: int = PARTITION_ROWS) -> Response:
    """The status page; ``refresh`` (seconds, 0 = never) reloads it periodically; ``partitions``:
    rows of each flow's partitions table, most lagging first (0 = all)."""
    user = await _user(request)
    if user is None:
        return RedirectResponse(_login_url(request), status_code=303)
    statuses, error = await run_in_threadpool(_statuses, user)
    body = render_page(statuses, error, refresh=max(0, refresh), partition_rows=max(0, partitions))
    return HTMLResponse(body, status_code=500 if error else 200, headers=_NO_STORE)


@app.get("/api/flows")
async def flows(request: Request) -> Response:
    """The same figures as the page, as JSON (times in ISO 8601, UTC)."""
    user = await _user(request)
    if user is None:
        return JSONResponse({"detail": "Not authenticated"}, status_code=401)
    statuses, error = await run_in_threadpool(_statuses, user)
    if error:
        return JSONResponse({"error": error}, status_code=500, headers=_NO_STORE)
    return JSONResponse(as_json(statuses), headers=_NO_STORE)


@app.get("/reports/{dag_id}/{folder}", response_class=HTMLResponse)
async def cutover_report(request: Request, dag_id: str, folder: str) -> Response:
    """A cutover report of a flow the user may read, as its Markdown text."""
    user = await _user(request)
    if user is None:
        return RedirectResponse(_login_url(request), status_code=303)
    text = await run_in_threadpool(_report_text, user, dag_id, folder)
    if text is None:
        raise HTTPException(status_code=404, detail="no such cutover report")
    return HTMLResponse(
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{_e(folder)}</title>'
        f'<style>{_CSS}</style></head><body><p><a href="../../">← {TITLE}</a></p>'
        f'<pre data-field="cutover-report">{_e(text)}</pre></body></html>',
        headers=_NO_STORE,
    )


def _report_text(user: Any, dag_id: str, folder: str) -> str | None:
    config = load_config()
    readable = _readable_flows(config, user)
    for flow in config.flows:
        if flow.dag_id == dag_id and flow.name in readable:
            found = {p.parent.name: p for p in report_files(config, flow.name)}
            return found[folder].read_text() if folder in found else None
    return None


@app.get("/icon.svg")
def icon() -> Response:
    """The navigation icon (public: it shows nothing about the flows)."""
    return Response(_ICON, media_type="image/svg+xml", headers={"Cache-Control": "max-age=86400"})


# ------------------------------------------------------------------------------------ Airflow glue


async def _user(request: Request) -> Any | None:
    """The logged-in Airflow user, as Airflow's own API routes check it; ``None`` if there is none
    or the token is invalid or expired."""
    from airflow.api_fastapi.core_api.security import (  # noqa: PLC0415  lazy: not at plugin load
        bearer_scheme,
        get_user,
    )

    try:
        return await get_user(request, None, await bearer_scheme(request))
    except HTTPException:
        return None


def _login_url(request: Request) -> str:
    from airflow.api_fastapi.app import get_auth_manager  # noqa: PLC0415  lazy: not at plugin load

    return str(get_auth_manager().get_url_login(next_url=str(request.url)))


def _statuses(user: Any) -> tuple[tuple[FlowStatus, ...], str | None]:
    """The flows ``user`` may read, or the error that keeps the page from showing any."""
    try:
        config = load_config()
    except MirrorError as error:
        return (), f"{type(error).__name__}: {error}"
    readable = _readable_flows(config, user)
    return flow_statuses(config, _airflow_runs(config, readable), flows=readable), None


def _readable_flows(config: MirrorConfig, user: Any) -> set[str]:
    """Flows whose DAG runs ``user`` may read (in multi-team mode, as their DAG's team)."""
    from airflow.api_fastapi.app import get_auth_manager  # noqa: PLC0415  lazy: not at plugin load
    from airflow.api_fastapi.auth.managers.models.resource_details import (  # noqa: PLC0415  lazy: not at plugin load
        DagAccessEntity,
        DagDetails,
    )
    from airflow.models.dag import DagModel  # noqa: PLC0415  lazy: not at plugin load

    teams = DagModel.get_dag_id_to_team_name_mapping([f.dag_id for f in config.flows])
    manager = get_auth_manager()
    return {
        f.name
        for f in config.flows
        if manager.is_authorized_dag(
            method="GET",
            access_entity=DagAccessEntity.RUN,
            details=DagDetails(id=f.dag_id, team_name=teams.get(f.dag_id)),
            user=user,
        )
    }


def _airflow_runs(config: MirrorConfig, names: set[str]) -> dict[str, list[AirflowRun]]:
    """Per flow, its newest DAG runs in Airflow's metadata database with their failed tasks."""
    from airflow.models.dagrun import DagRun  # noqa: PLC0415  lazy: not at plugin load
    from airflow.models.taskinstance import TaskInstance  # noqa: PLC0415  lazy: not at plugin load
    from airflow.utils.session import create_session  # noqa: PLC0415  lazy: not at plugin load

    found: dict[str, list[AirflowRun]] = {}
    with create_session() as session:
        for flow in config.flows:
            if flow.name not in names:
                continue
            runs = (
                session.query(DagRun)
                .filter(DagRun.dag_id == flow.dag_id)
                .order_by(DagRun.run_after.desc(), DagRun.id.desc())
                .limit(RUN_LIMIT)
                .all()
            )
            failed: dict[str, list[str]] = {}
            if runs:
                rows = (
                    session.query(TaskInstance.run_id, TaskInstance.task_id)
                    .filter(
                        TaskInstance.dag_id == flow.dag_id,
                        TaskInstance.run_id.in_([r.run_id for r in runs]),
                        TaskInstance.state == "failed",
                    )
                    .order_by(TaskInstance.start_date)
                    .all()
                )
                for run_id, task_id in rows:
                    failed.setdefault(run_id, []).append(task_id)
            found[flow.name] = [
                AirflowRun(
                    run_id=r.run_id,
                    state=str(r.state),
                    started_at=r.start_date or r.queued_at or r.run_after,
                    ended_at=r.end_date,
                    failed_tasks=tuple(failed.get(r.run_id, ())),
                )
                for r in runs
            ]
    return found


# Airflow reads these as lists: with url_route, it shows the page inside its UI (an iframe at
# /plugin/mirror-status) and puts a link to it at the top level of the navigation.
_FASTAPI_APPS: list[dict[str, Any]] = [{"app": app, "url_prefix": URL_PREFIX, "name": TITLE}]
_EXTERNAL_VIEWS: list[dict[str, Any]] = [
    {
        "name": TITLE,
        "href": f"{URL_PREFIX}/",
        "destination": "nav",
        "url_route": "mirror-status",
        "nav_top_level": True,
        "icon": f"{URL_PREFIX}/icon.svg",
    }
]


class MirrorflowPlugin(AirflowPlugin):
    name = "mirrorflow"
    fastapi_apps = _FASTAPI_APPS
    external_views = _EXTERNAL_VIEWS


# ---------------------------------------------------------------------------------------------- HTML


def render_page(
    statuses: Sequence[FlowStatus], error: str | None, refresh: int = 0, partition_rows: int = PARTITION_ROWS
) -> str:
    """The whole page. Every value is escaped; elements carry ``data-*`` names for tests and tools."""
    moment = datetime.now(UTC)
    now = _time(moment)
    head = f'<meta http-equiv="refresh" content="{refresh}">' if refresh else ""
    if error:
        body = (
            '<div class="errors"><h3>Cannot show the flows</h3>'
            f'<p data-field="page-error">{_e(error)}</p></div>'
        )
    elif not statuses:
        body = '<p class="muted" data-field="no-flows">No enabled flow you may read.</p>'
    else:
        body = "\n".join(_flow_section(s, moment, partition_rows) for s in statuses)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{TITLE}</title>{head}<style>{_CSS}</style></head>
<body><header><h1>{TITLE}</h1><p class="muted">as of {now} · <a href="api/flows">JSON</a></p></header>
{body}
</body></html>
"""


def _flow_section(s: FlowStatus, now: datetime, partition_rows: int) -> str:
    lock = f"held by run {s.locked_by}" if s.locked_by else "free"
    checkpoints = _checkpoint_summary(s)
    errors = [
        *s.errors,
        *(f"run {r.run_id}: {r.error}" for r in s.failed_runs),
        *(
            f"partition {f.topic}-{f.partition} failed in run {f.run_id} and waits for the next run: "
            f"{f.error}: {f.message}"
            for f in s.failed_partitions
        ),
    ]
    error_box = (
        '<div class="errors"><h3>Errors</h3><ul data-field="errors">'
        + "".join(f"<li>{_e(e)}</li>" for e in errors)
        + "</ul></div>"
        if errors
        else ""
    )
    summary = [
        ("recovery", "Recovery point", s.recovery.text),
        ("records", "Records copied", f"{s.records:,}"),
        ("bytes", "Bytes copied", f"{s.bytes:,}"),
        ("lag", "Lag (offsets)", f"{s.lag:,}"),
        ("freshness", "Freshness (heartbeat age)", s.freshness.text),
        ("gaps", "Gaps recorded", f"{len(s.gaps)}"),
        ("failed-partitions", "Failed partitions", f"{len(s.failed_partitions)}"),
        ("checkpoints", "Checkpoints", checkpoints),
        ("lock", "Lock", lock),
    ]
    cards = "".join(
        f'<div class="card"><div class="label">{label}</div><div class="value" data-field="{key}">{_e(value)}'
        "</div></div>"
        for key, label, value in summary
    )
    return f"""<section class="flow" data-flow="{_e(s.name)}">
<h2>{_e(s.source)} → {_e(s.target)} <span class="dag">DAG {_e(s.dag_id)}</span></h2>
<div class="cards">{cards}</div>
<p class="muted" data-field="mirrored-as-of">{_e(_as_of_note(s))}</p>
{error_box}
<h3>Recovery point, newest minutes</h3>
{_recovery_chart(s, now)}
<h3>Throughput over recent runs</h3>
{_chart(s.runs)}
<h3>Partitions</h3>
{_partitions_table(s, partition_rows)}
<h3>Recent runs</h3>
{_runs_table(s)}
<h3>Checkpoints</h3>
{_checkpoints_table(s)}
<h3>Gaps recorded</h3>
{_gaps_table(s)}
<h3>Cutover reports</h3>
{_reports_list(s)}
</section>"""


def _reports_list(s: FlowStatus) -> str:
    if not s.cutover_reports:
        return '<p class="muted" data-field="cutover-reports">No cutover yet.</p>'
    items = "".join(
        f'<li><a href="reports/{_e(s.dag_id)}/{_e(folder)}">{_e(folder)}</a></li>'
        for folder in s.cutover_reports
    )
    return f'<ul data-field="cutover-reports">{items}</ul>'


def _checkpoint_summary(s: FlowStatus) -> str:
    if not s.checkpoints_enabled:
        return "disabled (emit.checkpoints.enabled = false)"
    if not s.checkpoints:
        return "none emitted yet"
    groups = len({c.group for c in s.checkpoints})
    newest = max(c.emitted_at for c in s.checkpoints)
    return (
        f"{len(s.checkpoints)} partition{'s' if len(s.checkpoints) != 1 else ''} of {groups} "
        f"group{'s' if groups != 1 else ''}, last {_time(newest)}"
    )


def _as_of_note(s: FlowStatus) -> str:
    """What the recovery point rests on."""
    r = s.recovery
    parts = []
    if r.mirrored_as_of is not None:
        parts.append(f"Everything the source held at {_time(r.mirrored_as_of, ms=True)} is on the target.")
    if r.state == "caught up":
        parts.append("The source, read just now, holds nothing more.")
    elif r.live:
        parts.append(f"Source not checked live ({r.live}): the recovery point is an upper bound.")
    return " ".join(parts)


def _partitions_table(s: FlowStatus, limit: int) -> str:
    # Most lagging first: at thousands of partitions, the ones behind are what a reader looks for.
    ordered = sorted(s.partitions, key=lambda p: (-p.lag, p.topic, p.partition))
    shown = ordered if limit == 0 else ordered[:limit]
    note = (
        f'<p class="muted" data-field="partitions-shown">{len(shown):,} of {len(ordered):,} partitions, '
        f'most lagging first · <a href="?partitions=0">show all</a></p>'
        if len(shown) < len(ordered)
        else ""
    )
    rows = [
        (
            p.topic,
            str(p.partition),
            p.remote_topic,
            f"{p.next_source_offset:,}",
            f"{p.next_target_offset:,}",
            f"{p.records:,}",
            f"{p.bytes:,}",
            f"{p.lag:,}",
            "" if p.replication_latency_max_ms is None else f"{p.replication_latency_max_ms:,}",
            f"{p.lost_offsets:,}",
        )
        for p in shown
    ]
    head = (
        "topic", "partition", "remote topic", "next source offset", "next target offset", "records",
        "bytes", "lag", "latency max ms", "lost offsets",
    )  # fmt: skip
    return note + _table("partitions", head, rows, "No partition mirrored yet.")


def _runs_table(s: FlowStatus) -> str:
    rows = []
    for r in s.runs:
        rate = r.records_per_second
        rows.append(
            (
                r.run_id,
                r.state,
                _time(r.started_at),
                _time(r.committed_at),
                f"{r.records:,}",
                f"{r.bytes:,}",
                "" if rate is None else f"{rate:,.0f}",
                "" if r.lag is None else f"{r.lag:,}",
                str(r.gaps),
                r.error or "",
            )
        )
    head = (
        "run",
        "state",
        "started",
        "committed",
        "records",
        "bytes",
        "records/s",
        "lag after",
        "gaps",
        "error",
    )
    return _table("runs", head, rows, "No run yet.")


def _checkpoints_table(s: FlowStatus) -> str:
    if not s.checkpoints_enabled:
        return '<p class="muted">Checkpoints are disabled (emit.checkpoints.enabled = false).</p>'
    rows = [
        (
            c.group,
            f"{c.topic}-{c.partition}",
            c.remote_topic,
            f"{c.upstream_offset:,}",
            f"{c.downstream_offset:,}",
            _time(c.emitted_at),
            "" if c.latency_ms is None else f"{c.latency_ms:,}",
        )
        for c in s.checkpoints
    ]
    head = (
        "group",
        "source partition",
        "remote topic",
        "upstream offset",
        "downstream offset",
        "emitted",
        "latency ms",
    )
    return _table("checkpoints", head, rows, "No checkpoint emitted yet.")


def _gaps_table(s: FlowStatus) -> str:
    rows = [
        (
            f"{g.topic}-{g.partition}",
            f"[{g.source_start:,}, {g.source_end:,})",
            f"{g.source_end - g.source_start:,}",
            f"[{g.target_start:,}, {g.target_end:,})",
            g.run_id,
            _time(g.recorded_at),
        )
        for g in s.gaps
    ]
    head = ("source partition", "source offsets lost", "offsets", "target range", "run", "recorded")
    return _table("gaps", head, rows, "None: no source records were lost before they were mirrored.")


def _table(name: str, head: Sequence[str], rows: Sequence[Sequence[str]], empty: str) -> str:
    if not rows:
        return f'<p class="muted" data-table="{name}">{_e(empty)}</p>'
    cells = "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in row) + "</tr>" for row in rows)
    header = "".join(f"<th>{_e(h)}</th>" for h in head)
    return f'<table data-table="{name}"><thead><tr>{header}</tr></thead><tbody>{cells}</tbody></table>'


def _chart(runs: Sequence[RunStatus]) -> str:
    """Bars: records each run committed (left scale); dots joined by a line: its records per second
    (right scale). Oldest run on the left."""
    shown = list(reversed(runs))
    if not any(r.records for r in shown):
        return '<p class="muted" data-chart="throughput">No records copied in recent runs.</p>'
    most = max(r.records for r in shown)
    fastest = max((r.records_per_second or 0.0) for r in shown)
    # The scales' labels set the margins, so that "1,200,491" is never clipped.
    left, right = _margin(f"{most:,}", "records"), _margin(f"{fastest:,.0f}", "records/s")
    width, height, top, bottom = 720, 200, 16, 28
    plot_w, plot_h = width - left - right, height - top - bottom
    slot = plot_w / len(shown)
    bar_w = max(2.0, slot * 0.6)
    parts = [
        f'<line class="axis" x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}"/>',
        f'<text class="scale" x="{left - 6}" y="{top + 4}" text-anchor="end">{most:,}</text>',
        f'<text class="scale" x="{left - 6}" y="{top + plot_h}" text-anchor="end">0</text>',
        f'<text class="scale" x="{left - 6}" y="{height - 6}" text-anchor="end">records</text>',
    ]
    if fastest > 0:
        parts += [
            f'<text class="scale rate" x="{left + plot_w + 6}" y="{top + 4}">{fastest:,.0f}</text>',
            f'<text class="scale rate" x="{left + plot_w + 6}" y="{height - 6}">records/s</text>',
        ]
    points = []
    for i, r in enumerate(shown):
        x = left + slot * i + (slot - bar_w) / 2
        h = plot_h * r.records / most
        rate = r.records_per_second
        tip = f"{r.run_id}: {r.records:,} records" + ("" if rate is None else f", {rate:,.0f} records/s")
        parts.append(
            f'<rect class="bar" data-run="{_e(r.run_id)}" data-records="{r.records}" x="{x:.1f}" '
            f'y="{top + plot_h - h:.1f}" width="{bar_w:.1f}" height="{h:.1f}"><title>{_e(tip)}</title></rect>'
        )
        parts.append(
            f'<text class="scale" x="{x + bar_w / 2:.1f}" y="{top + plot_h + 14}" text-anchor="middle">'
            f"{i + 1}</text>"
        )
        if rate is not None and fastest > 0:
            points.append((x + bar_w / 2, top + plot_h - plot_h * rate / fastest))
    if len(points) > 1:
        line = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
        parts.append(f'<polyline class="rate" points="{line}"/>')
    parts += [f'<circle class="rate" cx="{x:.1f}" cy="{y:.1f}" r="3"/>' for x, y in points]
    return (
        f'<svg data-chart="throughput" role="img" aria-label="records and records per second of recent runs" '
        f'viewBox="0 0 {width} {height}" width="{width}" height="{height}">{"".join(parts)}</svg>'
    )


def _recovery_chart(s: FlowStatus, now: datetime) -> str:
    """A line through each minute's worst recovery point (the age of the flow's previous
    recovery point when a commit ended it), oldest minute on the left, up to now."""
    steps = s.recovery_history
    if not steps:
        return '<p class="muted" data-chart="recovery">No run has caught up with the source yet.</p>'
    worst = max(step.worst_seconds for step in steps)
    top_label = _seconds(worst)
    left, right = _margin(top_label, "seconds"), 16
    width, height, top, bottom = 720, 160, 16, 28
    plot_w, plot_h = width - left - right, height - top - bottom
    start = steps[0].minute
    span = max((now - start).total_seconds(), 60.0)
    points = []
    for step in steps:
        x = left + plot_w * min(1.0, (step.minute - start).total_seconds() / span)
        y = top + plot_h - (plot_h * step.worst_seconds / worst if worst > 0 else 0.0)
        points.append(f"{x:.1f},{y:.1f}")
    parts = [
        f'<line class="axis" x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}"/>',
        f'<text class="scale" x="{left - 6}" y="{top + 4}" text-anchor="end">{_e(top_label)}</text>',
        f'<text class="scale" x="{left - 6}" y="{top + plot_h}" text-anchor="end">0</text>',
        f'<text class="scale" x="{left - 6}" y="{height - 6}" text-anchor="end">seconds</text>',
        f'<text class="scale" x="{left}" y="{height - 6}">{_e(_time(start))}</text>',
        f'<text class="scale" x="{left + plot_w}" y="{height - 6}" text-anchor="end">now</text>',
        f'<polyline class="recovery" data-minutes="{len(steps)}" data-worst="{worst:g}" '
        f'points="{" ".join(points)}"><title>worst recovery point per minute</title></polyline>',
    ]
    if len(points) <= 60:  # an hour or less: each minute's point is seen, not only the line
        for point in points:
            cx, cy = point.split(",")
            parts.append(f'<circle class="recovery" cx="{cx}" cy="{cy}" r="3"/>')
    return (
        f'<svg data-chart="recovery" role="img" aria-label="worst recovery point per minute" '
        f'viewBox="0 0 {width} {height}" width="{width}" height="{height}">{"".join(parts)}</svg>'
    )


def _margin(*labels: str) -> int:
    """Room for the longest of a scale's labels (11 px text: about 7 px a character)."""
    return max(48, 7 * max(len(label) for label in labels) + 12)


def _seconds(value: float) -> str:
    return f"{value:,.1f} s" if value < 100 else f"{value:,.0f} s"


def _time(value: datetime | None, *, ms: bool = False) -> str:
    if value is None:
        return ""
    text = value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f" if ms else "%Y-%m-%d %H:%M:%S")
    return (text[:-3] if ms else text) + " UTC"


def _e(text: str) -> str:
    return html.escape(text, quote=True)


_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:16px;color:#1a202c;background:#fff}
h1{font-size:20px;margin:0 0 4px}h2{font-size:17px;margin:0 0 8px}h3{font-size:14px;margin:16px 0 6px}
a{color:#2b6cb0}.muted{color:#718096}.dag{font-size:12px;font-weight:normal;margin-left:8px;color:#718096}
section.flow{border:1px solid #e2e8f0;border-radius:8px;padding:12px 16px;margin:16px 0}
.cards{display:flex;flex-wrap:wrap;gap:8px}.card{border:1px solid #e2e8f0;border-radius:6px;padding:6px 10px}
.label{font-size:11px;color:#718096;text-transform:uppercase}.value{font-size:15px;font-weight:600}
table{border-collapse:collapse;font-size:13px}
th,td{border-bottom:1px solid #e2e8f0;padding:3px 8px;text-align:left}
th{background:#f7fafc;font-weight:600}td{font-variant-numeric:tabular-nums}
.errors{background:#fff5f5;border:1px solid #feb2b2;border-radius:6px;padding:4px 12px;margin:12px 0}
.errors ul{margin:4px 0;padding-left:18px}
svg .bar{fill:#4299e1}svg .axis{stroke:#a0aec0}svg .scale{font-size:11px;fill:#4a5568}
svg polyline.rate{fill:none;stroke:#dd6b20;stroke-width:2}svg circle.rate{fill:#dd6b20}
svg .scale.rate{fill:#dd6b20}
svg polyline.recovery{fill:none;stroke:#805ad5;stroke-width:2}svg circle.recovery{fill:#805ad5}
"""

_ICON = (
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 24 24" fill="none" stroke="#4a5568" '
    'stroke-width="2" stroke-linecap="round">'
    '<path d="M4 7h12m0 0-3-3m3 3-3 3M20 17H8m0 0 3-3m-3 3 3 3"/></svg>'
)
