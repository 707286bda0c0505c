"""Trigger params and a run's data interval to the options the planner honours."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from mirrorflow.config.run_options import TRIGGER_PARAMS, RunOptions, run_options
from mirrorflow.errors import ParamError


def test_defaults_mirror_everything_from_the_earliest_record_up_to_plan_time() -> None:
    assert run_options({}) == RunOptions()
    assert run_options({name: default for name, (default, _, _) in TRIGGER_PARAMS.items()}) == RunOptions()


def test_params_and_interval_end_become_options() -> None:
    options = run_options(
        {
            "topics": ["orders", "payments"],
            "max_records_per_partition": 500,
            "dry_run": True,
            "start": "timestamp",
            "start_timestamp": "2026-01-31T01:00:00+01:00",
            "lock_wait_timeout_seconds": 0,
        },
        until=datetime(2026, 2, 1, tzinfo=UTC),
    )

    assert options == RunOptions(
        topics=frozenset({"orders", "payments"}),
        max_records_per_partition=500,
        dry_run=True,
        start="timestamp",
        start_timestamp_ms=1_769_817_600_000,
        until_timestamp_ms=1_769_904_000_000,
        lock_wait_timeout_seconds=0,
    )


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"topics": "orders"}, "trigger param topics: 'orders' is not a list of topic names"),
        ({"topics": ["orders", ""]}, "trigger param topics: ['orders', ''] is not a list of topic names"),
        ({"max_records_per_partition": 0}, "trigger param max_records_per_partition: 0 is not a whole"),
        ({"max_records_per_partition": True}, "trigger param max_records_per_partition: True is not"),
        ({"max_records_per_partition": 2.5}, "trigger param max_records_per_partition: 2.5 is not"),
        ({"dry_run": "yes"}, "trigger param dry_run: 'yes' is not true or false"),
        ({"start": "beginning"}, "trigger param start: 'beginning' is not one of earliest, latest"),
        ({"start": "timestamp"}, "trigger param start_timestamp: is None; start = timestamp needs a time"),
        (
            {"start": "timestamp", "start_timestamp": "yesterday"},
            "trigger param start_timestamp: 'yesterday' is not an ISO 8601 time",
        ),
        (
            {"start": "timestamp", "start_timestamp": "2026-01-31T00:00:00"},
            "trigger param start_timestamp: '2026-01-31T00:00:00' has no time zone; add one",
        ),
        (
            {"start": "latest", "start_timestamp": "2026-01-31T00:00:00+00:00"},
            "trigger param start_timestamp: is set to '2026-01-31T00:00:00+00:00' but start is 'latest'",
        ),
        (
            {"lock_wait_timeout_seconds": -1},
            "trigger param lock_wait_timeout_seconds: -1 is not a whole number of seconds from 0 to 604800",
        ),
        ({"lock_wait_timeout_seconds": 604801}, "trigger param lock_wait_timeout_seconds: 604801 is not"),
        ({"lock_wait_timeout_seconds": "60"}, "trigger param lock_wait_timeout_seconds: '60' is not"),
    ],
)
def test_invalid_params_name_the_param(params: dict[str, Any], message: str) -> None:
    with pytest.raises(ParamError) as raised:
        run_options(params)
    assert str(raised.value).startswith(message)
    assert str(raised.value).endswith("Trigger the run again with a valid value.")
