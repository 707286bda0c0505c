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

from mirrorflow.config.property_view import PropertyView

log = logging.getLogger(__name__)

MODE = "mirrorflow.mode"
MODES = ("batch", "dr")
DR_WINDOW_SECONDS = "mirrorflow.dr.window.seconds"
DR_IDLE_WAIT_MS = "mirrorflow.dr.idle.wait.ms"
DR_SETTINGS = (MODE, DR_WINDOW_SECONDS, DR_IDLE_WAIT_MS)

# MM2's interval keys and defaults (MirrorConnectorConfig / MirrorCheckpointConfig / MirrorSourceConfig).
HEARTBEATS_INTERVAL = ("emit.heartbeats.interval.seconds", 1)
CHECKPOINTS_INTERVAL = ("emit.checkpoints.interval.seconds", 60)
REFRESH_TOPICS_INTERVAL = ("refresh.topics.interval.seconds", 600)
SYNC_CONFIGS_INTERVAL = ("sync.topic.configs.interval.seconds", 600)
SYNC_ACLS_INTERVAL = ("sync.topic.acls.interval.seconds", 600)


@dataclass(frozen=True)
class DrSettings:
    """A DR flow's window and intervals, in seconds (``idle_wait_ms``: how long a window waits after a
    micro-batch that found nothing new before it looks again)."""

    window_seconds: int = 600
    idle_wait_ms: int = 250
    heartbeats_interval_seconds: int = HEARTBEATS_INTERVAL[1]
    checkpoints_interval_seconds: int = CHECKPOINTS_INTERVAL[1]
    topics_interval_seconds: int = REFRESH_TOPICS_INTERVAL[1]
    acls_interval_seconds: int = SYNC_ACLS_INTERVAL[1]


def dr_settings(props: PropertyView, flow: str) -> DrSettings | None:
    """The flow's DR settings, None for a flow in batch mode (which warns about DR keys set for it)."""
    mode = props.get_choice(MODE, MODES)
    if mode == "batch":
        intervals = [k for k, _ in (HEARTBEATS_INTERVAL, CHECKPOINTS_INTERVAL, REFRESH_TOPICS_INTERVAL,
                                    SYNC_CONFIGS_INTERVAL, SYNC_ACLS_INTERVAL)]  # fmt: skip
        unused = [props.written_as(k) for k in (DR_WINDOW_SECONDS, DR_IDLE_WAIT_MS, *intervals) if k in props]
        if unused:
            log.warning(
                "flow %s runs in batch mode: %s has no effect (it applies with %s = dr; a batch run does "
                "each step once)",
                flow,
                ", ".join(unused),
                MODE,
            )
        return None
    return DrSettings(
        window_seconds=props.get_positive_int(DR_WINDOW_SECONDS, DrSettings.window_seconds),
        idle_wait_ms=props.get_positive_int(DR_IDLE_WAIT_MS, DrSettings.idle_wait_ms, zero_allowed=True),
        heartbeats_interval_seconds=props.get_positive_int(*HEARTBEATS_INTERVAL),
        checkpoints_interval_seconds=props.get_positive_int(*CHECKPOINTS_INTERVAL),
        # One control-plane step selects, creates and reconfigures remote topics: it runs as often as
        # the shorter of MM2's two intervals asks.
        topics_interval_seconds=min(
            props.get_positive_int(*REFRESH_TOPICS_INTERVAL), props.get_positive_int(*SYNC_CONFIGS_INTERVAL)
        ),
        acls_interval_seconds=props.get_positive_int(*SYNC_ACLS_INTERVAL),
    )
