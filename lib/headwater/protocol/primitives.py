"""Kafka's primitive types on bytes: a bounds-checked :class:`Reader` and a :class:`Writer`.

All integers are big-endian. ``STRING`` is an int16 length then UTF-8 (-1 = null for the
nullable kind); ``BYTES`` an int32 length then bytes (-1 = null). ``VARINT``/``VARLONG`` are
zigzag-encoded base-128 varints (protobuf style), used inside record batches.

Every read checks bounds first and raises :class:`DecodeError`; nothing here raises
``IndexError`` or ``struct.error``.

A :class:`Writer` collects output as parts: ``bytes`` and, for zero-copy fetches, opaque
:class:`FileRegion` placeholders that the network layer sends with ``sendfile``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Protocol

from headwater.protocol.errors import DecodeError

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_U32 = struct.Struct(">I")
_F64 = struct.Struct(">d")


class SupportsFileno(Protocol):
    def fileno(self) -> int: ...


@dataclass(frozen=True, slots=True)
class FileRegion:
    """``size`` bytes of ``file`` starting at ``position``, to be sent without copying.

    The owner of ``file`` keeps its descriptor open for as long as a region refers to it.
    """

    file: SupportsFileno
    position: int
    size: int


class Reader:
    """Reads primitives from a buffer, advancing ``pos``; every read is bounds-checked."""

    __slots__ = ("buf", "end", "pos")

    def __init__(self, data: bytes | bytearray | memoryview, pos: int = 0, end: int | None = None) -> None:
        self.buf = data if isinstance(data, memoryview) else memoryview(data)
        self.pos = pos
        self.end = len(self.buf) if end is None else end
        if not 0 <= self.pos <= self.end <= len(self.buf):
            raise DecodeError("reader bounds outside the buffer")

    def remaining(self) -> int:
        return self.end - self.pos

    def _need(self, n: int) -> int:
        p = self.pos
        if n < 0 or p + n > self.end:
            raise DecodeError(f"need {n} bytes at offset {p}, only {self.end - p} left")
        self.pos = p + n
        return p

    def int8(self) -> int:
        return int(_I8.unpack_from(self.buf, self._need(1))[0])

    def int16(self) -> int:
        return int(_I16.unpack_from(self.buf, self._need(2))[0])

    def int32(self) -> int:
        return int(_I32.unpack_from(self.buf, self._need(4))[0])

    def int64(self) -> int:
        return int(_I64.unpack_from(self.buf, self._need(8))[0])

    def uint32(self) -> int:
        return int(_U32.unpack_from(self.buf, self._need(4))[0])

    def float64(self) -> float:
        return float(_F64.unpack_from(self.buf, self._need(8))[0])

    def boolean(self) -> bool:
        return self.int8() != 0

    def raw(self, n: int) -> memoryview:
        p = self._need(n)
        return self.buf[p : p + n]

    def uvarint(self) -> int:
        result = 0
        shift = 0
        buf, p, end = self.buf, self.pos, self.end
        while True:
            if p >= end:
                raise DecodeError("truncated varint")
            b = buf[p]
            p += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                break
            shift += 7
            if shift > 63:
                raise DecodeError("varint longer than 10 bytes")
        self.pos = p
        return result

    def varint(self) -> int:
        """A zigzag-encoded signed varint (int32 or int64 range)."""
        v = self.uvarint()
        return (v >> 1) ^ -(v & 1)

    varlong = varint

    def string(self) -> str:
        n = self.int16()
        if n < 0:
            raise DecodeError("null where a STRING is required")
        return self._utf8(n)

    def nullable_string(self) -> str | None:
        n = self.int16()
        return None if n < 0 else self._utf8(n)

    def _utf8(self, n: int) -> str:
        try:
            return str(self.raw(n), "utf-8")
        except UnicodeDecodeError as e:
            raise DecodeError(f"invalid UTF-8 in string: {e}") from None

    def bytes_(self) -> bytes:
        n = self.int32()
        if n < 0:
            raise DecodeError("null where BYTES are required")
        return bytes(self.raw(n))

    def nullable_bytes(self) -> bytes | None:
        n = self.int32()
        return None if n < 0 else bytes(self.raw(n))

    def nullable_view(self) -> memoryview | None:
        """Like :meth:`nullable_bytes` but without copying (for record batches)."""
        n = self.int32()
        return None if n < 0 else self.raw(n)

    def compact_length(self) -> int:
        """A flexible version's length: unsigned varint N+1; -1 means null."""
        n = self.uvarint() - 1
        if n > self.end - self.pos:
            raise DecodeError(f"length {n} exceeds the {self.end - self.pos} bytes left")
        return n

    def compact_string(self) -> str:
        n = self.compact_length()
        if n < 0:
            raise DecodeError("null where a COMPACT_STRING is required")
        return self._utf8(n)

    def compact_nullable_string(self) -> str | None:
        n = self.compact_length()
        return None if n < 0 else self._utf8(n)

    def compact_bytes(self) -> bytes:
        n = self.compact_length()
        if n < 0:
            raise DecodeError("null where COMPACT_BYTES are required")
        return bytes(self.raw(n))

    def compact_nullable_bytes(self) -> bytes | None:
        n = self.compact_length()
        return None if n < 0 else bytes(self.raw(n))

    def skip_tagged_fields(self) -> None:
        """A flexible version's tagged fields: a count, then (tag, size, bytes) each; none is known here."""
        for _ in range(self.uvarint()):
            self.uvarint()
            size = self.uvarint()
            self._need(size)

    def array_length(self) -> int:
        """An int32 array length; -1 means null. Guards against lengths the input cannot hold."""
        n = self.int32()
        if n > self.end - self.pos:
            raise DecodeError(f"array length {n} exceeds the {self.end - self.pos} bytes left")
        return n


