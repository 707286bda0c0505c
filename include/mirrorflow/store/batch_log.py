"""The batch log's and the gap log's rows, step by step, inside a transaction the store holds:
moving a partition's progress across one batch or gap (compare-and-set), merging a DR window's
micro-batch rows, and pruning what lies below the source's log start.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    Row,
    Table,
    case,
    delete,
    exc,
    func,
    insert,
    select,
    tuple_,
    update,
)

from mirrorflow.core.progress import CommittedBatch, as_utc, format_time
from mirrorflow.core.topic_partitions import TP
from mirrorflow.core.translation import coalesce, trimmed
from mirrorflow.errors import CommitConflictError
from mirrorflow.store.rows import Log, batch_row, committed_batch
from mirrorflow.store.tables import batches_table, gaps_table, progress_table, pruned_table


def commit_step(conn: Connection, log: Log, row: dict[str, Any]) -> bool:
    """Move a partition's progress across one gap or batch (``row`` of ``log``) and log it;
    ``False`` when an earlier attempt of this commit already did."""
    table, stamp = log.table, log.stamp
    flow, run_id, topic, partition = row["flow"], row["run_id"], row["topic"], row["partition"]
    start = (row["source_start"], row["target_start"])
    where = f"flow {flow}: partition {topic}-{partition}"
    existing = conn.execute(
        select(table).where(
            table.c.flow == flow,
            table.c.topic == topic,
            table.c.partition == partition,
            table.c.source_start == start[0],
        )
    ).first()
    if existing is not None:
        logged = existing._mapping
        if all(logged[k] == v for k, v in row.items() if k != stamp):
            return False  # committed by an earlier attempt of this commit
        raise CommitConflictError(
            f"{where}: {log.kind} from source offset {start[0]} was already committed by run "
            f"{logged['run_id']} at {format_time(as_utc(logged[stamp]))} as {log.describe(logged)}; run "
            f"{run_id} now commits {log.describe(row)}. Nothing was committed; re-run the flow to "
            "plan from the committed position."
        )
    p = progress_table
    moved = conn.execute(
        update(p)
        .where(
            p.c.flow == flow,
            p.c.topic == topic,
            p.c.partition == partition,
            p.c.next_source_offset == start[0],
            p.c.next_target_offset == start[1],
        )
        .values(
            next_source_offset=row["source_end"],
            next_target_offset=row["target_end"],
            run_id=run_id,
            updated_at=row[stamp],
        )
    )
    if moved.rowcount != 1:
        actual = conn.execute(
            select(p.c.next_source_offset, p.c.next_target_offset, p.c.run_id).where(
                p.c.flow == flow, p.c.topic == topic, p.c.partition == partition
            )
        ).first()
        expected = f"(source {start[0]}, target {start[1]})"
        if actual is None:
            raise CommitConflictError(
                f"{where}: run {run_id} expected progress at {expected} but the partition has "
                "no progress: its starting position must be anchored before copying. Nothing "
                "was committed; re-run the flow."
            )
        raise CommitConflictError(
            f"{where}: run {run_id} expected progress at {expected} but it is at (source "
            f"{actual.next_source_offset}, target {actual.next_target_offset}), last written "
            f"by run {actual.run_id}. Nothing was committed; re-run the flow to plan from the "
            "committed position."
        )
    try:
        with conn.begin_nested():
            conn.execute(insert(table).values(**row))
    except exc.IntegrityError as error:
        raise CommitConflictError(
            f"{where}: {log.kind} from source offset {start[0]} was committed concurrently. Nothing "
            f"was committed; re-run the flow. ({error.orig})"
        ) from error
    return True


# A row the next window's rows no longer merge into: the sync points and target gaps (the copy's own
# commit markers, one per micro-batch) it holds. Each merge rewrites the row it merges into, so a
# DR flow's rows stay this small plus one window's points, however long it runs.
ROW_POINTS_MAX = 1000


def coalesce_window(conn: Connection, flow: str, holder: str) -> int:
    """Merge the batch-log rows of the DR window ``holder`` (run ids ``<holder>#<n>``), with the
    row each partition's first of them continues (an earlier window's or run's, unless it holds
    ``ROW_POINTS_MAX`` points already), into one row per unbroken stretch of each partition
    (``core.translation.coalesce``: translation reads the same from the merged rows); a merged row
    keeps its last micro-batch's id and time. Returns how many rows went. So a flow in DR mode keeps
    about one row per partition and ``ROW_POINTS_MAX`` points of its stretch (a window's at most),
    however many windows it ran; pruning at the source's log start bounds their number."""
    b = batches_table
    rows = conn.execute(
        select(b)
        .where(b.c.flow == flow, b.c.run_id.startswith(f"{holder}#", autoescape=True))
        .order_by(b.c.topic, b.c.partition, b.c.source_start)
    ).all()
    by_partition: dict[TP, list[CommittedBatch]] = {}
    for row in rows:
        batch = committed_batch(row._mapping)
        by_partition.setdefault((batch.topic, batch.partition), []).append(batch)
    firsts = [(t, p, logged[0].source_start) for (t, p), logged in by_partition.items()]
    before = (
        conn.execute(
            select(b).where(b.c.flow == flow, tuple_(b.c.topic, b.c.partition, b.c.source_end).in_(firsts))
        ).all()
        if firsts
        else []
    )
    for row in before:
        earlier = committed_batch(row._mapping)
        logged = by_partition[(earlier.topic, earlier.partition)]
        full = len(earlier.sync_points) + len(earlier.target_gaps) >= ROW_POINTS_MAX
        if earlier.target_end == logged[0].target_start and not full:
            logged.insert(0, earlier)
    removed = 0
    for (topic, partition), logged in by_partition.items():
        for merged in coalesce([c.as_batch() for c in logged]):
            chain = [c for c in logged if merged.source_start <= c.source_start < merged.source_end]
            if len(chain) == 1:
                continue
            conn.execute(
                delete(b).where(
                    b.c.flow == flow,
                    b.c.topic == topic,
                    b.c.partition == partition,
                    b.c.source_start >= merged.source_start,
                    b.c.source_start < merged.source_end,
                )
            )
            conn.execute(
                insert(b).values(**batch_row(flow, chain[-1].run_id, merged, chain[-1].committed_at))
            )
            removed += len(chain) - 1
    return removed


def prune_step(
    conn: Connection,
    flow: str,
    log_starts: Mapping[TP, int],
    keep_run: str | None,
    now: datetime,
) -> int:
    """Cut each partition's batch log and gaps at its source log start (``log_starts``), or below it
    where that would break the log: rows that end at or before the cut go, one that spans it is
    trimmed (``core.translation.trimmed``), and ``mirror_pruned`` keeps where the log began and the
    records and bytes the cut rows counted. A consumer position below the log start can only be reset
    on the source (to the log start), so translation keeps what a group can ask for
    (``app.checkpoints`` maps a position in the pruned range where the first row kept maps), and a
    source that adds a sync point per transaction no longer grows the log without bound.

    The cut is the log start lowered (``_cut``) so that a partition's newest row (batch or gap, by
    source offset) and its newest batch stay, trimmed at most, however far below the log start they
    lie: the batch says where the next record lands and what a group positioned in the log resumes
    at, and what follows it are gaps up to where progress is. Those gaps, where they lie wholly below
    the log start, merge into one row (they translate as one: to the first record after them), so
    the log does not grow with runs that find a partition's records lost and none to copy. The rows
    of ``keep_run`` (the commit this step runs in) stay as written, for a retried commit to find: the
    cut goes no further than the first of them.

    Invariant: one cut per partition, so what stays is the log's tail from the cut on, as contiguous
    as the log was, to its end. Once a newer batch is logged, the older one goes with the gaps after
    it; so does a hole that an earlier version's pruning left after a partition's newest batch, where
    it cut the gaps but kept the batch (``core.translation.pruning_hole`` translates across it
    meanwhile). Two reads find the partitions with anything to cut or merge. Returns how many rows
    went."""
    removed = 0
    for (topic, partition), cut in _due(conn, flow, log_starts).items():
        key = (flow, topic, partition)
        removed += _prune_partition(conn, key, log_starts[(topic, partition)], cut, keep_run, now)
    return removed


# A row's source range, [start, end).
_Range = tuple[int, int]


def _cut(log_start: int, newest: _Range, newest_batch: _Range | None) -> int:
    """Where a partition's log is cut at ``log_start``: there, or at the start of its newest row
    (batch or gap) when that ends at or before it, or lower at the start of its newest batch when
    that one does: each of them stays whole, with every row after it."""
    cut = newest[0] if newest[1] <= log_start else log_start
    if newest_batch is not None and newest_batch[1] <= cut:
        cut = newest_batch[0]
    return cut


def _due(conn: Connection, flow: str, log_starts: Mapping[TP, int]) -> dict[TP, int]:
    """The partitions with rows to cut (or gaps to merge, maybe: two or more, and a cut below the log
    start), with their cut (``_cut``)."""
    first: dict[TP, int] = {}
    newest: dict[TP, _Range] = {}
    newest_batch: dict[TP, _Range] = {}
    gaps: dict[TP, int] = {}
    for table in (batches_table, gaps_table):
        c = table.c
        for topic, partition, low, last, last_end, rows in conn.execute(
            select(
                c.topic,
                c.partition,
                func.min(c.source_start),
                func.max(c.source_start),
                func.max(c.source_end),
                func.count(),
            )
            .where(c.flow == flow)
            .group_by(c.topic, c.partition)
        ).all():
            key = (topic, partition)
            if key not in log_starts:
                continue
            first[key] = min(low, first.get(key, low))
            if key not in newest or last > newest[key][0]:
                newest[key] = (last, last_end)
            if table is batches_table:
                newest_batch[key] = (last, last_end)
            else:
                gaps[key] = rows
    cuts = {key: _cut(log_starts[key], newest[key], newest_batch.get(key)) for key in first}
    return {
        key: cut
        for key, cut in cuts.items()
        if first[key] < cut or (cut < log_starts[key] and gaps.get(key, 0) > 1)
    }


def _prune_partition(
    conn: Connection, key: tuple[str, str, int], log_start: int, cut: int, keep_run: str | None, now: datetime
) -> int:
    b, g = batches_table, gaps_table
    flow = key[0]

    def below(table: Table, offset: int) -> tuple[ColumnElement[bool], ...]:
        c = table.c
        return tuple_(c.flow, c.topic, c.partition) == key, c.source_start < offset

    rows = conn.execute(select(b).where(*below(b, cut))).all()
    gaps = conn.execute(select(g).where(*below(g, log_start)).order_by(g.c.source_start)).all()
    # The commit's own rows stay as written, and so does every row after them.
    cut = min([cut, *(r.source_start for r in [*rows, *gaps] if r.run_id == keep_run)])
    removed = records = size = 0
    began: list[int] = []
    for row in rows:
        if row.source_start >= cut:
            continue
        batch = committed_batch(row._mapping).as_batch()
        kept = trimmed(batch, cut)
        if kept is None:
            conn.execute(delete(b).where(b.c.id == row.id))
            removed += 1
        else:
            conn.execute(
                update(b)
                .where(b.c.id == row.id)
                .values(**batch_row(flow, row.run_id, kept, row.committed_at))
            )
        records += batch.records - (kept.records if kept else 0)
        size += batch.bytes - (kept.bytes if kept else 0)
        began.append(batch.source_start)
    for gap in gaps:
        if gap.source_start >= cut:
            continue
        if gap.source_end <= cut:
            conn.execute(delete(g).where(g.c.id == gap.id))
            removed += 1
        else:
            conn.execute(update(g).where(g.c.id == gap.id).values(source_start=cut))
        began.append(gap.source_start)
    if began:
        _count_pruned(conn, key, min(began), records, size, now)
    below_log_start = [
        gap
        for gap in gaps
        if gap.source_start >= cut and gap.source_end <= log_start and gap.run_id != keep_run
    ]
    return removed + _merge_gaps(conn, below_log_start)


def _merge_gaps(conn: Connection, gaps: list[Row[Any]]) -> int:
    """Each stretch of ``gaps`` (rows of one partition, in order) that tile merged into its first row;
    returns how many rows went."""
    g = gaps_table
    stretches: list[list[Row[Any]]] = []
    for gap in gaps:
        last = stretches[-1][-1] if stretches else None
        if last is not None and (last.source_end, last.target_end) == (gap.source_start, gap.target_start):
            stretches[-1].append(gap)
        else:
            stretches.append([gap])
    removed = 0
    for first, *rest in stretches:
        if rest:
            conn.execute(
                update(g)
                .where(g.c.id == first.id)
                .values(source_end=rest[-1].source_end, target_end=rest[-1].target_end)
            )
            conn.execute(delete(g).where(g.c.id.in_([gap.id for gap in rest])))
            removed += len(rest)
    return removed


def _count_pruned(
    conn: Connection, key: tuple[str, str, int], began: int, records: int, size: int, now: datetime
) -> None:
    p = pruned_table
    flow, topic, partition = key
    where = (p.c.flow == flow, p.c.topic == topic, p.c.partition == partition)
    if conn.execute(select(p.c.flow).where(*where)).first() is None:
        conn.execute(
            insert(p).values(
                flow=flow,
                topic=topic,
                partition=partition,
                source_start=began,
                records=records,
                bytes=size,
                pruned_at=now,
            )
        )
    else:
        conn.execute(
            update(p)
            .where(*where)
            .values(
                # A log an earlier version pruned may have kept a batch below where it began.
                source_start=case((p.c.source_start > began, began), else_=p.c.source_start),
                records=p.c.records + records,
                bytes=p.c.bytes + size,
                pruned_at=now,
            )
        )
