"""The records inside a magic-2 record batch: encoding a batch, decoding one, walking a record set.

The batch header (61 bytes) is described in :mod:`headwater.protocol.records.header`. After it
come ``records_count`` records, compressed together as one blob when the codec is not none.
Varints are zigzag base-128 (protobuf ``sint``); one record::

    field             type                    meaning
    length            varint                  bytes of the record after this field
    attributes        int8                    unused, 0
    timestamp_delta   varlong                 timestamp - batch base_timestamp (may be negative)
    offset_delta      varint                  offset - batch base_offset
    key_length        varint                  -1 = null key
    key               key_length bytes
    value_length      varint                  -1 = null value
    value             value_length bytes
    header_count      varint
    headers           header_count times:
        key_length    varint                  never null
        key           key_length bytes of UTF-8
        value_length  varint                  -1 = null value
        value         value_length bytes

Timestamps: with CreateTime (attribute bit 3 clear) a record's timestamp is
``base_timestamp + timestamp_delta``; with LogAppendTime (bit 3 set) every record's timestamp is
the batch's ``max_timestamp``, which the broker set when it appended the batch.

Decoding is total: any short, malformed or inconsistent input (including a record count that
does not match the records present, or bytes left over) raises ``KafkaError(CORRUPT_MESSAGE)``.
Codec failures raise as :mod:`~headwater.protocol.records.compression` documents.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator, Sequence
from types import ModuleType
from typing import Any, NamedTuple, TypeVar

from headwater.protocol.errors import ErrorCode, KafkaError
from headwater.protocol.records import header as _h
from headwater.protocol.records.compression import DEFAULT_MAX_OUTPUT, Codec, compress, decompress
from headwater.protocol.records.header import BatchHeader

__all__ = [
    "EXTENSION",
    "Record",
    "RecordInput",
    "RecordLike",
    "decode_batch",
    "encode_batch",
    "iter_batches",
    "read_record_set",
]

Buffer = bytes | bytearray | memoryview
Headers = tuple[tuple[str, bytes | None], ...]
# What encode_batch takes per record: (key, value, timestamp, headers); RecordInput is one.
RecordLike = tuple[Buffer | None, Buffer | None, int, Sequence[tuple[str, Buffer | None]]]

_EMPTY_HEADERS: Headers = ()


class Record(NamedTuple):
    """One decoded record, with its absolute offset and timestamp (ms)."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: Headers = ()


class RecordInput(NamedTuple):
    """One record to encode. A plain 4-tuple in this order works as well."""

    key: Buffer | None
    value: Buffer | None
    timestamp: int  # ms since the epoch (or -1, Kafka's NO_TIMESTAMP)
    headers: Sequence[tuple[str, Buffer | None]] = ()


#: A NamedTuple whose last five fields are Record's (the consumer's record adds topic and partition
#: in front of them, passed as ``prefix``).
R = TypeVar("R", bound=tuple[Any, ...])


def _load_extension() -> ModuleType | None:
    """The compiled codec (_crecords.pyx), unless HEADWATER_NO_EXTENSIONS is set or it is not built."""
    if os.environ.get("HEADWATER_NO_EXTENSIONS", "") not in ("", "0"):
        return None
    try:
        from headwater.protocol.records import _crecords
    except ImportError:
        return None
    return _crecords


_C = _load_extension()
#: True when records are encoded and decoded by the compiled codec.
EXTENSION = _C is not None


# -- varints -------------------------------------------------------------------------------------

_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1


def _uvarint(z: int) -> bytes:
    out = bytearray()
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


# _VARINT[z] is the encoding of the zigzag value z, for z < 2^14 (every 1- and 2-byte varint):
# record lengths, key/value lengths, offset deltas and small timestamp deltas all come from here.
_TABLE_SIZE = 1 << 14
_VARINT: tuple[bytes, ...] = tuple(_uvarint(z) for z in range(_TABLE_SIZE))


def _varint(v: int) -> bytes:
    """The zigzag varint for a signed 64-bit ``v``."""
    if not _INT64_MIN <= v <= _INT64_MAX:
        raise ValueError(f"{v} does not fit a varlong")
    z = (v << 1) ^ (v >> 63)
    return _VARINT[z] if z < _TABLE_SIZE else _uvarint(z)


