"""MM2's Checkpoint record (``connect-mirror-client``), byte-compatible.

Key: group STRING, topic STRING (the remote topic), partition INT32. Value: version INT16 (0),
upstreamOffset INT64, offset INT64 (downstream), metadata STRING. Written to partition 0 of
``<source><sep>checkpoints<sep>internal`` on the target, where ``RemoteClusterUtils.translateOffsets``
finds them.
"""

from __future__ import annotations

from dataclasses import dataclass

from mirrorflow.errors import WireFormatError
from mirrorflow.wire import Reader, encode

VERSION = 0


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
            ("int16", VERSION),
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
        if version != VERSION:
            raise WireFormatError(f"checkpoint value version {version}, only {VERSION} is known")
        checkpoint = cls(group, topic, partition, v.int64(), v.int64(), v.string())
        v.end()
        return checkpoint
