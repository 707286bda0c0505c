"""A flow's transform chain at work: the records of one source partition in, the records to write out.

The built-ins do what Connect's transforms and predicates of the same names do to a record of bytes;
a python hook is a function over a batch of ``Record`` values (one source partition's, in offset
order) returning the records to write. Invariants, checked on every call:
- The output is a subsequence of the input, by offset, in the same order: a transform may drop a
  record, or change its key, value, headers or timestamp, never reorder records, invent one or move
  one to another topic or partition. So each written record keeps its source offset, and a dropped
  one is an offset gap the batch log records, as it records compaction's: translation stays exact.
- A record's fate depends on that record alone (a retry may hand a hook other batches).
- A transform that raises, or breaks the contract, fails with ``TransformError`` naming the
  transform, the partition and the offset of the first record it failed on.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from mirrorflow.config.property_view import load_reference
from mirrorflow.config.transforms import PYTHON, PredicateConfig, TransformConfig
from mirrorflow.core.schema_ids import NO_SCHEMA_IDS, SchemaIdMap, UnknownSchemaId
from mirrorflow.errors import MirrorError, SchemaIdError, TransformError


class Record(NamedTuple):
    """One source record as a transform sees it; ``offset`` is its source offset. Immutable: a hook
    returns changed copies (``record._replace(value=...)``). A named tuple, as the record path builds
    one per record."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


class Encodable(Protocol):
    """A record as the copy writes it and a verification reads it: a ``Record``, what a transform
    returned, or a record decoded from a batch (``kafka.fetched_batches.SourceRecord``)."""

    @property
    def offset(self) -> int: ...
    @property
    def timestamp(self) -> int: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...
    @property
    def headers(self) -> tuple[tuple[str, bytes | None], ...]: ...


Batch = Callable[[list[Record]], Iterable[Record]]


def _predicate(config: PredicateConfig) -> Callable[[Record], bool]:
    if config.kind == "HasHeaderKey":
        name = config.option("name")
        return lambda r: any(k == name for k, _ in r.headers)
    if config.kind == "TopicNameMatches":
        # Java's Matcher.matches(): the whole name.
        pattern = re.compile(config.option("pattern"))
        return lambda r: pattern.fullmatch(r.topic) is not None
    return lambda r: r.value is None  # RecordIsTombstone


def _builtin(config: TransformConfig) -> Batch:
    if config.kind == "Filter":
        return lambda records: ()
    if config.kind == "DropHeaders":
        dropped = frozenset(h.strip() for h in config.option("headers").split(","))

        def drop(r: Record) -> Record:
            if not any(h[0] in dropped for h in r.headers):
                return r
            return Record(*r[:6], tuple(h for h in r.headers if h[0] not in dropped))

        return lambda records: [drop(r) for r in records]
    # InsertHeader adds the header (Connect's Headers.add), as UTF-8 text.
    header = (config.option("header"), config.option("value.literal").encode())
    return lambda records: [Record(*r[:6], (*r.headers, header)) for r in records]


@dataclass(frozen=True)
class _Step:
    config: TransformConfig
    function: Batch
    applies: Callable[[Record], bool] | None

    def apply(self, records: list[Record]) -> list[Record]:
        applies = self.applies
        if applies is None:
            return self._call(records)
        negate = self.config.negate
        chosen = [r for r in records if applies(r) != negate]
        if len(chosen) == len(records):
            return self._call(records)
        if not chosen:
            return records
        kept = {r.offset for r in chosen}
        out = self._call(chosen)
        # Offsets are unique within a partition: merging by offset keeps the source order.
        return sorted([*(r for r in records if r.offset not in kept), *out], key=lambda r: r.offset)

    def _call(self, records: list[Record]) -> list[Record]:
        try:
            out = list(self.function(records))
        except Exception as exc:
            raise self._failure(records, exc) from exc
        return self._checked(records, out)

    def _failure(self, records: list[Record], exc: Exception) -> TransformError:
        """The error naming the first record the function fails on alone (the whole batch's range
        when each record alone passes)."""
        where = f"{records[0].topic}-{records[0].partition}"
        if len(records) > 1:
            for record in records:
                try:
                    list(self.function([record]))
                except Exception as alone:
                    return self._error(f"{where} offset {record.offset}", alone)
            span = f"{where} offsets {records[0].offset}..{records[-1].offset} (as a batch)"
            return self._error(span, exc)
        return self._error(f"{where} offset {records[0].offset}", exc)

    def _error(self, where: str, exc: BaseException) -> TransformError:
        return TransformError(
            f"transform {self.config.described} failed on {where}: {type(exc).__name__}: {exc}. "
            "Nothing of that partition from there on was committed; fix the transform (or filter the "
            "record out before it) and run the flow again"
        )

    def _checked(self, records: list[Record], out: list[Record]) -> list[Record]:
        given = {r.offset: r for r in records}
        last = -1
        for r in out:
            if not isinstance(r, Record):
                problem = f"returned a {type(r).__name__}, not a Record"
            elif given.get(r.offset) is None or r.offset <= last:
                problem = f"returned offset {r.offset} out of order or not among the records it was given"
            elif (r.topic, r.partition) != (records[0].topic, records[0].partition):
                problem = f"moved offset {r.offset} to {r.topic}-{r.partition}"
            elif not (_is_bytes(r.key) and _is_bytes(r.value) and _are_headers(r.headers)):
                problem = (
                    f"returned offset {r.offset} with a key, value or header value that is not bytes or "
                    "None, or headers that are not (str, bytes | None) pairs"
                )
            else:
                last = r.offset
                continue
            raise self._error(
                f"{records[0].topic}-{records[0].partition}",
                ValueError(f"{problem}; a transform may only drop or change records, in order"),
            )
        return out