def _read_uvarint(data: bytes, p: int) -> tuple[int, int]:
    """(value, new position) of the unsigned varint at ``p``; at most 10 bytes."""
    result = 0
    shift = 0
    while True:
        b = data[p]  # IndexError at the end of data: the caller turns it into CORRUPT_MESSAGE
        p += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, p
        shift += 7
        if shift > 63:
            raise _corrupt("varint longer than 10 bytes")


def _corrupt(what: str) -> KafkaError:
    return KafkaError(ErrorCode.CORRUPT_MESSAGE, what)


# -- encoding ------------------------------------------------------------------------------------

_HEADER_ZEROS = bytes(_h.HEADER_SIZE)
_CRC = struct.Struct(">I")
_NO_HEADERS = b"\x00"  # header_count 0
_ATTRIBUTES = b"\x00"


def _encode_headers(headers: Sequence[tuple[str, Buffer | None]]) -> bytes:
    out = bytearray(_varint(len(headers)))
    for hkey, hvalue in headers:
        kb = hkey.encode("utf-8")
        out += _varint(len(kb))
        out += kb
        if hvalue is None:
            out += b"\x01"  # zigzag(-1)
        else:
            out += _varint(len(hvalue))
            out += hvalue
    return bytes(out)


def _encode_records(
    out: bytearray, records: Sequence[RecordLike], base_ts: int, offset_deltas: Sequence[int] | None = None
) -> int:
    """Append ``records`` at offset deltas 0..n-1 (or ``offset_deltas``) to ``out``; the largest timestamp.

    The reference implementation of _crecords.encode_records (and the fallback without it)."""
    table = _VARINT
    size = _TABLE_SIZE
    varint = _varint
    max_ts = base_ts
    append = out.extend
    join = b"".join
    for i, (key, value, ts, hdrs) in enumerate(records):
        if ts > max_ts:
            max_ts = ts
        d = ts - base_ts
        tz = (d << 1) ^ (d >> 63)
        if offset_deltas is not None:
            i = offset_deltas[i]
        if key is None:
            kl = b"\x01"
            key = b""
        else:
            z = len(key) << 1
            kl = table[z] if z < size else varint(len(key))
        if value is None:
            vl = b"\x01"
            value = b""
        else:
            z = len(value) << 1
            vl = table[z] if z < size else varint(len(value))
        body = join(
            (
                _ATTRIBUTES,
                table[tz] if 0 <= tz < size else varint(d),
                table[i << 1] if i < 8192 else varint(i),
                kl,
                key,
                vl,
                value,
                _encode_headers(hdrs) if hdrs else _NO_HEADERS,
            )
        )
        z = len(body) << 1
        append(table[z] if z < size else varint(len(body)))
        append(body)

    return max_ts


