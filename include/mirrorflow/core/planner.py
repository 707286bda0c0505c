"""The planner: a pure function from metadata and committed progress to a ``Plan``.

Invariants:
- A partition with committed progress resumes exactly where the last commit left it, on the source
  and on the target: records an interrupted attempt already wrote past that point are recognised by
  the copy (target end offset minus ``target_start``) and never written twice.
- A partition seen for the first time starts at the run's start position (by default the source's
  log start offset: MirrorMaker 2 copies from the earliest record) and at the target's current end
  offset; its starting point is anchored in the offsets table before any record is copied, and its
  topic's id is recorded with it.
- No range ends past the source's last stable offset at plan time, nor past the run's bound (a
  scheduled run's interval end), nor is longer than the per-run cap. A bound at or before committed
  progress plans nothing: re-running an interval already copied is a no-op.
- Committed progress the source no longer holds is never skipped silently: the run fails naming every
  lost range, or (``mirrorflow.on.source.data.loss = skip``) the plan carries each gap, and the
  partition resumes after it, where neither the lost records nor an interrupted attempt's copies of
  them are copied again, and no record after the gap is skipped or copied twice.
- A selected topic whose id differs from the one recorded (deleted and recreated) stops the run
  before anything is copied.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from mirrorflow.config.keys import ON_SOURCE_DATA_LOSS
from mirrorflow.core.plan import PartitionPlan, PartitionState, Plan, SourceGap
from mirrorflow.core.progress import PartitionProgress, TopicIdentity
from mirrorflow.core.topic_partitions import TP
from mirrorflow.errors import SourceDataLostError, SourceTopicRecreatedError, TargetStateError


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
    source: Mapping[TP, SourceOffsets]
    remote_topics: Mapping[str, str]
    target_ends: Mapping[TP, int]
    progress: Mapping[TP, PartitionProgress]
    max_records_per_partition: int
    # Topics of a few records each (heartbeats): a plan of only these is copied in process, since
    # starting Spark for them would make every run with nothing else new cost ~10 s more.
    ride_along: frozenset[str] = frozenset()
    # mirrorflow.on.source.data.loss = skip: continue after lost source records instead of failing.
    skip_lost: bool = False
    # For each gap of ``find_gaps`` whose remote partition holds offsets past the committed target
    # offset (an interrupted attempt's records, transaction markers): the target offset where the
    # copies of records from the log start on begin, at the end of them (``count_copied_past_gap``
    # counts them); where there are none, right after the last copy of a lost record (the gap's
    # target start if there is none: markers only). Required for every such gap.
    copied_past_gap: Mapping[TP, int] = field(default_factory=dict)
    # Source topic ids now (topics whose broker reports one), and as recorded when first mirrored.
    topic_ids: Mapping[str, str] = field(default_factory=dict)
    known_topic_ids: Mapping[str, str] = field(default_factory=dict)
    # Where partitions without progress start (default: the log start), within [log start, end].
    starts: Mapping[TP, int] = field(default_factory=dict)
    # The source offset each partition's range may not pass (a scheduled run's interval end).
    bounds: Mapping[TP, int] = field(default_factory=dict)


@dataclass(frozen=True)
class PlannerOutput:
    plan: Plan
    anchors: tuple[PartitionProgress, ...]
    # Topic ids seen for the first time, to record with the anchors.
    topics: tuple[TopicIdentity, ...] = ()


def find_gaps(inp: PlannerInput) -> tuple[SourceGap, ...]:
    """Check the flow's committed state against the source and the target; return the source gaps
    to skip, in (topic, partition) order.

    Raises ``SourceTopicRecreatedError`` naming every selected topic whose id changed,
    ``TargetStateError`` for a partition whose committed position the source or target contradicts,
    and, unless ``skip_lost``, one ``SourceDataLostError`` listing every lost range. Each gap returned
    counts every record past the committed target offset as a copy of a lost record; ``make_plan``
    moves those that copy records after the gap out of it (``copied_past_gap``).
    """
    _check_topic_ids(inp)
    gaps = []
    for (topic, partition), offsets in sorted(inp.source.items()):
        position = inp.progress.get((topic, partition))
        if position is None:
            continue  # a new partition starts at the log start: nothing of it can be lost
        remote = inp.remote_topics[topic]
        target_end = inp.target_ends[(remote, partition)]
        _check_positions(inp.flow, topic, partition, remote, offsets, target_end, position)
        if position.next_source_offset < offsets.log_start:
            gaps.append(
                SourceGap(
                    topic,
                    partition,
                    position.next_source_offset,
                    offsets.log_start,
                    position.next_target_offset,
                    target_end,
                )
            )
    if gaps and not inp.skip_lost:
        raise SourceDataLostError(
            f"flow {inp.flow}: source records were deleted from the source (retention or "
            f"delete-records) before they were mirrored: {', '.join(map(str, gaps))}. Nothing was "
            f"copied or committed. {lost_data_choice(inp.flow)}"
        )
    return tuple(gaps)


def lost_data_choice(flow: str) -> str:
    """What a person can do about source records lost before they were mirrored."""
    return (
        f"Until the loss is accepted, every run of the flow fails here. To accept it, set "
        f"`{flow}.{ON_SOURCE_DATA_LOSS} = skip` and run the flow again: it continues after each lost "
        "range and records it in the offsets table (mirror_gaps) and the run report."
    )


def make_plan(inp: PlannerInput) -> PlannerOutput:
    """Plan every source partition in ``inp.source``, in (topic, partition) order."""
    gaps = {(g.topic, g.partition): _without_copies_past(g, inp.copied_past_gap) for g in find_gaps(inp)}
    parts: list[PartitionPlan] = []
    states: list[PartitionState] = []
    anchors: list[PartitionProgress] = []
    for (topic, partition), offsets in sorted(inp.source.items()):
        remote = inp.remote_topics[topic]
        position = inp.progress.get((topic, partition))
        if position is None:
            position = PartitionProgress(
                topic,
                partition,
                inp.starts.get((topic, partition), offsets.log_start),
                inp.target_ends[(remote, partition)],
            )
            anchors.append(position)
        gap = gaps.get((topic, partition))
        if gap is not None:
            position = PartitionProgress(topic, partition, gap.source_end, gap.target_end)
        states.append(
            PartitionState(
                topic, partition, remote, offsets.log_start, offsets.end, position.next_source_offset
            )
        )
        end = min(
            offsets.end,
            inp.bounds.get((topic, partition), offsets.end),
            position.next_source_offset + inp.max_records_per_partition,
        )
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
    plan = Plan(
        inp.flow,
        inp.run_id,
        inp.created_at,
        tuple(parts),
        tuple(states),
        tuple(gaps.values()),
        in_process=bool(parts) and all(p.topic in inp.ride_along for p in parts),
    )
    topics = tuple(
        TopicIdentity(topic, topic_id, inp.remote_topics[topic])
        for topic, topic_id in sorted(inp.topic_ids.items())
        if topic not in inp.known_topic_ids
    )
    return PlannerOutput(plan, tuple(anchors), topics)


def count_copied_past_gap(left: Sequence[bytes], following: Sequence[bytes]) -> int:
    """How many of the records an interrupted attempt ``left`` on a remote partition past the
    committed target offset (digests, oldest first) are copies of records ``following`` a gap on the
    source (digests from the log start on): the longest end of ``left`` equal to a start of
    ``following``.

    The attempt copied consecutive records from the committed position on, so its copies of records
    after the gap, if any, are such an end, and the rest copy lost records. The longest is taken, so
    that no record is copied twice; only records identical in key, value, headers and timestamp on
    both sides of the gap's end could be mistaken for one another.
    """
    # Knuth-Morris-Pratt over following + separator + left: the border of the whole sequence is the
    # longest end of ``left`` that starts ``following``; the empty separator matches no digest.
    sequence = [*following[: len(left)], b"", *left]
    border = [0] * len(sequence)
    for i in range(1, len(sequence)):
        k = border[i - 1]
        while k and sequence[i] != sequence[k]:
            k = border[k - 1]
        border[i] = k + 1 if sequence[i] == sequence[k] else 0
    return border[-1]


def _without_copies_past(gap: SourceGap, copied_past_gap: Mapping[TP, int]) -> SourceGap:
    if gap.target_end == gap.target_start:
        return gap
    return replace(gap, target_end=copied_past_gap[(gap.topic, gap.partition)])


def _check_topic_ids(inp: PlannerInput) -> None:
    recreated = [
        (topic, known, inp.topic_ids[topic])
        for topic, known in sorted(inp.known_topic_ids.items())
        if topic in inp.topic_ids and inp.topic_ids[topic] != known
    ]
    if recreated:
        listed = "; ".join(
            f"{topic} (mirrored topic id {known}, now {now}) into {inp.remote_topics[topic]}"
            for topic, known, now in recreated
        )
        raise SourceTopicRecreatedError(
            f"flow {inp.flow}: source topics were deleted and recreated since they were first mirrored: "
            f"{listed}. Nothing was copied: the flow's progress, batch log and remote topics belong to "
            f"the old topics, and the new records must not be mixed into them unnoticed. "
            f"{_forget_topics_hint(inp.flow, [t for t, _, _ in recreated])}"
        )


def _forget_topics_hint(flow: str, topics: Sequence[str]) -> str:
    commands = "; ".join(
        f"python -m mirrorflow.store forget-topic --flow {shlex.quote(flow)} --topic {shlex.quote(t)}"
        for t in topics
    )
    return (
        "To mirror the topic anew: delete its remote topic on the target (or keep it, and the new "
        "records are appended after the old copy), forget the flow's state of the topic while no run "
        f"of the flow is going ({commands}), then run the flow again."
    )


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
    if nxt > offsets.end:
        # The topic id check finds recreated topics first; this catches those without a recorded id.
        raise SourceTopicRecreatedError(
            f"flow {flow}: committed progress for {topic}-{partition} is at offset {nxt} but the source "
            f"partition ends at {offsets.end}: the source topic was probably deleted and recreated. "
            f"Nothing was copied. {_forget_topics_hint(flow, [topic])}"
        )
    if target_end < position.next_target_offset:
        raise TargetStateError(
            f"flow {flow}: remote partition {remote}-{partition} ends at offset {target_end}, before the "
            f"{position.next_target_offset} already mirrored into it: the remote topic was deleted, "
            f"recreated or truncated. Nothing was copied. {_forget_topics_hint(flow, [topic])}"
        )
