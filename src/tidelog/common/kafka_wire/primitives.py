"""Kafka's protocol primitives (big-endian integers, varints, strings, bytes, UUIDs), read from a
`Reader` over one frame and written into a `bytearray`.

Every read is bounded by the frame: a length that runs past the end, a negative size that is not
the null marker or a varint of more than 5 (10) bytes raises `MalformedFrameError`, which the listener
answers by closing the connection (Kafka's `InvalidRequestException` does the same).
"""

from __future__ import annotations

import struct
import uuid
from typing import Final

__all__ = ["MalformedFrameError", "Reader", "write_uvarint"]

_INT8: Final = struct.Struct(">b")
_INT16: Final = struct.Struct(">h")
_UINT16: Final = struct.Struct(">H")
_INT32: Final = struct.Struct(">i")
_UINT32: Final = struct.Struct(">I")
_INT64: Final = struct.Struct(">q")
_FLOAT64: Final = struct.Struct(">d")

INT8: Final = _INT8
INT16: Final = _INT16
UINT16: Final = _UINT16
INT32: Final = _INT32
UINT32: Final = _UINT32
INT64: Final = _INT64
FLOAT64: Final = _FLOAT64
ZERO_UUID: Final = uuid.UUID(int=0)


class MalformedFrameError(ValueError):
    """A request whose bytes do not parse as the schema of its API key and version says."""


class Reader:
    __slots__ = ("buffer", "end", "position")

    def __init__(self, buffer: bytes | memoryview, position: int = 0) -> None:
        self.buffer = buffer
        self.position = position
        self.end = len(buffer)

    def remaining(self) -> int:
        return self.end - self.position

    def _take(self, size: int) -> int:
        start = self.position
        if size < 0 or start + size > self.end:
            raise MalformedFrameError(f"{size} bytes wanted at {start}, the frame ends at {self.end}")
        self.position = start + size
        return start

    def fixed(self, layout: struct.Struct) -> int | float:
        value: int | float = layout.unpack_from(self.buffer, self._take(layout.size))[0]
        return value

    def int8(self) -> int:
        return int(self.fixed(_INT8))

    def int16(self) -> int:
        return int(self.fixed(_INT16))

    def int32(self) -> int:
        return int(self.fixed(_INT32))

    def int64(self) -> int:
        return int(self.fixed(_INT64))

    def boolean(self) -> bool:
        return self.int8() != 0

    def uuid_value(self) -> uuid.UUID:
        start = self._take(16)
        return uuid.UUID(bytes=bytes(self.buffer[start : start + 16]))

    def raw(self, size: int) -> bytes:
        start = self._take(size)
        return bytes(self.buffer[start : start + size])

    def view(self, size: int) -> memoryview:
        start = self._take(size)
        return memoryview(self.buffer)[start : start + size]

    def uvarint(self) -> int:
        value = shift = 0
        buffer, position = self.buffer, self.position
        for _ in range(5):
            if position >= self.end:
                raise MalformedFrameError("a varint runs past the frame")
            byte = buffer[position]
            position += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                self.position = position
                return value
            shift += 7
        raise MalformedFrameError("a varint longer than 5 bytes")

    # -- length-prefixed: `compact` is the flexible versions' unsigned varint of length + 1 --

    def _length(self, compact: bool, wide: bool) -> int:
        if compact:
            return self.uvarint() - 1
        return self.int32() if wide else self.int16()

    def string(self, compact: bool, nullable: bool) -> str | None:
        size = self._length(compact, wide=False)
        if size < 0:
            if size == -1 and nullable:
                return None
            raise MalformedFrameError(f"string length {size}")
        start = self._take(size)
        try:
            return bytes(self.buffer[start : start + size]).decode()
        except UnicodeDecodeError as error:
            raise MalformedFrameError(f"a string that is not UTF-8: {error}") from None

    def blob(self, compact: bool, nullable: bool) -> bytes | None:
        size = self._length(compact, wide=True)
        if size < 0:
            if size == -1 and nullable:
                return None
            raise MalformedFrameError(f"bytes length {size}")
        return self.raw(size)

    def records(self, compact: bool) -> memoryview | None:
        """A records field: a view into the frame (no copy), None when null."""
        size = self._length(compact, wide=True)
        if size < 0:
            if size == -1:
                return None
            raise MalformedFrameError(f"records length {size}")
        return self.view(size)

    def array_length(self, compact: bool) -> int:
        """Elements in an array (-1: null). Each element takes at least one byte, so a length
        beyond the bytes left is refused before anything is allocated for it."""
        size = self.uvarint() - 1 if compact else self.int32()
        if size < -1 or size > self.remaining():
            raise MalformedFrameError(f"array length {size} with {self.remaining()} bytes left")
        return size


def write_uvarint(out: bytearray, value: int) -> None:
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
