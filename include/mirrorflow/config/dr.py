"""DR mode: a flow whose runs are windows of back-to-back micro-batches in one Spark application.

``mirrorflow.mode = dr`` turns it on for a flow (default ``batch``: one bounded copy per run). Inside a
window, MM2's own intervals say how often the control-plane work is done, with MM2's defaults:
heartbeats every ``emit.heartbeats.interval.seconds`` (1), checkpoints (and group offset sync)
every ``emit.checkpoints.interval.seconds`` (60), topic selection, creation and config sync every
``refresh.topics.interval.seconds`` / ``sync.topic.configs.interval.seconds`` (600 each), topic ACL
sync every ``sync.topic.acls.interval.seconds`` (600).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from mirrorflow.config.key_values import choice, default_number, number
from mirrorflow.config.keys import (
    DR_HANDOVER_WAIT,
    DR_IDLE_WAIT_MS,
    DR_TRIGGER_INTERVAL_MS,
    DR_WINDOW_SECONDS,
    MODE,
    SCHEDULE,
)
from mirrorflow.config.property_view import PropertyView

log = logging.getLogger(__name__)

# MM2's interval keys (MirrorConnectorConfig / MirrorCheckpointConfig / MirrorSourceConfig); their
# defaults are MM2's, in the key table.
_HEARTBEATS = "emit.heartbeats.interval.seconds"
_CHECKPOINTS = "emit.checkpoints.interval.seconds"
_REFRESH_TOPICS = "refresh.topics.interval.seconds"
_SYNC_CONFIGS = "sync.topic.configs.interval.seconds"
_SYNC_ACLS = "sync.topic.acls.interval.seconds"


@dataclass(frozen=True)
class DrSettings:
    """A DR flow's window and intervals, in seconds (``idle_wait_ms``: how long a window waits after a
    micro-batch that found nothing new before it looks again; ``trigger_interval_ms``: the least time
    from one micro-batch's start to the next one's, 0 for back to back; ``handover_wait_seconds``: how
    long a window goes on past its end while no next window is up to take over)."""

    window_seconds: int = default_number(DR_WINDOW_SECONDS)
    idle_wait_ms: int = default_number(DR_IDLE_WAIT_MS)
    heartbeats_interval_seconds: int = default_number(_HEARTBEATS)
    checkpoints_interval_seconds: int = default_number(_CHECKPOINTS)
    topics_interval_seconds: int = default_number(_REFRESH_TOPICS)
    acls_interval_seconds: int = default_number(_SYNC_ACLS)
    handover_wait_seconds: int = default_number(DR_HANDOVER_WAIT)
    trigger_interval_ms: int = default_number(DR_TRIGGER_INTERVAL_MS)


def dr_settings(props: PropertyView, flow: str) -> DrSettings | None:
    """The flow's DR settings, None for a flow in batch mode (which warns about DR keys set for it)."""
    if choice(props, MODE) == "batch":
        window_keys = (DR_WINDOW_SECONDS, DR_IDLE_WAIT_MS, DR_TRIGGER_INTERVAL_MS, DR_HANDOVER_WAIT,
                       _HEARTBEATS, _CHECKPOINTS, _REFRESH_TOPICS, _SYNC_CONFIGS, _SYNC_ACLS)  # fmt: skip
        unused = [props.written_as(k) for k in window_keys if k in props]
        if unused:
            log.warning(
                "flow %s runs in batch mode: %s has no effect (it applies with %s = dr; a batch run does "
                "each step once)",
                flow,
                ", ".join(unused),
                MODE,
            )
        return None
    if SCHEDULE in props:
        log.warning(
            "flow %s runs in DR mode: %s has no effect (its windows are scheduled every %s, two at a "
            "time, so that the next window is up before the one running hands the flow over)",
            flow,
            props.written_as(SCHEDULE),
            DR_WINDOW_SECONDS,
        )
    return DrSettings(
        window_seconds=number(props, DR_WINDOW_SECONDS),
        idle_wait_ms=number(props, DR_IDLE_WAIT_MS),
        heartbeats_interval_seconds=number(props, _HEARTBEATS),
        checkpoints_interval_seconds=number(props, _CHECKPOINTS),
        # One control-plane step selects, creates and reconfigures remote topics: it runs as often as
        # the shorter of MM2's two intervals asks.
        topics_interval_seconds=min(number(props, _REFRESH_TOPICS), number(props, _SYNC_CONFIGS)),
        acls_interval_seconds=number(props, _SYNC_ACLS),
        handover_wait_seconds=number(props, DR_HANDOVER_WAIT),
        trigger_interval_ms=number(props, DR_TRIGGER_INTERVAL_MS),
    )