def encode_uvarint(v: int) -> bytes:
    out = bytearray()
    while v > 0x7F:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def encode_varint(v: int) -> bytes:
    """Zigzag varint for a signed 64-bit value."""
    return encode_uvarint((v << 1) ^ (v >> 63))


class Writer:
    """Accumulates an encoded message as parts: bytes, and FileRegions for zero-copy sends."""

    __slots__ = ("_buf", "_parts", "_size")

    def __init__(self) -> None:
        self._buf = bytearray()
        self._parts: list[bytes | FileRegion] = []
        self._size = 0

    def int8(self, v: int) -> None:
        self._buf += _I8.pack(v)

    def int16(self, v: int) -> None:
        self._buf += _I16.pack(v)

    def int32(self, v: int) -> None:
        self._buf += _I32.pack(v)

    def int64(self, v: int) -> None:
        self._buf += _I64.pack(v)

    def uint32(self, v: int) -> None:
        self._buf += _U32.pack(v)

    def float64(self, v: float) -> None:
        self._buf += _F64.pack(v)

    def boolean(self, v: bool) -> None:
        self._buf.append(1 if v else 0)

    def raw(self, data: bytes | bytearray | memoryview) -> None:
        self._buf += data

    def string(self, v: str) -> None:
        b = v.encode("utf-8")
        if len(b) > 0x7FFF:
            raise ValueError("string longer than 32767 bytes")
        self._buf += _I16.pack(len(b))
        self._buf += b

    def nullable_string(self, v: str | None) -> None:
        if v is None:
            self._buf += _I16.pack(-1)
        else:
            self.string(v)

    def bytes_(self, v: bytes | bytearray | memoryview) -> None:
        self._buf += _I32.pack(len(v))
        self._buf += v

    def nullable_bytes(self, v: bytes | bytearray | memoryview | None) -> None:
        if v is None:
            self._buf += _I32.pack(-1)
        else:
            self.bytes_(v)

    def uvarint(self, v: int) -> None:
        self._buf += encode_uvarint(v)

    def compact_string(self, v: str) -> None:
        b = v.encode("utf-8")
        if len(b) > 0x7FFF:
            raise ValueError("string longer than 32767 bytes")
        self._buf += encode_uvarint(len(b) + 1)
        self._buf += b

    def compact_nullable_string(self, v: str | None) -> None:
        if v is None:
            self._buf += b"\x00"
        else:
            self.compact_string(v)

    def compact_bytes(self, v: bytes | bytearray | memoryview) -> None:
        self._buf += encode_uvarint(len(v) + 1)
        self._buf += v

    def compact_nullable_bytes(self, v: bytes | bytearray | memoryview | None) -> None:
        if v is None:
            self._buf += b"\x00"
        else:
            self.compact_bytes(v)

    def empty_tagged_fields(self) -> None:
        self._buf += b"\x00"

    def file_region(self, region: FileRegion) -> None:
        """An int32 length, then the region's bytes, sent later straight from the file."""
        self._buf += _I32.pack(region.size)
        self._flush()
        self._parts.append(region)
        self._size += region.size

    def _flush(self) -> None:
        if self._buf:
            self._parts.append(bytes(self._buf))
            self._size += len(self._buf)
            self._buf = bytearray()

    def parts(self) -> list[bytes | FileRegion]:
        self._flush()
        return self._parts

    def size(self) -> int:
        return self._size + len(self._buf)

    def getvalue(self) -> bytes:
        """The whole message as bytes (only when it holds no FileRegion)."""
        parts = self.parts()
        if any(isinstance(p, FileRegion) for p in parts):
            raise ValueError("message holds file regions; send its parts instead")
        return b"".join(p for p in parts if isinstance(p, bytes))
