"""The control plane's reading of consumer groups' states, on a scripted admin client: a group its
coordinator cannot describe yet is asked again, never taken for one in an unknown state (the failover
would leave such a group alone as active)."""

from __future__ import annotations

from typing import Any

import pytest
from kafka import errors as kafka_errors

from mirrorflow.errors import TransientError
from mirrorflow.kafka import faults
from mirrorflow.kafka.admin import ClusterAdmin


class ScriptedAdmin:
    """kafka-python's admin client as far as ``describe_groups`` goes: each call answers the next
    description of the script, in kafka-python's words."""

    def __init__(self, *answers: dict[str, dict[str, Any]]) -> None:
        self.answers = list(answers)
        self.calls = 0

    def describe_groups(self, names: list[str]) -> dict[str, dict[str, Any]]:
        self.calls += 1
        return self.answers.pop(0)


def _admin(scripted: ScriptedAdmin) -> ClusterAdmin:
    admin = ClusterAdmin.__new__(ClusterAdmin)
    admin.alias, admin._admin = "backup", scripted  # type: ignore[assignment]
    return admin


def _error(kind: type[kafka_errors.BrokerResponseError]) -> dict[str, Any]:
    return {"group_state": "", "error": str(kind(""))}


def test_a_group_whose_coordinator_still_loads_is_asked_again() -> None:
    scripted = ScriptedAdmin(
        {"orders": _error(kafka_errors.CoordinatorLoadInProgressError), "audit": {"group_state": "Empty"}},
        {"orders": _error(kafka_errors.NotCoordinatorError), "audit": {"group_state": "Empty"}},
        {"orders": {"group_state": "Stable", "error": None}, "audit": {"group_state": "Empty"}},
    )
    assert _admin(scripted).group_states(["orders", "audit"]) == {"orders": "Stable", "audit": "Empty"}
    assert scripted.calls == 3


def test_a_group_the_cluster_does_not_know_is_dead() -> None:
    scripted = ScriptedAdmin(
        {
            "orders": _error(kafka_errors.GroupIdNotFoundError),
            "audit": {"group_state": "Stable", "error": None},
        }
    )
    assert _admin(scripted).group_states(["orders", "audit"]) == {"orders": "Dead", "audit": "Stable"}


def test_a_group_its_coordinator_keeps_failing_to_describe_is_a_passing_fault_naming_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(faults, "TIMEOUT_S", 0.0)
    loading = {"orders": _error(kafka_errors.CoordinatorNotAvailableError)}
    with pytest.raises(TransientError, match=r"group orders: .*CoordinatorNotAvailableError"):
        _admin(ScriptedAdmin(loading, loading)).group_states(["orders"])
    refused = {"orders": _error(kafka_errors.GroupAuthorizationFailedError)}
    with pytest.raises(TransientError, match=r"could not describe group orders: .*GroupAuthorizationFailed"):
        _admin(ScriptedAdmin(refused)).group_states(["orders"])
