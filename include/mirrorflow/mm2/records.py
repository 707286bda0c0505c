"""MirrorMaker 2's internal records, byte for byte (``connect-mirror-client``, ``connect-mirror``).

Kafka's protocol types as MM2 writes them (``org.apache.kafka.common.protocol.types``): big-endian
integers and STRING = int16 byte length + UTF-8, never null. Checkpoint, Heartbeat and OffsetSync
records are concatenations of these fields; encoding them the same way byte for byte is what lets
MM2's own clients (MirrorClient, RemoteClusterUtils) read ours.

- ``Checkpoint``: key group STRING, topic STRING (the remote topic), partition INT32; value version
  INT16 (0), upstreamOffset INT64, offset INT64 (downstream), metadata STRING. Written to partition 0
  of ``<source><sep>checkpoints<sep>internal`` on the target, where
  ``RemoteClusterUtils.translateOffsets`` finds them.
- ``Heartbeat``: key sourceClusterAlias STRING, targetClusterAlias STRING; value version INT16 (0),
  timestamp INT64 (epoch ms). Written to partition 0 of the ``heartbeats`` topic; mirrored
  ``heartbeats`` topics (``primary.heartbeats``) are how ``MirrorClient.upstreamClusters`` and
  ``replicationHops`` see the topology.
- ``OffsetSync``: key topic STRING (source topic), partition INT32; value upstreamOffset INT64,
  offset INT64 (downstream), no version.

Standard library only: this module is what MM2 compatibility rests on, and runs anywhere.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from mirrorflow.errors import WireFormatError

_INT = {"int16": ">h", "int32": ">i", "int64": ">q"}


def encode(*fields: tuple[str, str | int]) -> bytes:
    """``encode(("string", "g"), ("int32", 3))``: the fields' bytes, in order."""
    out = bytearray()
    for kind, value in fields:
        if kind == "string":
            data = str(value).encode("utf-8")
            if len(data) > 0x7FFF:
                raise WireFormatError(f"string of {len(data)} bytes is longer than Kafka's STRING allows")
            out += struct.pack(">h", len(data)) + data
        else:
            out += struct.pack(_INT[kind], value)
    return bytes(out)


@dataclass
class Reader:
    """Reads fields in order from one record's key or value; ``end`` checks nothing is left over."""

    data: bytes
    pos: int = 0

    def string(self) -> str:
        size = self._int(">h", 2)
        if size < 0:
            raise WireFormatError(f"null or negative STRING length {size} at byte {self.pos - 2}")
        return self._take(size).decode("utf-8")

    def int16(self) -> int:
        return self._int(">h", 2)

    def int32(self) -> int:
        return self._int(">i", 4)

    def int64(self) -> int:
        return self._int(">q", 8)

    def end(self) -> None:
        if self.pos != len(self.data):
            raise WireFormatError(f"{len(self.data) - self.pos} unexpected bytes after the last field")

    def _int(self, fmt: str, size: int) -> int:
        (value,) = struct.unpack(fmt, self._take(size))
        return int(value)

    def _take(self, size: int) -> bytes:
        if self.pos + size > len(self.data):
            raise WireFormatError(f"record ends at byte {len(self.data)}, a field needs {self.pos + size}")
        chunk = self.data[self.pos : self.pos + size]
        self.pos += size
        return chunk


CHECKPOINT_VERSION = 0


@dataclass(frozen=True)
class Checkpoint:
    group: str
    topic: str
    partition: int
    upstream_offset: int
    downstream_offset: int
    metadata: str = ""

    def key(self) -> bytes:
        return encode(("string", self.group), ("string", self.topic), ("int32", self.partition))

    def value(self) -> bytes:
        return encode(
            ("int16", CHECKPOINT_VERSION),
            ("int64", self.upstream_offset),
            ("int64", self.downstream_offset),
            ("string", self.metadata),
        )

    @classmethod
    def decode(cls, key: bytes, value: bytes) -> Checkpoint:
        k, v = Reader(key), Reader(value)
        group, topic, partition = k.string(), k.string(), k.int32()
        k.end()
        version = v.int16()
        if version != CHECKPOINT_VERSION:
            raise WireFormatError(f"checkpoint value version {version}, only {CHECKPOINT_VERSION} is known")
        checkpoint = cls(group, topic, partition, v.int64(), v.int64(), v.string())
        v.end()
        return checkpoint


HEARTBEAT_VERSION = 0


@dataclass(frozen=True)
class Heartbeat:
    source_cluster_alias: str
    target_cluster_alias: str
    timestamp: int

    def key(self) -> bytes:
        return encode(("string", self.source_cluster_alias), ("string", self.target_cluster_alias))

    def value(self) -> bytes:
        return encode(("int16", HEARTBEAT_VERSION), ("int64", self.timestamp))

    @classmethod
    def decode(cls, key: bytes, value: bytes) -> Heartbeat:
        k, v = Reader(key), Reader(value)
        source, target = k.string(), k.string()
        k.end()
        version = v.int16()
        if version != HEARTBEAT_VERSION:
            raise WireFormatError(f"heartbeat value version {version}, only {HEARTBEAT_VERSION} is known")
        heartbeat = cls(source, target, v.int64())
        v.end()
        return heartbeat


@dataclass(frozen=True)
class OffsetSync:
    """MM2's OffsetSync (``connect-mirror``): key topic STRING (source topic), partition INT32; value
    upstreamOffset INT64, offset INT64 (downstream), no version."""

    topic: str
    partition: int
    upstream_offset: int
    downstream_offset: int

    def key(self) -> bytes:
        return encode(("string", self.topic), ("int32", self.partition))

    def value(self) -> bytes:
        return encode(("int64", self.upstream_offset), ("int64", self.downstream_offset))

    @classmethod
    def decode(cls, key: bytes, value: bytes) -> OffsetSync:
        k, v = Reader(key), Reader(value)
        sync = cls(k.string(), k.int32(), v.int64(), v.int64())
        k.end()
        v.end()
        return sync
