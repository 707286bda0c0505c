"""Writes planned partitions' records to the target with librdkafka, from Arrow batches.

Runs inside a Spark task (``mapInArrow``) over the planned source partitions that task reads, one
after another, and never imports pyspark. Invariants:
- Records reach the remote partition in source order, with key, value, headers and timestamp as read.
- The producer is idempotent and gapless: what an attempt leaves on the target is always a prefix of
  the planned records. So before writing, ``target end - target_start`` records are expected to be
  there already, and exactly that many are skipped: re-running a plan never duplicates a record.
  They are read back and compared with the planned records first (key, value, headers, timestamp):
  records written by anything else are never taken for ours, so nothing is skipped by mistake.
- Any delivery failure fails the task; the caller commits nothing for it.

It also measures MM2's record age (received - record timestamp) and replication latency
(acknowledged - record timestamp) of the records it writes. Records are acknowledged without a
callback each (one per record costs the copy rate): a run of records counts as acknowledged at the
first poll after which the producer holds fewer records than were produced since it, which is exact
to within one Arrow batch because a task writes its partitions one after another.
"""

from __future__ import annotations

import itertools
import json
import time
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import (
    TIMESTAMP_LOG_APPEND_TIME,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

from mirrorflow.core.metrics import Stats, Timestamps
from mirrorflow.core.plan import CopyResult, PartitionPlan, PartitionResult, Plan
from mirrorflow.errors import AuthorizationError, TargetStateError, TransientError

# Columns the writer reads, as produced by Spark's Kafka source.
READ_COLUMNS = ("topic", "partition", "offset", "key", "value", "timestamp", "headers")

RESULT_SCHEMA = pa.schema(
    [
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("records", pa.int64()),
        ("skipped", pa.int64()),
        ("bytes", pa.int64()),
        ("target_start", pa.int64()),
        ("sync_points", pa.string()),
        ("metrics", pa.string()),
    ]
)

# Settings that make the gapless-prefix invariant hold; the user's producer settings cannot undo them.
# One request in flight per broker: with five, a target broker restarted during the copy (single
# replica, no producer state yet for the partition) appended a later batch before an earlier one that
# was retried, in 4 of 6 runs; it costs about 20 % of the steady copy rate (55,245 -> 44,000 rec/s, W1).
_PRODUCER_GUARANTEES = {
    "enable.idempotence": "true",
    "enable.gapless.guarantee": "true",
    "acks": "all",
    "max.in.flight.requests.per.connection": "1",
}
_PRODUCER_DEFAULTS = {
    "linger.ms": "20",
    "batch.size": "1000000",
    "queue.buffering.max.kbytes": "131072",
    "queue.buffering.max.messages": "500000",
}
_TIMEOUT_S = 30.0
_REFUSED = frozenset({KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.CLUSTER_AUTHORIZATION_FAILED})


@dataclass
class _Progress:
    """Running state of one partition's copy."""

    plan: PartitionPlan
    already_written: int
    records: int = 0
    bytes: int = 0
    prev_offset: int = -1
    sync_points: list[tuple[int, int]] = field(default_factory=list)
    record_age: Stats = field(default_factory=Stats)
    replication_latency: Stats = field(default_factory=Stats)
    first_received_ms: int = 0
    last_acked_ms: int = 0

    def result(self) -> dict[str, object]:
        return {
            "topic": self.plan.topic,
            "partition": self.plan.partition,
            "records": self.records,
            "skipped": min(self.already_written, self.records),
            "bytes": self.bytes,
            "target_start": self.plan.target_start,
            "sync_points": json.dumps(self.sync_points),
            "metrics": json.dumps(
                {
                    "record_age": self.record_age.as_list(),
                    "replication_latency": self.replication_latency.as_list(),
                    "write_ms": max(self.last_acked_ms - self.first_received_ms, 0),
                }
            ),
        }


class _Target:
    """The target-side clients of one Spark task: one producer for all of its partitions, one
    consumer that reads remote end offsets. Set-up is paid once per task, not per partition."""

    def __init__(self, conf: Mapping[str, str], first_topic: str) -> None:
        self.errors: list[str] = []
        self.refused: list[str] = []
        self.produced = 0
        # Runs of records awaiting acknowledgement: (records produced up to their end, whose, when made).
        self._unacked: deque[tuple[int, _Progress, Timestamps]] = deque()
        self.producer = Producer(
            {
                **_PRODUCER_DEFAULTS,
                **conf,
                **_PRODUCER_GUARANTEES,
                # Only failures call back into Python: a callback per record costs the copy rate.
                "delivery.report.only.error": True,
                "on_delivery": self._on_delivery,
            }
        )
        self._consumer = Consumer(
            {**conf, "group.id": "mirrorflow-watermarks", "enable.auto.commit": "false"}
        )
        # Asking for a topic's metadata connects the producer and gets its producer id now; left
        # alone, an idempotent producer's first send waits about 0.5 s.
        try:
            self.producer.list_topics(first_topic, timeout=_TIMEOUT_S)
        except KafkaException as exc:
            self.close()
            raise TransientError(f"cannot read the metadata of {first_topic} on the target: {exc}") from exc

    def _on_delivery(self, err: KafkaError | None, msg: Message) -> None:
        if err is None:
            return
        if err.code() in _REFUSED:
            self.refused.append(f"{msg.topic()}-{msg.partition()}: {err.str()}")
        self.errors.append(f"{msg.topic()}-{msg.partition()}: {err}")

    def end_offset(self, topic: str, partition: int) -> int:
        try:
            _low, high = self._consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=_TIMEOUT_S
            )
            return int(high)
        except KafkaException as exc:
            raise TransientError(
                f"cannot read the end offset of {topic}-{partition} on the target: {exc}"
            ) from exc

    def check_written(self, state: _Progress, batch: pa.RecordBatch, first_index: int) -> None:
        """The records at ``first_index`` onwards already on the target must be this batch's."""
        plan = state.plan
        offset = plan.target_start + first_index
        expected = _records(batch)
        self._consumer.assign([TopicPartition(plan.remote_topic, plan.partition, offset)])
        try:
            found: list[Message] = []
            deadline = time.monotonic() + _TIMEOUT_S
            while len(found) < len(expected) and time.monotonic() < deadline:
                found += [m for m in self._consumer.consume(len(expected) - len(found), 1.0) if not m.error()]
        finally:
            self._consumer.unassign()
        for i, want in enumerate(expected):
            got = _record_of(found[i]) if i < len(found) else None
            if not _same(got, want):
                source_offset = int(batch.column("offset")[i].as_py())
                raise TargetStateError(
                    f"remote partition {plan.remote_topic}-{plan.partition} offset {offset + i} holds "
                    f"{'nothing readable' if got is None else 'another record'} where this flow wrote the "
                    f"record of source offset {source_offset} of {plan.topic}-{plan.partition}: something "
                    "else writes to the remote topic. Nothing was committed; stop the other writer, then "
                    "reset the flow's progress for that topic to mirror it again."
                )

    def start(self, plan: PartitionPlan) -> _Progress:
        written = self.end_offset(plan.remote_topic, plan.partition) - plan.target_start
        if written < 0:
            raise TargetStateError(
                f"remote partition {plan.remote_topic}-{plan.partition} ends before the planned start "
                f"{plan.target_start}: it was truncated or recreated since the plan was made"
            )
        return _Progress(plan, written, prev_offset=plan.source_start - 1)

    def sent(self, state: _Progress, timestamps: Timestamps) -> None:
        """``timestamps``' records were just produced for ``state``'s partition."""
        self.produced += timestamps.count
        self._unacked.append((self.produced, state, timestamps))
        self.producer.poll(0)
        self._settle()

    def _settle(self) -> None:
        acked = self.produced - len(self.producer)
        now = _now_ms()
        while self._unacked and self._unacked[0][0] <= acked:
            _, state, timestamps = self._unacked.popleft()
            state.replication_latency = state.replication_latency.merge(timestamps.elapsed(now))
            state.last_acked_ms = now

    def finish(self, copied: list[_Progress]) -> None:
        """Wait for every record to be acknowledged, then check each remote partition's end."""
        deadline = time.monotonic() + _TIMEOUT_S * 4
        remaining = len(self.producer)
        while remaining and time.monotonic() < deadline:
            remaining = self.producer.flush(0.05)
            self._settle()
        if self.refused:
            raise _refused_write(self.refused[0])
        if remaining or self.errors:
            raise TransientError(
                f"{remaining} records to {len(copied)} remote partitions undelivered, errors: "
                f"{self.errors[:3]}; the plan can be re-run safely"
            )
        for state in copied:
            self._check_result(state)

    def _check_result(self, state: _Progress) -> None:
        plan = state.plan
        if state.already_written > state.records:
            raise TargetStateError(
                f"remote partition {plan.remote_topic}-{plan.partition} holds {state.already_written} "
                f"records past the planned start {plan.target_start}, more than the {state.records} planned: "
                "something else writes to the remote topic. Nothing was committed; stop the other writer."
            )
        end = self.end_offset(plan.remote_topic, plan.partition)
        if end != plan.target_start + state.records:
            raise TargetStateError(
                f"remote partition {plan.remote_topic}-{plan.partition} ends at {end}, expected "
                f"{plan.target_start + state.records} after this copy: something else writes to the "
                "remote topic. Nothing was committed; stop the other writer."
            )

    def close(self) -> None:
        """Also drops whatever the producer still holds: after a failure, nothing of this attempt may
        reach the target later, behind the back of a retry."""
        self._consumer.close()
        self.producer.purge(in_queue=True, in_flight=True, blocking=True)
        self.producer.poll(0)


