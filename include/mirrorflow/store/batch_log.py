"""The batch log's and the gap log's rows, step by step, inside a transaction the store holds:
moving a partition's progress across one batch or gap (compare-and-set), merging a DR window's
micro-batch rows, and pruning what lies below the source's log start.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Connection, Table, delete, exc, func, insert, select, tuple_, update

from mirrorflow.core.progress import CommittedBatch, as_utc, format_time
from mirrorflow.core.translation import coalesce, trimmed
from mirrorflow.errors import CommitConflictError
from mirrorflow.store.rows import Log, batch_row, committed_batch
from mirrorflow.store.schema import batches_table, gaps_table, progress_table, pruned_table


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
    by_partition: dict[tuple[str, int], list[CommittedBatch]] = {}
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
    log_starts: Mapping[tuple[str, int], int],
    keep_run: str | None,
    now: datetime,
) -> int:
    """Cut each partition's batch log and gaps at its source log start (``log_starts``): rows
    that end at or before it go, one that spans it is trimmed (``core.translation.trimmed``), and
    ``mirror_pruned`` keeps where the log began and the records and bytes the cut rows counted. A
    consumer position below the log start can only be reset on the source (to the log start), so
    translation keeps what a group can ask for (``app.checkpoints`` maps a position in the pruned
    range where the log start maps), and a source that adds a sync point per transaction no longer
    grows the log without bound. A partition's newest batch is trimmed but never goes (it says
    where the next record lands); the rows of ``keep_run`` (the commit this step runs in) stay as
    written, for a retried commit to find. Two reads find the partitions with anything to cut.
    Returns how many rows went."""
    removed = 0
    for (topic, partition), newest in _due(conn, flow, log_starts).items():
        removed += _prune_partition(
            conn, (flow, topic, partition), log_starts[(topic, partition)], newest, keep_run, now
        )
    return removed


def _due(
    conn: Connection, flow: str, log_starts: Mapping[tuple[str, int], int]
) -> dict[tuple[str, int], int]:
    """The partitions with rows to cut below their log start, with their newest batch's start."""
    b, g = batches_table, gaps_table
    due: dict[tuple[str, int], int] = {}
    newest: dict[tuple[str, int], int] = {}
    for topic, partition, first, last, last_end in conn.execute(
        select(
            b.c.topic,
            b.c.partition,
            func.min(b.c.source_start),
            func.max(b.c.source_start),
            func.max(b.c.source_end),
        )
        .where(b.c.flow == flow)
        .group_by(b.c.topic, b.c.partition)
    ).all():
        newest[(topic, partition)] = last
        log_start = log_starts.get((topic, partition))
        # Nothing to cut when the newest batch is all the log below the log start and ends there.
        if log_start is not None and first < log_start and not (first == last and last_end <= log_start):
            due[(topic, partition)] = last
    for topic, partition, first in conn.execute(
        select(g.c.topic, g.c.partition, func.min(g.c.source_start))
        .where(g.c.flow == flow)
        .group_by(g.c.topic, g.c.partition)
    ).all():
        log_start = log_starts.get((topic, partition))
        if log_start is not None and first < log_start:
            due[(topic, partition)] = newest.get((topic, partition), -1)
    return due


def _prune_partition(
    conn: Connection,
    key: tuple[str, str, int],
    log_start: int,
    newest: int,
    keep_run: str | None,
    now: datetime,
) -> int:
    b, g = batches_table, gaps_table
    flow = key[0]

    def below(table: Table) -> tuple[ColumnElement[bool], ...]:
        """``table``'s rows of the partition that start below the log start, but ``keep_run``'s."""
        c = table.c
        return (
            tuple_(c.flow, c.topic, c.partition) == key,
            c.source_start < log_start,
            c.run_id != (keep_run or ""),
        )

    rows = conn.execute(select(b).where(*below(b))).all()
    gaps = conn.execute(select(g.c.id, g.c.source_start, g.c.source_end).where(*below(g))).all()
    removed = records = size = 0
    began: list[int] = []
    for row in rows:
        batch = committed_batch(row._mapping).as_batch()
        cut = trimmed(batch, log_start)
        if cut is None and row.source_start == newest:
            continue
        if cut is None:
            conn.execute(delete(b).where(b.c.id == row.id))
            removed += 1
        else:
            conn.execute(
                update(b).where(b.c.id == row.id).values(**batch_row(flow, row.run_id, cut, row.committed_at))
            )
        records += batch.records - (cut.records if cut else 0)
        size += batch.bytes - (cut.bytes if cut else 0)
        began.append(batch.source_start)
    for gap in gaps:
        if gap.source_end <= log_start:
            conn.execute(delete(g).where(g.c.id == gap.id))
            removed += 1
        else:
            conn.execute(update(g).where(g.c.id == gap.id).values(source_start=log_start))
        began.append(gap.source_start)
    if began:
        _count_pruned(conn, key, min(began), records, size, now)
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
            .values(records=p.c.records + records, bytes=p.c.bytes + size, pruned_at=now)
        )
