"""Failover: a flow's consumer groups set on the target from the newest MM2 checkpoints already there.

When the source cluster is lost, consumers move to the target and read the remote topics. Each run's
checkpoint task has been writing, for every consumer group the flow's ``GroupFilter`` passes, MM2
``Checkpoint`` records to ``<source><sep>checkpoints<sep>internal`` on the target: a group's
committed source offset and where exactly that resumes on the remote partition. Failing over reads
that topic, keeps the newest checkpoint per (group, remote topic, partition) (the topic is compacted,
but may still hold older versions: the newest is the last in offset order, as MM2's
``RemoteClusterUtils.translateOffsets`` reads it) and commits its downstream offset to the same group
on the target. The failover DAG of a flow ``B->A`` with reverse checkpoints is the failback: its
checkpoints also name ``A``'s own topics (``orders``), and the same rules set the groups there.

This module holds the failover's trigger params and options and its I/O (``run_failover``,
``write_report``); what is set, kept, left alone or refused, and the report, are pure:
``mirrorflow.core.failover_rules``.

Invariants:

- The source is never contacted, and the offsets database is not needed: only the target is read
  (the checkpoints topic, the remote topics' partitions and ends, the groups) and written (groups).
- A group is never moved backwards, a group active on the target is left alone, and a checkpoint
  past its remote partition's end (or of a partition that no longer exists) is never committed
  (``failover_rules.decide``).
- A dry run reads and decides exactly as a real run would, and commits nothing.
- Running it again is harmless: what it set before is then reported as unchanged.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from mirrorflow.app.run_folder import RunFolder, write_atomically
from mirrorflow.config.model import ClusterConfig, FlowConfig, MirrorConfig
from mirrorflow.config.run_options import ParamTable
from mirrorflow.core.failover_rules import FailoverReport, Timings, decide, newest_checkpoints, or_none
from mirrorflow.errors import ParamError, TargetStateError
from mirrorflow.kafka.admin import ClusterAdmin
from mirrorflow.kafka.record_reads import read_partition

__all__ = [
    "FAILOVER_PARAMS",
    "FailoverOptions",
    "failover_options",
    "run_failover",
    "write_report",
]

log = logging.getLogger(__name__)


# The trigger form of the failover DAG: name -> (default, JSON schema, description).
FAILOVER_PARAMS: ParamTable = {
    "groups": (
        [],
        {"type": "array", "items": {"type": "string", "minLength": 1}, "uniqueItems": True},
        "Consumer groups to fail over, one per line; empty fails over every group with checkpoints "
        "that the flow's groups / groups.exclude select. Each must be a group the flow selects.",
    ),
    "dry_run": (
        False,
        {"type": "boolean"},
        "Show what would be set (task log, report files) and commit nothing.",
    ),
}


# --------------------------------------------------------------------------------------- options


@dataclass(frozen=True)
class FailoverOptions:
    """``groups`` empty: every group with checkpoints that the flow's GroupFilter passes."""

    groups: frozenset[str] = frozenset()
    dry_run: bool = False


def failover_options(params: Mapping[str, Any], flow: FlowConfig) -> FailoverOptions:
    """The options of a failover run from its trigger params (missing ones take their defaults);
    ``ParamError`` before anything is read or written."""
    values = {name: params.get(name, default) for name, (default, _, _) in FAILOVER_PARAMS.items()}
    groups = values["groups"]
    if not isinstance(groups, list) or not all(isinstance(g, str) and g for g in groups):
        raise ParamError("groups", f"{groups!r} is not a list of consumer group names")
    dry_run = values["dry_run"]
    if not isinstance(dry_run, bool):
        raise ParamError("dry_run", f"{dry_run!r} is not true or false")
    refused = sorted(g for g in groups if not flow.group_filter.should_replicate_group(g))
    if refused:
        raise ParamError(
            "groups",
            f"{', '.join(refused)} {'is' if len(refused) == 1 else 'are'} not among the consumer groups "
            f"flow {flow.name} checkpoints (its groups / groups.exclude)",
        )
    return FailoverOptions(frozenset(groups), dry_run)


# ------------------------------------------------------------------------------------------ I/O


