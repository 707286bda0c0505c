"""What a run would do, shown without doing it (the trigger form's dry run).

Invariant: a dry run writes nothing: no remote topic, config, ACL, heartbeat, anchor, lock or plan
file. Its ranges are those a real run planned at the same moment would copy.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mirrorflow.app.remote_topics import RemoteTopics
from mirrorflow.core.plan import PartitionPlan, PartitionState, Plan
from mirrorflow.core.report import text_table
from mirrorflow.core.topic_partitions import TP


@dataclass(frozen=True)
class PlannedPartition:
    """A partition's planned range. ``records`` counts offsets, so it is an upper bound where the
    range holds transaction markers or aborted records; ``estimated_bytes`` scales the partition's
    size on disk by the share of its offsets planned (None when the size is unknown)."""

    topic: str
    partition: int
    remote_topic: str
    source_start: int
    source_end: int
    target_start: int
    new: bool
    estimated_bytes: int | None

    @property
    def records(self) -> int:
        return self.source_end - self.source_start


@dataclass(frozen=True)
class DryRun:
    flow: str
    run_id: str
    partitions: tuple[PlannedPartition, ...]
    topics: RemoteTopics
    acls: tuple[str, ...]
    gaps: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        return {
            "flow": self.flow,
            "run_id": self.run_id,
            "dry_run": True,
            "records": sum(p.records for p in self.partitions),
            "partitions": [{**vars(p), "records": p.records} for p in self.partitions],
            "remote_topics_created": sorted(self.topics.created),
            "remote_topics_grown": {r: list(g) for r, g in sorted(self.topics.grown.items())},
            "remote_topics_reconfigured": {r: dict(c) for r, c in sorted(self.topics.reconfigured.items())},
            "acls_created": list(self.acls),
            "source_gaps_skipped": list(self.gaps),
        }

    def table(self) -> str:
        """The planned partitions with a total, then every change the run would make to the target."""
        head = ("topic", "partition", "remote topic", "source range", "records", "est. bytes", "target start")
        rows = [
            (
                p.topic,
                str(p.partition),
                p.remote_topic + (" (new)" if p.new else ""),
                f"[{p.source_start}, {p.source_end})",
                str(p.records),
                "?" if p.estimated_bytes is None else str(p.estimated_bytes),
                str(p.target_start),
            )
            for p in self.partitions
        ]
        sizes = [p.estimated_bytes for p in self.partitions]
        total_bytes = "?" if None in sizes else str(sum(s or 0 for s in sizes))
        rows.append(("total", "", "", "", str(sum(p.records for p in self.partitions)), total_bytes, ""))
        lines = [f"dry run of flow {self.flow}: nothing was written", *text_table(head, rows)]
        lines += [
            f"would create remote topic {r} ({n.partitions} partitions)"
            for r, n in sorted(self.topics.created.items())
        ]
        lines += [
            f"would grow remote topic {r} from {a} to {b} partitions"
            for r, (a, b) in sorted(self.topics.grown.items())
        ]
        lines += [
            f"would sync configs of {r}: "
            + ", ".join(f"{k}={'(default)' if v is None else v}" for k, v in sorted(c.items()))
            for r, c in sorted(self.topics.reconfigured.items())
        ]
        lines += [f"would create ACL {a}" for a in self.acls]
        lines += [f"would skip lost source records {g}" for g in self.gaps]
        return "\n".join(lines)


def dry_run_of(
    plan: Plan,
    topics: RemoteTopics,
    new: frozenset[TP],
    sizes: Mapping[TP, int],
    acls: Sequence[str],
) -> DryRun:
    """``new``: partitions the flow has never mirrored; ``sizes``: source partitions' bytes on disk."""
    states = {(s.topic, s.partition): s for s in plan.states}
    return DryRun(
        plan.flow,
        plan.run_id,
        tuple(_planned(p, states[(p.topic, p.partition)], new, sizes) for p in plan.partitions),
        topics,
        tuple(acls),
        tuple(str(g) for g in plan.gaps),
    )


def _planned(
    p: PartitionPlan,
    state: PartitionState,
    new: frozenset[TP],
    sizes: Mapping[TP, int],
) -> PlannedPartition:
    key = (p.topic, p.partition)
    size = sizes.get(key)
    span = state.end - state.log_start
    estimate = None if size is None or span <= 0 else size * (p.source_end - p.source_start) // span
    return PlannedPartition(
        p.topic,
        p.partition,
        p.remote_topic,
        p.source_start,
        p.source_end,
        p.target_start,
        key in new,
        estimate,
    )
