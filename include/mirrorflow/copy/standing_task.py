"""A DR window's standing copy task: a Spark task that stays for the whole window and copies each
micro-batch's group of planned partitions as the window hands it over (``spark_copy.StandingCopy``
runs them and hands the groups over).

A Spark job per micro-batch pays its scheduling and the shipping of its closure to the Python
workers every time: 100-300 ms on a small machine, more than copying the few hundred records a DR
micro-batch holds. A standing task pays it once per window. Invariants:
- A task copies only the group it is handed, with ``batch_copy.copy_partitions``, exactly as a task
  of a job per micro-batch does; it copies one group at a time and answers each before it takes the
  next, so no two copies of a partition ever overlap.
- The channel is ``multiprocessing.connection``'s, authenticated with a secret the window's driver
  made for this job. Driver to task: ``(group, grant, schema_ids)`` (the plan's), or None to end.
  Task to driver: its index once, then per group ``ALIVE`` every ``ALIVE_EVERY_S`` while it copies,
  and its results (a list of ``PartitionResult``) or a ``Failed``. A task that says nothing for
  long while it copies froze or lost its host, which Spark may not notice for minutes; the driver
  gives it up (``spark_copy.SILENT_S``).
- A task whose driver is gone (the window's process ended) stops: it never copies what no one will
  commit.
- A task opens its connections to both clusters (``batch_copy.open_connections``) before it
  connects to the driver: once every task has connected (``StandingCopy.await_tasks``), the
  window's first micro-batch pays no connection set-up. A cluster it cannot reach then is the
  first copy's to report.
"""

from __future__ import annotations

import contextlib
import threading
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from multiprocessing.connection import Client, Connection

from mirrorflow.copy.batch_copy import CopySettings, copy_partitions, open_connections
from mirrorflow.core.plan import Grant, PartitionPlan, PartitionResult
from mirrorflow.core.schema_ids import SchemaIdMap
from mirrorflow.errors import MirrorError, TransientError

Handed = tuple[tuple[PartitionPlan, ...], Grant, SchemaIdMap]

ALIVE = "alive"
ALIVE_EVERY_S = 1.0


@dataclass(frozen=True)
class Failed:
    """A group's copy failed: a classified error's class name and message (``error_class``), or, for
    anything else, ``kind`` None and the task's traceback."""

    kind: str | None
    message: str


def serve(index: int, address: tuple[str, int], secret: bytes, settings: CopySettings) -> None:
    """The task's life: connect to the window's driver, then copy what it hands over until it says
    stop or is gone."""
    with contextlib.suppress(TransientError):
        open_connections(settings)
    try:
        channel = Client(address, authkey=secret)
    except OSError:
        # The window stopped its tasks before this one started: nothing is handed to it.
        return
    with channel:
        channel.send(index)
        while True:
            try:
                handed: Handed | None = channel.recv()
            except (EOFError, OSError):
                return
            if handed is None:
                return
            with _saying_alive(channel):
                answer = _copied(handed, settings)
            channel.send(answer)


@contextlib.contextmanager
def _saying_alive(channel: Connection) -> Iterator[None]:
    """``ALIVE`` over ``channel`` every ``ALIVE_EVERY_S`` until the block ends (nothing else is sent
    on the channel meanwhile)."""
    done = threading.Event()

    def say() -> None:
        while not done.wait(ALIVE_EVERY_S):
            try:
                channel.send(ALIVE)
            except OSError:
                return

    thread = threading.Thread(target=say, name="standing copy: alive", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def _copied(handed: Handed, settings: CopySettings) -> list[PartitionResult] | Failed:
    group, grant, schema_ids = handed
    try:
        return copy_partitions(group, settings, grant, schema_ids)
    except MirrorError as exc:
        return Failed(type(exc).__name__, str(exc))
    except Exception:
        return Failed(None, traceback.format_exc())