def encode_batch(
    records: Sequence[RecordLike],
    *,
    base_offset: int = 0,
    compression: int = Codec.NONE,
    timestamp_type: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    partition_leader_epoch: int = -1,
    transactional: bool = False,
    control: bool = False,
    offset_deltas: Sequence[int] | None = None,
    last_offset_delta: int | None = None,
) -> bytes:
    """One magic-2 batch holding ``records`` at offset deltas 0..n-1.

    base_timestamp is the first record's timestamp (as the Java client does), max_timestamp the
    largest. ``timestamp_type`` 1 sets LogAppendTime (attribute bit 3). ``transactional`` and
    ``control`` set attribute bits 4 and 5. ``offset_deltas`` and ``last_offset_delta`` rebuild a
    batch with gaps (what log compaction keeps of one: the surviving records keep their offsets,
    the batch its last offset). Raises ValueError for an empty ``records`` or a value that does not
    fit its field; the codec's KafkaError if compression fails.
    """
    n = len(records)
    if n == 0:
        raise ValueError("a record batch needs at least one record")
    base_ts = records[0][2]
    out = bytearray(_HEADER_ZEROS)
    if offset_deltas is not None:
        max_ts: int = _encode_records(out, records, base_ts, offset_deltas)
    elif _C is not None:
        try:
            max_ts = _C.encode_records(out, records, base_ts)
        except OverflowError as e:
            raise ValueError(f"a record field does not fit its varint: {e}") from None
    else:
        max_ts = _encode_records(out, records, base_ts)
    if compression != Codec.NONE:
        payload = compress(compression, memoryview(out)[_h.HEADER_SIZE :])
        out = bytearray(_HEADER_ZEROS)  # a fresh buffer: no view of the old one can pin it
        out += payload
    attributes = (
        (compression & _h.CODEC_MASK)
        | (_h.TIMESTAMP_TYPE_BIT if timestamp_type else 0)
        | (_h.TRANSACTIONAL_BIT if transactional else 0)
        | (_h.CONTROL_BIT if control else 0)
    )
    try:
        _h.HEADER.pack_into(
            out,
            0,
            base_offset,
            len(out) - _h.LOG_OVERHEAD,
            partition_leader_epoch,
            2,
            0,  # crc, set below
            attributes,
            n - 1 if last_offset_delta is None else last_offset_delta,
            base_ts,
            max_ts,
            producer_id,
            producer_epoch,
            base_sequence,
            n,
        )
    except struct.error as e:
        raise ValueError(f"a record batch header field is out of range: {e}") from None
    _CRC.pack_into(out, _h.CRC_OFFSET, _h.compute_crc(out, 0, len(out)))
    return bytes(out)


# -- decoding ------------------------------------------------------------------------------------


def decode_batch(
    buf: Buffer, pos: int = 0, *, verify_crc: bool = True, max_output: int = DEFAULT_MAX_OUTPUT
) -> tuple[BatchHeader, list[Record]]:
    """The header and the records of the batch at ``pos``, with absolute offsets and timestamps.

    Control batches decode like any other (their records are the control key/value pairs).
    ``max_output`` bounds the decompressed size of the records.
    """
    h = _h.read_header(buf, pos)
    end = pos + h.size
    if end > len(buf):
        raise _corrupt(f"record batch of {h.size} bytes at byte {pos} is truncated at byte {len(buf)}")
    if verify_crc and not _h.crc_matches(buf, pos, h):
        raise _corrupt(f"record batch at byte {pos} fails its CRC-32C check")
    return h, _decode_records(h, buf, pos + _h.HEADER_SIZE, end, max_output)


def iter_batches(
    buf: Buffer, *, verify_crc: bool = True, max_output: int = DEFAULT_MAX_OUTPUT
) -> Iterator[tuple[BatchHeader, list[Record]]]:
    """Each batch of a record set as a Fetch response carries it, in order.

    A truncated batch at the end (Kafka may cut the last batch of a fetch at the size limit) ends
    the iteration silently. Control batches (``header.is_control``) are yielded with an EMPTY
    record list: their records are transaction markers, not data; use :func:`decode_batch` to
    read them. Anything else wrong (a length below the header size, a magic other than 2 -- legacy
    message sets are not read here --, a CRC mismatch, malformed records) raises
    ``KafkaError(CORRUPT_MESSAGE)``; a codec id of 5-7 raises UNSUPPORTED_COMPRESSION_TYPE.
    """
    for h, start, end in _complete_batches(buf, verify_crc):
        yield h, ([] if h.is_control else _decode_records(h, buf, start, end, max_output))


def read_record_set(
    buf: Buffer,
    record_type: type[R],
    prefix: tuple[Any, ...] = (),
    min_offset: int = 0,
    *,
    verify_crc: bool = True,
    max_output: int = DEFAULT_MAX_OUTPUT,
) -> tuple[list[R], int, int]:
    """The records of a Fetch response's record set at or after ``min_offset``, as ``record_type``
    instances (``prefix`` then offset, timestamp, key, value, headers): what a consumer needs, in
    one pass and one object per record. Also the offset after the last complete batch (or -1 when
    none) and the number of complete batches. Errors as :func:`iter_batches`."""
    out: list[R] = []
    next_offset = -1
    complete = 0
    for h, start, end in _complete_batches(buf, verify_crc):
        complete += 1
        next_offset = h.next_offset
        if not h.is_control and h.next_offset > min_offset:
            out += _decode_records(h, buf, start, end, max_output, record_type, prefix, min_offset)
    return out, next_offset, complete


