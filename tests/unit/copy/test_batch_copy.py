"""The copy of a group of planned partitions (``copy.batch_copy``): when a record on the target is a
copy of a planned one (``_same``, and ``_held`` as ``core.compaction`` matches it), what the copy needs
of its flow (``CopySettings.of``), the result in plan order (``copy_result``), and the read-back of
what an earlier attempt committed past the planned start (``BatchCopy._check_written``) over both
clusters' records as plain lists, with fakes for nothing but plain values. The same on real brokers:
``tests/spark/test_copy_plan.py`` (an earlier attempt's records skipped, someone else's refused),
``tests/integration/test_compacted_sources.py`` (more records than planned, compacted sides) and
``tests/integration/test_runs.py`` and ``test_dr_window.py`` (``CopySettings.of``, ``copy_result``)."""

from __future__ import annotations

import pickle
from collections.abc import Iterator, Sequence
from contextlib import nullcontext
from typing import Any

import pytest
from config_texts import ONE_FLOW

from mirrorflow.config.model import parse_config
from mirrorflow.config.schemas import RegistryEndpoint
from mirrorflow.config.transforms import TransformConfig
from mirrorflow.copy import batch_copy
from mirrorflow.copy.batch_copy import BatchCopy, CopySettings, _held, _same, copy_result
from mirrorflow.copy.partition_copy import PartitionCopy
from mirrorflow.core.plan import Grant, PartitionPlan, PartitionResult, Plan, Writer
from mirrorflow.core.schema_ids import NO_SCHEMA_IDS
from mirrorflow.core.topic_partitions import TP
from mirrorflow.core.transforms import Encodable, Record
from mirrorflow.errors import TargetStateError
from mirrorflow.kafka.connection import READ_COMMITTED
from mirrorflow.kafka.faults import FaultPolicy
from mirrorflow.kafka.fetched_batches import SourceRecord

GRANT = Grant("mirrorflow.primary->backup", Writer(producer_id=7, producer_epoch=3))
HEADERS = (("trace", b"1"), ("null", None))
ORIGINAL = Record("orders", 0, 100, 1_000, b"k", b"v", HEADERS)


def _copy_of(record: Encodable, offset: int, **changes: Any) -> SourceRecord:
    """``record`` as the target holds it at ``offset``, with ``changes``."""
    copy = SourceRecord(offset, record.timestamp, record.key, record.value, record.headers)
    return copy._replace(**changes)


@pytest.mark.parametrize(
    ("target", "same"),
    [
        (_copy_of(ORIGINAL, 40), True),
        (_copy_of(ORIGINAL, 40, timestamp=1_001), False),
        # A LogAppendTime remote topic: its broker's time is not the copy's to keep.
        (_copy_of(ORIGINAL, 40, timestamp=9_999, appended=True), True),
        (_copy_of(ORIGINAL, 40, key=None), False),
        (_copy_of(ORIGINAL, 40, key=b""), False),
        (_copy_of(ORIGINAL, 40, value=None), False),
        (_copy_of(ORIGINAL, 40, headers=HEADERS[::-1]), False),
        (_copy_of(ORIGINAL, 40, headers=(("trace", b"1"), ("null", b""))), False),
        (_copy_of(ORIGINAL, 40, timestamp=9_999, value=b"w", appended=True), False),
    ],
    ids=[
        "copy",
        "other-timestamp",
        "broker-stamped",
        "null-key",
        "empty-key",
        "tombstone",
        "headers-reordered",
        "empty-header-for-null",
        "broker-stamped-other-value",
    ],
)
def test_a_target_record_is_a_copy_when_key_value_headers_and_timestamp_are_the_sources(
    target: SourceRecord, same: bool
) -> None:
    assert _same(target, ORIGINAL) is same


