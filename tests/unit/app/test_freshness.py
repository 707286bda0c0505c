"""Freshness alerts: thresholds on lag left and mirrored heartbeat age, and the notifier reference."""

from __future__ import annotations

import pytest

from mirrorflow.app.freshness import resolve_notifier, staleness
from mirrorflow.config.model import MirrorSettings
from mirrorflow.errors import ConfigError

LAGS = {("orders", 0): 0, ("orders", 1): 250, ("payments", 0): 1000}


def test_no_thresholds_never_stale() -> None:
    assert staleness("primary->backup", MirrorSettings(), LAGS, None) is None


def test_every_partition_over_the_lag_limit_is_named() -> None:
    message = staleness("primary->backup", MirrorSettings(alert_lag_max_records=200), LAGS, 3.0)

    assert message == (
        "flow primary->backup is stale: 2 partitions lag more than 200 records: orders-1 (250), "
        "payments-0 (1000). Check that its runs succeed and keep up (schedule, "
        "mirrorflow.max.records.per.partition, Spark resources) and that the source is reachable."
    )
    assert staleness("primary->backup", MirrorSettings(alert_lag_max_records=1000), LAGS, None) is None


@pytest.mark.parametrize(
    ("age", "problem"),
    [
        (None, "no heartbeat of the source was mirrored yet"),
        (600.4, "the newest mirrored heartbeat is 600 s old (limit 600 s)"),
        (600.0, None),
        (0.5, None),
    ],
)
def test_heartbeat_age_limit(age: float | None, problem: str | None) -> None:
    message = staleness("a->b", MirrorSettings(alert_heartbeat_age_max_seconds=600), {}, age)

    assert (message if message is None else message.split(": ", 1)[1].split(". Check")[0]) == problem


def test_lag_and_heartbeat_problems_together() -> None:
    settings = MirrorSettings(alert_lag_max_records=0, alert_heartbeat_age_max_seconds=60)

    message = staleness("a->b", settings, {("orders", 1): 1}, 61.0)

    assert message is not None
    assert message.startswith(
        "flow a->b is stale: 1 partitions lag more than 0 records: orders-1 (1); the newest mirrored "
        "heartbeat is 61 s old (limit 60 s). "
    )


def test_notifier_is_imported_from_its_reference() -> None:
    assert resolve_notifier(MirrorSettings()) is None
    assert resolve_notifier(MirrorSettings(alert_notifier="os.path:join")) is __import__("os").path.join


@pytest.mark.parametrize(
    ("reference", "message"),
    [
        ("no_such_module_here:notify", "No module named 'no_such_module_here'"),
        ("os.path:no_such_thing", "has no attribute 'no_such_thing'"),
        ("os:sep", "'os:sep' is not callable"),
    ],
)
def test_an_unusable_notifier_names_the_key(reference: str, message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        resolve_notifier(MirrorSettings(alert_notifier=reference))

    assert raised.value.key == "mirrorflow.alert.notifier"
    assert message in str(raised.value)
