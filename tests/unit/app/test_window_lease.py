"""A DR window's hold on its flow's lock (``app.window_lease``) on a SQLite offsets database: its turn
(taken free, waited for while another window holds it, handed over), and the lease thread that keeps
it or ends the window once the lock is another's. Time is the test's where a wait would be long."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from mirrorflow.app import window_lease
from mirrorflow.app.window_lease import LEASE_SECONDS, Lease, await_turn
from mirrorflow.errors import FlowLockedError
from mirrorflow.store.flow_lock import (
    acquire_lock,
    force_release_lock,
    hand_over,
    lock_holder,
    lock_info,
    offer_successor,
    successor_of,
)
from mirrorflow.store.offsets_store import OffsetsStore

FLOW = "primary->backup"


class Ticks:
    """A monotonic clock the waits advance, and the sleep that advances it (calling ``on_sleep``)."""

    def __init__(self) -> None:
        self.now = 0.0
        self.on_sleep: Callable[[], object] = lambda: None

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.on_sleep()


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'offsets.db'}"


@pytest.fixture
def store(url: str) -> Iterator[OffsetsStore]:
    with OffsetsStore(url) as s:
        yield s


def test_a_free_lock_is_taken_at_once_with_a_lease(store: OffsetsStore) -> None:
    ticks = Ticks()

    await_turn(store, FLOW, "w1", 60, clock=ticks.clock, sleep=ticks.sleep)

    lock = lock_info(store, FLOW)
    assert lock is not None and lock.run_id == "w1"
    assert (lock.expires_at - store.now()).total_seconds() == pytest.approx(LEASE_SECONDS, abs=2)
    assert ticks.now == 0.0


def test_a_window_waits_as_the_holders_successor_and_gives_up_naming_it(store: OffsetsStore) -> None:
    acquire_lock(store, FLOW, "w1", LEASE_SECONDS)
    ticks = Ticks()
    offered: list[str | None] = []
    ticks.on_sleep = lambda: offered.append(getattr(successor_of(store, FLOW), "run_id", None))

    with pytest.raises(FlowLockedError, match=r"window w2 waited 3 s for the flow's lock.*locked by run w1"):
        await_turn(store, FLOW, "w2", 3, clock=ticks.clock, sleep=ticks.sleep)

    assert set(offered) == {"w2"}
    assert successor_of(store, FLOW) is None  # its offer withdrawn as it gave up
    assert lock_holder(store, FLOW) == "w1"


def test_a_window_takes_the_lock_its_holder_hands_over(store: OffsetsStore) -> None:
    acquire_lock(store, FLOW, "w1", LEASE_SECONDS)
    ticks = Ticks()
    handed: list[str | None] = []

    def holder_at_its_boundary() -> None:
        if not handed and successor_of(store, FLOW) is not None:
            handed.append(hand_over(store, FLOW, "w1", LEASE_SECONDS))

    ticks.on_sleep = holder_at_its_boundary

    await_turn(store, FLOW, "w2", 60, clock=ticks.clock, sleep=ticks.sleep)

    assert handed == ["w2"]
    assert lock_holder(store, FLOW) == "w2"
    assert successor_of(store, FLOW) is None


def test_a_lease_ends_its_window_once_the_lock_is_another_runs(
    url: str, store: OffsetsStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(window_lease, "RENEW_EVERY_S", 0.05)
    acquire_lock(store, FLOW, "w1", LEASE_SECONDS)
    lost = threading.Event()
    why: list[str] = []

    def on_lost(message: str) -> None:
        why.append(message)
        lost.set()

    with Lease(url, FLOW, "w1", on_lost):
        force_release_lock(store, FLOW)
        acquire_lock(store, FLOW, "w2", LEASE_SECONDS)
        assert lost.wait(10)

    (message,) = why
    assert message.startswith(
        f"DR window w1 of flow {FLOW} stopped: flow {FLOW}: run w1 cannot renew its lease on the flow's "
        "lock: it does not hold the flow's lock (run w2 holds it since "
    )


def test_a_lease_renews_its_lock_until_it_hands_the_flow_over(
    url: str, store: OffsetsStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(window_lease, "RENEW_EVERY_S", 0.05)
    acquire_lock(store, FLOW, "w1", 1)
    first = lock_info(store, FLOW)
    with Lease(url, FLOW, "w1", lambda why: pytest.fail(why)) as lease:
        renewed = threading.Event()
        while not renewed.wait(0.05):
            lock = lock_info(store, FLOW)
            if lock is not None and first is not None and lock.expires_at > first.expires_at:
                renewed.set()
        assert lease.hand_over(store) is None  # nobody waits: it keeps the lock
        offer_successor(store, FLOW, "w2")
        assert lease.hand_over(store) == "w2"

    assert lock_holder(store, FLOW) == "w2"
