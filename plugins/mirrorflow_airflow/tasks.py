"""Airflow-side wrappers of the run steps: context in, classified errors out.

A ``TransientError`` propagates as it is, so Airflow retries the task. Any other ``MirrorError``
(misconfiguration, data loss, a target in an unexpected state) becomes ``AirflowFailException``:
retrying cannot fix it, so the task fails at once with the actionable message.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

from airflow.sdk import get_current_context
from airflow.sdk.exceptions import AirflowFailException

from mirrorflow import runner
from mirrorflow.config import load_config
from mirrorflow.errors import MirrorError, TransientError

P = ParamSpec("P")
R = TypeVar("R")


def classified(fn: Callable[P, R]) -> Callable[P, R]:
    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except TransientError:
            raise
        except MirrorError as exc:
            raise AirflowFailException(f"{type(exc).__name__}: {exc}") from exc

    return wrapper


def _run_id() -> str:
    return str(get_current_context()["run_id"])


@classified
def plan(flow: str) -> bool:
    """Returns whether there is anything to copy (False skips the copy task)."""
    return bool(runner.plan_run(load_config(), flow, _run_id()).partitions)


@classified
def commit(flow: str) -> dict[str, Any]:
    return runner.commit_run(load_config(), flow, _run_id()).as_dict()


@classified
def release(flow: str) -> bool:
    return runner.release_run(load_config(), flow, _run_id())