def write_partitions(
    batches: Iterator[pa.RecordBatch],
    plans: Mapping[tuple[str, int], PartitionPlan],
    producer_conf: Mapping[str, str],
) -> Iterator[pa.RecordBatch]:
    """Copy the records of one Spark task, whose partitions arrive one after another (a batch may
    hold the end of one and the start of the next); yield one result row per partition seen."""
    target: _Target | None = None
    copied: list[_Progress] = []
    try:
        # A failed send is fatal to a gapless producer: produce, poll and flush raise it from then on.
        with _producer_failures():
            for batch in batches:
                for run in _partition_runs(batch):
                    key = (run.column("topic")[0].as_py(), run.column("partition")[0].as_py())
                    if not copied or (copied[-1].plan.topic, copied[-1].plan.partition) != key:
                        if target is None:
                            target = _Target(producer_conf, plans[key].remote_topic)
                        copied.append(target.start(plans[key]))
                    assert target is not None
                    _write_batch(target, copied[-1], run)
            if target is None:
                return
            target.finish(copied)
    finally:
        if target is not None:
            target.close()
    yield pa.RecordBatch.from_pylist([p.result() for p in copied], schema=RESULT_SCHEMA)


def _refused_write(detail: str) -> AuthorizationError:
    return AuthorizationError(
        f"the target cluster refused the mirror's login to write: {detail}. Grant it WRITE on the "
        "remote topics (README: Secured clusters); nothing was committed."
    )


