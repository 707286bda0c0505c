"""Replication metrics with MirrorMaker 2's names, and their Prometheus text export.

MM2 publishes per remote partition (JMX ``kafka.connect.mirror:type=MirrorSourceConnector``):
``record-count``, ``byte-count``, ``record-rate``, ``byte-rate``, ``record-age-ms`` and
``replication-latency-ms`` (each also ``-min``/``-max``/``-avg``); per group and partition
(``type=MirrorCheckpointConnector``): ``checkpoint-latency-ms``. Scraped through Prometheus' JMX
exporter with the usual rules they become ``kafka_connect_mirror_source_connector_record_count``
etc. labelled ``destination``, ``topic`` (the remote topic) and ``partition``: the export below uses
exactly those names and labels (plus ``source``), so dashboards built for MM2 keep working.

What the values mean here, per run:
- record age: time the writer received a record minus the record's timestamp (MM2: at poll);
- replication latency: time the target acknowledged a record minus its timestamp (MM2: the same);
- record and byte rates: records and bytes written divided by the partition's write time, from its
  first record received to its last one acknowledged;
- record and byte counts: everything committed for the partition so far (the batch log), so they
  only grow, across runs and restarts;
- checkpoint latency: time the target acknowledged a checkpoint minus the time the group's committed
  offsets were read from the source.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

SOURCE_PREFIX = "kafka_connect_mirror_source_connector_"
CHECKPOINT_PREFIX = "kafka_connect_mirror_checkpoint_connector_"


@dataclass(frozen=True)
class Stats:
    """Millisecond measurements summarised: how many, smallest, largest, their sum, and the value of
    the last record measured (MM2's plain ``*-ms`` metric)."""

    count: int = 0
    min: int = 0
    max: int = 0
    total: int = 0
    last: int = 0

    @property
    def avg(self) -> float | None:
        return self.total / self.count if self.count else None

    def merge(self, later: Stats) -> Stats:
        """These measurements followed by ``later``'s."""
        if not later.count:
            return self
        if not self.count:
            return later
        return Stats(
            self.count + later.count,
            min(self.min, later.min),
            max(self.max, later.max),
            self.total + later.total,
            later.last,
        )

    def as_list(self) -> list[int]:
        return [self.count, self.min, self.max, self.total, self.last]

    @classmethod
    def from_list(cls, values: Sequence[int]) -> Stats:
        return cls(*(int(v) for v in values))


@dataclass(frozen=True)
class Timestamps:
    """The record timestamps (epoch ms) of a run of records, summarised once so that the time
    elapsed since them can be measured later without keeping the records."""

    count: int
    oldest: int
    newest: int
    total: int
    last: int

    @classmethod
    def of(cls, millis: np.ndarray) -> Timestamps:
        oldest = int(millis.min())
        # Summed as offsets from the oldest: millions of epoch-ms values would overflow int64.
        total = len(millis) * oldest + int((millis - oldest).sum())
        return cls(len(millis), oldest, int(millis.max()), total, int(millis[-1]))

    def elapsed(self, now_ms: int) -> Stats:
        """``now_ms`` minus each timestamp."""
        return Stats(
            self.count, now_ms - self.newest, now_ms - self.oldest, self.count * now_ms - self.total,
            now_ms - self.last,
        )  # fmt: skip


@dataclass(frozen=True)
class PartitionMetrics:
    """One remote partition's metrics after a run: ``records_total``/``bytes_total`` over all runs,
    the rest from the last run that wrote to it."""

    topic: str
    partition: int
    remote_topic: str
    records_total: int
    bytes_total: int
    lag: int
    replication_latency: Stats
    record_age: Stats
    record_rate: float
    byte_rate: float


@dataclass(frozen=True)
class CheckpointMetrics:
    group: str
    remote_topic: str
    partition: int
    latency_ms: int


def rate(amount: int, millis: int) -> float:
    return amount * 1000.0 / millis if millis > 0 else 0.0


def source_metrics_text(
    source: str, target: str, partitions: Iterable[PartitionMetrics], extra: Mapping[str, float | None]
) -> str:
    """The Prometheus text of a flow's partitions; ``extra`` adds flow-level ``mirrorflow_*`` gauges
    (``None`` values are left out)."""
    rows = sorted(partitions, key=lambda m: (m.remote_topic, m.partition))
    series: dict[str, list[tuple[dict[str, str], float]]] = {}
    for m in rows:
        labels = {
            "source": source,
            "destination": target,
            "topic": m.remote_topic,
            "partition": str(m.partition),
        }
        values: dict[str, float | None] = {
            "record_count": m.records_total,
            "byte_count": m.bytes_total,
            "record_rate": m.record_rate,
            "byte_rate": m.byte_rate,
            **_stats_values("record_age_ms", m.record_age),
            **_stats_values("replication_latency_ms", m.replication_latency),
        }
        for name, value in values.items():
            if value is not None:
                series.setdefault(SOURCE_PREFIX + name, []).append((labels, value))
        series.setdefault("mirrorflow_lag_records", []).append((labels, m.lag))
    flow_labels = {"source": source, "destination": target}
    for name, value in extra.items():
        if value is not None:
            series.setdefault(f"mirrorflow_{name}", []).append((flow_labels, value))
    return _exposition(series)


def checkpoint_metrics_text(source: str, target: str, checkpoints: Iterable[CheckpointMetrics]) -> str:
    series: dict[str, list[tuple[dict[str, str], float]]] = {}
    for c in sorted(checkpoints, key=lambda c: (c.group, c.remote_topic, c.partition)):
        labels = {
            "source": source, "target": target, "group": c.group, "topic": c.remote_topic,
            "partition": str(c.partition),
        }  # fmt: skip
        series.setdefault(CHECKPOINT_PREFIX + "checkpoint_latency_ms", []).append((labels, c.latency_ms))
    return _exposition(series)


def _stats_values(name: str, stats: Stats) -> dict[str, float | None]:
    if not stats.count:
        return {}
    return {
        name: stats.last,
        f"{name}_min": stats.min,
        f"{name}_max": stats.max,
        f"{name}_avg": stats.avg,
    }


def _exposition(series: Mapping[str, list[tuple[dict[str, str], float]]]) -> str:
    lines: list[str] = []
    for name, samples in series.items():
        lines.append(f"# TYPE {name} gauge")
        for labels, value in samples:
            rendered = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
            lines.append(f"{name}{{{rendered}}} {_number(value)}")
    return "\n".join(lines) + "\n" if lines else ""


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    if isinstance(value, int) or (math.isfinite(value) and value == int(value)):
        return str(int(value))
    return repr(float(value))
