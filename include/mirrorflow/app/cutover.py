"""Migration cutover of one flow: preflight -> drain -> verify -> translate groups -> report.

Typically run with ``IdentityReplicationPolicy`` (remote topics keep their names) once producers to
the source are stopped. Invariants:
- The drain is ordinary runs of the flow (same plan, copy, commit; same lock), repeated until one
  leaves no lag on any selected partition: it can neither duplicate nor skip a record.
- Group positions are translated exactly (``OffsetTranslator`` over the batch log; a group that
  read everything at the remote partition's end, past the drain's commit markers) and committed
  with MM2's safety rules: only groups idle on the target, and only forward. A dry run computes the
  same positions and commits none of them.
- The report says what every step did and names every step that failed; it is written whatever
  happened before it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from mirrorflow.app import batch_run
from mirrorflow.app.checkpoints import forward_translations, group_spans
from mirrorflow.app.flow_session import check_topic_subset
from mirrorflow.app.remote_topics import remote_topic_changes
from mirrorflow.app.run_folder import CUTOVER_REPORT, RunFolder, flow_runs, write_atomically
from mirrorflow.config.model import FlowConfig, MirrorConfig
from mirrorflow.config.run_options import ParamTable, RunOptions
from mirrorflow.core.group_positions import next_positions, offsets_to_sync
from mirrorflow.core.plan import Plan
from mirrorflow.core.report import markdown_table
from mirrorflow.core.verdicts import VerifyResult
from mirrorflow.errors import DrainTimeoutError, FlowLockedError, ParamError
from mirrorflow.kafka.admin import ClusterAdmin
from mirrorflow.store.flow_lock import lock_holder
from mirrorflow.store.offsets_store import OffsetsStore

DRAIN_TIMEOUT_SECONDS_DEFAULT = 1800
_LOCK_WAIT_SECONDS = 5.0

# The cutover DAG's trigger form: name -> (default, JSON schema, description).
CUTOVER_PARAMS: ParamTable = {
    "topics": (
        [],
        {"type": "array", "items": {"type": "string", "minLength": 1}, "uniqueItems": True},
        "Source topics to cut over, one per line; empty: every topic the flow selects.",
    ),
    "groups": (
        [],
        {"type": "array", "items": {"type": "string", "minLength": 1}, "uniqueItems": True},
        "Consumer groups whose positions move to the target; empty: every group the flow's groups / "
        "groups.exclude select.",
    ),
    "drain_timeout_seconds": (
        DRAIN_TIMEOUT_SECONDS_DEFAULT,
        {"type": "integer", "minimum": 1},
        "How long the drain may take to reach zero lag on every selected partition before it fails. "
        "Stop the producers to the source first, or it may never get there.",
    ),
    "dry_run": (
        False,
        {"type": "boolean"},
        "Do everything but commit consumer-group offsets on the target; the report shows the "
        "positions that would be committed.",
    ),
}


@dataclass(frozen=True)
class CutoverOptions:
    topics: frozenset[str] = frozenset()
    groups: frozenset[str] = frozenset()
    drain_timeout_seconds: int = DRAIN_TIMEOUT_SECONDS_DEFAULT
    dry_run: bool = False


def cutover_options(params: Mapping[str, Any]) -> CutoverOptions:
    values = {name: params.get(name, default) for name, (default, _, _) in CUTOVER_PARAMS.items()}
    for name in ("topics", "groups"):
        names = values[name]
        if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
            raise ParamError(name, f"{names!r} is not a list of names")
    timeout = values["drain_timeout_seconds"]
    if isinstance(timeout, bool) or not isinstance(timeout, int) or timeout < 1:
        raise ParamError("drain_timeout_seconds", f"{timeout!r} is not a whole number of at least 1")
    if not isinstance(values["dry_run"], bool):
        raise ParamError("dry_run", f"{values['dry_run']!r} is not true or false")
    return CutoverOptions(
        frozenset(values["topics"]), frozenset(values["groups"]), timeout, values["dry_run"]
    )


def preflight(config: MirrorConfig, flow_name: str, options: CutoverOptions) -> dict[str, Any]:
    """What the cutover starts from, read from both clusters and the offsets table; writes nothing.
    Unknown topics or groups fail here, before anything is written."""
    flow = config.flow(flow_name)
    with OffsetsStore(config.offsets_db_url) as store:
        with ClusterAdmin(flow.source) as source, ClusterAdmin(flow.target) as target:
            check_topic_subset(flow, source, RunOptions(topics=options.topics))
            groups = _groups(flow, source, options)
            topics = remote_topic_changes(flow, source, target, options.topics)
            tps = [(t, p) for t, n in topics.partitions.items() for p in range(n)]
            ends = source.latest_offsets(tps)
            starts = source.earliest_offsets(tps)
        progress = store.progress(flow.name)
        lag = {
            f"{t}-{p}": ends[(t, p)]
            - (progress[(t, p)].next_source_offset if (t, p) in progress else starts[(t, p)])
            for t, p in tps
        }
        return {
            "flow": flow.name,
            "replication_policy": type(flow.replication_policy).__name__,
            "topics": {
                t: {"partitions": n, "remote_topic": topics.remote_names[t]}
                for t, n in topics.partitions.items()
            },
            "remote_topics_to_create": sorted(topics.created),
            "remote_topics_to_grow": {r: list(g) for r, g in topics.grown.items()},
            "remote_configs_to_sync": {r: dict(c) for r, c in topics.reconfigured.items()},
            "groups": groups,
            "lag": lag,
            "lag_total": sum(lag.values()),
            "lock_holder": lock_holder(store, flow.name),
        }


def _groups(flow: FlowConfig, source: ClusterAdmin, options: CutoverOptions) -> list[str]:
    selected = {g for g in source.consumer_groups() if flow.group_filter.should_replicate_group(g)}
    unknown = sorted(options.groups - selected)
    if unknown:
        raise ParamError(
            "groups",
            f"{', '.join(unknown)}: not among the consumer groups flow {flow.name} selects on cluster "
            f"{flow.source.alias} ({', '.join(sorted(selected)) or 'none'}); check the spelling and the "
            "flow's groups / groups.exclude",
        )
    return sorted(options.groups or selected)


def drain(
    config: MirrorConfig,
    flow_name: str,
    run_id: str,
    options: CutoverOptions,
    copy: Callable[[Plan], None],
    clock: Callable[[], float] = time.monotonic,
) -> dict[str, Any]:
    """Runs of the flow (plan, ``copy``, commit, release; run ids ``<run_id>.drain-<n>``) until one
    leaves zero lag on every selected partition; a run of the flow's own DAG holding the lock is
    waited for. Raises ``DrainTimeoutError`` naming the lagging partitions after the timeout."""
    started = clock()
    deadline = started + options.drain_timeout_seconds
    runs, records = 0, 0
    lag: dict[str, int] = {}
    subjects: set[str] = set()
    while True:
        drain_id = f"{run_id}.drain-{runs + 1}"
        try:
            plan = batch_run.plan_run(config, flow_name, drain_id, RunOptions(topics=options.topics))
        except FlowLockedError:
            if clock() > deadline:
                raise
            time.sleep(_LOCK_WAIT_SECONDS)
            continue
        runs += 1
        subjects.update(plan.schema_ids.subjects)
        try:
            if plan.partitions and not plan.in_process:
                copy(plan)
            report = batch_run.commit_run(config, flow_name, drain_id).report
        finally:
            batch_run.release_run(config, flow_name, drain_id)
        records += report.records
        lag = {f"{p.topic}-{p.partition}": p.lag for p in report.partitions if p.lag}
        if not lag:
            return {
                "runs": runs,
                "records": records,
                "seconds": round(clock() - started, 1),
                # The subjects whose schemas the drain's runs synced to the target registry.
                "schema_subjects": sorted(subjects),
            }
        if clock() > deadline:
            raise DrainTimeoutError(
                f"flow {flow_name}: the drain did not reach zero lag in {options.drain_timeout_seconds} s "
                f"({runs} runs, {records} records copied); still lagging: "
                f"{', '.join(f'{tp} ({n})' for tp, n in sorted(lag.items()))}. Stop the producers to the "
                "source, then run the cutover again (what was copied stays committed)."
            )


def translate_groups(config: MirrorConfig, flow_name: str, options: CutoverOptions) -> dict[str, Any]:
    """Each selected group's committed source offsets, translated exactly to the target and (unless a
    dry run) committed there for idle groups, only forward."""
    flow = config.flow(flow_name)
    with OffsetsStore(config.offsets_db_url) as store:
        with ClusterAdmin(flow.source) as source:
            committed = source.group_offsets(_groups(flow, source, options))
        translations = forward_translations(store, flow.name, group_spans(committed), flow.target)
        positions, untranslated = next_positions(committed, translations, {})
        groups = sorted({p.group_id for p in positions})
        with ClusterAdmin(flow.target) as target:
            sync, active = offsets_to_sync(
                positions, target.group_states(groups), target.group_offsets(groups)
            )
            if not options.dry_run:
                for group, offsets in sorted(sync.items()):
                    target.commit_group_offsets(group, offsets)
        return {
            "dry_run": options.dry_run,
            "positions": [asdict(p) for p in positions],
            # With dry_run: what would have been committed.
            "committed": {
                g: {f"{t}-{p}": o for (t, p), o in sorted(offsets.items())}
                for g, offsets in sorted(sync.items())
            },
            "active_groups_left_alone": active,
            "offsets_not_mirrored_yet": untranslated,
        }


STEPS = ("preflight", "drain", "verify", "groups")


def cutover_report(
    flow: str, run_id: str, dry_run: bool, steps: Mapping[str, Mapping[str, Any]]
) -> dict[str, Any]:
    """The report of a cutover run from each step's outcome (``{"status": ..., "seconds": ...,
    "error": ..., "result": ...}``; a step without one did not run)."""
    outcome = {s: dict(steps.get(s) or {"status": "not run"}) for s in STEPS}
    failed = [s for s in STEPS if outcome[s]["status"] == "failed"]
    complete = all(outcome[s]["status"] == "success" for s in STEPS)
    return {
        "flow": flow,
        "run_id": run_id,
        "dry_run": dry_run,
        "outcome": "complete" if complete and not dry_run else "dry run" if complete else "failed",
        "failed_steps": failed,
        "steps": outcome,
    }


def report_files(config: MirrorConfig, flow_name: str) -> list[Path]:
    """The flow's cutover reports (Markdown), newest first."""
    runs = flow_runs(config.state_dir, flow_name)
    return sorted(runs.glob(f"*/{CUTOVER_REPORT}.md"), key=lambda p: p.stat().st_mtime, reverse=True)


