"""Freshness alerts: is the target as fresh as the flow's thresholds demand after a run?

Invariant: a run that leaves any partition further behind than ``mirrorflow.alert.lag.max.records``,
or the newest mirrored heartbeat older than ``mirrorflow.alert.heartbeat.age.max.seconds`` (or none
at all), is reported stale, naming every lagging partition: DR staleness is never silent.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mirrorflow.config.keys import ALERT_NOTIFIER
from mirrorflow.config.model import MirrorSettings
from mirrorflow.config.property_view import load_reference
from mirrorflow.core.topic_partitions import TP


def staleness(
    flow: str, settings: MirrorSettings, lags: Mapping[TP, int], heartbeat_age_s: float | None
) -> str | None:
    """Why the flow is stale after a run (lag left per partition, newest mirrored heartbeat's age),
    or None when it is within its thresholds."""
    problems = []
    limit = settings.alert_lag_max_records
    if limit is not None:
        lagging = sorted((tp, lag) for tp, lag in lags.items() if lag > limit)
        if lagging:
            listed = ", ".join(f"{t}-{p} ({lag})" for (t, p), lag in lagging)
            problems.append(f"{len(lagging)} partitions lag more than {limit} records: {listed}")
    max_age = settings.alert_heartbeat_age_max_seconds
    if max_age is not None:
        if heartbeat_age_s is None:
            problems.append("no heartbeat of the source was mirrored yet")
        elif heartbeat_age_s > max_age:
            problems.append(
                f"the newest mirrored heartbeat is {heartbeat_age_s:.0f} s old (limit {max_age} s)"
            )
    if not problems:
        return None
    return (
        f"flow {flow} is stale: {'; '.join(problems)}. Check that its runs succeed and keep up "
        "(schedule, mirrorflow.max.records.per.partition, Spark resources) and that the source is reachable."
    )


def resolve_notifier(settings: MirrorSettings) -> Any:
    """The object ``mirrorflow.alert.notifier`` names (an Airflow notifier or failure callback), or
    None; an unimportable name is a configuration error naming the key."""
    reference = settings.alert_notifier
    if reference is None:
        return None
    return load_reference(reference, ALERT_NOTIFIER)
