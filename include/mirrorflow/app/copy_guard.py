"""CopyGuard: a copy executes only while its run holds the flow's lock, and stops before it expires.

The lock is what keeps two runs of a flow from writing to the same remote partitions. A copy whose
Airflow task died (worker lost, task killed) can outlive it: once the lock expires another run may
take the flow over. So the copy job checks at start that its run holds the lock, and ends its own
process shortly before the lock's expiry: no copy writes after its run's lock expired. How long it
has is judged by the offsets database's clock (``OffsetsStore.now``), as the lock's expiry is, and
counted down by this host's monotonic clock: a host whose wall clock is off still stops in time.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from datetime import timedelta

from mirrorflow.errors import FlowLockedError
from mirrorflow.store.flow_lock import lock_info
from mirrorflow.store.offsets_store import OffsetsStore

# Stop this long before the lock expires: room for the producer's in-flight requests to end.
MARGIN = timedelta(seconds=60)
EXIT_CODE = 75  # EX_TEMPFAIL


def lock_deadline(offsets_db_url: str, flow: str, run_id: str) -> timedelta:
    """How long the copy of ``run_id`` may still run; refuses a run that does not hold the lock."""
    with OffsetsStore(offsets_db_url) as store:
        lock = lock_info(store, flow)
        if lock is None or lock.run_id != run_id:
            holder = "nobody" if lock is None else f"run {lock.run_id}"
            raise FlowLockedError(
                f"flow {flow}: run {run_id} does not hold the flow's lock ({holder} does), so its plan "
                "must not be executed: another run may own the flow now. Nothing was copied; re-run the "
                "flow."
            )
        return lock.expires_at - MARGIN - store.now()


def stop_process(why: str) -> None:
    """End this process at once, saying ``why`` where it still can: the process that read its output
    may be gone (a window whose spark-submit ended), which must not keep it alive."""
    with contextlib.suppress(OSError):
        print(why, file=sys.stderr)
        sys.stderr.flush()
    os._exit(EXIT_CODE)


def exit_at(left: timedelta, what: str) -> threading.Timer:
    """End this process once ``left`` has passed, whatever it is doing (a daemon timer)."""
    seconds = max(left.total_seconds(), 0.0)
    why = f"{what}: stopped after {seconds:.0f} s, before its run's lock expires"
    timer = threading.Timer(seconds, stop_process, (why,))
    timer.daemon = True
    timer.start()
    return timer
