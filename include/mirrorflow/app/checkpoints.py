"""MirrorCheckpoint: consumer-group positions translated to the target, as MM2 checkpoints.

For each consumer group on the source that passes the flow's GroupFilter, its committed offsets on
the flow's mirrored partitions are translated exactly (``OffsetTranslator`` over the batch log) and
emitted as MM2 ``Checkpoint`` records to ``<source><sep>checkpoints<sep>internal`` on the target. A
group that read everything mirrored of a partition is translated past the commit marker the last
copy left on the remote partition, to where a read_committed consumer at its end stands (no lag):
the first committed record past the log's end, read off the target in one fetch per broker.

With ``mirrorflow.reverse.checkpoints.enabled`` (off by default) a flow ``B->A`` whose opposite
flow ``A->B`` is enabled also emits reverse checkpoints: a group's committed offset on a remote topic
of ``A->B`` on ``B`` (``A.orders``) is translated exactly back through ``A->B``'s batch log to the
upstream topic (``orders`` on ``A``), so that a group failing back resumes on ``A`` at the first record
it did not consume on ``B``. They are MM2 checkpoints on ``A``'s topic name, as MM2's
``RemoteClusterUtils`` reads them, and follow the same rules as the others.

With ``sync.group.offsets.enabled`` (MM2's default: false) the translated positions are also
committed to the same groups on the target, on the topic names of the checkpoints.

Which positions are emitted and which target offsets are committed, with their invariants (never past
a record not yet mirrored; only forward or when the source group rewound; MM2's safety rules for
target groups): ``mirrorflow.core.group_positions``. What was emitted is kept in the offsets table,
which is how "forward" is judged.
"""

from __future__ import annotations

import logging
import shlex
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import partial

from mirrorflow.app.flow_session import FlowSession
from mirrorflow.config.model import ClusterConfig
from mirrorflow.core.group_positions import Translation, next_positions, offsets_to_sync
from mirrorflow.core.plan import SourceGap
from mirrorflow.core.progress import Batch, GroupPosition
from mirrorflow.core.topic_partitions import TP
from mirrorflow.core.translation import OffsetTranslator, pruning_hole
from mirrorflow.errors import CommitConflictError, CorruptStateError, PlanError
from mirrorflow.kafka.record_reads import control_plane_read, first_committed
from mirrorflow.mm2.records import Checkpoint
from mirrorflow.store.checkpoint_log import batches_from, checkpoints, record_checkpoints
from mirrorflow.store.flow_lock import lock_holder
from mirrorflow.store.offsets_store import OffsetsStore

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CheckpointReport:
    groups: int
    emitted: tuple[GroupPosition, ...]
    untranslated: int
    synced: Mapping[str, Mapping[TP, int]] = field(default_factory=dict)
    active: tuple[str, ...] = ()


def forward_translations(
    store: OffsetsStore, flow: str, spans: Mapping[TP, tuple[int, int]], target: ClusterConfig
) -> dict[TP, Translation]:
    """Each mirrored partition a group has a position on (``spans``: the groups' lowest and highest
    there, ``group_spans``) with its remote topic's name and exact translation, from the rows of its
    batch log and gaps that translate offsets at or past the lowest. A group that read everything
    mirrored stands past the commit marker of the last copy, where a read_committed consumer at the
    remote partition's end does: where the first committed record past the log's end is, is read off
    ``target`` (the flow's) for partitions whose highest position translates to the end (one fetch
    per broker). A partition with gaps but no batch yet has nothing mirrored to point at: it has
    none."""
    mirrored = store.progress(flow)
    translators = _translators(store, flow, {tp: low for tp, (low, _) in spans.items() if tp in mirrored})
    at_end = {
        (remote, partition): end
        for (topic, partition), (remote, t) in translators.items()
        if (end := t.target_end) is not None and t.translate(spans[(topic, partition)][1]) == end
    }
    committed_from = _committed_past_end(target, at_end)
    return {
        tp: Translation(remote, partial(t.translate, committed_from=committed_from.get((remote, tp[1]))))
        for tp, (remote, t) in translators.items()
    }


