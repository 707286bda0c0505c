"""Failover's pure parts: the newest checkpoint per key, what is set, kept or listed, the trigger
params, and the report (dict, Markdown, files)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from failover_report import row

from mirrorflow.app.failover import (
    FAILOVER_PARAMS,
    FailoverOptions,
    failover_options,
    write_report,
)
from mirrorflow.app.run_folder import RunFolder
from mirrorflow.config.model import FlowConfig, parse_config
from mirrorflow.core.failover_rules import (
    ActiveGroup,
    Decisions,
    FailoverReport,
    GroupOffset,
    Timings,
    Untranslatable,
    decide,
    newest_checkpoints,
)
from mirrorflow.errors import ParamError
from mirrorflow.mm2.records import Checkpoint

FLOW_TEXT = """\
clusters = primary, backup
primary.bootstrap.servers = 127.0.0.1:1
backup.bootstrap.servers = 127.0.0.1:2
primary->backup.enabled = true
mirrorflow.state.dir = /var/lib/mirrorflow
primary->backup.groups.exclude = audit-.*
"""


def flow() -> FlowConfig:
    (only,) = parse_config(FLOW_TEXT, env={}).flows
    return only


def record(offset: int, c: Checkpoint) -> tuple[int, bytes | None, bytes | None]:
    return offset, c.key(), c.value()


# --- newest checkpoints --------------------------------------------------------------------------


def test_the_last_checkpoint_in_offset_order_wins_per_group_topic_and_partition() -> None:
    records = [
        record(0, Checkpoint("billing", "primary.orders", 0, 10, 10)),
        record(1, Checkpoint("billing", "primary.orders", 1, 4, 4)),
        record(2, Checkpoint("billing", "primary.orders", 0, 12, 11, "m")),
        record(3, Checkpoint("audit", "primary.orders", 0, 3, 3)),
        # A rewound source group: the newest is older in offsets, and still the newest.
        record(5, Checkpoint("billing", "primary.orders", 1, 2, 2)),
    ]

    newest, undecodable = newest_checkpoints(records)

    assert newest == {
        ("billing", "primary.orders", 0): Checkpoint("billing", "primary.orders", 0, 12, 11, "m"),
        ("billing", "primary.orders", 1): Checkpoint("billing", "primary.orders", 1, 2, 2),
        ("audit", "primary.orders", 0): Checkpoint("audit", "primary.orders", 0, 3, 3),
    }
    assert undecodable == ()


def test_a_tombstone_deletes_its_key_and_records_that_are_not_checkpoints_are_skipped() -> None:
    gone = Checkpoint("billing", "primary.orders", 0, 10, 10)
    records = [
        record(0, gone),
        (1, gone.key(), None),
        (2, b"not a key", gone.value()),
        (3, gone.key(), b"\x00\x07 a newer version"),
        (4, None, None),
        record(6, Checkpoint("billing", "primary.orders", 1, 5, 5)),
    ]

    newest, undecodable = newest_checkpoints(records)

    assert newest == {("billing", "primary.orders", 1): Checkpoint("billing", "primary.orders", 1, 5, 5)}
    assert undecodable == (2, 3, 4)


# --- decisions -----------------------------------------------------------------------------------

REMOTE = "primary.orders"
PARTITIONS = {REMOTE: 2}
ENDS = {(REMOTE, 0): 100, (REMOTE, 1): 50}


def test_idle_groups_move_forward_only_and_active_groups_are_left_alone() -> None:
    checkpoints = [
        Checkpoint("new", REMOTE, 0, 40, 30),  # absent on the target
        Checkpoint("behind", REMOTE, 0, 40, 30),
        Checkpoint("behind", REMOTE, 1, 9, 9),  # already there
        Checkpoint("ahead", REMOTE, 0, 40, 30),
        Checkpoint("ahead", REMOTE, 1, 5, 5),  # no offset on the target yet
        Checkpoint("busy", REMOTE, 0, 40, 30),
        Checkpoint("rebalancing", REMOTE, 0, 40, 30),
        Checkpoint("unknown", REMOTE, 0, 40, 30),  # no state known: not touched
        Checkpoint("at-end", REMOTE, 1, 50, 50),
    ]
    states = {
        "new": "Dead",
        "behind": "Empty",
        "ahead": "Empty",
        "busy": "Stable",
        "rebalancing": "PreparingRebalance",
        "at-end": "Empty",
    }
    committed = {
        "behind": {(REMOTE, 0): (12, ""), (REMOTE, 1): (9, "")},
        "ahead": {(REMOTE, 0): (31, "")},
        "busy": {(REMOTE, 0): (1, "")},
    }

    d = decide(checkpoints, states, committed, PARTITIONS, ENDS)

    assert d == Decisions(
        set_offsets=(
            GroupOffset("ahead", REMOTE, 1, 5, 5, None),
            GroupOffset("at-end", REMOTE, 1, 50, 50, None),
            GroupOffset("behind", REMOTE, 0, 40, 30, 12),
            GroupOffset("new", REMOTE, 0, 40, 30, None),
        ),
        unchanged=(GroupOffset("behind", REMOTE, 1, 9, 9, 9),),
        ahead=(GroupOffset("ahead", REMOTE, 0, 40, 30, 31),),
        active=(
            ActiveGroup("busy", "Stable"),
            ActiveGroup("rebalancing", "PreparingRebalance"),
            ActiveGroup("unknown", "Unknown"),
        ),
    )
    assert d.offsets_to_commit() == {
        "ahead": {(REMOTE, 1): 5},
        "at-end": {(REMOTE, 1): 50},
        "behind": {(REMOTE, 0): 30},
        "new": {(REMOTE, 0): 30},
    }


def test_checkpoints_of_remote_partitions_that_are_gone_or_shorter_are_untranslatable() -> None:
    checkpoints = [
        Checkpoint("g", "primary.deleted", 0, 7, 7),
        Checkpoint("g", REMOTE, 2, 7, 7),
        Checkpoint("g", REMOTE, 1, 80, 51),
        Checkpoint("g", REMOTE, 0, 80, 70),
    ]

    d = decide(checkpoints, {"g": "Empty"}, {}, PARTITIONS, ENDS)

    assert d.set_offsets == (GroupOffset("g", REMOTE, 0, 80, 70, None),)
    assert d.untranslatable == (
        Untranslatable("g", "primary.deleted", 0, 7, 7, "the remote topic does not exist on the target"),
        Untranslatable(
            "g",
            REMOTE,
            1,
            80,
            51,
            "past the remote partition's end (50): it was truncated or recreated since",
        ),
        Untranslatable(
            "g", REMOTE, 2, 7, 7, "the remote topic has 2 partitions on the target, no partition 2"
        ),
    )


# --- trigger params ------------------------------------------------------------------------------


def test_params_default_to_every_group_for_real() -> None:
    defaults = {name: default for name, (default, _, _) in FAILOVER_PARAMS.items()}

    assert failover_options({}, flow()) == FailoverOptions()
    assert failover_options(defaults, flow()) == FailoverOptions(frozenset(), False)
    assert failover_options({"groups": ["billing", "shipping"], "dry_run": True}, flow()) == FailoverOptions(
        frozenset({"billing", "shipping"}), True
    )


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"groups": "billing"}, "trigger param groups: 'billing' is not a list of consumer group names"),
        (
            {"groups": ["billing", ""]},
            "trigger param groups: ['billing', ''] is not a list of consumer group",
        ),
        ({"dry_run": "yes"}, "trigger param dry_run: 'yes' is not true or false"),
        (
            {"groups": ["billing", "audit-2", "audit-1"]},
            "trigger param groups: audit-1, audit-2 are not among the consumer groups flow "
            "primary->backup checkpoints (its groups / groups.exclude). Trigger the run again with a "
            "valid value.",
        ),
    ],
)
def test_invalid_params_are_refused(params: dict[str, Any], message: str) -> None:
    with pytest.raises(ParamError) as caught:
        failover_options(params, flow())

    assert str(caught.value).startswith(message)


def test_the_failover_dag_is_named_after_the_flow_dag() -> None:
    assert flow().failover_dag_id == "mirror_primary_to_backup_failover"


# --- report --------------------------------------------------------------------------------------


GONE = "the remote topic does not exist on the target"


def report(dry_run: bool) -> FailoverReport:
    return FailoverReport(
        flow="primary->backup",
        source="primary",
        target="backup",
        checkpoints_topic="primary.checkpoints.internal",
        dry_run=dry_run,
        records_read=9,
        checkpoints=6,
        selected=5,
        decisions=Decisions(
            set_offsets=(
                GroupOffset("billing", REMOTE, 0, 40, 30, None),
                GroupOffset("billing", REMOTE, 1, 9, 8, 2),
            ),
            unchanged=(GroupOffset("ship|ping", REMOTE, 0, 5, 5, 5),),
            ahead=(GroupOffset("ship|ping", REMOTE, 1, 5, 5, 7),),
            untranslatable=(Untranslatable("billing", "primary.gone", 0, 3, 3, GONE),),
            active=(ActiveGroup("busy", "Stable"),),
        ),
        without_checkpoints=("never",),
        undecodable=(4,),
        timings=Timings("2026-01-31T00:00:00+00:00", 0.25, 0.125, 0.5, 0.875),
    )


def test_the_report_as_a_dict_is_json_ready_and_complete() -> None:
    d = report(dry_run=False).as_dict()

    assert json.loads(json.dumps(d)) == d
    assert d == {
        "flow": "primary->backup",
        "source": "primary",
        "target": "backup",
        "checkpoints_topic": "primary.checkpoints.internal",
        "dry_run": False,
        "records_read": 9,
        "checkpoints": 6,
        "selected": 5,
        "groups_set": {
            "billing": [
                {"topic": REMOTE, "partition": 0, "offset": 30},
                {"topic": REMOTE, "partition": 1, "offset": 8},
            ]
        },
        "set": [
            row("billing", REMOTE, 0, 40, 30, committed=None),
            row("billing", REMOTE, 1, 9, 8, committed=2),
        ],
        "unchanged": [row("ship|ping", REMOTE, 0, 5, 5, committed=5)],
        "ahead": [row("ship|ping", REMOTE, 1, 5, 5, committed=7)],
        "active": {"busy": "Stable"},
        "untranslatable": [row("billing", "primary.gone", 0, 3, 3, reason=GONE)],
        "without_checkpoints": ["never"],
        "undecodable_offsets": [4],
        "timings": {
            "started_at": "2026-01-31T00:00:00+00:00",
            "read_s": 0.25,
            "inspect_s": 0.125,
            "commit_s": 0.5,
            "total_s": 0.875,
        },
    }


MARKDOWN = """\
# Failover of flow primary->backup

