"""A flow's lock (``mirrorflow.store.flow_lock``), cases that hold on every backend: taking, waiting,
releasing, racing processes, a holder killed in its commit, and a DR window's lease and handover to
the next. Not a test module itself: tests/unit/store/test_flow_lock.py runs the cases on SQLite
files, tests/integration/test_offsets_store_postgres.py on PostgreSQL, each giving the ``db_url``
fixture and offsets_store_cases.py's ``store`` and ``clock``.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from offsets_store_cases import FLOW, LATER, T0, FakeClock, _anchored, _batch, _rows
from sqlalchemy import Engine, event

from mirrorflow.core.progress import (
    SUCCESSOR_FRESH_SECONDS,
    Batch,
    CommittedBatch,
    LockInfo,
    Successor,
    attempt_holder,
)
from mirrorflow.errors import CommitConflictError, FlowLockedError, PlanError
from mirrorflow.store.flow_lock import (
    acquire_lock,
    hand_over,
    lock_holder,
    lock_info,
    offer_successor,
    release_lock,
    renew_lock,
    require_lock,
    successor_of,
    withdraw_offer,
)
from mirrorflow.store.offsets_store import OffsetsStore

# ----------------------------------------------------------------------------------------------- locks


def test_lock_acquire_reentrant_and_refused(store: OffsetsStore, clock: FakeClock) -> None:
    acquire_lock(store, FLOW, "run-1", ttl_seconds=600)
    assert lock_holder(store, FLOW) == "run-1"
    info = lock_info(store, FLOW)
    assert info is not None
    assert (info.acquired_at, info.expires_at) == (T0, T0 + timedelta(seconds=600))

    # Re-entrant: a retried task of the same run refreshes the expiry, keeps acquired_at.
    clock.advance(60)
    acquire_lock(store, FLOW, "run-1", ttl_seconds=600)
    info = lock_info(store, FLOW)
    assert info is not None
    assert (info.run_id, info.acquired_at, info.expires_at) == ("run-1", T0, T0 + timedelta(seconds=660))

    with pytest.raises(FlowLockedError) as refused:
        acquire_lock(store, FLOW, "run-2", ttl_seconds=600)
    assert str(refused.value) == (
        "flow primary->backup is locked by run run-1 since 2030-01-02T03:04:05+00:00; the lock expires at "
        "2030-01-02T03:15:05+00:00. Run run-2 did not start. If run run-1 is still going, wait for it to "
        "finish. If it is dead, release its lock with: python -m mirrorflow.store release-lock "
        "--flow 'primary->backup'"
    )
    assert lock_holder(store, FLOW) == "run-1"
    # Other flows are independent.
    acquire_lock(store, "other->backup", "run-2", ttl_seconds=600)
    assert lock_holder(store, "other->backup") == "run-2"


def test_expired_lock_is_taken_over(store: OffsetsStore, clock: FakeClock, db_url: str) -> None:
    acquire_lock(store, FLOW, "run-1", ttl_seconds=100)
    clock.advance(99)
    with pytest.raises(FlowLockedError):
        acquire_lock(store, FLOW, "run-2", ttl_seconds=100)
    clock.advance(1)  # expires_at reached
    acquire_lock(store, FLOW, "run-2", ttl_seconds=100)
    assert lock_holder(store, FLOW) == "run-2"
    assert _rows(db_url, "mirror_locks") == [
        (FLOW, "run-2", T0 + timedelta(seconds=100), T0 + timedelta(seconds=200))
    ]
    # The run that lost its lock can neither release nor retake it while the new holder is live.
    assert release_lock(store, FLOW, "run-1") is False
    with pytest.raises(FlowLockedError):
        acquire_lock(store, FLOW, "run-1", ttl_seconds=100)


def test_a_run_waits_for_a_held_lock_up_to_its_bound(store: OffsetsStore, clock: FakeClock) -> None:
    acquire_lock(store, FLOW, "run-1", ttl_seconds=3600)
    naps: list[float] = []

    def nap(seconds: float) -> None:
        naps.append(seconds)
        clock.advance(int(seconds))

    with pytest.raises(FlowLockedError, match="locked by run run-1"):
        acquire_lock(store, FLOW, "run-2", ttl_seconds=100, wait_seconds=3, sleep=nap)
    assert naps == [1.0, 1.0, 1.0]  # looked again every second, for 3 s
    assert lock_holder(store, FLOW) == "run-1"

    def release_on_second_nap(seconds: float) -> None:
        nap(seconds)
        if len(naps) == 5:
            release_lock(store, FLOW, "run-1")

    acquire_lock(store, FLOW, "run-2", ttl_seconds=100, wait_seconds=60, sleep=release_on_second_nap)
    assert naps == [1.0] * 5
    assert lock_holder(store, FLOW) == "run-2"


def test_release_only_by_holder(store: OffsetsStore) -> None:
    assert release_lock(store, FLOW, "run-1") is False
    acquire_lock(store, FLOW, "run-1", ttl_seconds=600)
    assert release_lock(store, FLOW, "run-2") is False
    assert lock_holder(store, FLOW) == "run-1"
    assert release_lock(store, FLOW, "run-1") is True
    assert lock_holder(store, FLOW) is None
    assert release_lock(store, FLOW, "run-1") is False
    acquire_lock(store, FLOW, "run-2", ttl_seconds=600)
    assert lock_holder(store, FLOW) == "run-2"


def test_ttl_must_be_positive(store: OffsetsStore) -> None:
    with pytest.raises(ValueError, match="ttl_seconds must be positive, got 0"):
        acquire_lock(store, FLOW, "run-1", ttl_seconds=0)


def _at_once(worker: Callable[..., str], meet_before: str, *calls: tuple[Any, ...]) -> list[str]:
    """Run ``worker(*call, barrier)`` for each call in a process of its own (spawned: it inherits no
    connection) and return each call's outcome, in order.

    Workers wait on the barrier right before the step they race on, so they reach the database at
    the same moment. Inside that step, each waits (up to a second) at its first statement starting
    with ``meet_before`` for the others to get there too: where the database lets them in together,
    they overlap there for sure; where it keeps the others out until the first one's transaction
    ends, the wait times out and each goes on alone.
    """
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(len(calls))
    results = ctx.Queue()
    procs = [
        ctx.Process(target=_report, args=(index, worker, call, barrier, meet_before, results), daemon=True)
        for index, call in enumerate(calls)
    ]
    for proc in procs:
        proc.start()
    outcomes = dict(results.get(timeout=120) for _ in procs)
    for proc in procs:
        proc.join(timeout=60)
        assert proc.exitcode == 0
    return [outcomes[index] for index in range(len(calls))]


def _report(
    index: int,
    worker: Callable[..., str],
    call: tuple[Any, ...],
    barrier: Any,
    meet_before: str,
    results: Any,
) -> None:
    met = False

    def meet(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        nonlocal met
        if not met and statement.startswith(meet_before):
            met = True
            with contextlib.suppress(threading.BrokenBarrierError):
                barrier.wait(timeout=1)

    event.listen(Engine, "before_cursor_execute", meet)
    try:
        outcome = worker(*call, barrier)
    except BaseException as error:  # reported to the parent, which fails the test
        outcome = f"error:{type(error).__name__}:{error}"
    results.put((index, outcome))


def _acquire(db_url: str, run_id: str, barrier: Any) -> str:
    with OffsetsStore(db_url) as store:
        barrier.wait(timeout=60)
        try:
            acquire_lock(store, FLOW, run_id, ttl_seconds=600)
        except FlowLockedError as error:
            return f"locked:{error}"
        return "won"


def _commit(db_url: str, run_id: str, batches: list[Batch], barrier: Any) -> str:
    with OffsetsStore(db_url, clock=FakeClock(LATER)) as store:
        barrier.wait(timeout=60)
        try:
            return f"committed:{store.commit(FLOW, run_id, batches)}"
        except CommitConflictError as error:
            return f"conflict:{error}"


@pytest.mark.parametrize("tables_exist", [False, True])
def test_two_processes_race_for_the_lock_exactly_one_wins(db_url: str, tables_exist: bool) -> None:
    if tables_exist:
        OffsetsStore(db_url).progress(FLOW)
    # On PostgreSQL both find no lock row and meet at inserting one: the primary key decides. SQLite
    # lets one writer in at a time.
    first, second = _at_once(_acquire, "INSERT INTO mirror_locks", (db_url, "run-1"), (db_url, "run-2"))
    outcomes = {"run-1": first, "run-2": second}
    winners = [run for run, outcome in outcomes.items() if outcome == "won"]
    assert len(winners) == 1, outcomes
    (loser,) = set(outcomes) - set(winners)
    assert outcomes[loser].startswith(f"locked:flow primary->backup is locked by run {winners[0]} since ")
    assert lock_holder(OffsetsStore(db_url), FLOW) == winners[0]


# ------------------------------------------------------------------------ racing and crashing processes


@pytest.mark.parametrize("replanned", [False, True], ids=["same-batches", "other-batches"])
def test_two_attempts_of_a_run_commit_at_once_each_batch_is_logged_once(
    store: OffsetsStore, db_url: str, replanned: bool
) -> None:
    # A retried commit task of run-1 while its first attempt is still going (a zombie worker).
    _anchored(store)
    b1 = _batch(partition=1, source=(0, 5), target=(50, 55), sync_points=())
    attempts = [[_batch(), b1], [_batch(source=(10, 21), target=(100, 109)) if replanned else _batch(), b1]]

    # They would meet past the lock check, at the look-up of already committed batches: the lock row
    # keeps the second out until the first has committed.
    outcomes = _at_once(_commit, "SELECT mirror_batches.", *((db_url, "run-1", b) for b in attempts))

    assert "committed:2" in outcomes, outcomes
    winner = outcomes.index("committed:2")
    loser = outcomes[1 - winner]
    if replanned:
        assert loser.startswith(
            "conflict:flow primary->backup: partition orders-0: a batch from source offset 10 was already "
            "committed by run run-1 at 2030-01-02T04:04:05+00:00 as "
        ), outcomes
    else:
        assert loser == "committed:0", outcomes  # it found its batches committed: nothing to do
    won = attempts[winner]
    assert store.batches(FLOW) == [
        CommittedBatch(**b.__dict__, flow=FLOW, run_id="run-1", committed_at=LATER) for b in won
    ]
    assert _rows(db_url, "mirror_progress") == [
        (FLOW, "orders", 0, won[0].source_end, won[0].target_end, "run-1", LATER),
        (FLOW, "orders", 1, 5, 55, "run-1", LATER),
    ]


def test_after_a_takeover_only_the_new_holder_commits(
    store: OffsetsStore, clock: FakeClock, db_url: str
) -> None:
    _anchored(store, "run-1")
    clock.advance(600)
    acquire_lock(store, FLOW, "run-2", ttl_seconds=600)  # run-1's lock expired: run-2 takes over
    # Both planned the same batch from the same position and commit it at the same moment.
    outcomes = _at_once(
        _commit, "SELECT mirror_batches.", (db_url, "run-1", [_batch()]), (db_url, "run-2", [_batch()])
    )

    assert outcomes == [
        "conflict:flow primary->backup: run run-1 cannot commit: it does not hold the flow's lock (run "
        "run-2 holds it since 2030-01-02T03:14:05+00:00); the lock was released, or expired and was taken "
        "over by another run. Nothing was written. Re-run the flow.",
        "committed:1",
    ]
    assert store.batches(FLOW) == [
        CommittedBatch(**_batch().__dict__, flow=FLOW, run_id="run-2", committed_at=LATER)
    ]
    assert _rows(db_url, "mirror_progress") == [
        (FLOW, "orders", 0, 20, 108, "run-2", LATER),
        (FLOW, "orders", 1, 0, 50, "run-1", T0),
    ]


def test_require_lock_names_the_run_that_lost_it(store: OffsetsStore, clock: FakeClock) -> None:
    acquire_lock(store, FLOW, "run-1", ttl_seconds=600)
    require_lock(store, FLOW, "run-1", "plan")
    clock.advance(600)
    acquire_lock(store, FLOW, "run-2", ttl_seconds=600)

    with pytest.raises(CommitConflictError, match=r"run run-1 cannot plan: .*\(run run-2 holds it since"):
        require_lock(store, FLOW, "run-1", "plan")
    release_lock(store, FLOW, "run-2")
    with pytest.raises(CommitConflictError, match=r"run run-2 cannot plan: .*\(nobody holds it\)"):
        require_lock(store, FLOW, "run-2", "plan")


def _crash_in_commit(db_url: str, inside: Any) -> None:
    """Run-1 takes the lock, anchors and commits; its commit stops for good once it has moved
    progress and is about to log the batch, and waits there to be killed."""

    def stop_before_the_batch_log(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if statement.startswith("INSERT INTO mirror_batches"):
            inside.set()
            time.sleep(600)

    event.listen(Engine, "before_cursor_execute", stop_before_the_batch_log)
    store = OffsetsStore(db_url, clock=FakeClock(T0))
    _anchored(store, "run-1")
    store.commit(FLOW, "run-1", [_batch()])


def test_holder_killed_in_its_commit_writes_nothing_and_its_lock_expires(
    store: OffsetsStore, clock: FakeClock, db_url: str
) -> None:
    ctx = multiprocessing.get_context("spawn")
    inside = ctx.Event()
    holder = ctx.Process(target=_crash_in_commit, args=(db_url, inside), daemon=True)
    holder.start()
    try:
        assert inside.wait(timeout=60), f"run-1 never reached its batch insert (exit code {holder.exitcode})"
    finally:
        holder.kill()
        holder.join(timeout=60)
    assert holder.exitcode == -9

    # Its open transaction died with it: progress is where run-1 anchored it, nothing is logged.
    anchored_rows = [(FLOW, "orders", 0, 10, 100, "run-1", T0), (FLOW, "orders", 1, 0, 50, "run-1", T0)]
    assert _rows(db_url, "mirror_progress") == anchored_rows
    assert _rows(db_url, "mirror_batches") == []
    # Its lock stays until it expires; then another run takes it over and commits the same range.
    assert lock_info(store, FLOW) == LockInfo(FLOW, "run-1", T0, T0 + timedelta(seconds=600))
    clock.advance(599)
    with pytest.raises(FlowLockedError, match="locked by run run-1 since 2030-01-02T03:04:05"):
        acquire_lock(store, FLOW, "run-2", ttl_seconds=600)
    clock.advance(1)
    acquire_lock(store, FLOW, "run-2", ttl_seconds=600)
    assert store.commit(FLOW, "run-2", [_batch()]) == 1

    takeover = T0 + timedelta(seconds=600)
    assert _rows(db_url, "mirror_locks") == [(FLOW, "run-2", takeover, takeover + timedelta(seconds=600))]
    assert [row[1:] for row in _rows(db_url, "mirror_batches")] == [
        (FLOW, "run-2", "orders", 0, "primary.orders", 10, 20, 100, 108, 8, 1000, "[[10,100],[13,102]]",
         takeover, "[]"),
    ]  # fmt: skip
    assert _rows(db_url, "mirror_progress") == [
        (FLOW, "orders", 0, 20, 108, "run-2", takeover),
        anchored_rows[1],
    ]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"source_end": 10, "records": 0, "target_end": 100, "sync_points": ()},
            "empty or negative source range",
        ),
        ({"target_end": 99, "records": -1}, r"target range \[100, 99\) is negative"),
        ({"records": 7}, r"records=7 but the target range \[100, 108\) holds 8"),
        ({"target_end": 111, "records": 11}, "records=11 exceeds the 10 offsets of the source range"),
        ({"sync_points": ((20, 100),)}, r"sync point \(20, 100\) lies outside"),
        ({"sync_points": ((13, 102), (12, 103))}, r"not strictly increasing at \(12, 103\)"),
        ({"bytes": -1}, "negative bytes -1"),
        ({"target_gaps": ((105, 108),), "records": 5}, r"target gap \(105, 108\) is not a stretch"),
        ({"target_gaps": ((103, 105), (104, 106)), "records": 5}, r"target gap \(104, 106\) is not"),
        ({"target_gaps": ((102, 103),), "records": 7}, r"sync point \(13, 102\) lies in a target gap"),
    ],
)
def test_insane_batches_are_refused(
    store: OffsetsStore, db_url: str, changes: dict[str, Any], message: str
) -> None:
    _anchored(store)
    bad = Batch(**{**_batch().__dict__, **changes})
    with pytest.raises(PlanError, match=message):
        store.commit(
            FLOW, "run-1", [_batch(partition=1, source=(0, 5), target=(50, 55), sync_points=()), bad]
        )
    assert _rows(db_url, "mirror_batches") == []


def test_same_batch_twice_in_one_commit_is_refused(store: OffsetsStore) -> None:
    _anchored(store)
    with pytest.raises(PlanError, match="appears twice in one commit"):
        store.commit(FLOW, "run-1", [_batch(), _batch()])


# ------------------------------------------------------------------------- a DR window's lease and handover

LEASE = 30


def test_a_window_hands_the_lock_to_its_waiting_successor_in_one_step(
    store: OffsetsStore, clock: FakeClock
) -> None:
    acquire_lock(store, FLOW, "w1", LEASE)
    assert hand_over(store, FLOW, "w1", LEASE) is None  # nobody waits: w1 keeps the lock
    assert offer_successor(store, FLOW, "w2")
    clock.advance(2)
    assert offer_successor(store, FLOW, "w2")  # renewed while it waits
    assert successor_of(store, FLOW) == Successor(FLOW, "w2", T0, T0 + timedelta(seconds=2))
    clock.advance(1)
    assert hand_over(store, FLOW, "w1", LEASE) == "w2"
    lock = lock_info(store, FLOW)
    assert lock is not None
    assert (lock.run_id, lock.acquired_at, lock.expires_at) == (
        "w2",
        T0 + timedelta(seconds=3),
        T0 + timedelta(seconds=3 + LEASE),
    )
    assert successor_of(store, FLOW) is None
    # w1 holds nothing any more: it can neither hand over nor renew, and w2's commit goes through.
    with pytest.raises(CommitConflictError, match="run w1 cannot hand the flow over"):
        hand_over(store, FLOW, "w1", LEASE)
    with pytest.raises(CommitConflictError, match="run w1 cannot renew its lease"):
        renew_lock(store, FLOW, "w1", LEASE)
    store.commit(FLOW, "w2#0", [], holder="w2")


def test_a_successor_that_died_waiting_is_never_handed_the_lock(
    store: OffsetsStore, clock: FakeClock
) -> None:
    acquire_lock(store, FLOW, "w1", LEASE)
    offer_successor(store, FLOW, "w2")
    clock.advance(int(SUCCESSOR_FRESH_SECONDS) + 1)
    assert hand_over(store, FLOW, "w1", LEASE) is None
    assert lock_holder(store, FLOW) == "w1"
    # A stale offer gives way to a new one; a fresh one does not.
    assert offer_successor(store, FLOW, "w3")
    assert not offer_successor(store, FLOW, "w4")
    withdraw_offer(store, FLOW, "w4")  # not its offer: nothing changes
    assert successor_of(store, FLOW) is not None
    withdraw_offer(store, FLOW, "w3")
    assert successor_of(store, FLOW) is None
    assert offer_successor(store, FLOW, "w4")


def test_a_lease_is_renewed_by_its_holder_and_a_lapsed_one_is_taken_over(
    store: OffsetsStore, clock: FakeClock
) -> None:
    acquire_lock(store, FLOW, "w1", LEASE)
    clock.advance(20)
    assert renew_lock(store, FLOW, "w1", LEASE) == T0 + timedelta(seconds=20 + LEASE)
    clock.advance(LEASE - 1)
    lock = lock_info(store, FLOW)
    assert lock is not None and not lock.free_for("w2", store.now())
    clock.advance(2)  # w1 was killed: its lease ran out
    acquire_lock(store, FLOW, "w2", LEASE)
    assert lock_holder(store, FLOW) == "w2"
    with pytest.raises(CommitConflictError, match="run w1 cannot renew its lease"):
        renew_lock(store, FLOW, "w1", LEASE)


def test_two_attempts_of_one_window_never_hold_the_lock_together(
    store: OffsetsStore, clock: FakeClock
) -> None:
    # An Airflow retry of a window started beside its first attempt, still alive: another holder,
    # which waits its turn; the run's release (its teardown) frees the lock whichever attempt holds it.
    first, retry = attempt_holder("w1", "a"), attempt_holder("w1", "b")
    acquire_lock(store, FLOW, first, LEASE)
    lock = lock_info(store, FLOW)
    assert lock is not None and not lock.free_for(retry, store.now())
    with pytest.raises(FlowLockedError):
        acquire_lock(store, FLOW, retry, LEASE)
    with pytest.raises(CommitConflictError, match="cannot renew its lease"):
        renew_lock(store, FLOW, retry, LEASE)
    assert not release_lock(store, FLOW, "w2")
    assert release_lock(store, FLOW, "w1")
    assert lock_holder(store, FLOW) is None
