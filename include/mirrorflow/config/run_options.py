"""What one run of a flow is asked to do: the trigger form's params and the run's data interval.

Invariants: options only narrow or bound what a run copies (fewer topics, fewer records, an earlier
end), or how long it waits for its turn; none of them can make a run copy a record twice or skip one
that a later run would not copy.
A partition's start position applies only the first time the flow sees the partition; afterwards it
resumes from committed progress whatever the params say.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from mirrorflow.errors import ParamError

START_CHOICES = ("earliest", "latest", "timestamp")
# How long a run waits for its turn (earlier runs of its flow, the flow's lock) before it fails: long
# enough for a backfill's runs, started 10 at a time, to wait for the ones before them.
LOCK_WAIT_TIMEOUT = "lock_wait_timeout_seconds"
LOCK_WAIT_TIMEOUT_DEFAULT = 6 * 3600
# Airflow's own limit for a sensor (its default sensor timeout): no run waits longer.
LOCK_WAIT_TIMEOUT_MAX = 7 * 24 * 3600

# A DAG's trigger form: name -> (default, JSON schema, description). Airflow renders each as a field.
ParamTable = Mapping[str, tuple[Any, Mapping[str, Any], str]]

TRIGGER_PARAMS: ParamTable = {
    "topics": (
        [],
        {"type": "array", "items": {"type": "string", "minLength": 1}, "uniqueItems": True},
        "Source topics to mirror in this run, one per line; empty mirrors every topic the flow "
        "selects. Each must be a topic the flow selects.",
    ),
    "max_records_per_partition": (
        None,
        {"type": ["null", "integer"], "minimum": 1},
        "At most this many records per partition in this run; empty uses the flow's "
        "mirrorflow.max.records.per.partition. The rest follows in the next run.",
    ),
    "dry_run": (
        False,
        {"type": "boolean"},
        "Plan only: the plan task's log shows each partition's range, record count and estimated "
        "bytes, and nothing is written to either cluster or the offsets table.",
    ),
    "start": (
        "earliest",
        {"type": "string", "enum": list(START_CHOICES)},
        "Where partitions the flow has never mirrored start: earliest (all retained records, as "
        "MirrorMaker 2), latest (only records produced after this run's plan), or timestamp "
        "(the first record at or after start_timestamp). Partitions already mirrored resume where "
        "they left off.",
    ),
    "start_timestamp": (
        None,
        {"type": ["null", "string"], "format": "date-time"},
        "With start = timestamp: an ISO 8601 time with its zone, e.g. 2026-01-31T00:00:00+00:00.",
    ),
    LOCK_WAIT_TIMEOUT: (
        LOCK_WAIT_TIMEOUT_DEFAULT,
        {"type": "integer", "minimum": 0, "maximum": LOCK_WAIT_TIMEOUT_MAX},
        "How long this run waits, without holding a worker slot, for earlier runs of the flow to "
        "finish and for the flow's lock, before it fails naming the run it waits for; 0 fails at once.",
    ),
}


@dataclass(frozen=True)
class RunOptions:
    """``topics`` empty: every selected topic. ``start_timestamp_ms`` is set iff ``start`` is
    ``timestamp``. ``until_timestamp_ms``: copy only records before the first record at or after
    this time (a scheduled or backfill run's data interval end); None: up to the offsets at plan time.
    ``lock_wait_timeout_seconds``: how long the run waits for its turn before it fails."""

    topics: frozenset[str] = frozenset()
    max_records_per_partition: int | None = None
    dry_run: bool = False
    start: str = "earliest"
    start_timestamp_ms: int | None = None
    until_timestamp_ms: int | None = None
    lock_wait_timeout_seconds: int = LOCK_WAIT_TIMEOUT_DEFAULT


DEFAULT_OPTIONS = RunOptions()


def run_options(params: Mapping[str, Any], until: datetime | None = None) -> RunOptions:
    """The options of a run from its params (missing ones take the form's defaults) and, for a
    scheduled or backfill run, its data interval end."""
    values = {name: params.get(name, default) for name, (default, _, _) in TRIGGER_PARAMS.items()}
    topics = values["topics"]
    if not isinstance(topics, list) or not all(isinstance(t, str) and t for t in topics):
        raise ParamError("topics", f"{topics!r} is not a list of topic names")
    cap = values["max_records_per_partition"]
    if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 1):
        raise ParamError("max_records_per_partition", f"{cap!r} is not a whole number of at least 1")
    dry_run = values["dry_run"]
    if not isinstance(dry_run, bool):
        raise ParamError("dry_run", f"{dry_run!r} is not true or false")
    start = values["start"]
    if start not in START_CHOICES:
        raise ParamError("start", f"{start!r} is not one of {', '.join(START_CHOICES)}")
    stamp = values["start_timestamp"]
    if start == "timestamp":
        start_ms: int | None = _epoch_ms("start_timestamp", stamp)
    elif stamp is not None:
        raise ParamError("start_timestamp", f"is set to {stamp!r} but start is {start!r}, not 'timestamp'")
    else:
        start_ms = None
    wait = values[LOCK_WAIT_TIMEOUT]
    if isinstance(wait, bool) or not isinstance(wait, int) or not 0 <= wait <= LOCK_WAIT_TIMEOUT_MAX:
        raise ParamError(
            LOCK_WAIT_TIMEOUT, f"{wait!r} is not a whole number of seconds from 0 to {LOCK_WAIT_TIMEOUT_MAX}"
        )
    return RunOptions(
        topics=frozenset(topics),
        max_records_per_partition=cap,
        dry_run=dry_run,
        start=start,
        start_timestamp_ms=start_ms,
        until_timestamp_ms=None if until is None else _ms(until),
        lock_wait_timeout_seconds=wait,
    )


def _epoch_ms(name: str, value: object) -> int:
    if not isinstance(value, str):
        raise ParamError(
            name, f"is {value!r}; start = timestamp needs a time such as 2026-01-31T00:00:00+00:00"
        )
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError as exc:
        raise ParamError(name, f"{value!r} is not an ISO 8601 time ({exc})") from exc
    if parsed.tzinfo is None:
        raise ParamError(name, f"{value!r} has no time zone; add one, e.g. {value}+00:00")
    return _ms(parsed)


def _ms(moment: datetime) -> int:
    return round(moment.timestamp() * 1000)
