"""Failover: a flow's consumer groups set on the target from the newest MM2 checkpoints already there.

When the source cluster is lost, consumers move to the target and read the remote topics. Each run's
checkpoint task has been writing, for every consumer group the flow's ``GroupFilter`` passes, MM2
``Checkpoint`` records to ``<source><sep>checkpoints<sep>internal`` on the target: a group's
committed source offset and where exactly that resumes on the remote partition. Failing over reads
that topic, keeps the newest checkpoint per (group, remote topic, partition) (the topic is compacted,
but may still hold older versions: the newest is the last in offset order, as MM2's
``RemoteClusterUtils.translateOffsets`` reads it) and commits its downstream offset to the same group
on the target.

Invariants:

- The source is never contacted, and the offsets database is not needed: only the target is read
  (the checkpoints topic, the remote topics' partitions and ends, the groups) and written (groups).
- A group is never moved backwards: where the target group's committed offset is already at or past
  the checkpoint, it is kept (when past, the report lists it under ``ahead``).
- A group that is active on the target (any state but ``Empty`` or ``Dead``: it has members) is left
  alone, whatever its checkpoints say, and listed.
- A checkpoint whose remote partition no longer exists on the target, or that points past the
  partition's end (the remote topic was truncated or recreated since), is never committed: it is
  listed as untranslatable.
- A dry run reads and decides exactly as a real run would, and commits nothing.
- Running it again is harmless: what it set before is then reported as unchanged.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kafka.admin import OffsetSpec

from mirrorflow.app.checkpoints import IDLE_STATES
from mirrorflow.config.model import ClusterConfig, FlowConfig, MirrorConfig
from mirrorflow.config.run_options import ParamError, ParamTable
from mirrorflow.copy.range_reader import read_partition
from mirrorflow.core.plan import write_atomically
from mirrorflow.core.report import markdown_table
from mirrorflow.errors import MirrorError, TargetStateError
from mirrorflow.kafka.admin import TP, ClusterAdmin
from mirrorflow.mm2.records import Checkpoint, Reader

__all__ = [
    "FAILOVER_PARAMS",
    "ActiveGroup",
    "Decisions",
    "FailoverOptions",
    "FailoverReport",
    "GroupOffset",
    "Timings",
    "Untranslatable",
    "decide",
    "failover_dag_id",
    "failover_options",
    "newest_checkpoints",
    "run_failover",
    "write_report",
]

log = logging.getLogger(__name__)

REPORT_FILES = ("failover.md", "failover.json")

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


def failover_dag_id(flow: FlowConfig) -> str:
    """``mirror_<source>_to_<target>_failover``: the flow DAG's id with ``_failover``."""
    return f"{flow.dag_id}_failover"


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


# ------------------------------------------------------------------------------------ pure logic

CheckpointKey = tuple[str, str, int]  # (group, remote topic, partition)


def newest_checkpoints(
    records: Iterable[tuple[int, bytes | None, bytes | None]],
) -> tuple[dict[CheckpointKey, Checkpoint], tuple[int, ...]]:
    """The newest checkpoint per (group, remote topic, partition) of ``(offset, key, value)`` records
    in offset order, and the offsets of records that are not checkpoints (skipped, as MM2's reader
    skips them). A tombstone (no value) deletes its key, as compaction eventually would."""
    newest: dict[CheckpointKey, Checkpoint] = {}
    undecodable: list[int] = []
    for offset, key, value in records:
        try:
            if value is None:
                newest.pop(_key(key or b""), None)
                continue
            c = Checkpoint.decode(key or b"", value)
        except (MirrorError, ValueError):  # UnicodeDecodeError is a ValueError
            undecodable.append(offset)
            continue
        newest[(c.group, c.topic, c.partition)] = c
    return newest, tuple(undecodable)


def _key(key: bytes) -> CheckpointKey:
    r = Reader(key)
    decoded = (r.string(), r.string(), r.int32())
    r.end()
    return decoded


@dataclass(frozen=True)
class GroupOffset:
    """A group's newest checkpoint on one remote partition: its committed ``upstream_offset`` on the
    source, the ``checkpoint`` offset where that resumes on the target, and the group's committed
    offset there on the target before the failover (``committed``; None: none)."""

    group: str
    topic: str
    partition: int
    upstream_offset: int
    checkpoint: int
    committed: int | None


@dataclass(frozen=True)
class Untranslatable:
    """A checkpoint that cannot be applied on the target, and why."""

    group: str
    topic: str
    partition: int
    upstream_offset: int
    checkpoint: int
    reason: str


@dataclass(frozen=True)
class ActiveGroup:
    group: str
    state: str


