"""A DR flow's lock passing from one window to the next, and the lease a window holds it by
(``mirrorflow.store.handover``), on every backend. Not a test module itself:
tests/unit/store/test_handover.py runs the cases on SQLite files, tests/integration/
test_offsets_store_postgres.py on PostgreSQL, each giving the ``db_url`` fixture and
offsets_store_cases.py's ``store`` and ``clock``.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from offsets_store_cases import FLOW, T0, FakeClock

from mirrorflow.core.progress import SUCCESSOR_FRESH_SECONDS, Successor, attempt_holder
from mirrorflow.errors import CommitConflictError, FlowLockedError
from mirrorflow.store.handover import hand_over, offer_successor, renew_lock, successor_of, withdraw_offer
from mirrorflow.store.offsets_store import OffsetsStore

LEASE = 30


def test_a_window_hands_the_lock_to_its_waiting_successor_in_one_step(
    store: OffsetsStore, clock: FakeClock
) -> None:
    store.acquire_lock(FLOW, "w1", LEASE)
    assert hand_over(store, FLOW, "w1", LEASE) is None  # nobody waits: w1 keeps the lock
    assert offer_successor(store, FLOW, "w2")
    clock.advance(2)
    assert offer_successor(store, FLOW, "w2")  # renewed while it waits
    assert successor_of(store, FLOW) == Successor(FLOW, "w2", T0, T0 + timedelta(seconds=2))
    clock.advance(1)
    assert hand_over(store, FLOW, "w1", LEASE) == "w2"
    lock = store.lock_info(FLOW)
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
    store.acquire_lock(FLOW, "w1", LEASE)
    offer_successor(store, FLOW, "w2")
    clock.advance(int(SUCCESSOR_FRESH_SECONDS) + 1)
    assert hand_over(store, FLOW, "w1", LEASE) is None
    assert store.lock_holder(FLOW) == "w1"
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
    store.acquire_lock(FLOW, "w1", LEASE)
    clock.advance(20)
    assert renew_lock(store, FLOW, "w1", LEASE) == T0 + timedelta(seconds=20 + LEASE)
    clock.advance(LEASE - 1)
    lock = store.lock_info(FLOW)
    assert lock is not None and not lock.free_for("w2", store.now())
    clock.advance(2)  # w1 was killed: its lease ran out
    store.acquire_lock(FLOW, "w2", LEASE)
    assert store.lock_holder(FLOW) == "w2"
    with pytest.raises(CommitConflictError, match="run w1 cannot renew its lease"):
        renew_lock(store, FLOW, "w1", LEASE)


def test_two_attempts_of_one_window_never_hold_the_lock_together(
    store: OffsetsStore, clock: FakeClock
) -> None:
    # An Airflow retry of a window started beside its first attempt, still alive: another holder,
    # which waits its turn; the run's release (its teardown) frees the lock whichever attempt holds it.
    first, retry = attempt_holder("w1", "a"), attempt_holder("w1", "b")
    store.acquire_lock(FLOW, first, LEASE)
    lock = store.lock_info(FLOW)
    assert lock is not None and not lock.free_for(retry, store.now())
    with pytest.raises(FlowLockedError):
        store.acquire_lock(FLOW, retry, LEASE)
    with pytest.raises(CommitConflictError, match="cannot renew its lease"):
        renew_lock(store, FLOW, retry, LEASE)
    assert not store.release_lock(FLOW, "w2")
    assert store.release_lock(FLOW, "w1")
    assert store.lock_holder(FLOW) is None
