"""A DR window in a thread beside a test's producer and faults, on a standing copy as the window task
runs it."""

from __future__ import annotations

import threading

from pyspark.sql import SparkSession

from mirrorflow.app import batch_run, dr_window
from mirrorflow.config.model import MirrorConfig
from mirrorflow.copy.spark_copy import StandingCopy
from mirrorflow.core.window import WindowSummary


class WindowThread:
    """``dr_window.run_window`` of ``flow`` as run ``run_id``: entering starts the standing copy's
    tasks and waits for them, ``start`` starts the window in a thread, and leaving waits for the
    window's end (up to ``timeout``), closes the copy and gives the flow's lock back, also when the
    block failed. ``summaries`` then holds what the window returned or raised."""

    def __init__(
        self,
        spark: SparkSession,
        config: MirrorConfig,
        flow: str,
        run_id: str = "window-1",
        timeout: float = 120,
    ) -> None:
        self._config, self._flow, self._run_id, self._timeout = config, flow, run_id, timeout
        self._copy = StandingCopy(spark.sparkContext, config.flow(flow))
        self._thread = threading.Thread(target=self._run)
        self.summaries: list[WindowSummary | BaseException] = []

    def _run(self) -> None:
        try:
            self.summaries.append(dr_window.run_window(self._config, self._flow, self._run_id, self._copy))
        except BaseException as error:
            self.summaries.append(error)

    def __enter__(self) -> WindowThread:
        try:
            self._copy.await_tasks()
        except BaseException:
            self._copy.close()
            raise
        return self

    def start(self) -> None:
        self._thread.start()

    def __exit__(self, *_: object) -> None:
        try:
            if self._thread.is_alive():
                self._thread.join(self._timeout)
        finally:
            self._copy.close()
            batch_run.release_run(self._config, self._flow, self._run_id)
