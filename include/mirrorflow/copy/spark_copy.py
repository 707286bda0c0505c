"""The Spark side of a run: execute exactly the plan it is handed, nothing more.

The planned partitions are spread over as many Spark tasks as Spark has cores, fewer for a small
plan (``Plan.task_count``, ``Plan.task_groups``); each task copies its group's record batches from
the source to the target as bytes (``batch_copy``), all of its partitions at once. Spark schedules,
retries a failed task (which reads back what an earlier attempt wrote and goes on from there) and
collects the per partition results. A task's classified error (``mirrorflow.errors``) reaches the
caller as the same class with the same message. With ``spark_verify``, the only modules that import
pyspark.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

from py4j.protocol import Py4JJavaError
from pyspark import SparkContext
from pyspark.errors.exceptions.captured import CapturedException

from mirrorflow.config.model import FlowConfig
from mirrorflow.copy.batch_copy import CopySettings, copy_partitions, copy_result
from mirrorflow.core.plan import CopyResult, PartitionPlan, PartitionResult, Plan
from mirrorflow.errors import AuthorizationError, MirrorError, SourceDataLostError, error_class


def copy_plan(sc: SparkContext, flow: FlowConfig, plan: Plan) -> CopyResult:
    """Copy every planned partition of ``flow``; each planned partition gets one result."""
    if not plan.partitions:
        return CopyResult(plan.flow, plan.run_id, ())

    # Plain values travel to the Spark tasks (the config's own mappings do not pickle).
    settings, writer = CopySettings.of(flow), plan.writer

    def copy(groups: Iterable[tuple[PartitionPlan, ...]]) -> Iterator[PartitionResult]:
        for group in groups:
            yield from copy_partitions(group, settings, writer)

    groups = plan.task_groups(plan.task_count(sc.defaultParallelism))
    try:
        results = sc.parallelize(groups, len(groups)).mapPartitions(copy).collect()
    except (Py4JJavaError, CapturedException) as error:
        classified = task_error(str(error))
        if classified is None:
            raise
        if isinstance(classified, SourceDataLostError):
            raise SourceDataLostError(
                f"flow {plan.flow} run {plan.run_id}: planned source records are no longer on the source: "
                f"{classified}"
            ) from error
        raise classified from error
    return copy_result(plan, results)


def warm_up(sc: SparkContext) -> None:
    """Start a Python worker per core (Spark reuses them from job to job) with the copy's modules
    imported, so that a DR window's first micro-batch after it takes over costs what the others do."""
    cores = sc.defaultParallelism
    sc.parallelize(range(cores), cores).foreach(_imported)


def _imported(_: int) -> None:
    """Runs in a task: unpickling it imports this module, and with it the copy's, in the worker."""


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
