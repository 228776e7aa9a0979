"""Kafka API schemas as data.

Each API is declared once (see :mod:`headwater.protocol.apis`) as a request and a response
:class:`Struct`, whose :class:`Field` s carry the version range they exist in::

    Field("transactional_id", NULLABLE_STRING, since=3)
    Field("topics", Array(Struct(Field("name", STRING), ...), nullable_since=1))

Decoding a struct at a version yields a ``dict`` holding every field of the schema: fields
absent at that version get their default, so handlers see one shape across versions.
Encoding takes such a dict; missing keys take the field's default. Fields outside the
version are skipped both ways.

Flexible versions (KIP-482): an :class:`Api` with ``flexible_since`` encodes its versions from
there on with compact strings, bytes and arrays (unsigned varint length + 1, 0 = null) and an
empty tagged-field section after every struct (tagged fields received are skipped: none is
known here). The advertised snapshot is Kafka 2.3 (no flexible versions) but for CreateTopics v5
(Kafka 2.4); every other API uses the classic encodings.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from headwater.protocol.errors import DecodeError
from headwater.protocol.primitives import FileRegion, Reader, Writer

Message = dict[str, Any]


@dataclass(frozen=True)
class Primitive:
    name: str
    read: Callable[[Reader], Any]
    write: Callable[[Writer, Any], None]
    default: Any


def _write_records(w: Writer, v: Any) -> None:
    if isinstance(v, FileRegion):
        w.file_region(v)
    else:
        w.nullable_bytes(v)


BOOLEAN = Primitive("bool", Reader.boolean, Writer.boolean, False)
INT8 = Primitive("int8", Reader.int8, Writer.int8, 0)
INT16 = Primitive("int16", Reader.int16, Writer.int16, 0)
INT32 = Primitive("int32", Reader.int32, Writer.int32, 0)
INT64 = Primitive("int64", Reader.int64, Writer.int64, 0)
FLOAT64 = Primitive("float64", Reader.float64, Writer.float64, 0.0)
STRING = Primitive("string", Reader.string, Writer.string, "")
NULLABLE_STRING = Primitive("nullable_string", Reader.nullable_string, Writer.nullable_string, None)
BYTES = Primitive("bytes", Reader.bytes_, Writer.bytes_, b"")
NULLABLE_BYTES = Primitive("nullable_bytes", Reader.nullable_bytes, Writer.nullable_bytes, None)
#: Record batches: decoded as a zero-copy memoryview (or None); encoded from bytes,
#: memoryview, None, or a FileRegion that the server sends with sendfile.
RECORDS = Primitive("records", Reader.nullable_view, _write_records, None)

#: what a classic primitive becomes in a flexible version
_COMPACT: dict[str, Primitive] = {
    "string": Primitive("compact_string", Reader.compact_string, Writer.compact_string, ""),
    "nullable_string": Primitive(
        "compact_nullable_string", Reader.compact_nullable_string, Writer.compact_nullable_string, None
    ),
    "bytes": Primitive("compact_bytes", Reader.compact_bytes, Writer.compact_bytes, b""),
    "nullable_bytes": Primitive(
        "compact_nullable_bytes", Reader.compact_nullable_bytes, Writer.compact_nullable_bytes, None
    ),
}


@dataclass(frozen=True)
class Array:
    """An int32 count then the elements; ``nullable_since`` is the first version where -1 (null) is allowed."""

    of: Primitive | Struct
    nullable_since: int | None = None


@dataclass(frozen=True)
class Field:
    name: str
    type: Primitive | Array | Struct
    since: int = 0
    until: int | None = None  # inclusive last version, None = still present
    default: Any = None  # None means: the type's default

    def present_in(self, version: int) -> bool:
        return self.since <= version and (self.until is None or version <= self.until)

    def default_value(self) -> Any:
        if self.default is not None:
            return self.default
        if isinstance(self.type, Primitive):
            return self.type.default
        if isinstance(self.type, Array):
            return []
        return self.type.default_value()


class Struct:
    """An ordered set of fields; the per-version field lists are computed once and cached."""

    def __init__(self, *fields: Field) -> None:
        self.fields = fields
        self._by_version: dict[int, tuple[Field, ...]] = {}

    def fields_at(self, version: int) -> tuple[Field, ...]:
        got = self._by_version.get(version)
        if got is None:
            got = tuple(f for f in self.fields if f.present_in(version))
            self._by_version[version] = got
        return got

    def default_value(self) -> Message:
        return {f.name: f.default_value() for f in self.fields}

    def decode(self, r: Reader, version: int, flexible: bool = False) -> Message:
        out: Message = {}
        for f in self.fields:
            if f.present_in(version):
                out[f.name] = _read(f.type, r, version, flexible)
            else:
                out[f.name] = f.default_value()
        if flexible:
            r.skip_tagged_fields()
        return out

    def encode(self, w: Writer, version: int, value: Message, flexible: bool = False) -> None:
        for f in self.fields_at(version):
            v = value.get(f.name, _MISSING)
            if v is _MISSING:
                v = f.default_value()
            try:
                _write(f.type, w, version, v, flexible)
            except (TypeError, ValueError, OverflowError, AttributeError, struct.error) as e:
                raise ValueError(f"cannot encode field {f.name!r} at v{version}: {e}") from e
        if flexible:
            w.empty_tagged_fields()


_MISSING = object()


def _read(t: Primitive | Array | Struct, r: Reader, version: int, flexible: bool = False) -> Any:
    if isinstance(t, Primitive):
        return (_COMPACT.get(t.name, t) if flexible else t).read(r)
    if isinstance(t, Struct):
        return t.decode(r, version, flexible)
    n = r.compact_length() if flexible else r.array_length()
    if n < 0:
        if n != -1 or t.nullable_since is None or version < t.nullable_since:
            raise DecodeError(f"invalid array length {n}")
        return None
    elem = t.of
    if isinstance(elem, Primitive):
        read = (_COMPACT.get(elem.name, elem) if flexible else elem).read
        return [read(r) for _ in range(n)]
    return [elem.decode(r, version, flexible) for _ in range(n)]


def _write(t: Primitive | Array | Struct, w: Writer, version: int, v: Any, flexible: bool = False) -> None:
    if isinstance(t, Primitive):
        (_COMPACT.get(t.name, t) if flexible else t).write(w, v)
    elif isinstance(t, Struct):
        t.encode(w, version, v, flexible)
    elif v is None:
        if t.nullable_since is None or version < t.nullable_since:
            raise ValueError("null array at a version that does not allow it")
        if flexible:
            w.uvarint(0)
        else:
            w.int32(-1)
    else:
        if flexible:
            w.uvarint(len(v) + 1)
        else:
            w.int32(len(v))
        elem = t.of
        if isinstance(elem, Primitive):
            write = (_COMPACT.get(elem.name, elem) if flexible else elem).write
            for item in v:
                write(w, item)
        else:
            for item in v:
                elem.encode(w, version, item, flexible)


@dataclass(frozen=True)
class Api:
    """One Kafka API: its key, the versions we implement, and its request/response schemas."""

    key: int
    name: str
    min_version: int
    max_version: int
    request: Struct
    response: Struct
    #: the first flexible version (KIP-482), None when none is
    flexible_since: int | None = None

    def supports(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version

    def is_flexible(self, version: int) -> bool:
        """Compact encodings and tagged fields at this version; request header v2 and (but for
        ApiVersions) response header v1."""
        return self.flexible_since is not None and version >= self.flexible_since
