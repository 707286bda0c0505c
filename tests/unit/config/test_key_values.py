"""Typed keys read by their rows of the key table: kind, default and choices come from the row."""

from __future__ import annotations

import pytest

from mirrorflow.config.key_values import choice, flag, number, optional_number
from mirrorflow.config.keys import TASK_RETRIES
from mirrorflow.config.property_view import PropertyView
from mirrorflow.config.setting_keys import FLOW_SETTINGS
from mirrorflow.errors import ConfigError

NOTHING = PropertyView()


def written(key: str, value: str) -> PropertyView:
    return PropertyView.layered([("primary->backup.", {key: value})])


def test_an_absent_key_is_its_rows_default() -> None:
    assert number(NOTHING, "replication.factor") == 2
    assert flag(NOTHING, "sync.group.offsets.enabled") is False
    assert choice(NOTHING, "mirrorflow.mode") == "batch"
    assert optional_number(NOTHING, "mirrorflow.alert.lag.max.records") is None


def test_a_settings_default_is_its_first_choice() -> None:
    with_choices = [row for row in FLOW_SETTINGS if row.choices]

    assert with_choices
    assert all(row.default == row.choices[0] for row in with_choices)


def test_the_rows_kind_bounds_a_number_and_the_error_names_the_key_as_written() -> None:
    assert number(written(TASK_RETRIES, "0"), TASK_RETRIES) == 0
    with pytest.raises(ConfigError) as caught:
        number(written("emit.checkpoints.interval.seconds", "0"), "emit.checkpoints.interval.seconds")

    assert str(caught.value) == (
        "primary->backup.emit.checkpoints.interval.seconds: expected a positive whole number, got '0'; "
        "set e.g. 60"
    )


def test_a_replication_factor_is_positive_or_the_brokers_default() -> None:
    assert number(written("replication.factor", "-1"), "replication.factor") == -1
    assert number(written("replication.factor", "3"), "replication.factor") == 3
    with pytest.raises(ConfigError) as caught:
        number(written("replication.factor", "0"), "replication.factor")

    assert str(caught.value) == (
        "primary->backup.replication.factor: expected a positive whole number, or -1 for the brokers' "
        "default.replication.factor, got '0'; set e.g. 2"
    )


def test_a_name_the_table_lacks_is_a_mistake_in_the_code() -> None:
    with pytest.raises(KeyError):
        number(NOTHING, "mirrorflow.no.such.key")
