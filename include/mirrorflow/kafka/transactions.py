"""The flow writer's transactions on the target (Kafka's transactional fencing): the transaction
coordinator of the flow's transactional id, a new epoch of its producer per copy attempt
(InitProducerId), the partitions a transaction writes to (AddPartitionsToTxn) and its end (EndTxn).
The batches themselves go with ``produce.produce``, stamped transactional
(``copy.record_batches.stamp``) and carrying the transactional id.

Invariants:
- Every ``fence`` bumps the writer's epoch: the coordinator aborts what an older epoch left open,
  and that epoch's requests are refused from then on (``WriterFencedError``; its batches
  INVALID_PRODUCER_EPOCH), however old their records' timestamps: the coordinator keeps the
  epoch, and a partition's leader that dropped the writer's idempotent state asks it before
  appending a transaction's first batch (KIP-890's verification, on by default since Kafka 3.6).
- Transactions keep Kafka's version 1 semantics (KIP-890 part 2 off): one epoch per attempt, not one
  per transaction, the partitions added by AddPartitionsToTxn before any batch is sent. Brokers
  take a client's EndTxn v5+ or Produce v12+ as asking for version 2, so neither is sent.
- A batch goes to a partition only once ``add_partitions`` added it to the open transaction: that
  answers only after the markers of the writer's previous transaction are written (the coordinator
  says CONCURRENT_TRANSACTIONS until then), while a batch sent before them joins the transaction just
  ended, which its partition's leader still holds open.
- Requests go to the coordinator; while it loads, moves or is still ending a transaction, or its
  broker does not answer, it is found and asked again until ``TIMEOUT_S``, then the step fails as
  a ``TransientError`` naming the transactional id. A refused login is an ``AuthorizationError``
  naming the grant.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from kafka.protocol.metadata import CoordinatorType, FindCoordinatorRequest
from kafka.protocol.producer import AddPartitionsToTxnRequest, EndTxnRequest, InitProducerIdRequest

from mirrorflow.core.plan import Writer
from mirrorflow.core.topic_partitions import TP
from mirrorflow.errors import AuthorizationError, ConfigError, TransientError, WriterFencedError
from mirrorflow.kafka.connection import Connection
from mirrorflow.kafka.faults import Again, Verdict, error_name, retried, verdict
from mirrorflow.kafka.produce import refused_write

# Ending a transaction takes the coordinator a few ms (its markers written): Kafka's own producer asks
# again after 20 ms too.
_BACKOFF_S = 0.02

# Versions (kafka-python offers FindCoordinator 0-6, InitProducerId 0-6, AddPartitionsToTxn 0-5,
# EndTxn 0-5): FindCoordinator 1-3 asks for one key of a type (v4+ batches keys). The others stay
# below KIP-890's TRANSACTION_ABORTABLE code (InitProducerId v5, AddPartitionsToTxn v5, EndTxn v4),
# which older versions never see; AddPartitionsToTxn v4+ is the brokers' own batched form, and EndTxn
# v5 would ask for transaction version 2 (an epoch bump per transaction).
_FIND_VERSIONS = {"min_version": 1, "max_version": 3}
_INIT_MAX = 4
_ADD_MAX = 3
_END_MAX = 3


def coordinator(conn: Connection, transactional_id: str) -> int:
    """The node id of the broker coordinating ``transactional_id``'s transactions, known to the
    connection's client (its metadata names it)."""

    def find() -> int:
        node = conn.client.least_loaded_node(bootstrap_fallback=True)
        request = FindCoordinatorRequest(
            key=transactional_id, key_type=CoordinatorType.TRANSACTION, **_FIND_VERSIONS
        )
        try:
            answer = conn.call(node, request)
        except TransientError as away:
            raise Again(str(away)) from away  # a broker that went away: another one names it
        code = answer.error_code
        if not code:
            found = int(answer.node_id)
            if conn.client.cluster.broker_metadata(found) is None:
                conn.refresh()  # a broker the metadata read at bootstrap did not know yet
            if conn.client.cluster.broker_metadata(found) is not None:
                return found
            raise Again(f"the coordinator named, broker {found}, is not in the cluster's metadata")
        rule = verdict(code)
        if rule is Verdict.REFUSED:
            raise _refused(transactional_id, code)
        if rule is not Verdict.MOVED:
            raise _failed(transactional_id, "find its transaction coordinator", code)
        raise Again(error_name(code))

    return retried(
        find,
        f"finding the transaction coordinator of transactional id {transactional_id!r} on the target cluster",
        backoff_s=_BACKOFF_S,
    )


def fence(conn: Connection, transactional_id: str, transaction_timeout_ms: int) -> Writer:
    """The writer's next epoch (its producer id may change when the epoch runs out): every request of
    an older one is refused from now on, and a transaction one left open is aborted. The
    coordinator aborts a transaction of this epoch left open ``transaction_timeout_ms`` after it
    began."""

    def request() -> Any:
        return InitProducerIdRequest(
            transactional_id=transactional_id,
            transaction_timeout_ms=transaction_timeout_ms,
            max_version=_INIT_MAX,
        )

    answer = _ask(conn, transactional_id, "fence its older writers", request, lambda a: [a.error_code])
    if answer.error_code and verdict(answer.error_code) is Verdict.BAD_TIMEOUT:
        raise ConfigError(
            f"the target cluster refuses transactions that may stay open {transaction_timeout_ms} ms "
            f"({error_name(answer.error_code)}): its brokers' transaction.max.timeout.ms is lower. Set the "
            "target's producer transaction.timeout.ms (`<target alias>.producer.transaction.timeout.ms`) "
            "at or below it; nothing was written",
            key="transaction.timeout.ms",
        )
    if answer.error_code:
        raise _refusal(transactional_id, "fence its older writers", answer.error_code)
    return Writer(int(answer.producer_id), int(answer.producer_epoch))


