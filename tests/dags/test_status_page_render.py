"""The status page's HTML for figures a real run rarely gives: thousands of partitions, counts in the
millions, a day of recovery point history. Rendered from plain ``FlowStatus`` values; the page on real
runs is tests/integration/test_status_page.py."""

from __future__ import annotations

import dataclasses
import re
from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser

import pytest

from mirrorflow.app.status_values import FlowStatus, Freshness, PartitionStatus, RunStatus
from mirrorflow.core.recovery_point import RecoveryPoint, RecoveryStep
from mirrorflow.store.read_model import PartitionErrorRecord
from mirrorflow_airflow.status_page import render_page

pytestmark = pytest.mark.airflow  # the plugin module imports Airflow

NOW = datetime.now(UTC)


class _Tables(HTMLParser):
    """The body rows of each ``data-table`` and every element with its attributes."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: dict[str, list[list[str]]] = {}
        self.elements: list[tuple[str, dict[str, str]]] = []
        self._table: str | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = {k: v or "" for k, v in attrs}
        self.elements.append((tag, found))
        if tag == "table":
            self._table = found["data-table"]
            self.rows[self._table] = []
        elif tag == "tr" and self._table is not None:
            self.rows[self._table].append([])
        elif tag == "td":
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "td" and self._cell is not None and self._table is not None:
            self.rows[self._table][-1].append("".join(self._cell))
            self._cell = None
        elif tag == "table" and self._table is not None:
            self.rows[self._table] = [row for row in self.rows[self._table] if row]  # the header has none
            self._table = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def _partition(n: int, lag: int) -> PartitionStatus:
    return PartitionStatus(
        "orders", n, "primary.orders", 1000, 1000, 1000, 10_000, lag, None, None, 0
    )  # fmt: skip


def _status(partitions: int, records: int) -> FlowStatus:
    # Partitions 7 and 1,500 lag; the rest are caught up.
    lags = {7: 50, 1500: 900}
    run = RunStatus(
        "big", "success", NOW - timedelta(minutes=5), NOW, 2000, records, records * 100, 0, 1000, 0, 0
    )
    return FlowStatus(
        name="primary->backup",
        dag_id="mirror_primary_to_backup",
        source="primary",
        target="backup",
        locked_by=None,
        partitions=tuple(_partition(n, lags.get(n, 0)) for n in range(partitions)),
        runs=(run,),
        freshness=Freshness("measured", age_seconds=1.0),
        checkpoints_enabled=False,
        checkpoints=(),
        gaps=(),
        recovery=RecoveryPoint("behind", 2.5, NOW - timedelta(seconds=2.5)),
        recovery_history=tuple(
            RecoveryStep((NOW - timedelta(minutes=m)).replace(second=0, microsecond=0), 0.5 + m % 7, NOW)
            for m in range(1440, 0, -1)
        ),
    )


def _parse(page: str) -> _Tables:
    tables = _Tables()
    tables.feed(page)
    return tables


def test_two_thousand_partitions_show_the_lagging_first_and_a_hundred_unless_all_are_asked_for() -> None:
    status = _status(2000, 10)

    page = render_page([status], None)
    rows = _parse(page).rows["partitions"]
    assert len(rows) == 100
    assert [(r[1], r[7]) for r in rows[:3]] == [("1500", "900"), ("7", "50"), ("0", "0")]
    assert re.search(r'data-field="partitions-shown">100 of 2,000 partitions, most lagging first', page)

    everything = render_page([status], None, partition_rows=0)
    assert len(_parse(everything).rows["partitions"]) == 2000
    assert 'data-field="partitions-shown"' not in everything


def test_scale_labels_fit_their_margins_and_the_recovery_point_is_shown_with_its_day_of_history() -> None:
    page = render_page([_status(3, 1_200_491)], None)
    elements = _parse(page).elements

    # An end-anchored label at x needs about 7 px per character to its left: "1,200,491" fits.
    label = re.search(r'<text class="scale" x="(\d+)" y="\d+" text-anchor="end">1,200,491</text>', page)
    assert label is not None and int(label.group(1)) >= 7 * len("1,200,491")
    (line,) = [attrs for tag, attrs in elements if tag == "polyline" and attrs.get("class") == "recovery"]
    assert (line["data-minutes"], line["data-worst"]) == ("1440", "6.5")
    xs = [float(point.split(",")[0]) for point in line["points"].split()]
    assert xs == sorted(xs) and len(xs) == 1440
    assert re.search(r'data-field="recovery">at most 2\.5 s<', page)
    assert re.search(
        r'data-field="mirrored-as-of">Everything the source held at \S+ \S+ UTC is on the target\.<', page
    )


def test_a_failed_partition_is_counted_and_named_with_its_error() -> None:
    failed = PartitionErrorRecord("orders", 3, "run-9", "TransformError", "transform parse failed", NOW)
    page = render_page([dataclasses.replace(_status(4, 10), failed_partitions=(failed,))], None)

    assert re.search(r'data-field="failed-partitions">1<', page)
    assert (
        "partition orders-3 failed in run run-9 and waits for the next run: TransformError: transform parse "
        "failed" in page
    )
