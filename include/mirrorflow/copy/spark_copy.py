"""The Spark side of a run: execute exactly the plan it is handed, nothing more.

The planned partitions are spread over as many Spark tasks as Spark has cores, fewer for a small
plan (``Plan.task_count``, ``Plan.task_groups``); each task copies its group's record batches from
the source to the target as bytes (``batch_copy``), all of its partitions at once. A batch run's
plan is one Spark job (``copy_plan``): Spark schedules, retries a failed task (which reads back what
an earlier attempt wrote and goes on from there) and collects the per partition results. A DR
window's micro-batches go to tasks that stand for the whole window (``StandingCopy``,
``standing_task``). A task's classified error (``mirrorflow.errors``) reaches the caller as the
same class with the same message. With ``spark_verify``, the only modules that import pyspark.
"""

from __future__ import annotations

import contextlib
import re
import secrets
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from functools import partial
from multiprocessing import AuthenticationError
from multiprocessing.connection import Connection, Listener, wait
from typing import cast

from py4j.protocol import Py4JJavaError
from pyspark import SparkContext
from pyspark.errors.exceptions.captured import CapturedException

from mirrorflow.config.model import FlowConfig
from mirrorflow.copy.batch_copy import CopySettings, copy_partitions, copy_result
from mirrorflow.copy.flow_transaction import copied_in_one_transaction
from mirrorflow.copy.standing_task import ALIVE, Failed, serve
from mirrorflow.core.plan import CopyResult, Grant, PartitionPlan, PartitionResult, Plan
from mirrorflow.errors import (
    AuthorizationError,
    MirrorError,
    SourceDataLostError,
    TransientError,
    error_class,
)

# How long a window's standing tasks may take to start, and to end once told to.
TASKS_START_S = 60.0
TASKS_STOP_S = 30.0
# A task copying a group that said nothing for this long (it says ``ALIVE`` every second) froze or
# lost its host: the micro-batch fails as transient and the job is cancelled at once.
SILENT_S = 15.0


def copy_plan(sc: SparkContext, flow: FlowConfig, plan: Plan) -> CopyResult:
    """Copy every planned partition of ``flow`` in one Spark job, one transaction of the flow's
    writer, fenced for this attempt (``flow_transaction``); each planned partition gets one result."""
    if not plan.partitions:
        return CopyResult(plan.flow, plan.run_id, ())
    # Plain values travel to the Spark tasks (the config's own mappings do not pickle).
    settings = CopySettings.of(flow)
    return copied_in_one_transaction(
        settings.target, plan, lambda grant: _copy_job(sc, settings, plan, grant)
    )


def _copy_job(sc: SparkContext, settings: CopySettings, plan: Plan, grant: Grant) -> CopyResult:
    def copy(groups: Iterable[tuple[PartitionPlan, ...]]) -> Iterator[PartitionResult]:
        for group in groups:
            yield from copy_partitions(group, settings, grant, plan.schema_ids)

    groups = plan.task_groups(plan.task_count(sc.defaultParallelism))
    try:
        results = sc.parallelize(groups, len(groups)).mapPartitions(copy).collect()
    except (Py4JJavaError, CapturedException) as error:
        classified = task_error(str(error))
        if classified is None:
            raise
        raise _of_plan(plan, classified) from error
    return copy_result(plan, results)


