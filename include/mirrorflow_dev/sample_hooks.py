"""Example python hooks for a flow's transforms (``transforms.<name>.type = python``): the demo's and
the tests'. A hook takes one source partition's records in offset order and returns those to write."""

from __future__ import annotations

from mirrorflow.core.transforms import Record


def drop_test_keys(records: list[Record]) -> list[Record]:
    """Drops test traffic: records whose key starts with ``test-``."""
    return [r for r in records if not (r.key or b"").startswith(b"test-")]


def reject_poison(records: list[Record]) -> list[Record]:
    """Refuses a record whose value is ``poison``, as a hook that cannot parse a record does."""
    for r in records:
        if r.value == b"poison":
            raise ValueError(f"cannot parse the value of offset {r.offset}")
    return records