def reverse_translations(
    store: OffsetsStore, opposite: str, spans: Mapping[TP, tuple[int, int]], cluster: ClusterConfig
) -> dict[TP, Translation]:
    """For reverse checkpoints: each remote partition of the ``opposite`` flow that a group has a
    position on (``spans``: the groups' lowest and highest there, keyed by its name on ``cluster``,
    that flow's target), translated back to its upstream topic. A group that read every copy sits
    past the commit marker of the last one, which no batch covers yet: where the first committed
    record past the log's end is, is read off ``cluster`` for such positions (one fetch per broker)."""
    translators = {
        (remote, partition): (topic, t)
        for (topic, partition), (remote, t) in _translators(
            store, opposite, {tp: low for tp, (low, _) in spans.items()}, on_target=True
        ).items()
    }
    ends = {tp: t.target_end for tp, (_, t) in translators.items()}
    past_end = {
        tp: end for tp, (_, high) in spans.items() if (end := ends.get(tp)) is not None and high > end
    }
    committed_from = _committed_past_end(cluster, past_end)
    return {
        tp: Translation(topic, partial(t.reverse, committed_from=committed_from.get(tp)))
        for tp, (topic, t) in translators.items()
    }


def _committed_past_end(cluster: ClusterConfig, ends: Mapping[TP, int]) -> dict[TP, int]:
    """Per remote partition of ``ends`` (where the last copy in its log ends on ``cluster``), where
    its first committed record at or past there is: one read_committed fetch per broker for them
    all. Before it lie only the markers closing the flow's transactions and records they aborted;
    the fetch stops at the last stable offset, so it never passes a record an open transaction may
    still commit (a copy in flight)."""
    if not ends:
        return {}
    with control_plane_read(cluster.consumer, cluster.alias, *{t for t, _ in ends}) as connection:
        return first_committed(connection, ends)


def group_spans(committed: Mapping[str, Mapping[TP, tuple[int, str]]]) -> dict[TP, tuple[int, int]]:
    """Each partition's lowest and highest position among the groups."""
    spans: dict[TP, tuple[int, int]] = {}
    for offsets in committed.values():
        for tp, (offset, _) in offsets.items():
            low, high = spans.get(tp, (offset, offset))
            spans[tp] = (min(low, offset), max(high, offset))
    return spans


def _translators(
    store: OffsetsStore, flow: str, lowest: Mapping[TP, int], *, on_target: bool = False
) -> dict[TP, tuple[str, OffsetTranslator]]:
    """The translator of each partition of ``lowest`` from the part of its batch log and gaps that
    translates offsets at or past its lowest there (source offsets, or with ``on_target`` target
    offsets of remote partitions): the rows that end past it, and the gaps from the first of them
    on. Where the log was pruned below the source's log start, the pruned offsets count as a gap: a
    group still positioned there (the source resets it to the log start) maps to where the first
    record kept lands; so does a hole pruning left after the log's first row
    (``core.translation.pruning_hole``). A log with any other hole is refused, naming the flow and
    the partition (``CorruptStateError``)."""
    by_tp: dict[TP, list[Batch]] = {}
    for b in batches_from(store, flow, lowest, on_target=on_target):
        by_tp.setdefault((b.topic, b.partition), []).append(b)
    gaps: dict[TP, list[SourceGap]] = {}
    for g in store.gaps(flow):
        logged = by_tp.get((g.topic, g.partition))
        if logged and _past(g, logged[0], lowest, on_target):
            gaps.setdefault((g.topic, g.partition), []).append(g)
    for (topic, partition), began in store.pruned_from(flow).items():
        hole = pruning_hole(by_tp.get((topic, partition), ()), gaps.get((topic, partition), ()))
        if hole is not None:
            gaps.setdefault((topic, partition), []).append(hole)
        logged = [*by_tp.get((topic, partition), ()), *gaps.get((topic, partition), ())]
        first = min(logged, key=lambda s: s.source_start, default=None)
        if first is None or first.source_start <= began:
            continue
        # Read from its lowest on, only a lowest before the first row read needs the cut: it then
        # maps as any gap before that row would.
        if not on_target and lowest.get((topic, partition), began) < first.source_start:
            cut = SourceGap(
                topic, partition, began, first.source_start, first.target_start, first.target_start
            )
            gaps.setdefault((topic, partition), []).append(cut)
    return {tp: (bs[0].remote_topic, _translator(flow, bs, gaps.get(tp, ()))) for tp, bs in by_tp.items()}


def _translator(flow: str, batches: list[Batch], gaps: Iterable[SourceGap]) -> OffsetTranslator:
    """The partition's translator; a log that does not tile is a damaged database, with its repair."""
    try:
        return OffsetTranslator(batches, gaps)
    except PlanError as broken:
        flag = f"--flow {shlex.quote(flow)}"
        raise CorruptStateError(
            f"flow {flow}: {broken}. mirrorflow leaves no such hole in a partition's log: the offsets "
            "database was edited by hand or is damaged, and no offset of the partition translates until "
            f"it is repaired. See its rows with `python -m mirrorflow.store show {flag}`; restore the "
            "database from a backup, or forget the flow's state of the topic while no run is going "
            f"(`python -m mirrorflow.store forget-topic {flag} --topic {shlex.quote(batches[0].topic)}`): "
            "the next run then mirrors it anew, after what its remote topic holds."
        ) from broken