class StandingCopy:
    """A DR window's copy: one Spark job whose tasks, one per core, stand for the whole window
    (``standing_task``); each micro-batch's plan is spread over them as ``copy_plan`` spreads a plan
    over a job's tasks. Its job starts when it is made, and the DR job waits until its tasks are up
    and connected (``await_tasks``) before the window offers to take over, so that the first
    micro-batch after a handover costs what the others do. Invariants:
    - A call returns once every group it handed over has answered: no copy of one micro-batch
      overlaps the next one's.
    - A failed call (a task's classified error, a task or the job gone) raises what ``copy_plan``
      would, and ends the job: the next call starts a fresh one.
    - ``close`` ends the job; a task ends once the group it copies is answered.
    """

    def __init__(self, sc: SparkContext, flow: FlowConfig) -> None:
        self.sc, self.settings = sc, CopySettings.of(flow)
        self._job: _StandingJob | None = _StandingJob(sc, self.settings)

    def await_tasks(self) -> None:
        """Until every task of the job is up and connected to both clusters (``TransientError`` if
        they are not within ``TASKS_START_S``): a window waits for this before it offers to take
        over."""
        with self._running() as job:
            job.await_tasks()

    def __call__(self, plan: Plan, grant: Grant) -> CopyResult:
        if not plan.partitions:
            return CopyResult(plan.flow, plan.run_id, ())
        with self._running() as job:
            return copy_result(plan, job.copy(plan, grant))

    @contextlib.contextmanager
    def _running(self) -> Iterator[_StandingJob]:
        """The job (a fresh one if the last ended), ended if the block fails."""
        if self._job is None:
            self._job = _StandingJob(self.sc, self.settings)
        try:
            yield self._job
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        job, self._job = self._job, None
        if job is not None:
            job.stop()


class _StandingJob:
    """One Spark job of standing tasks and the channels to them (``standing_task`` says what
    travels)."""

    def __init__(self, sc: SparkContext, settings: CopySettings) -> None:
        self.sc, self.size = sc, sc.defaultParallelism
        # Executors reach the driver at spark.driver.host; a local application's tasks at loopback.
        local = str(sc.master).startswith("local")
        host = "127.0.0.1" if local else str(sc.getConf().get("spark.driver.host", "127.0.0.1"))
        secret = secrets.token_bytes(32)
        self.listener = Listener((host, 0), authkey=secret)
        self.channels: dict[int, Connection] = {}
        self.all_in = threading.Event()
        self.stopping = False
        self.silent = False
        self.failure: BaseException | None = None
        self.group_id = f"mirrorflow-standing-copy-{uuid.uuid4().hex}"
        task = partial(_standing_task, self.listener.address, secret, settings)
        self.accepting = threading.Thread(target=self._accept, name="standing copy: channels", daemon=True)
        self.job = threading.Thread(target=self._run, args=(task,), name="standing copy: job", daemon=True)
        self.accepting.start()
        self.job.start()

    def _run(self, task: Callable[[int, Iterable[int]], Iterator[PartitionResult]]) -> None:
        self.sc.setJobGroup(self.group_id, "DR window: standing copy tasks", interruptOnCancel=True)
        try:
            self.sc.parallelize(range(self.size), self.size).mapPartitionsWithIndex(task).collect()
        except BaseException as exc:
            self.failure = exc
        finally:
            self._wake()

    def _accept(self) -> None:
        while len(self.channels) < self.size:
            try:
                channel = self.listener.accept()
                index = channel.recv()
            except (OSError, EOFError, AuthenticationError):
                if self.stopping:
                    return
                continue  # a connection that is not one of this job's tasks
            if self.stopping:
                channel.close()
                return
            if index in self.channels:
                channel.close()  # a second attempt of a task (speculation): the first one serves
            else:
                self.channels[index] = channel
        self.all_in.set()

    def _wake(self) -> None:
        """Let an accept still waiting see ``stopping``: closing the listener does not wake it."""
        self.stopping = True
        with contextlib.suppress(OSError):
            socket.create_connection(self.listener.address, timeout=1).close()

    def copy(self, plan: Plan, grant: Grant) -> list[PartitionResult]:
        self.await_tasks()
        groups = plan.task_groups(plan.task_count(self.size))
        results: list[PartitionResult] = []
        failures: list[BaseException] = []
        handed: dict[Connection, int] = {}
        heard: dict[Connection, float] = {}
        for index, group in enumerate(groups):
            try:
                self.channels[index].send((group, grant, plan.schema_ids))
            except OSError:
                failures.append(_gone(index))
                continue
            handed[self.channels[index]] = index
            heard[self.channels[index]] = time.monotonic()
        while handed:
            for ready in wait(list(handed), timeout=1.0):
                channel = cast(Connection, ready)
                try:
                    answer = channel.recv()
                except (EOFError, OSError):
                    failures.append(_gone(handed.pop(channel)))
                    continue
                if answer == ALIVE:
                    heard[channel] = time.monotonic()
                    continue
                handed.pop(channel)
                if isinstance(answer, Failed):
                    failures.append(_raised(plan, answer))
                else:
                    results.extend(answer)
            silent = [
                index for channel, index in handed.items() if time.monotonic() - heard[channel] > SILENT_S
            ]
            if silent:
                self.silent = True
                failures.append(_silent(silent[0]))
                break
            if handed and not self.job.is_alive():
                failures.append(self._ended())
                break
        if failures:
            raise failures[0]
        return results

    def await_tasks(self) -> None:
        deadline = time.monotonic() + TASKS_START_S
        while not self.all_in.wait(0.05):
            if not self.job.is_alive():
                raise self._ended()
            if time.monotonic() > deadline:
                raise TransientError(
                    f"only {len(self.channels)} of the window's {self.size} copy tasks started in "
                    f"{TASKS_START_S:.0f} s: the Spark application has fewer free cores than its default "
                    "parallelism, or its executors cannot reach the driver (spark.driver.host)"
                )

    def _ended(self) -> MirrorError:
        failure = str(self.failure or "").strip()
        if not failure:
            return TransientError("the window's copy tasks ended without being told to")
        first_line = failure.splitlines()[0]
        return task_error(failure) or TransientError(f"the window's copy tasks failed: {first_line}")

    def stop(self) -> None:
        self._wake()
        for channel in list(self.channels.values()):
            with contextlib.suppress(OSError):
                channel.send(None)
        if not self.silent:  # a silent task would never end: cancel at once
            self.job.join(TASKS_STOP_S)
        if self.job.is_alive():
            self.sc.cancelJobGroup(self.group_id)
            self.job.join(TASKS_STOP_S)
        for channel in self.channels.values():
            channel.close()
        self.listener.close()