def _is_bytes(value: object) -> bool:
    return value is None or isinstance(value, bytes)


def _are_headers(headers: object) -> bool:
    return isinstance(headers, tuple) and all(
        isinstance(h, tuple) and len(h) == 2 and isinstance(h[0], str) and _is_bytes(h[1]) for h in headers
    )


class Chain:
    """A flow's transforms in order, then the schema ids mapped (``schema_ids``: the run's
    ``core.schema_ids`` map, on the topics it lists); an empty chain changes nothing. ``holders``
    asks the source registry which subjects hold a schema id, for the message of a record refused
    for one no subject the sync read holds (a ``MirrorError`` if it cannot). Building it imports the
    python hooks (an unimportable one is a ``ConfigError`` naming its key)."""

    def __init__(
        self,
        configs: Sequence[TransformConfig],
        schema_ids: SchemaIdMap = NO_SCHEMA_IDS,
        holders: Callable[[int], Sequence[str]] | None = None,
    ) -> None:
        self._steps = tuple(
            _Step(
                c,
                load_reference(c.option("function"), f"transforms.{c.name}.function")
                if c.kind == PYTHON
                else _builtin(c),
                _predicate(c.predicate) if c.predicate else None,
            )
            for c in configs
        )
        self._schema_ids = schema_ids
        self._holders = holders

    def __bool__(self) -> bool:
        return bool(self._steps) or bool(self._schema_ids)

    def changes(self, topic: str) -> bool:
        """Whether the chain may change a record of ``topic``: if not, its batches pass as bytes."""
        return bool(self._steps) or self._schema_ids.maps(topic)

    def inspects(self, topic: str) -> bool:
        """Whether the chain looks at the records of ``topic`` without changing them (``inspect``)."""
        return self._schema_ids.inspects(topic)

    def apply(self, records: list[Record]) -> list[Record]:
        """The records to write for ``records`` (one partition's, in offset order)."""
        for step in self._steps:
            if not records:
                break
            records = step.apply(records)
        if records and self._schema_ids.covers(records[0].topic):
            remap = self._schema_ids.remapper(records[0].topic)
            out = []
            for r in records:
                try:
                    key, value = remap(r.key, r.value)
                except UnknownSchemaId as unknown:
                    raise self._refused(r.topic, r.partition, r.offset, unknown) from None
                out.append(r if key is r.key and value is r.value else r._replace(key=key, value=value))
            records = out
        return records

    def inspect(self, topic: str, partition: int, records: Iterable[Encodable]) -> None:
        """Refuse the first of ``records`` (of a topic the chain does not change) that the schema id map
        refuses (``SchemaIdError``)."""
        remap = self._schema_ids.remapper(topic)
        for r in records:
            try:
                remap(r.key, r.value)
            except UnknownSchemaId as unknown:
                raise self._refused(topic, partition, r.offset, unknown) from None

    def _refused(self, topic: str, partition: int, offset: int, unknown: UnknownSchemaId) -> SchemaIdError:
        return SchemaIdError(
            f"{topic}-{partition} offset {offset}: "
            f"{self._schema_ids.refusal(topic, unknown, self._holding(unknown))}. Nothing of that "
            "partition from there on was committed"
        )

    def _holding(self, unknown: UnknownSchemaId) -> Sequence[str] | str:
        """The source registry's subjects holding the refused id, where the map cannot say (or why
        the registry could not be asked)."""
        if not unknown.framed or unknown.holder is not None:
            return ()
        if self._holders is None:
            return "no registry client where the record was read"
        try:
            return self._holders(unknown.source_id)
        except MirrorError as error:
            return str(error)
