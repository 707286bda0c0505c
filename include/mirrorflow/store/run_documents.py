"""What a run's steps hand each other, kept in the offsets database (``mirror_run_documents``): the
plan (plan task -> copy job), the copy's result or the error it stopped on (copy job -> commit task),
a DR window's summary (window job -> report task), a verification's plan and result. A Spark driver
that reaches the offsets database finds them wherever it runs: nothing of a run depends on the
driver sharing a disk with the Airflow worker (cluster deploy mode).

Invariants: a document is written whole, in one transaction with the removal of the documents it
supersedes (a copy result removes the run's failure note and back), and read whole, or refused
(``core.documents``). A flow keeps the documents of its ``RUNS_KEPT`` newest runs
(``prune_documents``, at each run's release) and always those of the releasing run.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Literal

from sqlalchemy import delete, func, insert, select

from mirrorflow.core.progress import as_utc
from mirrorflow.errors import PlanError
from mirrorflow.store.offsets_store import OffsetsStore
from mirrorflow.store.tables import run_documents_table

__all__ = [
    "RUNS_KEPT",
    "DocumentName",
    "describe",
    "find_document",
    "prune_documents",
    "read_document",
    "recent_documents",
    "save_document",
]

DocumentName = Literal["plan", "result", "copy_failed", "window", "verify_plan", "verify_result"]
# Runs whose documents a flow keeps: the status page reads the newest 20; a failed run cleared in
# Airflow long after finds its plan gone and re-plans.
RUNS_KEPT = 100


def save_document(
    store: OffsetsStore,
    flow: str,
    run_id: str,
    name: DocumentName,
    body: str,
    *,
    supersedes: Iterable[DocumentName] = (),
) -> None:
    """Write (or replace) the run's document ``name`` and remove those it ``supersedes``."""
    d = run_documents_table
    gone = {name, *supersedes}
    with store.write() as conn:
        conn.execute(delete(d).where(d.c.flow == flow, d.c.run_id == run_id, d.c.name.in_(gone)))
        conn.execute(insert(d).values(flow=flow, run_id=run_id, name=name, body=body, written_at=store.now()))


def find_document(store: OffsetsStore, flow: str, run_id: str, name: DocumentName) -> str | None:
    """The run's document ``name``; ``None`` if it has none."""
    d = run_documents_table
    with store.read() as conn:
        body = conn.execute(
            select(d.c.body).where(d.c.flow == flow, d.c.run_id == run_id, d.c.name == name)
        ).scalar()
    return None if body is None else str(body)


def read_document(store: OffsetsStore, flow: str, run_id: str, name: DocumentName, what: str) -> str:
    """The run's document ``name``, which must exist (``what`` names it in the error)."""
    body = find_document(store, flow, run_id, name)
    if body is None:
        raise PlanError(f"{describe(flow, run_id, what)} does not exist; re-run the task that writes it")
    return body


def describe(flow: str, run_id: str, what: str) -> str:
    """How messages name one of a run's documents."""
    return f"the {what} of run {run_id} of flow {flow} in the offsets database"


def recent_documents(
    store: OffsetsStore, flow: str, name: DocumentName, limit: int
) -> list[tuple[str, datetime, str]]:
    """The ``limit`` newest documents ``name`` of ``flow``'s runs: (run id, written at, body)."""
    d = run_documents_table
    with store.read() as conn:
        rows = conn.execute(
            select(d.c.run_id, d.c.written_at, d.c.body)
            .where(d.c.flow == flow, d.c.name == name)
            .order_by(d.c.written_at.desc())
            .limit(limit)
        ).all()
    return [(str(r.run_id), as_utc(r.written_at), str(r.body)) for r in rows]


def prune_documents(store: OffsetsStore, flow: str, spare: str, keep: int = RUNS_KEPT) -> int:
    """Delete the documents of ``flow``'s runs older than its ``keep`` newest (by last write), but
    run ``spare``'s; returns how many runs' documents went."""
    d = run_documents_table
    newest = func.max(d.c.written_at)
    with store.write() as conn:
        runs = conn.execute(
            select(d.c.run_id)
            .where(d.c.flow == flow)
            .group_by(d.c.run_id)
            .order_by(newest.desc())
            .offset(keep)
        ).scalars()
        old = [r for r in runs if r != spare]
        if old:
            conn.execute(delete(d).where(d.c.flow == flow, d.c.run_id.in_(old)))
    return len(old)
