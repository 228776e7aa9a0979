"""Legacy message sets (magic 0 and 1, sent by Produce v0-v2), up-converted to one magic-2 batch.

A message set is a sequence of messages, each (big-endian)::

    offset  size  field
         0     8  offset          -- ignored here: the broker assigns offsets
         8     4  message_size    -- bytes after this field
        12     4  crc             -- zlib CRC-32 (uint32) of bytes 16 .. end of message
        16     1  magic           -- 0 or 1
        17     1  attributes      -- bits 0-2 codec (0 none, 1 gzip, 2 snappy, 3 lz4);
                                     bit 3 timestamp type, magic 1 only (1 = LogAppendTime)
        18     8  timestamp       -- magic 1 only (ms)
     18/26     4  key_length      -- -1 = null key
                  key
                  value_length    -- int32, -1 = null value
                  value

A compressed message (codec != 0) is a wrapper: its value, once decompressed, is an inner message
set of uncompressed messages of the same magic. Inner offsets are absolute for magic 0 and
relative (0, 1, ...) for magic 1; both are ignored since the result starts again at offset 0.
For a magic-1 wrapper with LogAppendTime the wrapper's timestamp overrides the inner ones.

What :func:`upconvert` does, following Kafka's LogValidator:

* every message, inner ones included, is checked: size, CRC-32, magic in {0, 1}, key and value
  lengths that fill the message exactly. A truncated trailing message is an error here (unlike a
  fetch response, a produce request must be whole). Any violation: CORRUPT_MESSAGE.
* a wrapper with a null value, an empty inner set, a nested compressed message or an inner magic
  that differs from the wrapper's: CORRUPT_MESSAGE. zstd (codec 4) needs magic 2 and codecs 5-7
  do not exist: UNSUPPORTED_COMPRESSION_TYPE.
* timestamps: magic 0 has none, so its records get NO_TIMESTAMP (-1), as Kafka's up-conversion
  does; magic 1 records keep theirs (or the wrapper's, see above). The batch is CreateTime.
* the result is ONE magic-2 batch at base offset 0 holding every record in order, with no
  producer id, compressed with the codec of the (last) compressed wrapper (Kafka's "source
  codec") or uncompressed when no message was compressed. Above ``max_batch_bytes``:
  MESSAGE_TOO_LARGE.

LZ4 and magic 0: Kafka 0.8/0.9 computed the LZ4 frame descriptor checksum (the HC byte) over the
frame's magic number as well as the descriptor, so the frames old clients wrote carry a wrong HC.
Kafka ignores the HC for magic 0 (KafkaLZ4BlockInputStream's ignoreFlagDescriptorChecksum). We do
the same by rewriting the HC to the correct value before decoding a magic-0 LZ4 wrapper; for
magic 1 the HC must be right.
"""

from __future__ import annotations

import struct
import zlib

from headwater.protocol.errors import ErrorCode, KafkaError
from headwater.protocol.records.compression import DEFAULT_MAX_OUTPUT, Codec, decompress
from headwater.protocol.records.header import NO_TIMESTAMP
from headwater.protocol.records.record import RecordInput, encode_batch

__all__ = ["upconvert"]

Buffer = bytes | bytearray | memoryview

_OFFSET_SIZE_CRC_MAGIC_ATTRS = struct.Struct(">qiIbB")  # 18 bytes: offset .. attributes
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_LOG_OVERHEAD = 12  # offset + message_size
_CRC_START = 16  # the CRC covers magic .. end
_MIN_SIZE = {0: 14, 1: 22}  # crc + magic + attributes (+ timestamp) + key_length + value_length
_CODEC_MASK = 0x07
_LOG_APPEND_TIME_BIT = 0x08


def _corrupt(what: str) -> KafkaError:
    return KafkaError(ErrorCode.CORRUPT_MESSAGE, what)


def upconvert(buf: Buffer, *, max_batch_bytes: int, max_decompressed_bytes: int = DEFAULT_MAX_OUTPUT) -> bytes:
    """One magic-2 record batch holding every record of the magic 0/1 message set ``buf``.

    ``max_decompressed_bytes`` bounds what any one compressed wrapper may expand to.
    """
    records: list[RecordInput] = []
    codec = _walk(memoryview(buf), records, None, max_decompressed_bytes)
    if not records:
        raise _corrupt("empty message set")
    try:
        batch = encode_batch(records, compression=codec)
    except ValueError as e:  # a timestamp outside int64 cannot come from an int64 field; belt and braces
        raise _corrupt(str(e)) from None
    if len(batch) > max_batch_bytes:
        raise KafkaError(
            ErrorCode.MESSAGE_TOO_LARGE,
            f"up-converted record batch of {len(batch)} bytes exceeds the maximum of {max_batch_bytes} bytes",
        )
    return batch


class _Wrapper:
    """What inner messages inherit from their compressed wrapper."""

    __slots__ = ("magic", "timestamp")

    def __init__(self, magic: int, timestamp: int | None) -> None:
        self.magic = magic
        self.timestamp = timestamp  # set when it overrides the inner timestamps (LogAppendTime)


