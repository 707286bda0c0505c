"""MM2's Heartbeat record (``connect-mirror-client``), byte-compatible.

Key: sourceClusterAlias STRING, targetClusterAlias STRING. Value: version INT16 (0), timestamp
INT64 (epoch ms). Written to partition 0 of the ``heartbeats`` topic; mirrored ``heartbeats`` topics
(``primary.heartbeats``) are how ``MirrorClient.upstreamClusters`` and ``replicationHops`` see the
topology.
"""

from __future__ import annotations

from dataclasses import dataclass

from mirrorflow.errors import WireFormatError
from mirrorflow.wire import Reader, encode

VERSION = 0


@dataclass(frozen=True)
class Heartbeat:
    source_cluster_alias: str
    target_cluster_alias: str
    timestamp: int

    def key(self) -> bytes:
        return encode(("string", self.source_cluster_alias), ("string", self.target_cluster_alias))

    def value(self) -> bytes:
        return encode(("int16", VERSION), ("int64", self.timestamp))

    @classmethod
    def decode(cls, key: bytes, value: bytes) -> Heartbeat:
        k, v = Reader(key), Reader(value)
        source, target = k.string(), k.string()
        k.end()
        version = v.int16()
        if version != VERSION:
            raise WireFormatError(f"heartbeat value version {version}, only {VERSION} is known")
        heartbeat = cls(source, target, v.int64())
        v.end()
        return heartbeat