def write_report(
    config: MirrorConfig, flow_name: str, run_id: str, report: Mapping[str, Any]
) -> tuple[str, str]:
    """Writes ``cutover_report.json`` and ``cutover_report.md`` into the run's folder; returns their paths."""
    as_json, as_md = RunFolder.of(config.state_dir, flow_name, run_id).cutover_report
    write_atomically(as_json, json.dumps(report, indent=1, sort_keys=True))
    write_atomically(as_md, markdown(report))
    return str(as_json), str(as_md)


def verify_summary(result: VerifyResult) -> dict[str, Any]:
    """The verify step's result for the report: every range compared, with both sides' figures."""
    return {
        "ranges": len(result.partitions),
        "mismatches": len(result.mismatches),
        "verdicts": [
            {
                "range": str(v.range),
                "source_records": v.source.records,
                "target_records": v.target.records,
                "source_digest": v.source.digest,
                "target_digest": v.target.digest,
                "matches": v.matches,
                # Compacted and LogAppendTime ranges: what each source offset held, instead of digests.
                "by_record": None if v.records is None else v.records.describe(v.range.compacted),
            }
            for v in result.partitions
        ],
    }


def markdown(report: Mapping[str, Any]) -> str:
    """The report for people: the steps, then what each step that ran found."""
    steps = report["steps"]
    dry = " (dry run: no group offsets committed)" if report["dry_run"] else ""
    lines = [
        f"# Cutover of flow {report['flow']}: {report['outcome']}",
        "",
        f"Run `{report['run_id']}`{dry}.",
        "",
    ]
    lines += _md_table(
        ("step", "status", "seconds", "error"),
        [
            (s, steps[s]["status"], str(steps[s].get("seconds", "")), steps[s].get("error") or "")
            for s in STEPS
        ],
    )
    for step, section in (
        ("preflight", _preflight_md),
        ("drain", _drain_md),
        ("verify", _verify_md),
        ("groups", _groups_md),
    ):
        result = steps[step].get("result")
        if result:
            lines += ["", *section(result)]
    return "\n".join(lines) + "\n"