@contextmanager
def _producer_failures() -> Iterator[None]:
    """The producer's own errors, classified: a refused login is not retried, the rest is."""
    try:
        yield
    except KafkaException as exc:
        error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
        detail = error.str() if error is not None else str(exc)
        if (error is not None and error.code() in _REFUSED) or "authorization failed" in detail.lower():
            raise _refused_write(detail) from exc
        raise TransientError(
            f"the producer to the target failed: {detail}; the plan can be re-run safely"
        ) from exc


def _partition_runs(batch: pa.RecordBatch) -> list[pa.RecordBatch]:
    """The batch cut where the source partition changes."""
    n = batch.num_rows
    if n == 0:
        return []
    changed = pc.or_(
        pc.not_equal(batch.column("partition").slice(1), batch.column("partition").slice(0, n - 1)),
        pc.not_equal(batch.column("topic").slice(1), batch.column("topic").slice(0, n - 1)),
    )
    cuts = [0, *(int(i) + 1 for i in np.flatnonzero(changed.to_numpy(zero_copy_only=False))), n]
    return [batch.slice(a, b - a) for a, b in itertools.pairwise(cuts) if b > a]


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _write_batch(target: _Target, state: _Progress, batch: pa.RecordBatch) -> None:
    received = _now_ms()
    if not state.first_received_ms:
        state.first_received_ms = received
    n = batch.num_rows
    offsets = batch.column("offset").to_numpy()
    first_index = state.records
    # Sync points: records whose source offset does not follow the previous one.
    prev = offsets[:-1] + 1
    gaps = [0] if offsets[0] != state.prev_offset + 1 else []
    gaps.extend(int(i) + 1 for i in (offsets[1:] != prev).nonzero()[0])
    target_base = state.plan.target_start + first_index
    state.sync_points.extend((int(offsets[i]), target_base + i) for i in gaps)
    state.prev_offset = int(offsets[-1])
    state.records += n
    state.bytes += _payload_bytes(batch)

    skip = max(0, state.already_written - first_index)
    if skip:
        target.check_written(state, batch.slice(0, min(skip, n)), first_index)
    if skip >= n:
        return
    topic, partition = state.plan.remote_topic, state.plan.partition
    keys = batch.column("key").to_pylist()
    values = batch.column("value").to_pylist()
    # Spark hands timestamps as microseconds; Kafka wants milliseconds.
    millis_array = pc.divide(batch.column("timestamp").cast(pa.int64()), 1000).to_numpy()
    millis = millis_array.tolist()
    timestamps = Timestamps.of(millis_array[skip:])
    state.record_age = state.record_age.merge(timestamps.elapsed(received))
    # Headers of the whole batch as one flat list of (key, value) pairs, sliced per record: far
    # cheaper than converting each record's list of structs.
    header_col = batch.column("headers")
    flat = header_col.flatten()
    pairs = list(zip(flat.field("key").to_pylist(), flat.field("value").to_pylist(), strict=True))
    counts = header_col.value_lengths().fill_null(0).to_pylist()
    start = sum(counts[:skip])
    producer = target.producer
    produce = producer.produce
    for i in range(skip, n):
        end = start + counts[i]
        record_headers = pairs[start:end] if end > start else None
        start = end
        while True:
            try:
                produce(
                    topic, value=values[i], key=keys[i], partition=partition, timestamp=millis[i],
                    headers=record_headers,
                )  # fmt: skip
                break
            except BufferError:
                producer.poll(0.05)
    target.sent(state, timestamps)


