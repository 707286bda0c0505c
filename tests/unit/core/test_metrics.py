"""Metrics with MM2's names: the statistics and their Prometheus text."""

from __future__ import annotations

import numpy as np
from dashboard_queries import metric_names, queries

from mirrorflow.core.metrics import (
    CheckpointMetrics,
    PartitionMetrics,
    Stats,
    Timestamps,
    checkpoint_metrics_text,
    rate,
    source_metrics_text,
)


def test_elapsed_since_timestamps_summarises_each_record() -> None:
    stamps = Timestamps.of(np.array([1_000, 1_400, 1_100], dtype=np.int64))

    # now - each timestamp: 1000, 600, 900; the last record's is 900.
    assert stamps.elapsed(2_000) == Stats(count=3, min=600, max=1000, total=2500, last=900)
    assert stamps.elapsed(2_000).avg == 2500 / 3


def test_timestamp_sums_do_not_overflow() -> None:
    epoch_ms = 1_800_000_000_000
    stamps = Timestamps.of(np.full(10_000_000, epoch_ms, dtype=np.int64))

    assert stamps.total == 10_000_000 * epoch_ms  # more than int64 holds
    assert stamps.elapsed(epoch_ms + 5) == Stats(10_000_000, 5, 5, 50_000_000, 5)


def test_merge_keeps_extremes_sums_and_the_later_last_value() -> None:
    first, later = Stats(2, 10, 30, 40, 30), Stats(1, 5, 5, 5, 5)

    assert first.merge(later) == Stats(3, 5, 30, 45, 5)
    assert first.merge(Stats()) == first
    assert Stats().merge(later) == later
    assert Stats().avg is None
    assert Stats.from_list(first.as_list()) == first


def test_rate_per_second_and_zero_without_time() -> None:
    assert rate(50, 500) == 100.0
    assert rate(50, 0) == 0.0


def test_source_metrics_use_mm2_names_and_labels_and_skip_unmeasured_times() -> None:
    written = PartitionMetrics(
        "orders", 0, "primary.orders", records_total=60, bytes_total=6000, lag=3,
        replication_latency=Stats(2, 150, 250, 400, 250), record_age=Stats(2, 100, 200, 300, 200),
        record_rate=100.0, byte_rate=2500.5,
    )  # fmt: skip
    idle = PartitionMetrics("orders", 1, "primary.orders", 0, 0, 0, Stats(), Stats(), 0.0, 0.0)

    text = source_metrics_text(
        "primary", "backup", [idle, written], {"heartbeat_age_seconds": 1.5, "x": None}
    )

    p0 = 'source="primary",destination="backup",topic="primary.orders",partition="0"'
    p1 = 'source="primary",destination="backup",topic="primary.orders",partition="1"'
    prefix = "kafka_connect_mirror_source_connector_"
    assert text.split("\n") == [
        f"# TYPE {prefix}record_count gauge",
        f"{prefix}record_count{{{p0}}} 60",
        f"{prefix}record_count{{{p1}}} 0",
        f"# TYPE {prefix}byte_count gauge",
        f"{prefix}byte_count{{{p0}}} 6000",
        f"{prefix}byte_count{{{p1}}} 0",
        f"# TYPE {prefix}record_rate gauge",
        f"{prefix}record_rate{{{p0}}} 100",
        f"{prefix}record_rate{{{p1}}} 0",
        f"# TYPE {prefix}byte_rate gauge",
        f"{prefix}byte_rate{{{p0}}} 2500.5",
        f"{prefix}byte_rate{{{p1}}} 0",
        f"# TYPE {prefix}record_age_ms gauge",
        f"{prefix}record_age_ms{{{p0}}} 200",
        f"# TYPE {prefix}record_age_ms_min gauge",
        f"{prefix}record_age_ms_min{{{p0}}} 100",
        f"# TYPE {prefix}record_age_ms_max gauge",
        f"{prefix}record_age_ms_max{{{p0}}} 200",
        f"# TYPE {prefix}record_age_ms_avg gauge",
        f"{prefix}record_age_ms_avg{{{p0}}} 150",
        f"# TYPE {prefix}replication_latency_ms gauge",
        f"{prefix}replication_latency_ms{{{p0}}} 250",
        f"# TYPE {prefix}replication_latency_ms_min gauge",
        f"{prefix}replication_latency_ms_min{{{p0}}} 150",
        f"# TYPE {prefix}replication_latency_ms_max gauge",
        f"{prefix}replication_latency_ms_max{{{p0}}} 250",
        f"# TYPE {prefix}replication_latency_ms_avg gauge",
        f"{prefix}replication_latency_ms_avg{{{p0}}} 200",
        "# TYPE mirrorflow_lag_records gauge",
        f"mirrorflow_lag_records{{{p0}}} 3",
        f"mirrorflow_lag_records{{{p1}}} 0",
        "# TYPE mirrorflow_heartbeat_age_seconds gauge",
        'mirrorflow_heartbeat_age_seconds{source="primary",destination="backup"} 1.5',
        "",
    ]


def test_checkpoint_latency_per_group_and_partition_with_escaped_labels() -> None:
    text = checkpoint_metrics_text(
        "primary", "backup", [CheckpointMetrics('team "a"\\b', "primary.orders", 2, 35)]
    )

    assert text == (
        "# TYPE kafka_connect_mirror_checkpoint_connector_checkpoint_latency_ms gauge\n"
        'kafka_connect_mirror_checkpoint_connector_checkpoint_latency_ms{source="primary",target="backup",'
        'group="team \\"a\\"\\\\b",topic="primary.orders",partition="2"} 35\n'
    )
    assert checkpoint_metrics_text("primary", "backup", []) == ""


def test_the_dashboards_queries_read_only_the_metrics_mirrorflow_exports() -> None:
    """Every query names at least one metric, each of the families the exporter writes (the names
    themselves are checked against real metrics files in tests/integration/test_status_page.py)."""
    assert metric_names('time() - max by (source) (mirrorflow_x{source=~"$source"})') == {"mirrorflow_x"}
    assert metric_names('sum by (topic) (rate(kafka_connect_mirror_a{b="c"}[5m]))') == {
        "kafka_connect_mirror_a"
    }
    assert metric_names("label_values(mirrorflow_lag_records, source)") == {"mirrorflow_lag_records"}
    found = [metric_names(q) for q in queries()]
    assert found and all(found)
    assert all(n.startswith(("mirrorflow_", "kafka_connect_mirror_")) for names in found for n in names)
    assert any("mirrorflow_mirrored_as_of_timestamp_seconds" in names for names in found)