def _preflight_md(pre: Mapping[str, Any]) -> list[str]:
    lines = [
        "## Preflight",
        "",
        f"Replication policy {pre['replication_policy']}; lag before the drain {pre['lag_total']} records; "
        f"groups: {', '.join(pre['groups']) or 'none'}; flow lock held by: {pre['lock_holder'] or 'nobody'}.",
        "",
    ]
    lines += _md_table(
        ("topic", "partitions", "remote topic"),
        [(t, str(v["partitions"]), v["remote_topic"]) for t, v in sorted(pre["topics"].items())],
    )
    for key in ("remote_topics_to_create", "remote_topics_to_grow", "remote_configs_to_sync"):
        if pre[key]:
            lines += [
                "",
                f"{key.replace('_', ' ').capitalize()} (the drain does it): "
                f"`{json.dumps(pre[key], sort_keys=True)}`",
            ]
    return lines


def _drain_md(drained: Mapping[str, Any]) -> list[str]:
    return [
        "## Drain",
        "",
        f"{drained['runs']} run{'' if drained['runs'] == 1 else 's'} copied {drained['records']} records "
        f"in {drained['seconds']} s; "
        "lag is zero on every selected partition.",
        *(
            ["", f"Schemas synced to the target registry for: {', '.join(drained['schema_subjects'])}."]
            if drained.get("schema_subjects")
            else []
        ),
    ]


