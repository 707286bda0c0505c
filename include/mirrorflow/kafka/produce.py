"""The flow writer's Produce requests to the target, of batches the copy stamped (its producer id
and epoch come from its transactions: ``kafka.transactions``).

The copy (``copy.batch_copy``) decides what to send, stamps each batch with the writer's producer
id and sequence, and judges each partition's answer; this module builds the requests, sends them
and hands back each partition's answer (error code and base offset). Invariants:
- Produce is acks=all: a batch counts only once every in-sync replica has it, and the broker checks
  its sequence against the writer's (idempotence).
- A request is transactional only when it carries the writer's transactional id (its batches
  stamped transactional, their partitions added to the open transaction: ``kafka.transactions``);
  it stays at v9, below v12, which brokers take as transaction version 2.
- A refused login is an ``AuthorizationError`` that names the grant to add.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kafka.protocol.producer import ProduceRequest

from mirrorflow.core.topic_partitions import TP
from mirrorflow.errors import AuthorizationError
from mirrorflow.kafka.connection import Connection
from mirrorflow.kafka.faults import TIMEOUT_S


class ProduceCall:
    """One Produce request on the wire to one broker, and then its answer."""

    def __init__(self, future: Any) -> None:
        self._future = future

    @property
    def done(self) -> bool:
        return bool(self._future.is_done)

    def answers(self) -> dict[TP, tuple[int, int]]:
        """Each partition's answer: its error code (0 when appended) and the offset the broker gave
        the batch's first record; none when no answer came."""
        if not self._future.succeeded():
            return {}
        return {
            (t.name, r.index): (r.error_code, r.base_offset)
            for t in self._future.value.responses
            for r in t.partition_responses
        }

    @property
    def exception(self) -> BaseException | None:
        """Why no answer came."""
        exception: BaseException | None = self._future.exception
        return exception


def produce(
    target: Connection, node: int, batches: Sequence[tuple[TP, bytes]], transactional_id: str | None = None
) -> ProduceCall:
    """Send ``batches`` (one stamped batch per partition, all led by ``node``) in one Produce request,
    acks=all; ``target.poll`` moves it, ``ProduceCall.done`` says when its answer is in. Transactional
    batches travel with the ``transactional_id`` of their writer."""
    topic_type = ProduceRequest.TopicProduceData
    topics: dict[str, list[Any]] = {}
    for (topic, partition), data in batches:
        topics.setdefault(topic, []).append(topic_type.PartitionProduceData(index=partition, records=data))
    request = ProduceRequest(
        transactional_id=transactional_id,
        acks=-1,
        timeout_ms=int(TIMEOUT_S * 1000),
        topic_data=[topic_type(name=t, partition_data=ps) for t, ps in topics.items()],
        min_version=3,
        max_version=9,
    )
    return ProduceCall(target.client.send(node, request))


def refused_write(detail: str) -> AuthorizationError:
    return AuthorizationError(
        f"the target cluster refused the mirror's login to write: {detail}. Grant it WRITE on the "
        "remote topics (README: Secured clusters); nothing was committed."
    )