def add_partitions(conn: Connection, transactional_id: str, writer: Writer, tps: Iterable[TP]) -> None:
    """``tps`` made part of the writer's open transaction (the first added begins one), once the
    markers of its previous transaction are written: from then on, and not before, the partitions
    take the transaction's batches."""
    topic_type = AddPartitionsToTxnRequest.AddPartitionsToTxnTopic
    topics: dict[str, list[int]] = {}
    for topic, partition in tps:
        topics.setdefault(topic, []).append(partition)

    def request() -> Any:
        return AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=transactional_id,
            v3_and_below_producer_id=writer.producer_id,
            v3_and_below_producer_epoch=writer.producer_epoch,
            v3_and_below_topics=[topic_type(name=t, partitions=ps) for t, ps in topics.items()],
            max_version=_ADD_MAX,
        )

    def codes(answer: Any) -> list[int]:
        return [
            p.partition_error_code
            for t in answer.results_by_topic_v3_and_below
            for p in t.results_by_partition
        ]

    what = "add partitions to its transaction"
    answer = _ask(conn, transactional_id, what, request, codes)
    # One partition's error leaves the others not attempted: the first real one is the answer.
    refused = [
        (f"{t.name}-{p.partition_index}", p.partition_error_code)
        for t in answer.results_by_topic_v3_and_below
        for p in t.results_by_partition
        if p.partition_error_code and verdict(p.partition_error_code) is not Verdict.NOT_ATTEMPTED
    ]
    if refused:
        where, code = refused[0]
        if verdict(code) is Verdict.REFUSED:
            raise refused_write(f"{where}: {error_name(code)}")  # the remote topic's grant
        raise _refusal(transactional_id, what, code)


def end_transaction(conn: Connection, transactional_id: str, writer: Writer, commit: bool) -> None:
    """The writer's open transaction committed (``commit``) or aborted: on return the coordinator has
    decided it, and writes its markers to the partitions (read_committed readers see its records
    once a partition has its marker)."""
    what = "commit its transaction" if commit else "abort its transaction"

    def request() -> Any:
        return EndTxnRequest(
            transactional_id=transactional_id,
            producer_id=writer.producer_id,
            producer_epoch=writer.producer_epoch,
            committed=commit,
            max_version=_END_MAX,
        )

    answer = _ask(conn, transactional_id, what, request, lambda a: [a.error_code])
    if answer.error_code:
        raise _refusal(transactional_id, what, answer.error_code)


def _ask(
    conn: Connection,
    transactional_id: str,
    what: str,
    request: Callable[[], Any],
    codes: Callable[[Any], list[int]],
) -> Any:
    """The coordinator's answer to ``request()``, asked again (of the coordinator found again where
    it moved or did not answer) while it is busy or away, until ``TIMEOUT_S``."""
    node: int | None = None

    def ask() -> Any:
        nonlocal node
        if node is None:
            node = coordinator(conn, transactional_id)
        try:
            answer = conn.call(node, request())
        except TransientError as silent:
            # A lost answer may hide a request the coordinator carried out: asking again is safe, as
            # AddPartitionsToTxn and EndTxn repeated answer as the first did, and InitProducerId
            # repeated bumps the epoch once more.
            node = None
            raise Again(f"no answer: {silent}") from silent
        rules = {verdict(c): c for c in codes(answer) if c}
        waiting = rules.keys() - {Verdict.NOT_ATTEMPTED}
        if not waiting or not waiting <= {Verdict.MOVED, Verdict.BUSY}:
            return answer
        if Verdict.MOVED in waiting:
            node = None
        raise Again(error_name(min(rules[w] for w in waiting)))

    return retried(
        ask,
        f"the target cluster's transaction coordinator, asked to {what} for transactional id "
        f"{transactional_id!r},",
        backoff_s=_BACKOFF_S,
    )


def _refusal(transactional_id: str, what: str, code: int) -> Exception:
    """The error a coordinator's refusal is, by its verdict."""
    rule = verdict(code)
    if rule is Verdict.FENCED:
        return WriterFencedError(
            f"a newer copy of the flow took over its writer (transactional id {transactional_id!r}) "
            f"when this one tried to {what} ({error_name(code)}): nothing of its transaction is committed. "
            "If another run of the flow is running, nothing is to be done; else run the flow again."
        )
    if rule is Verdict.STATE_LOST:
        return TransientError(
            f"the target cluster's transaction coordinator refused to {what} for transactional id "
            f"{transactional_id!r} ({error_name(code)}): the writer has no transaction open that it "
            "can end so (none was begun, or it already ended the other way). The next attempt fences "
            "this writer and reads back what the target holds."
        )
    if rule is Verdict.REFUSED:
        return _refused(transactional_id, code)
    return _failed(transactional_id, what, code)


def _refused(transactional_id: str, code: int) -> AuthorizationError:
    return AuthorizationError(
        f"the target cluster refused the mirror's login to write transactionally: {error_name(code)}. "
        f"Grant it WRITE on the TransactionalId {transactional_id!r} and WRITE on the remote topics; "
        "nothing of this transaction was committed."
    )


def _failed(transactional_id: str, what: str, code: int) -> TransientError:
    return TransientError(
        f"the target cluster could not {what} for transactional id {transactional_id!r}: {error_name(code)}"
    )
