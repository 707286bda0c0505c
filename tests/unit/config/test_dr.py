"""DR mode's settings: the mode, the window, and MM2's interval keys a window honours."""

from __future__ import annotations

import logging

import pytest
from config_texts import ONE_FLOW

from mirrorflow.config.dr import DrSettings
from mirrorflow.config.model import FlowConfig, parse_config
from mirrorflow.errors import ConfigError


def parse(extra: str) -> FlowConfig:
    (flow,) = parse_config(ONE_FLOW + extra, env={}).flows
    return flow


def test_batch_mode_is_the_default_and_has_no_dr_settings() -> None:
    flow = parse("")
    assert flow.dr is None
    assert flow.copy_task_timeout_seconds == 6 * 3600


def test_dr_mode_takes_mm2_defaults_for_its_intervals() -> None:
    flow = parse("primary->backup.mirrorflow.mode = DR\n")
    assert flow.dr == DrSettings(
        window_seconds=600,
        idle_wait_ms=250,
        heartbeats_interval_seconds=1,
        checkpoints_interval_seconds=60,
        topics_interval_seconds=600,
        acls_interval_seconds=600,
        handover_wait_seconds=600,
        trigger_interval_ms=0,
    )
    # A window attempt may last the window, its wait for the next one and one copy.
    assert flow.copy_task_timeout_seconds == 6 * 3600 + 600 + 600


def test_dr_settings_at_top_level_and_per_flow() -> None:
    flow = parse(
        "mirrorflow.mode = dr\n"
        "mirrorflow.dr.window.seconds = 120\n"
        "primary->backup.mirrorflow.dr.idle.wait.ms = 0\n"
        "emit.heartbeats.interval.seconds = 5\n"
        "primary->backup.emit.checkpoints.interval.seconds = 10\n"
        "refresh.topics.interval.seconds = 300\n"
        "sync.topic.configs.interval.seconds = 900\n"
        "sync.topic.acls.interval.seconds = 30\n"
        "mirrorflow.dr.handover.wait.seconds = 0\n"
        "primary->backup.mirrorflow.dr.trigger.interval.ms = 200\n"
    )
    assert flow.dr == DrSettings(120, 0, 5, 10, 300, 30, 0, 200)


def test_topic_refresh_runs_as_often_as_the_shorter_of_mm2s_two_intervals() -> None:
    flow = parse("mirrorflow.mode = dr\nsync.topic.configs.interval.seconds = 60\n")
    assert flow.dr is not None and flow.dr.topics_interval_seconds == 60


@pytest.mark.parametrize(
    ("text", "key", "message"),
    [
        (
            "primary->backup.mirrorflow.mode = stream",
            "primary->backup.mirrorflow.mode",
            "expected batch or dr",
        ),
        (
            "mirrorflow.mode = dr\nmirrorflow.dr.window.seconds = 0",
            "mirrorflow.dr.window.seconds",
            "positive",
        ),
        (
            "mirrorflow.mode = dr\nemit.heartbeats.interval.seconds = -1",
            "emit.heartbeats.interval.seconds",
            "positive",
        ),
        (
            "mirrorflow.mode = dr\nmirrorflow.dr.idle.wait.ms = soon",
            "mirrorflow.dr.idle.wait.ms",
            "at least 0",
        ),
        (
            "mirrorflow.mode = dr\nmirrorflow.dr.trigger.interval.ms = -200",
            "mirrorflow.dr.trigger.interval.ms",
            "at least 0",
        ),
    ],
)
def test_bad_dr_values_name_the_key(text: str, key: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        parse(text + "\n")
    assert caught.value.key == key


def test_dr_keys_on_a_batch_flow_are_warned_about_by_name(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="mirrorflow.config.dr"):
        flow = parse(
            "primary->backup.mirrorflow.dr.window.seconds = 60\nemit.checkpoints.interval.seconds = 5\n"
        )
    assert flow.dr is None
    assert caplog.messages == [
        "flow primary->backup runs in batch mode: primary->backup.mirrorflow.dr.window.seconds, "
        "emit.checkpoints.interval.seconds has no effect (it applies with mirrorflow.mode = dr; a batch run "
        "does each step once)"
    ]