def test_a_held_record_is_matched_with_its_copy_as_same_has_it() -> None:
    stamped_copy = _copy_of(ORIGINAL, 40, timestamp=9_999, appended=True)
    assert _same(stamped_copy, ORIGINAL)

    # Where the target's broker stamps its own time, only key, value and headers are compared.
    assert _held(stamped_copy, True).same == _held(ORIGINAL, True).same
    assert _held(stamped_copy, False).same != _held(ORIGINAL, False).same
    assert _held(_copy_of(ORIGINAL, 40, value=b"w"), True).same != _held(ORIGINAL, True).same
    # Each keeps its own offset, key and time, whatever the digest leaves out.
    held = _held(stamped_copy, True)
    assert (held.offset, held.key, held.tombstone, held.at_ms) == (40, b"k", False, 9_999)
    assert _held(ORIGINAL._replace(value=None), True).tombstone


def test_copy_settings_take_the_sources_consumer_and_the_targets_producer_as_plain_values() -> None:
    flow = parse_config(
        ONE_FLOW + "primary.consumer.client.id = reader\n"
        "primary.admin.client.id = admin\n"
        "backup.consumer.client.id = backup-reader\n"
        "backup.producer.client.id = writer\n"
        "mirrorflow.on.partition.error = isolate\n"
        "mirrorflow.on.source.data.loss = skip\n"
        "transforms = tag\n"
        "transforms.tag.type = InsertHeader\n"
        "transforms.tag.header = mirrored-by\n"
        "transforms.tag.value.literal = mirrorflow\n"
        "mirrorflow.schema.registry.source.url = http://sr.primary:8081\n"
        "mirrorflow.schema.registry.target.url = http://sr.backup:8081\n",
        env={},
    ).flow("primary->backup")

    settings = CopySettings.of(flow)

    assert settings == CopySettings(
        {"bootstrap.servers": "p1:9092", "client.id": "reader"},
        {"bootstrap.servers": "b1:9092", "client.id": "writer"},
        (
            TransformConfig(
                "tag", "InsertHeader", (("header", "mirrored-by"), ("value.literal", "mirrorflow"))
            ),
        ),
        FaultPolicy(isolate=True, skip_lost=True),
        RegistryEndpoint("http://sr.primary:8081", (("url", "http://sr.primary:8081"),)),
    )
    # They travel to Spark's executors.
    assert (type(settings.source), type(settings.target)) == (dict, dict)
    assert pickle.loads(pickle.dumps(settings)) == settings
    plain = CopySettings.of(parse_config(ONE_FLOW, env={}).flow("primary->backup"))
    assert (plain.transforms, plain.policy, plain.source_registry) == ((), FaultPolicy(), None)


def test_the_copy_result_lists_the_partitions_in_plan_order_whatever_order_the_tasks_gave() -> None:
    planned = [
        PartitionPlan("orders", 1, 0, 10, "primary.orders", 0),
        PartitionPlan("payments", 0, 5, 9, "primary.payments", 3),
        PartitionPlan("orders", 0, 0, 10, "primary.orders", 0),
    ]
    plan = Plan("primary->backup", "run-7", "2024-05-01T00:00:00+00:00", tuple(planned))
    results = {
        p.topic + str(p.partition): PartitionResult(p.topic, p.partition, 4, 0, 40, 0) for p in planned
    }

    result = copy_result(plan, [results["orders0"], results["payments0"], results["orders1"]])

    assert (result.flow, result.run_id) == ("primary->backup", "run-7")
    assert result.partitions == (results["orders1"], results["payments0"], results["orders0"])


# Source offsets 100-109 planned to land from target offset 40; 102 is a marker of the source's.
PLAN = PartitionPlan("orders", 0, 100, 110, "primary.orders", 40)
SOURCE = [
    Record("orders", 0, i, 1_000 + i, b"k%d" % i, b"v%d" % i, (("n", b"%d" % i),))
    for i in (100, 101, 103, 104, 105, 106)
]


