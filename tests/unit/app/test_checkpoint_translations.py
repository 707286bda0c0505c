"""A checkpoint pass reads only the batch-log rows its groups' positions need: translations built
from each partition's lowest position on answer every offset at or past it exactly as the whole log
does, forward and back, across rows of several windows, a source gap, and a log pruned at the
source's log start. Over a real SQLite offsets table filled through its public API; no group is at
the log's end, where the remote partition would be read (tests/integration/test_checkpoints.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import create_engine, delete, insert

from mirrorflow.app.checkpoints import forward_translations, reverse_translations
from mirrorflow.config.model import ClusterConfig
from mirrorflow.core.plan import SourceGap
from mirrorflow.core.progress import Batch, PartitionProgress
from mirrorflow.core.translation import OffsetTranslator
from mirrorflow.errors import CorruptStateError
from mirrorflow.store.flow_lock import acquire_lock, release_lock
from mirrorflow.store.offsets_store import OffsetsStore
from mirrorflow.store.tables import gaps_table, pruned_table

FLOW = "primary->backup"
TP, REMOTE = ("orders", 0), ("primary.orders", 0)
# Never reached: a group at or past the log's end would be read there, and no case puts one there.
UNREACHABLE = ClusterConfig.__new__(ClusterConfig)
SOURCE_END = 70


def _micro_batch(source: int, target: int, records: int, marker: bool) -> Batch:
    """``records`` records from ``source`` on, landing after the last transaction's commit marker."""
    start = target + (1 if marker else 0)
    return Batch(
        *TP,
        "primary.orders",
        source,
        source + records,
        target,
        start + records,
        records,
        100 * records,
        (),
        ((target, start),) if marker else (),
    )


@pytest.fixture(params=[None, 12], ids=["whole", "pruned"])
def store(tmp_path: Path, request: pytest.FixtureRequest) -> OffsetsStore:
    """Three windows of micro-batches, the first window's rows merged; source offsets 40-49 lost
    before the third window; the log pruned at source offset 12, or not."""
    store = OffsetsStore(f"sqlite:///{tmp_path / 'offsets.db'}")
    source, target = 0, 0
    for window in range(3):
        holder = f"w{window}"
        acquire_lock(store, FLOW, holder, ttl_seconds=600)
        if window == 0:
            store.anchor(FLOW, holder, [PartitionProgress(*TP, 0, 0)])
        gaps: list[SourceGap] = []
        if window == 2:
            gaps = [SourceGap(*TP, source, source + 10, target, target)]
            source += 10
        for n in range(4):
            batch = _micro_batch(source, target, 5, marker=source > 0)
            store.commit(FLOW, f"{holder}#{n}", [batch], gaps=gaps if n == 0 else (), holder=holder)
            source, target = batch.source_end, batch.target_end
        if window == 0:
            store.coalesce_batches(FLOW, holder, {})
        release_lock(store, FLOW, holder)
    acquire_lock(store, FLOW, "w3", ttl_seconds=600)
    store.coalesce_batches(FLOW, "w3", {} if request.param is None else {TP: request.param})
    return store


def test_translations_from_the_lowest_position_equal_the_whole_logs_at_and_past_it(
    store: OffsetsStore,
) -> None:
    whole = forward_translations(store, FLOW, {TP: (0, 0)}, UNREACHABLE)[TP].translate
    assert len(store.batches(FLOW)) == 9  # the first window merged; 8 micro-batches
    assert store.progress(FLOW)[TP].next_source_offset == SOURCE_END
    for lowest in range(0, SOURCE_END):
        part = forward_translations(store, FLOW, {TP: (lowest, lowest)}, UNREACHABLE)[TP].translate
        assert [part(u) for u in range(lowest, 75)] == [whole(u) for u in range(lowest, 75)], lowest


def test_reverse_translations_from_the_lowest_position_equal_the_whole_logs_at_and_past_it(
    store: OffsetsStore,
) -> None:
    batches = [b.as_batch() for b in store.batches(FLOW)]
    gaps = [SourceGap(*list(vars(g).values())[:6]) for g in store.gaps(FLOW)]
    whole = OffsetTranslator(batches, gaps).reverse
    end = batches[-1].target_end
    for lowest in range(0, end + 1):
        part = reverse_translations(store, FLOW, {REMOTE: (lowest, lowest)}, UNREACHABLE)[REMOTE].translate
        assert [part(d) for d in range(lowest, end + 1)] == [whole(d) for d in range(lowest, end + 1)], lowest


