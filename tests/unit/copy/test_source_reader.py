"""The copy's reader (``copy.source_reader``): the memory budget a reader waits on while the writer is
behind (``Budget``), what a partition's records become on their way to the target (``transformed``,
``encoded``, ``record_timestamps``, ``_record_count``), and one fetch round of ``SourceReader`` over a
scripted source, with fakes for nothing but plain values. The same reader on real brokers:
``tests/spark/test_copy_plan.py`` (exact copies, compressed and LogAppendTime batches),
``tests/integration/test_transform_runs.py`` (transforms) and ``tests/integration/test_runs.py`` (the
transaction's deadline); the budget's waits are exercised only here."""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any, cast

import pytest
from batch_samples import LZ4, NONE, ZSTD, build, decoded, parse
from config_texts import ONE_FLOW
from kafka.record.default_records import DefaultRecordBatch

from mirrorflow.config.model import parse_config
from mirrorflow.copy.partition_copy import PartitionCopy
from mirrorflow.copy.record_batches import encode
from mirrorflow.copy.source_reader import (
    Budget,
    SourceReader,
    _record_count,
    encoded,
    record_timestamps,
    transformed,
)
from mirrorflow.core.metrics import Timestamps
from mirrorflow.core.plan import PartitionPlan
from mirrorflow.core.topic_partitions import TP
from mirrorflow.core.transforms import Chain, Encodable, Record
from mirrorflow.kafka.connection import Connection
from mirrorflow.kafka.faults import FaultPolicy
from mirrorflow.kafka.fetched_batches import SourceRecord

# How long a take that must wait is watched still waiting: a wrong one has returned by then.
BLOCKED_S = 0.1
# Only reached when a released take never returns.
RELEASED_S = 2.0
TP0: TP = ("orders", 0)


def _take_in_thread(budget: Budget, n: int) -> tuple[threading.Thread, list[bool]]:
    got: list[bool] = []
    taker = threading.Thread(target=lambda: got.append(budget.take(n)), daemon=True)
    taker.start()
    return taker, got


def _taken_at_once(budget: Budget, n: int) -> bool:
    """What ``take`` says, failing the test where it waits (in a thread: a wrong wait never returns)."""
    taker, got = _take_in_thread(budget, n)
    taker.join(RELEASED_S)
    assert not taker.is_alive(), f"take({n}) waits"
    return got[0]


def _records(offsets: range | list[int]) -> list[SourceRecord]:
    return [SourceRecord(i, 1_000 + i, b"k%d" % i, b"v%d" % i, (("trace", b"t%d" % i),)) for i in offsets]


def test_takes_up_to_the_limit_itself_go_through_without_waiting() -> None:
    budget = Budget(10)
    assert _taken_at_once(budget, 4)
    assert _taken_at_once(budget, 6)


def test_a_take_past_the_limit_waits_until_enough_bytes_are_given_back() -> None:
    budget = Budget(10)
    assert _taken_at_once(budget, 8)
    taker, got = _take_in_thread(budget, 5)
    taker.join(BLOCKED_S)
    assert taker.is_alive()
    # 6 held + 5 is still past the limit: the taker keeps waiting.
    budget.give(2)
    taker.join(BLOCKED_S)
    assert taker.is_alive()
    budget.give(1)
    taker.join(RELEASED_S)
    assert (taker.is_alive(), got) == (False, [True])


def test_a_take_larger_than_the_whole_budget_goes_through_when_nothing_is_held() -> None:
    # Else a batch larger than the budget would stop the reader for good.
    budget = Budget(10)
    assert _taken_at_once(budget, 25)
    taker, got = _take_in_thread(budget, 1)
    taker.join(BLOCKED_S)
    assert taker.is_alive()
    budget.give(25)
    taker.join(RELEASED_S)
    assert (taker.is_alive(), got) == (False, [True])


def test_close_releases_a_waiting_take_which_says_the_budget_is_closed() -> None:
    budget = Budget(10)
    assert _taken_at_once(budget, 10)
    taker, got = _take_in_thread(budget, 1)
    taker.join(BLOCKED_S)
    assert taker.is_alive()

    budget.close()
    taker.join(RELEASED_S)

    assert (taker.is_alive(), got, budget.closed) == (False, [False], True)
    # Once closed, a take past the limit no longer waits either.
    assert _taken_at_once(budget, 100) is False


def test_a_chain_that_changes_nothing_hands_back_the_records_themselves() -> None:
    records = _records(range(3))
    assert transformed(Chain(()), TP0, records) is records


def test_transformed_records_keep_their_partition_and_source_offsets_and_a_dropped_one_leaves_a_gap() -> None:
    flow = parse_config(
        ONE_FLOW + "transforms = strip, noTombstones\n"
        "transforms.strip.type = DropHeaders\n"
        "transforms.strip.headers = trace\n"
        "transforms.noTombstones.type = Filter\n"
        "transforms.noTombstones.predicate = isTombstone\n"
        "predicates = isTombstone\n"
        "predicates.isTombstone.type = RecordIsTombstone\n",
        env={},
    ).flow("primary->backup")
    tombstone = SourceRecord(11, 1_011, b"gone", None, ())
    records = [*_records([10]), tombstone, *_records([12])]

    out = transformed(Chain(flow.transforms), ("orders", 3), records)

    assert out == [
        Record("orders", 3, 10, 1_010, b"k10", b"v10", ()),
        Record("orders", 3, 12, 1_012, b"k12", b"v12", ()),
    ]


