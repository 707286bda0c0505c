"""Entries of a failover report, as the unit and the integration tests of failover expect them."""

from __future__ import annotations

from typing import Any


def row(
    group: str, topic: str, partition: int, upstream: int, checkpoint: int, **more: Any
) -> dict[str, Any]:
    """A report's entry for one checkpoint; ``more`` adds what its section says (committed, reason)."""
    return {
        "group": group,
        "topic": topic,
        "partition": partition,
        "upstream_offset": upstream,
        "checkpoint": checkpoint,
        **more,
    }
