"""Reads of live figures (a heartbeat's age, a source's end offsets) for the status page, all at
once and each bounded: a cluster that does not answer costs the page its timeout, once, and only
makes its own figure unknown."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping

__all__ = ["LATE", "LiveReads", "why_missing"]


class LiveReads:
    """Each read, run in parallel from construction on (daemon threads); ``collect`` waits until
    ``deadline`` (``time.monotonic``) at most. A read still running then is left to finish on its
    own, bounded by its Kafka client's timeouts, and collected as ``LATE``."""

    def __init__(self, reads: Mapping[str, Callable[[], object]], deadline: float) -> None:
        self._deadline = deadline
        self._pending: list[tuple[str, threading.Thread, dict[str, object]]] = []
        for name, read in reads.items():
            box: dict[str, object] = {}
            thread = threading.Thread(
                target=_run, args=(read, box), name=f"mirrorflow-live-{name}", daemon=True
            )
            thread.start()
            self._pending.append((name, thread, box))

    def collect(self) -> dict[str, object]:
        found: dict[str, object] = {}
        for name, thread, box in self._pending:
            thread.join(max(0.0, self._deadline - time.monotonic()))
            found[name] = box.get("value", LATE)
        return found


# What ``LiveReads.collect`` gives for a read that did not finish in time.
LATE = object()


def _run(read: Callable[[], object], box: dict[str, object]) -> None:
    try:
        box["value"] = read()
    except Exception as error:  # any failure of a live read only makes its figure unknown
        box["value"] = error


def why_missing(value: object, timeout: float) -> str | None:
    """Why a live read bounded by ``timeout`` seconds gave no value, or ``None`` if it did."""
    if value is LATE:
        return f"no answer within {timeout:g} s"
    if isinstance(value, Exception):
        return f"{type(value).__name__}: {value}"
    return None
