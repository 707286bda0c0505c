"""The cutover's pure parts: its params, the report's outcome, and the Markdown people read."""

from __future__ import annotations

from typing import Any

import pytest

from mirrorflow.app.cutover import CutoverOptions, cutover_options, cutover_report, markdown
from mirrorflow.errors import ParamError

PREFLIGHT = {
    "replication_policy": "IdentityReplicationPolicy",
    "topics": {"orders": {"partitions": 2, "remote_topic": "orders"}},
    "remote_topics_to_create": ["orders"],
    "remote_topics_to_grow": {},
    "remote_configs_to_sync": {},
    "groups": ["billing"],
    "lag": {"orders-0": 3, "orders-1": 0},
    "lag_total": 3,
    "lock_holder": None,
}


def _ok(result: Any) -> dict[str, Any]:
    return {"status": "success", "seconds": 1.5, "result": result}


def test_params_default_to_everything_and_half_an_hour() -> None:
    assert cutover_options({}) == CutoverOptions()
    assert cutover_options(
        {"topics": ["orders"], "groups": ["billing"], "drain_timeout_seconds": 60, "dry_run": True}
    ) == (CutoverOptions(frozenset({"orders"}), frozenset({"billing"}), 60, True))


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"groups": "billing"}, "trigger param groups: 'billing' is not a list of names"),
        (
            {"drain_timeout_seconds": 0},
            "trigger param drain_timeout_seconds: 0 is not a whole number of at least 1",
        ),
        ({"dry_run": 1}, "trigger param dry_run: 1 is not true or false"),
    ],
)
def test_invalid_params_are_named(params: dict[str, Any], message: str) -> None:
    with pytest.raises(ParamError, match="^" + message.replace("(", r"\(")):
        cutover_options(params)


def test_the_outcome_names_failed_steps_and_steps_that_did_not_run() -> None:
    failed = {"status": "failed", "seconds": 30.0, "error": "DrainTimeoutError: still lagging: orders-0 (4)"}

    report = cutover_report("a->b", "manual__1", False, {"preflight": _ok(PREFLIGHT), "drain": failed})

    assert report["outcome"] == "failed"
    assert report["failed_steps"] == ["drain"]
    assert report["steps"]["verify"] == {"status": "not run"}
    text = markdown(report)
    assert text.splitlines()[:2] == ["# Cutover of flow a->b: failed", ""]
    assert "| drain | failed | 30.0 | DrainTimeoutError: still lagging: orders-0 (4) |" in text
    assert "| verify | not run |  |  |" in text
    assert 'Remote topics to create (the drain does it): `["orders"]`' in text


def test_a_complete_dry_run_shows_what_it_would_commit() -> None:
    groups = {
        "dry_run": True,
        "positions": [],
        "committed": {"billing": {"orders-0": 7}},
        "active_groups_left_alone": ["live"],
        "offsets_not_mirrored_yet": 0,
    }
    verify = {
        "ranges": 2,
        "mismatches": 0,
        "verdicts": [
            {
                "range": "orders-0 [0, 7) -> orders-0 [0, 7)",
                "source_records": 7,
                "target_records": 7,
                "source_digest": "ab" * 32,
                "target_digest": "ab" * 32,
                "matches": True,
            },
            {
                "range": "log-0 [0, 9) -> log-0 [0, 9)",
                "source_records": 6,
                "target_records": 9,
                "source_digest": "",
                "target_digest": "",
                "matches": True,
                "by_record": "6 the same on both; 3 compacted away on the source after they were copied: ...",
            },
        ],
    }
    steps = {
        "preflight": _ok(PREFLIGHT),
        "drain": _ok(
            {"runs": 1, "records": 7, "seconds": 12.0, "schema_subjects": ["orders-key", "orders-value"]}
        ),
        "verify": _ok(verify),
        "groups": _ok(groups),
    }

    report = cutover_report("a->b", "manual__1", True, steps)

    assert (report["outcome"], report["failed_steps"]) == ("dry run", [])
    assert cutover_report("a->b", "manual__1", False, steps)["outcome"] == "complete"
    text = markdown(report)
    assert "Run `manual__1` (dry run: no group offsets committed)." in text
    assert "1 run copied 7 records in 12.0 s; lag is zero on every selected partition." in text
    assert "Schemas synced to the target registry for: orders-key, orders-value." in text
    assert (
        "| orders-0 [0, 7) -> orders-0 [0, 7) | 7 | 7 | `abababababababab` | `abababababababab` | yes |"
        in text
    )
    assert "| log-0 [0, 9) -> log-0 [0, 9) | 6 | 9 | by record | by record | yes |" in text
    assert (
        "- log-0 [0, 9) -> log-0 [0, 9): 6 the same on both; 3 compacted away on the source after they "
        "were copied: ..." in text
    )
    assert "Positions would be committed (dry run) on the target:" in text
    assert "| billing | orders-0 | 7 |" in text
    assert "Active on the target, left alone: live." in text
