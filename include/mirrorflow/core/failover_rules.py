"""Failover's rules and report: from the newest MM2 checkpoints on the target, what is set, kept, left
alone or refused for each consumer group, and the report of a failover (Markdown and JSON). Pure, no
I/O: ``mirrorflow.app.failover`` reads the target, commits what ``decide`` decides and writes the
report.

The newest checkpoint per (group, remote topic, partition) is the last in offset order of the
checkpoints topic (it is compacted, but may still hold older versions), as MM2's
``RemoteClusterUtils.translateOffsets`` reads it; its downstream offset is what the group is set to.

Invariants (``decide``):

- A group is never moved backwards: where the target group's committed offset is already at or past
  the checkpoint, it is kept (when past, the report lists it under ``ahead``).
- A group that is active on the target (any state but ``Empty`` or ``Dead``: it has members) is left
  alone, whatever its checkpoints say, and listed.
- A checkpoint whose remote partition no longer exists on the target, or that points past the
  partition's end (the remote topic was truncated or recreated since), is never committed: it is
  listed as untranslatable.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from mirrorflow.core.group_positions import IDLE_STATES
from mirrorflow.core.report import markdown_table
from mirrorflow.core.topic_partitions import TP
from mirrorflow.errors import MirrorError
from mirrorflow.mm2.records import Checkpoint, Reader

__all__ = [
    "ActiveGroup",
    "CheckpointKey",
    "Decisions",
    "FailoverReport",
    "GroupOffset",
    "Timings",
    "Untranslatable",
    "decide",
    "newest_checkpoints",
    "or_none",
]

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
                (o.group, o.topic, o.partition, o.checkpoint, or_none(o.committed), o.upstream_offset)
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
            [(o.group, o.topic, o.partition, or_none(o.committed), o.checkpoint) for o in d.ahead],
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


def or_none(value: int | None) -> str:
    return "none" if value is None else str(value)


def _section(title: str, head: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    lines = ["", f"## {title} ({len(rows)})", ""]
    return [*lines, *(markdown_table(head, rows) if rows else ["none"])]