def _complete_batches(buf: Buffer, verify_crc: bool) -> Iterator[tuple[BatchHeader, int, int]]:
    """(header, start of its records, end) of each complete batch of a record set."""
    n = len(buf)
    pos = 0
    while True:
        peek = _h.peek_offset_and_length(buf, pos)
        if peek is None:
            return
        length = peek[1]
        if length < _h.HEADER_SIZE - _h.LOG_OVERHEAD:
            raise _corrupt(f"record batch length {length} at byte {pos} is below the header size")
        if pos + _h.LOG_OVERHEAD + length > n:
            return  # a partial trailing batch
        h = _h.read_header(buf, pos)
        if verify_crc and not _h.crc_matches(buf, pos, h):
            raise _corrupt(f"record batch at byte {pos} fails its CRC-32C check")
        end = pos + h.size
        yield h, pos + _h.HEADER_SIZE, end
        pos = end


def first_record(batch: Buffer, *, max_output: int = DEFAULT_MAX_OUTPUT) -> Record | None:
    """The first record of one complete batch (at byte 0), parsing no other record.

    For readers that account for a whole batch from its header and its first record (the audit
    counts a batch whose records share one window and one origin this way). A compressed batch is
    still inflated as a whole (one call into the codec); None for a control or empty batch.
    """
    h = _h.read_header(batch, 0)
    if h.records_count <= 0 or h.is_control:
        return None
    if h.size > len(batch):
        raise _corrupt(f"record batch of {h.size} bytes is truncated at byte {len(batch)}")
    if h.codec == Codec.NONE:
        data = bytes(memoryview(batch)[_h.HEADER_SIZE : h.size])
    else:
        data = decompress(h.codec, memoryview(batch)[_h.HEADER_SIZE : h.size], max_output=max_output)
    try:
        zigzag, p = _read_uvarint(data, 0)
        length = (zigzag >> 1) ^ -(zigzag & 1)
        if length < 0 or p + length > len(data):
            raise _corrupt(f"record batch at offset {h.base_offset} has a malformed first record")
        first: Record = _parse(data[: p + length], 1, h.base_offset, h.base_timestamp, h.max_timestamp, h.attributes)[0]
        return first
    except (IndexError, UnicodeDecodeError) as e:
        raise _corrupt(f"record batch at offset {h.base_offset} has a malformed first record: {e}") from None


def _decode_records(
    h: BatchHeader,
    buf: Buffer,
    start: int,
    end: int,
    max_output: int,
    record_type: type[Any] = Record,
    prefix: tuple[Any, ...] = (),
    min_offset: int = -1,
) -> list[Any]:
    count = h.records_count
    if count < 0:
        raise _corrupt(f"record batch has a negative record count {count}")
    if count == 0:
        # Log compaction keeps emptied batches (producer state); no records, no payload to inflate.
        if start != end and h.codec == Codec.NONE:
            raise _corrupt(f"record batch holds {end - start} bytes but no records")
        return []
    codec = h.codec
    if codec == Codec.NONE:
        data: Buffer = memoryview(buf)[start:end] if _C is not None else bytes(buf[start:end])
    else:
        data = decompress(codec, memoryview(buf)[start:end], max_output=max_output)
    return _parse(
        data, count, h.base_offset, h.base_timestamp, h.max_timestamp, h.attributes, record_type, prefix, min_offset
    )


def _parse(
    data: Buffer,
    count: int,
    base_offset: int,
    base_ts: int,
    max_ts: int,
    attributes: int,
    record_type: type[Any] = Record,
    prefix: tuple[Any, ...] = (),
    min_offset: int = -1,
) -> list[Any]:
    """The records of one batch's (inflated) payload: the compiled parser when it is built."""
    log_append = bool(attributes & _h.TIMESTAMP_TYPE_BIT)
    if _C is not None:
        result: list[Any] = _C.parse_records(
            data, count, base_offset, base_ts, max_ts, log_append, record_type, prefix, min_offset
        )
        return result
    try:
        return _parse_records(
            bytes(data), count, base_offset, base_ts, max_ts, log_append, record_type, prefix, min_offset
        )
    except (IndexError, UnicodeDecodeError) as e:
        raise _corrupt(f"record batch at offset {base_offset} has malformed records: {e}") from None


