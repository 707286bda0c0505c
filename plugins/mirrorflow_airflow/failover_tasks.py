"""Airflow-side wrapper of the manual failover DAG: trigger params in, report out, classified errors.

Errors are classified as in ``mirrorflow_airflow.tasks``: a ``TransientError`` (the target
unreachable) propagates and Airflow retries the task, which is safe (a group is never moved
backwards, so a retry only finishes what an attempt left); any other ``MirrorError`` (an invalid
param, no checkpoints topic on the target) fails the task at once with its message.
"""

from __future__ import annotations

import logging
from typing import Any

from airflow.sdk import get_current_context

from mirrorflow.app.failover import failover_options, run_failover, write_report
from mirrorflow.app.run_folder import RunFolder
from mirrorflow.config.model import load_config
from mirrorflow_airflow.tasks import classified

log = logging.getLogger(__name__)


@classified
def failover(flow: str) -> dict[str, Any]:
    """Set the target's consumer groups of ``flow`` from the newest checkpoints on the target (the
    source is never contacted). The report is logged as Markdown, written to ``failover.md`` and
    ``failover.json`` in the run's folder, and returned (the task's XCom)."""
    context = get_current_context()
    config = load_config()
    options = failover_options(context["params"], config.flow(flow))
    report = run_failover(config, flow, options)
    log.info("%s", report.markdown())
    md, js = write_report(report, RunFolder.of(config.state_dir, flow, str(context["run_id"])))
    log.info("failover report written to %s and %s", md, js)
    return report.as_dict()
