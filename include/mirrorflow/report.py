"""The report of one committed run: records, bytes and lag left, per topic."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from mirrorflow.plan import CopyResult, Plan


@dataclass(frozen=True)
class TopicReport:
    """``records`` were committed by the run (they match the batch log); ``skipped`` of them were found
    already on the target, written by an earlier attempt of the same plan."""

    topic: str
    remote_topic: str
    partitions: int
    records: int
    skipped: int
    bytes: int
    lag: int


@dataclass(frozen=True)
class RunReport:
    flow: str
    run_id: str
    topics: tuple[TopicReport, ...]

    @property
    def records(self) -> int:
        return sum(t.records for t in self.topics)

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "records": self.records}

    def table(self) -> str:
        head = ("topic", "remote topic", "partitions", "records", "skipped", "bytes", "lag left")
        rows = [
            (
                t.topic,
                t.remote_topic,
                str(t.partitions),
                str(t.records),
                str(t.skipped),
                str(t.bytes),
                str(t.lag),
            )
            for t in self.topics
        ]
        widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
        return "\n".join(
            "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in [head, *rows]
        )


def build_report(plan: Plan, result: CopyResult) -> RunReport:
    """Lag left is measured against the source's last stable offset at plan time."""
    planned = {(p.topic, p.partition): p for p in plan.partitions}
    copied = {(r.topic, r.partition): r for r in result.partitions}
    topics: dict[str, dict[str, Any]] = {}
    for s in plan.states:
        entry = topics.setdefault(
            s.topic,
            {
                "remote_topic": s.remote_topic,
                "partitions": 0,
                "records": 0,
                "skipped": 0,
                "bytes": 0,
                "lag": 0,
            },
        )
        entry["partitions"] += 1
        p = planned.get((s.topic, s.partition))
        committed = p.source_end if p else s.committed
        entry["lag"] += s.end - committed
        if p:
            r = copied[(s.topic, s.partition)]
            entry["records"] += r.records
            entry["skipped"] += r.skipped
            entry["bytes"] += r.bytes
    return RunReport(plan.flow, plan.run_id, tuple(TopicReport(t, **v) for t, v in sorted(topics.items())))