def _lost_between_batches(tmp_path: Path, before: int) -> tuple[OffsetsStore, OffsetTranslator]:
    """``before`` micro-batches of 5 records from source offset 0, then source offsets lost up to 30
    (a gap), then a micro-batch from 30 on, and what pruning once left of that at log start 30 before
    that last micro-batch came: the gap cut, the batch before it kept (and the pruned range's start
    where the gap began). With the translator of the log before that."""
    store = OffsetsStore(f"sqlite:///{tmp_path / 'offsets.db'}")
    acquire_lock(store, FLOW, "w", ttl_seconds=600)
    store.anchor(FLOW, "w", [PartitionProgress(*TP, 0, 0)])
    batches: list[Batch] = []
    for n in range(before):
        batches.append(_micro_batch(5 * n, batches[-1].target_end if batches else 0, 5, marker=n > 0))
    lost = SourceGap(*TP, 5 * before, 30, batches[-1].target_end, batches[-1].target_end)
    batches.append(_micro_batch(30, lost.target_end, 5, marker=True))
    for n, batch in enumerate(batches):
        store.commit(FLOW, f"w#{n}", [batch], gaps=[lost] if batch.source_start == 30 else (), holder="w")
    engine = create_engine(f"sqlite:///{tmp_path / 'offsets.db'}")
    with engine.begin() as conn:
        conn.execute(delete(gaps_table))
        conn.execute(
            insert(pruned_table).values(
                flow=FLOW, topic=TP[0], partition=TP[1], source_start=lost.source_start, records=0, bytes=0,
                pruned_at=datetime.now(UTC),
            )
        )  # fmt: skip
    engine.dispose()
    return store, OffsetTranslator(batches, [lost])


def test_a_hole_pruning_left_after_the_first_row_translates_as_the_gap_it_was(tmp_path: Path) -> None:
    store, original = _lost_between_batches(tmp_path, 1)
    end = original.target_end
    assert end is not None

    # Forward, from any group's lowest position on (none at the log's end: nothing is read off the
    # target), and back: as the log did before the cut.
    for lowest in range(0, 35):
        part = forward_translations(store, FLOW, {TP: (lowest, lowest)}, UNREACHABLE)[TP].translate
        assert [part(u) for u in range(lowest, 40)] == [original.translate(u) for u in range(lowest, 40)]
    for lowest in range(0, end + 1):
        back = reverse_translations(store, FLOW, {REMOTE: (lowest, lowest)}, UNREACHABLE)[REMOTE].translate
        assert [back(d) for d in range(lowest, end + 1)] == [
            original.reverse(d) for d in range(lowest, end + 1)
        ]

    # The next merge cuts the batch below the log start: from there on, translation is the same, and
    # a group still positioned below resumes at the first record kept.
    store.coalesce_batches(FLOW, "w", {TP: 30})
    assert [(b.source_start, b.source_end) for b in store.batches(FLOW)] == [(30, 35)]
    whole = forward_translations(store, FLOW, {TP: (0, 0)}, UNREACHABLE)[TP].translate
    assert [whole(u) for u in range(30, 40)] == [original.translate(u) for u in range(30, 40)]
    assert {whole(u) for u in range(0, 31)} == {original.translate(30)}


def test_a_hole_pruning_cannot_have_left_is_refused_naming_the_flow_and_the_partition(
    tmp_path: Path,
) -> None:
    store, _ = _lost_between_batches(tmp_path, 2)  # two rows before the hole

    with pytest.raises(CorruptStateError) as caught:
        forward_translations(store, FLOW, {TP: (0, 0)}, UNREACHABLE)

    assert str(caught.value).startswith(
        "flow primary->backup: batch log of orders-0 is not contiguous at source offset 10 (target 11): "
        "the next row starts at source offset 30 (target 11). mirrorflow leaves no such hole"
    )
    assert "forget-topic --flow 'primary->backup' --topic orders" in str(caught.value)