def write_report(report: FailoverReport, folder: RunFolder) -> tuple[Path, Path]:
    """``failover.md`` and ``failover.json`` in the run's folder, each written atomically."""
    md, js = folder.failover_report
    write_atomically(md, report.markdown())
    write_atomically(js, json.dumps(report.as_dict(), indent=1, sort_keys=True) + "\n")
    return md, js


def run_failover(config: MirrorConfig, flow_name: str, options: FailoverOptions) -> FailoverReport:
    """Set the target's consumer groups of flow ``flow_name`` from the newest checkpoints on the
    target (see the module's invariants); the source cluster is never contacted."""
    flow = config.flow(flow_name)
    started_at = datetime.now(UTC).isoformat(timespec="seconds")
    start = time.perf_counter()
    topic = flow.replication_policy.checkpoints_topic(flow.source.alias)
    with ClusterAdmin(flow.target) as target:
        existing = target.topics()
        if topic not in existing:
            raise TargetStateError(
                f"{topic} does not exist on cluster {flow.target.alias}: no checkpoint of flow {flow.name} "
                "was ever written there, so no consumer group can be set from one. Checkpoints are "
                "written by each run's checkpoint task while the source is reachable "
                "(emit.checkpoints.enabled); without them consumers start on the target by their "
                "auto.offset.reset"
            )
        records = _read_partition(flow.target, topic)
        read = time.perf_counter()
        newest, undecodable = newest_checkpoints(records)
        selected = [
            c
            for c in newest.values()
            if flow.group_filter.should_replicate_group(c.group)
            and (not options.groups or c.group in options.groups)
        ]
        groups = sorted({c.group for c in selected})
        remote = target.describe_topics({c.topic for c in selected} & existing)
        partitions = {name: d.partitions for name, d in remote.items()}
        tps = [(name, p) for name, n in partitions.items() for p in range(n)]
        decisions = decide(
            selected,
            target.group_states(groups),
            target.group_offsets(groups),
            partitions,
            target.latest_offsets(tps),
        )
        inspected = time.perf_counter()
        if not options.dry_run:
            for group, offsets in sorted(decisions.offsets_to_commit().items()):
                target.commit_group_offsets(group, offsets)
        committed = time.perf_counter()
    report = FailoverReport(
        flow=flow.name,
        source=flow.source.alias,
        target=flow.target.alias,
        checkpoints_topic=topic,
        dry_run=options.dry_run,
        records_read=len(records),
        checkpoints=len(newest),
        selected=len(selected),
        decisions=decisions,
        without_checkpoints=tuple(sorted(options.groups - set(groups))),
        undecodable=undecodable,
        timings=Timings(
            started_at,
            round(read - start, 3),
            round(inspected - read, 3),
            round(committed - inspected, 3),
            round(committed - start, 3),
        ),
    )
    _log(report)
    return report


def _log(report: FailoverReport) -> None:
    verb = "would set" if report.dry_run else "set"
    for o in report.decisions.set_offsets:
        log.info(
            "group %s on %s: %s %s-%d to %d (was %s; source offset %d)",
            o.group, report.target, verb, o.topic, o.partition, o.checkpoint, or_none(o.committed),
            o.upstream_offset,
        )  # fmt: skip
    for a in report.decisions.active:
        log.warning("group %s is active on %s (%s): left alone", a.group, report.target, a.state)
    for o in report.decisions.ahead:
        log.warning(
            "group %s on %s: %s-%d kept at %s, ahead of its checkpoint %d",
            o.group, report.target, o.topic, o.partition, or_none(o.committed), o.checkpoint,
        )  # fmt: skip
    for u in report.decisions.untranslatable:
        log.warning(
            "group %s: checkpoint %s-%d -> %d untranslatable: %s",
            u.group, u.topic, u.partition, u.checkpoint, u.reason,
        )  # fmt: skip
    for g in report.without_checkpoints:
        log.warning("group %s has no checkpoint in %s: it was not set", g, report.checkpoints_topic)


def _read_partition(cluster: ClusterConfig, topic: str) -> list[tuple[int, bytes | None, bytes | None]]:
    """Every record of partition 0 of ``topic``, in offset order, up to its end when read."""
    return [(r.offset, r.key, r.value) for r in read_partition(cluster.consumer, cluster.alias, topic, 0)]
