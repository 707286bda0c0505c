"""Kafka's protocol types as MirrorMaker 2 writes its internal records (``org.apache.kafka.common
.protocol.types``): big-endian integers and STRING = int16 byte length + UTF-8, never null.

Checkpoint, Heartbeat and OffsetSync records are concatenations of these fields; encoding them the
same way byte for byte is what lets MM2's own clients (MirrorClient, RemoteClusterUtils) read ours.
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