def _parse_records(
    data: bytes,
    count: int,
    base_offset: int,
    base_ts: int,
    max_ts: int,
    log_append: bool,
    record_type: type[Any],
    prefix: tuple[Any, ...],
    min_offset: int,
) -> list[Any]:
    """``count`` records from ``data``, which they must fill exactly. Hot path: varints inlined.

    The reference implementation of _crecords.parse_records (and the fallback without it)."""
    end = len(data)
    new = tuple.__new__
    out: list[Any] = []
    append = out.append
    read = _read_uvarint
    p = 0
    for _ in range(count):
        # length
        b = data[p]
        if b < 0x80:
            length = b
            p += 1
        else:
            length, p = read(data, p)
        length = (length >> 1) ^ -(length & 1)
        rstart = p
        if length < 0 or rstart + length > end:
            raise _corrupt(f"record length {length} at byte {rstart} overruns the {end - rstart} bytes left")
        p += 1  # attributes (int8, unused)
        # timestamp_delta
        b = data[p]
        if b < 0x80:
            z = b
            p += 1
        else:
            z, p = read(data, p)
        ts = max_ts if log_append else base_ts + ((z >> 1) ^ -(z & 1))
        # offset_delta
        b = data[p]
        if b < 0x80:
            z = b
            p += 1
        else:
            z, p = read(data, p)
        offset = base_offset + ((z >> 1) ^ -(z & 1))
        # key
        b = data[p]
        if b < 0x80:
            z = b
            p += 1
        else:
            z, p = read(data, p)
        n = (z >> 1) ^ -(z & 1)
        key: bytes | None
        if n >= 0:
            q = p + n
            if q > end:
                raise _corrupt(f"record key of {n} bytes overruns the batch")
            key = data[p:q]
            p = q
        elif n == -1:
            key = None
        else:
            raise _corrupt(f"record key length {n}")
        # value
        b = data[p]
        if b < 0x80:
            z = b
            p += 1
        else:
            z, p = read(data, p)
        n = (z >> 1) ^ -(z & 1)
        value: bytes | None
        if n >= 0:
            q = p + n
            if q > end:
                raise _corrupt(f"record value of {n} bytes overruns the batch")
            value = data[p:q]
            p = q
        elif n == -1:
            value = None
        else:
            raise _corrupt(f"record value length {n}")
        # headers
        b = data[p]
        if b == 0:
            headers = _EMPTY_HEADERS
            p += 1
        else:
            headers, p = _parse_headers(data, p)
        if p - rstart != length:
            raise _corrupt(f"record at byte {rstart} declares {length} bytes but holds {p - rstart}")
        if offset >= min_offset:
            append(new(record_type, (*prefix, offset, ts, key, value, headers)))
    if p != end:
        raise _corrupt(f"{end - p} bytes follow the {count} records of the batch")
    return out


def _parse_headers(data: bytes, p: int) -> tuple[Headers, int]:
    z, p = _read_uvarint(data, p)
    count = (z >> 1) ^ -(z & 1)
    if count < 0:
        raise _corrupt(f"record header count {count}")
    end = len(data)
    out: list[tuple[str, bytes | None]] = []
    for _ in range(count):
        z, p = _read_uvarint(data, p)
        n = (z >> 1) ^ -(z & 1)
        if n < 0 or p + n > end:
            raise _corrupt(f"record header key length {n} at byte {p}")
        hkey = data[p : p + n].decode("utf-8")
        p += n
        z, p = _read_uvarint(data, p)
        n = (z >> 1) ^ -(z & 1)
        hvalue: bytes | None
        if n >= 0:
            if p + n > end:
                raise _corrupt(f"record header value of {n} bytes overruns the batch")
            hvalue = data[p : p + n]
            p += n
        elif n == -1:
            hvalue = None
        else:
            raise _corrupt(f"record header value length {n}")
        out.append((hkey, hvalue))
    return tuple(out), p
