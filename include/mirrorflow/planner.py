"""The planner: a pure function from metadata and committed progress to a ``Plan``.

Invariants:
- A partition with committed progress resumes exactly where the last commit left it, on the source
  and on the target: records an interrupted attempt already wrote past that point are recognised by
  the copy (target end offset minus ``target_start``) and never written twice.
- A partition seen for the first time starts at the source's log start offset (MirrorMaker 2 copies
  from the earliest record) and at the target's current end offset; its starting point is anchored in
  the offsets table before any record is copied.
- No range ends past the source's last stable offset at plan time, nor is longer than the per-run cap.
- Committed progress the source no longer holds is never skipped silently.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from mirrorflow.errors import SourceDataLostError, TargetStateError
from mirrorflow.offsets_store import PartitionProgress
from mirrorflow.plan import PartitionPlan, PartitionState, Plan

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class SourceOffsets:
    """Offsets of one source partition at plan time: ``end`` is the last stable offset."""

    log_start: int
    end: int


@dataclass(frozen=True)
class PlannerInput:
    flow: str
    run_id: str
    created_at: str
    source: Mapping[TopicPartition, SourceOffsets]
    remote_topics: Mapping[str, str]
    target_ends: Mapping[TopicPartition, int]
    progress: Mapping[TopicPartition, PartitionProgress]
    max_records_per_partition: int
    # Topics copied only by a run that copies something else: a new heartbeat alone must not
    # start Spark, so runs with nothing new stay cheap; heartbeats ride along with the next data.
    ride_along: frozenset[str] = frozenset()


@dataclass(frozen=True)
class PlannerOutput:
    plan: Plan
    anchors: tuple[PartitionProgress, ...]


def make_plan(inp: PlannerInput) -> PlannerOutput:
    """Plan every source partition in ``inp.source``, in (topic, partition) order."""
    parts: list[PartitionPlan] = []
    states: list[PartitionState] = []
    anchors: list[PartitionProgress] = []
    for (topic, partition), offsets in sorted(inp.source.items()):
        remote = inp.remote_topics[topic]
        target_end = inp.target_ends[(remote, partition)]
        position = inp.progress.get((topic, partition))
        if position is None:
            position = PartitionProgress(topic, partition, offsets.log_start, target_end)
            anchors.append(position)
        _check_positions(inp.flow, topic, partition, remote, offsets, target_end, position)
        states.append(
            PartitionState(
                topic, partition, remote, offsets.log_start, offsets.end, position.next_source_offset
            )
        )
        end = min(offsets.end, position.next_source_offset + inp.max_records_per_partition)
        if end > position.next_source_offset:
            parts.append(
                PartitionPlan(
                    topic=topic,
                    partition=partition,
                    source_start=position.next_source_offset,
                    source_end=end,
                    remote_topic=remote,
                    target_start=position.next_target_offset,
                )
            )
    if all(p.topic in inp.ride_along for p in parts):
        parts = []
    plan = Plan(inp.flow, inp.run_id, inp.created_at, tuple(parts), tuple(states))
    return PlannerOutput(plan, tuple(anchors))


def _check_positions(
    flow: str,
    topic: str,
    partition: int,
    remote: str,
    offsets: SourceOffsets,
    target_end: int,
    position: PartitionProgress,
) -> None:
    nxt = position.next_source_offset
    if nxt < offsets.log_start:
        raise SourceDataLostError(
            f"flow {flow}: source records {topic}-{partition} offsets [{nxt}, {offsets.log_start}) were "
            "deleted from the source (retention or delete-records) before they were mirrored. Nothing was "
            "copied. Decide whether the loss is acceptable, then move the flow's progress for that "
            "partition past the gap."
        )
    if nxt > offsets.end:
        raise TargetStateError(
            f"flow {flow}: committed progress for {topic}-{partition} is at offset {nxt} but the source "
            f"partition ends at {offsets.end}: the source topic was probably deleted and recreated. "
            "Nothing was copied; reset the flow's progress for that topic once you have decided how to "
            "treat the existing remote topic."
        )
    if target_end < position.next_target_offset:
        raise TargetStateError(
            f"flow {flow}: remote partition {remote}-{partition} ends at offset {target_end}, before the "
            f"{position.next_target_offset} already mirrored into it: the remote topic was deleted, "
            "recreated or truncated. Nothing was copied; reset the flow's progress for that topic to "
            "mirror it again."
        )
