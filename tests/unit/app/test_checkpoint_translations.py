"""A checkpoint pass reads only the batch-log rows its groups' positions need: translations built
from each partition's lowest position on answer every offset at or past it exactly as the whole log
does, forward and back, across rows of several windows, a source gap, and a log pruned at the
source's log start. Over a real SQLite offsets table filled through its public API; no group is at
the log's end, where the remote partition would be read (tests/integration/test_checkpoints.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mirrorflow.app.checkpoints import forward_translations, reverse_translations
from mirrorflow.config.model import ClusterConfig
from mirrorflow.core.plan import SourceGap
from mirrorflow.core.progress import Batch, PartitionProgress
from mirrorflow.core.translation import OffsetTranslator
from mirrorflow.store.offsets_store import OffsetsStore

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
        store.acquire_lock(FLOW, holder, ttl_seconds=600)
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
        store.release_lock(FLOW, holder)
    store.acquire_lock(FLOW, "w3", ttl_seconds=600)
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