def _standing_task(
    address: tuple[str, int], secret: bytes, settings: CopySettings, index: int, _: Iterable[int]
) -> Iterator[PartitionResult]:
    """A standing task as Spark runs it (``mapPartitionsWithIndex``); its answers travel over its
    channel, so its Spark result is empty."""
    serve(index, address, secret, settings)
    return iter(())


def _gone(index: int) -> TransientError:
    return TransientError(
        f"copy task {index} of the window is gone (its Python worker or executor was lost); the "
        "micro-batch is planned again from what was committed"
    )


def _silent(index: int) -> TransientError:
    return TransientError(
        f"copy task {index} of the window said nothing for {SILENT_S:.0f} s while it copied (its Python "
        "worker froze or its executor's host is gone); its job is cancelled and the micro-batch is "
        "planned again from what was committed"
    )


def _of_plan(plan: Plan, error: MirrorError) -> MirrorError:
    """A task's classified error as the copy of ``plan`` raises it."""
    if isinstance(error, SourceDataLostError):
        return SourceDataLostError(
            f"flow {plan.flow} run {plan.run_id}: planned source records are no longer on the source: {error}"
        )
    return error


def _raised(plan: Plan, failed: Failed) -> BaseException:
    kind = error_class(failed.kind) if failed.kind else None
    if kind is None:
        return RuntimeError(f"a copy task of {plan.run_id} failed:\n{failed.message}")
    return _of_plan(plan, kind.from_message(failed.message))


# A copy task's own error, as Spark's failure quotes its traceback: "mirrorflow.errors.<Class>: <message>".
_TASK_ERROR = re.compile(r"mirrorflow\.errors\.(\w+): ([^\n]*)")
_REFUSED = re.compile(r"org\.apache\.kafka\.common\.errors\.(\w*AuthorizationException): ([^\n]*)")


def task_error(failure: str) -> MirrorError | None:
    """The classified error behind a failed Spark job: one a copy task raised (same class and
    message), or a cluster refusing the reader's login; None for anything else."""
    raised = _TASK_ERROR.search(failure)
    kind = error_class(raised.group(1)) if raised else None
    if raised and kind is not None:
        return kind.from_message(raised.group(2))
    refused = _REFUSED.search(failure)
    if refused:
        return AuthorizationError(
            f"the source cluster refused the mirror's login: {refused.group(2)} ({refused.group(1)}). "
            "Grant it READ on the mirrored topics (README: Secured clusters); nothing was committed."
        )
    return None