Comparable = tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int | None]


def _records(batch: pa.RecordBatch) -> list[Comparable]:
    millis = pc.divide(batch.column("timestamp").cast(pa.int64()), 1000).to_pylist()
    return [
        (row["key"], row["value"], [(h["key"], h["value"]) for h in row["headers"] or ()], ms)
        for row, ms in zip(batch.select(["key", "value", "headers"]).to_pylist(), millis, strict=True)
    ]


def _same(got: Comparable | None, want: Comparable) -> bool:
    """A target record is the planned one; a broker-set timestamp (None) is not compared."""
    return got is not None and got == (want if got[3] is not None else (*want[:3], None))


def _record_of(msg: Message) -> Comparable:
    """A target record as ``_records`` gives source ones; a broker-set timestamp is not compared."""
    kind, ms = msg.timestamp()
    return (
        msg.key(),
        msg.value(),
        cast(list[tuple[str, bytes | None]], msg.headers() or []),
        None if kind == TIMESTAMP_LOG_APPEND_TIME else ms,
    )


def _payload_bytes(batch: pa.RecordBatch) -> int:
    total = 0
    for name in ("key", "value"):
        lengths = pc.binary_length(batch.column(name))
        total += int(pc.sum(lengths).as_py() or 0)
    return total


def result_from_row(row: Mapping[str, object]) -> PartitionResult:
    metrics = json.loads(str(row["metrics"]))
    return PartitionResult(
        topic=str(row["topic"]),
        partition=int(str(row["partition"])),
        records=int(str(row["records"])),
        skipped=int(str(row["skipped"])),
        bytes=int(str(row["bytes"])),
        target_start=int(str(row["target_start"])),
        sync_points=tuple((int(a), int(b)) for a, b in json.loads(str(row["sync_points"]))),
        record_age=Stats.from_list(metrics["record_age"]),
        replication_latency=Stats.from_list(metrics["replication_latency"]),
        write_ms=int(metrics["write_ms"]),
    )


def copy_result(plan: Plan, rows: Iterable[Mapping[str, object]]) -> CopyResult:
    """The copy's result from the writer's result rows: a planned partition without a row (its range
    held no committed record) copied nothing."""
    done = {(r.topic, r.partition): r for r in map(result_from_row, rows)}
    return CopyResult(
        plan.flow,
        plan.run_id,
        tuple(
            done.get((p.topic, p.partition)) or PartitionResult(p.topic, p.partition, 0, 0, 0, p.target_start)
            for p in plan.partitions
        ),
    )