@pytest.mark.parametrize("codec", [NONE, LZ4])
def test_encoded_batches_each_come_with_exactly_the_records_they_hold(codec: int) -> None:
    records = [SourceRecord(i, 1_000 + i, b"k%d" % i, b"x" * 100, ()) for i in range(40)]

    chunks = list(encoded(records, codec, max_bytes=1_000))

    assert len(chunks) > 3
    for chunk, data in chunks:
        # Re-encoded batches number their records from 0: compared by content.
        assert [(r.key, r.timestamp) for r in decoded(data)] == [(r.key, r.timestamp) for r in chunk]
    assert [r for chunk, _ in chunks for r in chunk] == records


@pytest.mark.parametrize(("count", "codec"), [(1, NONE), (3, NONE), (300, NONE), (300, ZSTD)])
def test_the_record_count_is_read_from_the_batch_header_compressed_or_not(count: int, codec: int) -> None:
    data = build(_records(range(count)), base_offset=7, codec=codec)
    assert _record_count(bytearray(data)) == DefaultRecordBatch(data).records_count == count
    (again,) = encode(_records(range(count)), codec, max_bytes=1 << 20)
    assert _record_count(again) == count


def test_record_timestamps_summarise_the_records_in_their_order() -> None:
    records: list[Encodable] = [
        SourceRecord(0, 1_000, None, b"a", ()),
        Record("orders", 0, 1, 1_005, None, b"b"),
        SourceRecord(2, 999, None, b"c", ()),
    ]
    # The last record is the oldest: ``last`` is the last one's, not the newest.
    assert record_timestamps(records) == Timestamps(3, 999, 1_005, 3_004, 999)


class SourceLog:
    """A source whose one broker answers each Fetch with every stored batch of the partition holding
    an offset at or after the fetch position, all committed up to ``stable``; it keeps each round's
    positions."""

    side = "source"

    def __init__(self, batches: dict[TP, list[bytes]], stable: int) -> None:
        self.batches = batches
        self.stable = stable
        self.rounds: list[dict[TP, int]] = []

    def by_leader(self, tps: Any) -> dict[int, list[TP]]:
        found = list(tps)
        return {0: found} if found else {}

    def request_update(self) -> None:
        pass

    def call(self, node: int, request: Any) -> Any:
        positions = {(t.topic, p.partition): p.fetch_offset for t in request.topics for p in t.partitions}
        self.rounds.append(positions)
        topics = []
        for t in request.topics:
            answers = []
            for p in t.partitions:
                held = [
                    b for b in self.batches[(t.topic, p.partition)] if parse(b).last_offset >= p.fetch_offset
                ]
                answers.append(
                    SimpleNamespace(
                        partition_index=p.partition,
                        error_code=0,
                        aborted_transactions=(),
                        records=b"".join(held),
                        last_stable_offset=self.stable,
                        high_watermark=self.stable,
                    )
                )
            topics.append(SimpleNamespace(topic=t.topic, partitions=answers))
        return SimpleNamespace(error_code=0, responses=topics)


def test_a_batch_inside_the_plan_passes_as_bytes_and_one_reaching_out_is_cut_to_its_planned_records() -> None:
    straddling, inside, after = (
        build(_records(range(0, 3)), base_offset=0),
        build(_records(range(3, 6)), base_offset=3),
        build(_records(range(6, 9)), base_offset=6),
    )
    source = SourceLog({TP0: [straddling, inside, after]}, stable=9)
    part = PartitionCopy(PartitionPlan("orders", 0, 1, 6, "primary.orders", 40), 0, 1)
    reader = SourceReader(cast(Connection, source), [part], Budget(1 << 20), Chain(()), FaultPolicy())

    reader.start()
    reader.join(RELEASED_S)

    assert (reader.is_alive(), reader.error, reader.finished.is_set()) == (False, None, True)
    # One round: the position moved past every whole batch fetched, beyond the plan's end.
    assert source.rounds == [{TP0: 1}]
    assert part.position == 9
    (cut_part, cut), (whole_part, whole) = reader.ready
    assert cut_part is whole_part is part
    assert decoded(cut.data) == [r._replace(offset=i) for i, r in enumerate(_records([1, 2]))]
    assert bytes(whole.data) == inside
    assert [(p.count, p.budgeted, p.timestamps.oldest) for p in (cut, whole)] == [
        (2, len(cut.data), 1_001),
        (3, len(inside), 1_003),
    ]
    assert (part.runs, part.records, part.bytes) == ([(1, 40, 5)], 5, len(cut.data) + len(inside))
