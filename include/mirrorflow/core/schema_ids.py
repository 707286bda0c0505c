"""Confluent's wire format of a key or value, and the map that moves its schema id from the source
registry's numbering to the target registry's.

A serialized key or value in the wire format is a magic byte 0, the schema id (4 bytes, big-endian)
and the serializer's payload (Protobuf's message indexes first). Two registries number the same
schema differently, so a mirrored record keeps its meaning on the target only with its id mapped.
Nothing in a key or value says whether it is in the wire format (an int64 of 16777216 is 0 0 0 0 1 0
0 0, schema id 1 to a reader that takes it for one), so the flow declares it, per topic and side
(``config.schemas``).

Invariants:
- A side declared framed (``framed_keys``, ``framed_values``) is mapped: only the 4 id bytes change,
  the payload passes byte for byte; one whose id the map does not hold is never passed on:
  ``remap`` raises ``UnknownSchemaId``. A null, or one not in the wire format's shape (shorter than 5
  bytes, or not starting with 0), carries no id and passes untouched.
- Any other side is never changed. One declared neither framed nor plain (``undeclared_keys``,
  ``undeclared_values``) is looked at: a key or value there in the wire format's shape whose id the
  source registry holds under a subject the sync read (``held``) is refused, as it may be a framed
  record the flow would pass with the source's id; any other passes. A side declared plain is not
  looked at, nor is any side of a topic the map does not list (heartbeats, a flow without registries).
- A refusal says which subject holds the id and the one thing to do (``refusal``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from mirrorflow.config.keys import SCHEMA_STRATEGIES, SCHEMA_SUBJECTS_EXCLUDE, SCHEMA_SUBJECTS_INCLUDE
from mirrorflow.config.schemas import DECLARING, FRAMED, PLAIN, UNDECLARED
from mirrorflow.core.schema_sync import strategy_of

MAGIC = 0
HEADER_BYTES = 5
# A record's key and value -> as written.
Remap = Callable[[bytes | None, bytes | None], tuple[bytes | None, bytes | None]]


def schema_id(data: bytes | None) -> int | None:
    """The schema id of a key or value in the wire format's shape, or None if it is not in it."""
    if data is None or len(data) < HEADER_BYTES or data[0] != MAGIC:
        return None
    return int.from_bytes(data[1:HEADER_BYTES], "big")


def with_schema_id(data: bytes, new_id: int) -> bytes:
    """``data`` (in the wire format) with its schema id replaced by ``new_id``."""
    return bytes((MAGIC,)) + new_id.to_bytes(4, "big") + data[HEADER_BYTES:]


class UnknownSchemaId(ValueError):
    """A key or value the map refuses: its ``side`` (``key`` or ``value``) carries ``source_id``.
    ``framed``: the side is declared framed and the map lacks the id; else the side is undeclared
    and the id is one the source registry holds. ``holder``: a subject the sync read that holds it."""

    def __init__(self, side: str, source_id: int, *, framed: bool, holder: str | None) -> None:
        super().__init__(f"the record's {side} carries schema id {source_id}")
        self.side = side
        self.source_id = source_id
        self.framed = framed
        self.holder = holder