def _verify_md(verified: Mapping[str, Any]) -> list[str]:
    by_record = [f"- {v['range']}: {v['by_record']}" for v in verified["verdicts"] if v.get("by_record")]
    return [
        "## Verify",
        "",
        f"{verified['ranges']} ranges compared, {verified['mismatches']} differ.",
        "",
        *_md_table(
            ("range", "source records", "target records", "source digest", "target digest", "same"),
            [
                (
                    v["range"],
                    str(v["source_records"]),
                    str(v["target_records"]),
                    _digest_md(v["source_digest"]),
                    _digest_md(v["target_digest"]),
                    "yes" if v["matches"] else "**NO**",
                )
                for v in verified["verdicts"]
            ],
        ),
        *(["", "Compared record by record (keyed by source offset):", "", *by_record] if by_record else []),
    ]


def _digest_md(digest: str) -> str:
    """A digest's first 16 digits; a range compared record by record has none."""
    return f"`{digest[:16]}`" if digest else "by record"


def _groups_md(groups: Mapping[str, Any]) -> list[str]:
    verb = "would be committed (dry run)" if groups["dry_run"] else "committed"
    lines = ["## Consumer groups", "", f"Positions {verb} on the target:", ""]
    lines += _md_table(
        ("group", "remote partition", "offset"),
        [
            (g, tp, str(o))
            for g, offsets in sorted(groups["committed"].items())
            for tp, o in sorted(offsets.items())
        ],
    )
    if groups["active_groups_left_alone"]:
        lines += ["", f"Active on the target, left alone: {', '.join(groups['active_groups_left_alone'])}."]
    if groups["offsets_not_mirrored_yet"]:
        lines += [
            "",
            "Committed offsets before anything mirrored (not translated): "
            f"{groups['offsets_not_mirrored_yet']}.",
        ]
    return lines


def _md_table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    return markdown_table(head, rows) if rows else ["(none)"]