def _walk(view: memoryview, records: list[RecordInput], wrapper: _Wrapper | None, max_output: int) -> int:
    """Append the records of message set ``view`` to ``records``; the codec of the last wrapper."""
    codec_seen = Codec.NONE
    n = len(view)
    pos = 0
    where = "inner message" if wrapper else "message"
    while pos < n:
        if n - pos < _LOG_OVERHEAD + _MIN_SIZE[0]:
            raise _corrupt(f"{n - pos} trailing bytes at byte {pos} are not a whole {where}")
        _offset, size, crc, magic, attributes = _OFFSET_SIZE_CRC_MAGIC_ATTRS.unpack_from(view, pos)
        if magic not in (0, 1):
            raise _corrupt(f"{where} at byte {pos} has magic {magic}, expected 0 or 1")
        if size < _MIN_SIZE[magic]:
            raise _corrupt(f"{where} at byte {pos} has size {size}, below the minimum for magic {magic}")
        end = pos + _LOG_OVERHEAD + size
        if end > n:
            raise _corrupt(f"{where} of {size} bytes at byte {pos} is truncated at byte {n}")
        if zlib.crc32(view[pos + _CRC_START : end]) != crc:
            raise _corrupt(f"{where} at byte {pos} fails its CRC-32 check")
        p = pos + 18
        if magic == 1:
            (timestamp,) = _I64.unpack_from(view, p)
            p += 8
        else:
            timestamp = NO_TIMESTAMP
        key, p = _nullable_bytes(view, p, end, "key", pos)
        value, p = _nullable_bytes(view, p, end, "value", pos)
        if p != end:
            raise _corrupt(f"{where} at byte {pos} has {end - p} bytes after its value")

        codec = attributes & _CODEC_MASK
        if wrapper is not None:
            if codec != Codec.NONE:
                raise _corrupt(f"compressed {where} at byte {pos} inside a compressed message")
            if magic != wrapper.magic:
                raise _corrupt(f"{where} at byte {pos} has magic {magic} inside a magic {wrapper.magic} wrapper")
            if wrapper.timestamp is not None:
                timestamp = wrapper.timestamp
        if codec == Codec.NONE:
            records.append(RecordInput(key, value, timestamp, ()))
        else:
            if codec > Codec.LZ4:
                raise KafkaError(
                    ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
                    f"message at byte {pos} uses compression codec {codec}, which needs magic 2"
                    if codec == Codec.ZSTD
                    else f"message at byte {pos} uses unknown compression codec {codec}",
                )
            if value is None:
                raise _corrupt(f"compressed message at byte {pos} has a null value")
            if codec == Codec.LZ4 and magic == 0:
                value = fix_lz4_header_checksum(value)
            inner = decompress(codec, value, max_output=max_output)
            override = timestamp if magic == 1 and attributes & _LOG_APPEND_TIME_BIT else None
            before = len(records)
            _walk(memoryview(inner), records, _Wrapper(magic, override), max_output)
            if len(records) == before:
                raise _corrupt(f"compressed message at byte {pos} holds no messages")
            codec_seen = Codec(codec)
        pos = end
    return codec_seen


def _nullable_bytes(view: memoryview, p: int, end: int, what: str, pos: int) -> tuple[bytes | None, int]:
    if end - p < 4:
        raise _corrupt(f"message at byte {pos}: {what} length overruns the message")
    (length,) = _I32.unpack_from(view, p)
    p += 4
    if length == -1:
        return None, p
    if length < 0 or length > end - p:
        raise _corrupt(f"message at byte {pos}: {what} length {length} overruns the {end - p} bytes left")
    return bytes(view[p : p + length]), p + length


# -- LZ4 frame descriptor checksum -----------------------------------------------------------------

_LZ4_MAGIC = b"\x04\x22\x4d\x18"  # 0x184D2204 little-endian
_LZ4_FLG_CONTENT_SIZE = 0x08
_LZ4_FLG_DICT_ID = 0x01


def fix_lz4_header_checksum(frame: bytes) -> bytes:
    """``frame`` with its frame descriptor checksum (HC) recomputed; unchanged if it is no LZ4 frame.

    Frame start: magic (4), FLG (1), BD (1), content size (8, if FLG bit 3), dictionary id (4, if
    FLG bit 0), HC (1) = second byte of xxHash32(FLG .. dictionary id, seed 0).
    """
    if len(frame) < 7 or frame[:4] != _LZ4_MAGIC:
        return frame
    flg = frame[4]
    hc_at = 6 + (8 if flg & _LZ4_FLG_CONTENT_SIZE else 0) + (4 if flg & _LZ4_FLG_DICT_ID else 0)
    if len(frame) <= hc_at:
        return frame  # truncated: let the decoder report it
    hc = (xxh32_short(frame[4:hc_at]) >> 8) & 0xFF
    if frame[hc_at] == hc:
        return frame
    return frame[:hc_at] + bytes((hc,)) + frame[hc_at + 1 :]


_P1 = 2654435761
_P2 = 2246822519
_P3 = 3266489917
_P4 = 668265263
_P5 = 374761393
_M32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def xxh32_short(data: bytes, seed: int = 0) -> int:
    """xxHash32 of fewer than 16 bytes (all an LZ4 frame descriptor can be: at most 14)."""
    n = len(data)
    if n >= 16:
        raise ValueError("xxh32_short handles inputs of fewer than 16 bytes")
    acc = (seed + _P5 + n) & _M32
    p = 0
    while p + 4 <= n:
        word = int.from_bytes(data[p : p + 4], "little")
        acc = (_rotl((acc + word * _P3) & _M32, 17) * _P4) & _M32
        p += 4
    while p < n:
        acc = (_rotl((acc + data[p] * _P5) & _M32, 11) * _P1) & _M32
        p += 1
    acc ^= acc >> 15
    acc = (acc * _P2) & _M32
    acc ^= acc >> 13
    acc = (acc * _P3) & _M32
    acc ^= acc >> 16
    return acc
