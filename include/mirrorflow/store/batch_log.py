"""The batch log's and the gap log's rows, step by step, inside a transaction the store holds:
moving a partition's progress across one batch or gap (compare-and-set), and merging a DR window's
micro-batch rows.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, delete, exc, insert, select, tuple_, update

from mirrorflow.core.progress import CommittedBatch, as_utc, format_time
from mirrorflow.core.translation import coalesce
from mirrorflow.errors import CommitConflictError
from mirrorflow.store.rows import Log, batch_row, committed_batch
from mirrorflow.store.schema import batches_table, progress_table


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


def coalesce_window(conn: Connection, flow: str, holder: str) -> int:
    """Merge the batch-log rows of the DR window ``holder`` (run ids ``<holder>#<n>``), with the
    row each partition's first of them continues (an earlier window's or run's), into one row per
    unbroken stretch of each partition (``core.translation.coalesce``: translation reads the same
    from the merged rows); a merged row keeps its last micro-batch's id and time. Returns how many
    rows went. So a flow in DR mode keeps one row per partition and unbroken stretch, however many
    windows it ran."""
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
        if earlier.target_end == logged[0].target_start:
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