Consumer groups on `backup` set from the newest checkpoints in `primary.checkpoints.internal`; \
the source `primary` was not contacted.

- started 2026-01-31T00:00:00+00:00, took 0.88 s (reading checkpoints 0.25 s, target topics and \
groups 0.12 s, committing 0.50 s)
- checkpoint records read: 9; newest per group and partition: 6; of the groups failed over: 5

## Offsets set (2)

| group | topic | partition | offset | was | source offset |
|---|---|---|---|---|---|
| billing | primary.orders | 0 | 30 | none | 40 |
| billing | primary.orders | 1 | 8 | 2 | 9 |

## Already at their checkpoint (1)

| group | topic | partition | offset | source offset |
|---|---|---|---|---|
| ship\\|ping | primary.orders | 0 | 5 | 5 |

## Kept: the target group is ahead of its checkpoint (never moved back) (1)

| group | topic | partition | committed | checkpoint |
|---|---|---|---|---|
| ship\\|ping | primary.orders | 1 | 7 | 5 |

## Left alone: active on `backup` (1)

| group | state |
|---|---|
| busy | Stable |

## Untranslatable checkpoints (1)

| group | topic | partition | checkpoint | source offset | reason |
|---|---|---|---|---|---|
| billing | primary.gone | 0 | 3 | 3 | the remote topic does not exist on the target |

## Requested groups without a checkpoint (1)

| group |
|---|
| never |

Records in `primary.checkpoints.internal` that are not checkpoints, skipped: 4
"""


def test_the_markdown_report_lists_every_decision() -> None:
    assert report(dry_run=False).markdown() == MARKDOWN


def test_a_dry_run_report_says_nothing_was_committed() -> None:
    lines = report(dry_run=True).markdown().splitlines()

    assert lines[0] == "# Failover of flow primary->backup (dry run: nothing was committed)"
    assert lines[2].startswith("Consumer groups on `backup` would be set from the newest checkpoints")
    assert "## Offsets that would be set (2)" in lines


def test_report_files_are_the_markdown_and_the_dict(tmp_path: Path) -> None:
    md, js = write_report(report(dry_run=False), RunFolder(tmp_path / "runs" / "r1"))

    assert (md, js) == (tmp_path / "runs" / "r1" / "failover.md", tmp_path / "runs" / "r1" / "failover.json")
    assert md.read_text() == MARKDOWN
    assert json.loads(js.read_text()) == report(dry_run=False).as_dict()
    assert sorted(p.name for p in md.parent.iterdir()) == ["failover.json", "failover.md"]