@dataclass(frozen=True)
class Decisions:
    """What a failover does with each selected checkpoint. ``set_offsets``: committed (in a dry run:
    would be); ``unchanged``: the group is there already; ``ahead``: the group is further on the
    target and kept there; ``untranslatable``: not applied; ``active``: groups left alone."""

    set_offsets: tuple[GroupOffset, ...] = ()
    unchanged: tuple[GroupOffset, ...] = ()
    ahead: tuple[GroupOffset, ...] = ()
    untranslatable: tuple[Untranslatable, ...] = ()
    active: tuple[ActiveGroup, ...] = ()

    def offsets_to_commit(self) -> dict[str, dict[TP, int]]:
        """Per group, the remote partitions to set and their offsets."""
        by_group: dict[str, dict[TP, int]] = {}
        for o in self.set_offsets:
            by_group.setdefault(o.group, {})[(o.topic, o.partition)] = o.checkpoint
        return by_group


def decide(
    checkpoints: Iterable[Checkpoint],
    states: Mapping[str, str],
    committed: Mapping[str, Mapping[TP, tuple[int, str]]],
    partitions: Mapping[str, int],
    ends: Mapping[TP, int],
) -> Decisions:
    """Per checkpoint: commit, keep or list it. ``states``: target group states (a group not named
    counts as active: its state is unknown); ``committed``: target groups' committed offsets;
    ``partitions``: partition count of each remote topic that exists on the target; ``ends``: the
    end offset of each of their partitions."""
    set_offsets: list[GroupOffset] = []
    unchanged: list[GroupOffset] = []
    ahead: list[GroupOffset] = []
    untranslatable: list[Untranslatable] = []
    active: dict[str, str] = {}
    for c in sorted(checkpoints, key=lambda c: (c.group, c.topic, c.partition)):
        state = states.get(c.group) or "Unknown"
        if state not in IDLE_STATES:
            active[c.group] = state
            continue
        reason = _untranslatable(c, partitions, ends)
        if reason is not None:
            untranslatable.append(
                Untranslatable(c.group, c.topic, c.partition, c.upstream_offset, c.downstream_offset, reason)
            )
            continue
        current = committed.get(c.group, {}).get((c.topic, c.partition))
        now = None if current is None else current[0]
        o = GroupOffset(c.group, c.topic, c.partition, c.upstream_offset, c.downstream_offset, now)
        if now is None or now < c.downstream_offset:
            set_offsets.append(o)
        elif now == c.downstream_offset:
            unchanged.append(o)
        else:
            ahead.append(o)
    return Decisions(
        tuple(set_offsets),
        tuple(unchanged),
        tuple(ahead),
        tuple(untranslatable),
        tuple(ActiveGroup(g, s) for g, s in sorted(active.items())),
    )


def _untranslatable(c: Checkpoint, partitions: Mapping[str, int], ends: Mapping[TP, int]) -> str | None:
    count = partitions.get(c.topic)
    if count is None:
        return "the remote topic does not exist on the target"
    if not 0 <= c.partition < count:
        return f"the remote topic has {count} partitions on the target, no partition {c.partition}"
    end = ends[(c.topic, c.partition)]
    if c.downstream_offset > end:
        return f"past the remote partition's end ({end}): it was truncated or recreated since"
    return None


# ---------------------------------------------------------------------------------------- report


@dataclass(frozen=True)
class Timings:
    """``started_at``: UTC, ISO 8601; durations in seconds: reading the checkpoints topic, reading
    the target's topics and groups, committing, and the whole failover."""

    started_at: str
    read_s: float
    inspect_s: float
    commit_s: float
    total_s: float