class TwoClusters:
    """Each cluster's records of one partition, a batch at a time as ``records_of`` reads them: the
    connections are the sides' names. It keeps each read asked for, and how many batches each side
    handed out."""

    def __init__(
        self, source: Sequence[Sequence[Encodable]], target: Sequence[Sequence[SourceRecord]]
    ) -> None:
        self.batches: dict[str, Sequence[Sequence[Encodable]]] = {"source": source, "target": target}
        self.reads: list[tuple[str, TP, int, int, int]] = []
        self.handed = {"source": 0, "target": 0}

    def records_of(
        self, side: str, tp: TP, start: int, end: int, isolation: int
    ) -> Iterator[list[Encodable]]:
        self.reads.append((side, tp, start, end, isolation))
        for batch in self.batches[side]:
            held = [r for r in batch if start <= r.offset < end]
            if held:
                self.handed[side] += 1
                yield held


def _read_back(
    monkeypatch: pytest.MonkeyPatch, clusters: TwoClusters, plan: PartitionPlan, end: int
) -> PartitionCopy:
    """The read-back of ``plan``'s remote partition from its planned start to ``end``, on topics that
    do not compact."""
    monkeypatch.setattr(batch_copy, "kept_open", lambda props, side, topics: nullcontext(side))
    monkeypatch.setattr(batch_copy, "records_of", clusters.records_of)
    monkeypatch.setattr(batch_copy, "topic_config", lambda connection, tp, name: "delete")
    part = PartitionCopy(plan, 0, plan.source_start, first_new=end)
    with BatchCopy([plan], CopySettings({}, {}), GRANT, NO_SCHEMA_IDS) as copy:
        copy._check_written(part, end)
    return part


def test_an_earlier_attempts_committed_records_are_counted_where_they_are_and_the_copy_goes_on_after_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # An earlier attempt committed the first four planned records at 40-43, its marker at 44; the two
    # clusters batch them differently.
    written = [_copy_of(r, 40 + i) for i, r in enumerate(SOURCE[:4])]
    clusters = TwoClusters([SOURCE[:2], SOURCE[2:5], SOURCE[5:]], [written[:3], written[3:]])

    part = _read_back(monkeypatch, clusters, PLAN, end=45)

    assert (part.already_written, part.records, part.position) == (4, 4, 105)
    assert part.runs == [(100, 40, 2), (103, 42, 2)]
    # The next record lands after the marker.
    assert part.landing == 45
    assert clusters.reads == [
        ("target", ("primary.orders", 0), 40, 45, READ_COMMITTED),
        ("source", ("orders", 0), 100, 110, READ_COMMITTED),
    ]
    # The source is read only as far as compared.
    assert clusters.handed["source"] == 2


def test_a_record_someone_else_wrote_past_the_planned_start_is_never_taken_for_ours(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    written = [_copy_of(SOURCE[0], 40), _copy_of(SOURCE[1], 41), _copy_of(SOURCE[2], 42, value=b"theirs")]
    clusters = TwoClusters([SOURCE], [written])

    with pytest.raises(TargetStateError) as caught:
        _read_back(monkeypatch, clusters, PLAN, end=43)

    assert str(caught.value).startswith(
        "remote partition primary.orders-0 offset 42 holds another record where this flow wrote the record "
        "of source offset 103 of orders-0: something else writes to the remote topic. Nothing was committed"
    )


def test_more_records_past_the_planned_start_than_the_plan_holds_are_someone_elses(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    short = PartitionPlan("orders", 0, 100, 102, "primary.orders", 40)
    written = [_copy_of(r, 40 + i) for i, r in enumerate(SOURCE[:3])]
    clusters = TwoClusters([SOURCE], [written[:2], written[2:]])

    with pytest.raises(TargetStateError) as caught:
        _read_back(monkeypatch, clusters, short, end=43)

    assert str(caught.value).startswith(
        "remote partition primary.orders-0 holds more records past the planned start 40 (at least 3) than "
        "the 2 planned: something else writes to the remote topic. Nothing was committed"
    )