def _past(gap: SourceGap, first: Batch, lowest: Mapping[TP, int], on_target: bool) -> bool:
    """Whether ``gap`` is part of a log read from ``first`` (the first row read) for offsets at or
    past the partition's lowest: it ends past the lowest, or past the first row's start."""
    if on_target:
        return gap.target_end > min(lowest[(first.remote_topic, first.partition)], first.target_start)
    return gap.source_end > min(lowest[(first.topic, first.partition)], first.source_start)


def emit_checkpoints(session: FlowSession) -> CheckpointReport:
    """Translate and emit what moved since the last call (nothing when emit.checkpoints.enabled is
    false), with the session's connections and its producer for the checkpoints topic. A session
    holding the flow's lock (a DR window) must still hold it right before the checkpoints are
    written: a window frozen and woken up after the next took over would otherwise write positions it
    read before."""
    flow, store = session.flow, session.store
    if not flow.emit_checkpoints:
        return CheckpointReport(0, (), 0)
    source = session.source
    groups = [g for g in source.consumer_groups() if flow.group_filter.should_replicate_group(g)]
    read_at = time.monotonic()
    committed = source.group_offsets(groups)
    spans = group_spans(committed)
    translations = forward_translations(store, flow.name, spans, flow.target)
    if flow.settings.reverse_checkpoints:
        translations |= reverse_translations(store, flow.opposite, spans, flow.source)
    previous = checkpoints(store, flow.name)
    emit, untranslated = next_positions(committed, translations, previous)
    if emit:
        holder = session.holder
        if holder is not None and lock_holder(store, flow.name) != holder:
            raise CommitConflictError(
                f"flow {flow.name}: run {holder} cannot emit checkpoints: it no longer holds the "
                "flow's lock (another run took it over); nothing was written"
            )
        _write(session, emit)
        # MM2's checkpoint latency: from reading the group's offsets to the checkpoint's ack.
        record_checkpoints(store, flow.name, emit, round((time.monotonic() - read_at) * 1000))
        session.write_checkpoint_metrics()
    synced: dict[str, dict[TP, int]] = {}
    active: list[str] = []
    if flow.sync_group_offsets:
        # Every group's newest position, not only what moved now: a target group may have become
        # idle since its checkpoint was emitted.
        newest = {**previous, **{(p.group_id, p.topic, p.partition): p for p in emit}}
        synced, active = _sync_group_offsets(session, newest.values())
    for p in emit:
        log.info(
            "checkpoint %s %s-%d: source offset %d -> %s offset %d",
            p.group_id, p.topic, p.partition, p.upstream_offset, p.remote_topic, p.downstream_offset,
        )  # fmt: skip
    log.info(
        "flow %s: %d groups, %d checkpoints emitted, %d committed offsets not mirrored yet",
        flow.name, len(committed), len(emit), untranslated,
    )  # fmt: skip
    return CheckpointReport(len(committed), tuple(emit), untranslated, synced, tuple(active))


def _sync_group_offsets(
    session: FlowSession, positions: Iterable[GroupPosition]
) -> tuple[dict[str, dict[TP, int]], list[str]]:
    flow, target = session.flow, session.target
    positions = list(positions)
    groups = sorted({p.group_id for p in positions})
    sync, active = offsets_to_sync(positions, target.group_states(groups), target.group_offsets(groups))
    for group, offsets in sorted(sync.items()):
        target.commit_group_offsets(group, offsets)
        log.info("group %s on %s: offsets synced %s", group, flow.target.alias, dict(sorted(offsets.items())))
    for group in active:
        log.warning(
            "group %s is active on %s: its offsets were not synced (MM2 leaves active groups alone too)",
            group, flow.target.alias,
        )  # fmt: skip
    return sync, active


def _write(session: FlowSession, positions: list[GroupPosition]) -> None:
    flow = session.flow
    checkpoints = [
        Checkpoint(
            p.group_id, p.remote_topic, p.partition, p.upstream_offset, p.downstream_offset, p.metadata
        )
        for p in positions
    ]
    session.internal.write(
        flow.target,
        flow.replication_policy.checkpoints_topic(flow.source.alias),
        flow.checkpoints_topic_replication_factor,
        [(c.key(), c.value()) for c in checkpoints],
    )