@dataclass(frozen=True)
class FailoverReport:
    """What one failover of ``flow`` read, set, kept, left alone and could not translate.
    ``records_read``: records in the checkpoints topic; ``checkpoints``: newest checkpoints, one per
    (group, remote topic, partition); ``selected``: of those, the ones of the groups failed over;
    ``without_checkpoints``: requested groups with no checkpoint; ``undecodable``: offsets of
    records in the checkpoints topic that are not checkpoints (skipped)."""

    flow: str
    source: str
    target: str
    checkpoints_topic: str
    dry_run: bool
    records_read: int
    checkpoints: int
    selected: int
    decisions: Decisions
    without_checkpoints: tuple[str, ...]
    undecodable: tuple[int, ...]
    timings: Timings

    @property
    def groups_set(self) -> dict[str, dict[TP, int]]:
        """Per group, the remote partitions set and their new offsets."""
        return self.decisions.offsets_to_commit()

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready (the task's XCom and ``failover.json``)."""
        d = self.decisions
        return {
            "flow": self.flow,
            "source": self.source,
            "target": self.target,
            "checkpoints_topic": self.checkpoints_topic,
            "dry_run": self.dry_run,
            "records_read": self.records_read,
            "checkpoints": self.checkpoints,
            "selected": self.selected,
            "groups_set": {
                group: [{"topic": t, "partition": p, "offset": o} for (t, p), o in sorted(offsets.items())]
                for group, offsets in sorted(self.groups_set.items())
            },
            "set": [asdict(o) for o in d.set_offsets],
            "unchanged": [asdict(o) for o in d.unchanged],
            "ahead": [asdict(o) for o in d.ahead],
            "active": {a.group: a.state for a in d.active},
            "untranslatable": [asdict(u) for u in d.untranslatable],
            "without_checkpoints": list(self.without_checkpoints),
            "undecodable_offsets": list(self.undecodable),
            "timings": asdict(self.timings),
        }

    def markdown(self) -> str:
        d, t = self.decisions, self.timings
        dry = self.dry_run
        lines = [
            f"# Failover of flow {self.flow}" + (" (dry run: nothing was committed)" if dry else ""),
            "",
            f"Consumer groups on `{self.target}` {'would be ' if dry else ''}set from the newest checkpoints "
            f"in `{self.checkpoints_topic}`; the source `{self.source}` was not contacted.",
            "",
            f"- started {t.started_at}, took {t.total_s:.2f} s (reading checkpoints {t.read_s:.2f} s, "
            f"target topics and groups {t.inspect_s:.2f} s, committing {t.commit_s:.2f} s)",
            f"- checkpoint records read: {self.records_read}; newest per group and partition: "
            f"{self.checkpoints}; of the groups failed over: {self.selected}",
        ]
        offset_head = ("group", "topic", "partition", "offset", "was", "source offset")
        lines += _section(
            "Offsets that would be set" if dry else "Offsets set",
            offset_head,
            [
                (o.group, o.topic, o.partition, o.checkpoint, _or_none(o.committed), o.upstream_offset)
                for o in d.set_offsets
            ],
        )
        lines += _section(
            "Already at their checkpoint",
            ("group", "topic", "partition", "offset", "source offset"),
            [(o.group, o.topic, o.partition, o.checkpoint, o.upstream_offset) for o in d.unchanged],
        )
        lines += _section(
            "Kept: the target group is ahead of its checkpoint (never moved back)",
            ("group", "topic", "partition", "committed", "checkpoint"),
            [(o.group, o.topic, o.partition, _or_none(o.committed), o.checkpoint) for o in d.ahead],
        )
        lines += _section(
            f"Left alone: active on `{self.target}`",
            ("group", "state"),
            [(a.group, a.state) for a in d.active],
        )
        lines += _section(
            "Untranslatable checkpoints",
            ("group", "topic", "partition", "checkpoint", "source offset", "reason"),
            [
                (u.group, u.topic, u.partition, u.checkpoint, u.upstream_offset, u.reason)
                for u in d.untranslatable
            ],
        )
        lines += _section(
            "Requested groups without a checkpoint", ("group",), [(g,) for g in self.without_checkpoints]
        )
        if self.undecodable:
            offsets = ", ".join(str(o) for o in self.undecodable)
            lines += [
                "",
                f"Records in `{self.checkpoints_topic}` that are not checkpoints, skipped: {offsets}",
            ]
        return "\n".join(lines) + "\n"


def _or_none(value: int | None) -> str:
    return "none" if value is None else str(value)


def _section(title: str, head: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    lines = ["", f"## {title} ({len(rows)})", ""]
    return [*lines, *(markdown_table(head, rows) if rows else ["none"])]


def write_report(report: FailoverReport, folder: Path) -> tuple[Path, Path]:
    """``failover.md`` and ``failover.json`` in ``folder`` (a run's folder), each written atomically."""
    md, js = (folder / name for name in REPORT_FILES)
    write_atomically(md, report.markdown())
    write_atomically(js, json.dumps(report.as_dict(), indent=1, sort_keys=True) + "\n")
    return md, js


# ------------------------------------------------------------------------------------------ I/O


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
            target.offsets(tps, OffsetSpec.LATEST),
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
            o.group, report.target, verb, o.topic, o.partition, o.checkpoint, _or_none(o.committed),
            o.upstream_offset,
        )  # fmt: skip
    for a in report.decisions.active:
        log.warning("group %s is active on %s (%s): left alone", a.group, report.target, a.state)
    for o in report.decisions.ahead:
        log.warning(
            "group %s on %s: %s-%d kept at %s, ahead of its checkpoint %d",
            o.group, report.target, o.topic, o.partition, _or_none(o.committed), o.checkpoint,
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
    return [
        (m.offset() or 0, m.key(), m.value())
        for m in read_partition(cluster.consumer, cluster.alias, topic, 0)
    ]