@dataclass(frozen=True)
class SchemaIdMap:
    """Source id -> target id of every synced schema version (``ids``); source id -> a subject
    holding it, of every version of every subject the sync read, synced or left out (``held``); the
    source subjects synced (``subjects``); the topics whose keys and values are declared framed, and
    those declared neither framed nor plain; the source registry's URL and the strategies whose
    subjects the sync read (``registry``, ``strategies``: for refusals). Plain tuples: a plan
    carries it (as JSON) to Spark's executors, and a retry maps with the same one."""

    ids: tuple[tuple[int, int], ...] = ()
    held: tuple[tuple[int, str], ...] = ()
    subjects: tuple[str, ...] = ()
    framed_keys: tuple[str, ...] = ()
    framed_values: tuple[str, ...] = ()
    undeclared_keys: tuple[str, ...] = ()
    undeclared_values: tuple[str, ...] = ()
    registry: str = ""
    strategies: tuple[str, ...] = ()

    @cached_property
    def _lookup(self) -> tuple[dict[int, int], dict[int, str]]:
        return dict(self.ids), dict(self.held)

    @cached_property
    def _sides(self) -> dict[str, tuple[str | None, str | None]]:
        """Per topic listed, how its keys and its values are looked at: FRAMED, UNDECLARED or None."""
        sides: dict[str, tuple[str | None, str | None]] = {}
        for keys, values, how in (
            (self.framed_keys, self.framed_values, FRAMED),
            (self.undeclared_keys, self.undeclared_values, UNDECLARED),
        ):
            for topic in keys:
                sides[topic] = (how, sides.get(topic, (None, None))[1])
            for topic in values:
                sides[topic] = (sides.get(topic, (None, None))[0], how)
        return sides

    @classmethod
    def of(cls, raw: dict[str, Any]) -> SchemaIdMap:
        """The map as a plan's JSON holds it."""
        topics = {
            name: tuple(str(t) for t in raw[name])
            for name in ("framed_keys", "framed_values", "undeclared_keys", "undeclared_values")
        }
        return cls(
            ids=tuple((int(s), int(t)) for s, t in raw["ids"]),
            held=tuple((int(i), str(s)) for i, s in raw["held"]),
            subjects=tuple(str(s) for s in raw["subjects"]),
            registry=str(raw["registry"]),
            strategies=tuple(str(s) for s in raw["strategies"]),
            **topics,
        )

    def __bool__(self) -> bool:
        return bool(self._sides)

    def maps(self, topic: str) -> bool:
        """Whether a side of ``topic`` is declared framed: its records may change."""
        return FRAMED in self._sides.get(topic, ())

    def inspects(self, topic: str) -> bool:
        """Whether a side of ``topic`` is undeclared: its records are looked at, never changed."""
        return UNDECLARED in self._sides.get(topic, ())

    def covers(self, topic: str) -> bool:
        return topic in self._sides

    def remap(self, topic: str, key: bytes | None, value: bytes | None) -> tuple[bytes | None, bytes | None]:
        """The record's key and value with their schema ids mapped where their side is declared
        framed; ``UnknownSchemaId`` for one the map refuses."""
        return self.remapper(topic)(key, value)

    def remapper(self, topic: str) -> Remap:
        """``remap`` of ``topic``'s records, its sides resolved once (the record path calls it per
        record)."""
        keys, values = self._sides.get(topic, (None, None))
        key, value = self._side("key", keys), self._side("value", values)
        return lambda k, v: (key(k), value(v))

    def _side(self, side: str, how: str | None) -> Callable[[bytes | None], bytes | None]:
        """What happens to a key or value (``side``) looked at as ``how`` says."""
        ids, held = self._lookup
        if how is None:
            return _unchanged

        def framed(data: bytes | None) -> bytes | None:
            if data is None or len(data) < HEADER_BYTES or data[0] != MAGIC:
                return data
            source_id = int.from_bytes(data[1:HEADER_BYTES], "big")
            target_id = ids.get(source_id)
            if target_id is None:
                raise UnknownSchemaId(side, source_id, framed=True, holder=held.get(source_id))
            return data if target_id == source_id else with_schema_id(data, target_id)

        def undeclared(data: bytes | None) -> bytes | None:
            if data is None or len(data) < HEADER_BYTES or data[0] != MAGIC:
                return data
            source_id = int.from_bytes(data[1:HEADER_BYTES], "big")
            if source_id in held:
                raise UnknownSchemaId(side, source_id, framed=False, holder=held[source_id])
            return data

        return framed if how == FRAMED else undeclared

    def refusal(self, topic: str, unknown: UnknownSchemaId, holders: Sequence[str] | str) -> str:
        """Why ``topic``'s record is refused, and the one thing to do. ``holders``: the subjects of the
        source registry holding the id as it answers now, or why it could not be asked."""
        side, found, holder = unknown.side, unknown.source_id, unknown.holder
        framed, plain = DECLARING[(side, FRAMED)], DECLARING[(side, PLAIN)]
        carries = f"its {side} carries schema id {found}"
        if not unknown.framed:
            return (
                f"its {side} looks like Confluent's wire format, with schema id {found}, which the source "
                f"registry's subject {holder} holds, and the flow declares {topic}'s {side}s neither framed "
                f"nor plain: passed on as they are, they would keep the source's ids. Declare them: add "
                f"{topic} to {framed} (their ids are then mapped), or, if they are not in the wire format, "
                f"to {plain} (they then pass as they are)"
            )
        if holder is not None:
            return (
                f"{carries}, which the flow's schema sync did not map: the source registry's subject "
                f"{holder} holds it, and {SCHEMA_SUBJECTS_INCLUDE} and {SCHEMA_SUBJECTS_EXCLUDE} leave "
                f"{holder} out of the sync. Let them include {holder}"
            )
        if isinstance(holders, str):
            return (
                f"{carries}, which no subject the flow's schema sync read holds, and the source registry "
                f"{self.registry} could not be asked which subject does ({holders}). Ask it "
                f"(GET /schemas/ids/{found}/versions), then declare or sync accordingly"
            )
        if not holders:
            return (
                f"{carries}, and no subject of the source registry {self.registry} holds that id, so no "
                f"sync can map it: the record was not serialized with that registry, or {topic}'s {side}s "
                f"are not all in the wire format. Find what wrote it; if those {side}s are plain, move "
                f"{topic} from {framed} to {plain}"
            )
        named = {s: strategy_of(s, topic) for s in holders}
        unnamed = next(((s, st) for s, st in named.items() if st and st not in self.strategies), None)
        if unnamed is not None:
            return (
                f"{carries}, which the source registry's subject {unnamed[0]} holds, a subject of "
                f"{unnamed[1]}, which {SCHEMA_STRATEGIES} does not name. Add {unnamed[1]} to it"
            )
        since = next((s for s, st in named.items() if st), None)
        if since is not None:
            return (
                f"{carries}, which the source registry's subject {since} holds, registered after this "
                "copy's schema sync. Run the flow again: its next sync maps it"
            )
        return (
            f"{carries}, which the source registry's subjects {', '.join(sorted(holders))} hold, none of "
            f"them {topic}'s under {', '.join(self.strategies)}: the sync maps the schemas of a topic's "
            f"own subjects only. Register the schema under {topic}-{side} in the source registry too (it "
            "keeps its id there), then run the flow again"
        )


def _unchanged(data: bytes | None) -> bytes | None:
    return data


NO_SCHEMA_IDS = SchemaIdMap()
