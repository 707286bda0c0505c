"""Confluent's wire format of a key or value, and the map that moves its schema id from the source
registry's numbering to the target registry's.

A serialized key or value in the wire format is a magic byte 0, the schema id (4 bytes, big-endian)
and the serializer's payload (Protobuf's message indexes first). Two registries number the same
schema differently, so a mirrored record keeps its meaning on the target only with its id mapped.

Invariants:
- Only the 4 id bytes ever change; the payload passes as it is, byte for byte.
- Only the sides the sync covers are read: a topic's values where its subject ``<topic>-value`` was
  synced, its keys where ``<topic>-key`` was. Any other key or value passes untouched, as does a null
  or one not in the wire format (shorter than 5 bytes, or not starting with 0).
- A key or value in the wire format whose id the map does not hold is never passed on with that id:
  ``remap`` raises ``UnknownSchemaId`` naming the id and the side.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

MAGIC = 0
HEADER_BYTES = 5


def schema_id(data: bytes | None) -> int | None:
    """The schema id of a key or value in the wire format, or None if it is not in it."""
    if data is None or len(data) < HEADER_BYTES or data[0] != MAGIC:
        return None
    return int.from_bytes(data[1:HEADER_BYTES], "big")


def with_schema_id(data: bytes, new_id: int) -> bytes:
    """``data`` (in the wire format) with its schema id replaced by ``new_id``."""
    return bytes((MAGIC,)) + new_id.to_bytes(4, "big") + data[HEADER_BYTES:]


class UnknownSchemaId(ValueError):
    """A key or value carries a schema id the sync did not map; ``side`` is ``key`` or ``value``."""

    def __init__(self, side: str, source_id: int) -> None:
        super().__init__(
            f"the record's {side} carries schema id {source_id}, which is not a schema of the subjects "
            "this flow syncs"
        )
        self.side = side
        self.source_id = source_id


@dataclass(frozen=True)
class SchemaIdMap:
    """Source id -> target id of every synced schema version (``ids``), and the topics whose keys and
    values are in the wire format (``key_topics``, ``value_topics``: those whose ``<topic>-key`` or
    ``<topic>-value`` subject was synced). Plain tuples: a plan carries it (as JSON) to Spark's
    executors, and a retry maps with the same one."""

    ids: tuple[tuple[int, int], ...] = ()
    key_topics: tuple[str, ...] = ()
    value_topics: tuple[str, ...] = ()

    @cached_property
    def _lookup(self) -> dict[int, int]:
        return dict(self.ids)

    @cached_property
    def _topics(self) -> tuple[frozenset[str], frozenset[str]]:
        return frozenset(self.key_topics), frozenset(self.value_topics)

    @classmethod
    def of(cls, raw: dict[str, list[Any]]) -> SchemaIdMap:
        """The map as a plan's JSON holds it."""
        return cls(
            tuple((int(s), int(t)) for s, t in raw["ids"]),
            tuple(str(t) for t in raw["key_topics"]),
            tuple(str(t) for t in raw["value_topics"]),
        )

    def __bool__(self) -> bool:
        return bool(self.key_topics or self.value_topics)

    def subjects(self) -> list[str]:
        """The synced subjects of the mapped topics (source names), sorted."""
        return sorted([*(f"{t}-key" for t in self.key_topics), *(f"{t}-value" for t in self.value_topics)])

    def covers(self, topic: str) -> bool:
        keys, values = self._topics
        return topic in keys or topic in values

    def remap(self, topic: str, key: bytes | None, value: bytes | None) -> tuple[bytes | None, bytes | None]:
        """The record's key and value with their schema ids mapped, where the sync covers them."""
        keys, values = self._topics
        if topic in keys:
            key = self._mapped("key", key)
        if topic in values:
            value = self._mapped("value", value)
        return key, value

    def _mapped(self, side: str, data: bytes | None) -> bytes | None:
        source_id = schema_id(data)
        if source_id is None or data is None:
            return data
        target_id = self._lookup.get(source_id)
        if target_id is None:
            raise UnknownSchemaId(side, source_id)
        return data if target_id == source_id else with_schema_id(data, target_id)


NO_SCHEMA_IDS = SchemaIdMap()
