"""Kafka's compression codecs for record batches (and the wrappers of legacy message sets).

The codec id lives in bits 0-2 of a batch's attributes (``header.CODEC_MASK``)::

    id  codec   wire format of the compressed records
     0  none    --
     1  gzip    RFC 1952 gzip stream (zlib, 15-bit window); concatenated members are accepted
     2  snappy  xerial snappy-java framing (below) when compressing; both that and a bare raw
                snappy block (librdkafka's "no framing") when decompressing
     3  lz4     LZ4 frame format (magic 0x184D2204), as KafkaLZ4BlockOutputStream writes it:
                independent 64 KiB blocks, no content size, no checksums
     4  zstd    zstd frames; librdkafka writes them without a content size, so decompression
                is streaming and never trusts a declared size
   5-7  --      reserved: UNSUPPORTED_COMPRESSION_TYPE

xerial framing (snappy-java's ``SnappyOutputStream``, what the Java client writes)::

    offset  size  field
         0     8  magic: 0x82 'S' 'N' 'A' 'P' 'P' 'Y' 0x00
         8     4  version, int32 BE (1)
        12     4  minimum compatible version, int32 BE (1)
        16        repeated: [int32 BE length of the block][raw snappy block]
                  each block compresses at most 32 KiB of input

On decompression only the 8-byte magic decides between xerial and raw (the version fields are
ignored: some producers write them little-endian, and librdkafka ignores them too). A header
met again at a block boundary starts a concatenated stream, as snappy-java accepts.

Concatenation is accepted for every codec (gzip members, lz4 and zstd frames), trailing garbage
is not.

Decompression is bounded: output beyond ``max_output`` bytes (default :data:`DEFAULT_MAX_OUTPUT`)
raises CORRUPT_MESSAGE instead of growing without limit, so a zip bomb costs at most a bounded
amount of memory. The bound is checked against declared sizes before allocating where the format
declares them (snappy), and while streaming otherwise (gzip, lz4, zstd). zstd has no output limit
per call, so its input is fed in slices small enough that even a maximally compressible slice
cannot overshoot the remaining budget by much (peak memory about twice ``max_output``, plus at
most a few MiB when the budget is nearly spent).

Every failure raises :class:`KafkaError`: CORRUPT_MESSAGE for bad or oversized data,
UNSUPPORTED_COMPRESSION_TYPE for a codec id outside 0-4. Nothing here does I/O.
"""

from __future__ import annotations

import struct
import threading
import zlib
from enum import IntEnum

import lz4.frame
import snappy
import zstandard

from headwater.protocol.errors import ErrorCode, KafkaError

__all__ = ["DEFAULT_MAX_OUTPUT", "Codec", "codec_from_name", "compress", "decompress"]

# 64 MiB: 64 times Kafka's default max.message.bytes (1 MiB). A batch whose records expand past
# this is refused as corrupt; callers with larger limits pass their own ``max_output``.
DEFAULT_MAX_OUTPUT = 64 * 1024 * 1024


class Codec(IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


_BY_NAME = {c.name.lower(): c for c in Codec}


def codec_from_name(name: str) -> Codec:
    """The codec for a ``compression.type`` name: none, gzip, snappy, lz4 or zstd (any case).

    Raises ValueError for any other name (a configuration error, not a wire error).
    """
    try:
        return _BY_NAME[name.strip().lower()]
    except KeyError:
        raise ValueError(f"unknown compression codec {name!r}; expected one of {', '.join(_BY_NAME)}") from None


Buffer = bytes | bytearray | memoryview


def _check_codec(codec: int) -> Codec:
    if 0 <= codec <= 4:
        return Codec(codec)
    raise KafkaError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"unknown compression codec id {codec}")


def compress(codec: int, data: Buffer) -> bytes:
    """Compress ``data`` the way Kafka's Java client does for ``codec``."""
    c = _check_codec(codec)
    try:
        if c is Codec.NONE:
            return bytes(data)
        if c is Codec.GZIP:
            # wbits 31 = gzip container; level 6 is java.util.zip's default (Deflater.DEFAULT_COMPRESSION).
            z = zlib.compressobj(6, zlib.DEFLATED, 31)
            return z.compress(data) + z.flush()
        if c is Codec.SNAPPY:
            return _xerial_compress(data)
        if c is Codec.LZ4:
            return bytes(
                lz4.frame.compress(
                    data,
                    block_size=lz4.frame.BLOCKSIZE_MAX64KB,
                    block_linked=False,
                    content_checksum=False,
                    store_size=False,
                )
            )
        return zstandard.ZstdCompressor(level=3).compress(data)
    except KafkaError:
        raise
    except Exception as e:  # the codec libraries raise assorted types
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"{c.name.lower()} compression failed: {e}") from None


def decompress(codec: int, data: Buffer, *, max_output: int = DEFAULT_MAX_OUTPUT) -> bytes:
    """Decompress ``data`` compressed with ``codec``; at most ``max_output`` bytes of output."""
    c = _check_codec(codec)
    try:
        if c is Codec.NONE:
            out = bytes(data)
        elif c is Codec.GZIP:
            out = _gzip_decompress(data, max_output)
        elif c is Codec.SNAPPY:
            out = _snappy_decompress(data, max_output)
        elif c is Codec.LZ4:
            out = _lz4_decompress(data, max_output)
        else:
            out = _zstd_decompress(data, max_output)
    except KafkaError:
        raise
    except Exception as e:  # zlib.error, snappy.UncompressError, RuntimeError (lz4), ZstdError, ...
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"{c.name.lower()} data does not decompress: {e}") from None
    if len(out) > max_output:
        raise _too_big(c, max_output)
    return out


def _too_big(c: Codec, max_output: int) -> KafkaError:
    return KafkaError(
        ErrorCode.CORRUPT_MESSAGE, f"{c.name.lower()} data expands beyond the limit of {max_output} bytes"
    )


def _corrupt(what: str) -> KafkaError:
    return KafkaError(ErrorCode.CORRUPT_MESSAGE, what)


# -- gzip ----------------------------------------------------------------------------------------


def _gzip_decompress(data: Buffer, max_output: int) -> bytes:
    out = bytearray()
    pending: Buffer = data
    while True:
        d = zlib.decompressobj(31)
        out += d.decompress(pending, max_output + 1 - len(out))
        if len(out) > max_output:
            raise _too_big(Codec.GZIP, max_output)
        if not d.eof:
            raise _corrupt("gzip stream is truncated")
        pending = d.unused_data
        if not pending:
            return bytes(out)
        # Another gzip member follows (java.util.zip.GZIPInputStream reads them all).


# -- snappy --------------------------------------------------------------------------------------

XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024  # bytes of input per block, snappy-java's default
_I32 = struct.Struct(">i")


def _xerial_compress(data: Buffer) -> bytes:
    view = memoryview(data)
    parts = [_XERIAL_HEADER]
    # At least one block, so that even empty input is longer than the 16-byte header (some readers,
    # kafka-python's among them, only recognise the framing when more than the header is present).
    for i in range(0, max(len(view), 1), _XERIAL_BLOCK):
        block = snappy.compress(view[i : i + _XERIAL_BLOCK])
        parts.append(_I32.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_uncompressed_length(block: Buffer) -> int:
    """The uncompressed length a raw snappy block declares in its preamble (a uvarint, <= 2^32-1)."""
    result = 0
    for i in range(min(len(block), 5)):
        b = block[i]
        result |= (b & 0x7F) << (7 * i)
        if not b & 0x80:
            return result
    raise _corrupt("snappy block has a malformed length preamble")


def _snappy_block(block: Buffer, budget: int, max_output: int) -> bytes:
    if _snappy_uncompressed_length(block) > budget:
        raise _too_big(Codec.SNAPPY, max_output)
    return bytes(snappy.uncompress(block))


def _snappy_decompress(data: Buffer, max_output: int) -> bytes:
    view = memoryview(data)
    if len(view) < 16 or view[:8] != XERIAL_MAGIC:
        return _snappy_block(view, max_output, max_output)
    out = bytearray()
    pos, n = 16, len(view)
    while pos < n:
        if view[pos : pos + 8] == XERIAL_MAGIC and n - pos >= 16:
            pos += 16  # a concatenated stream's header, as snappy-java's SnappyInputStream accepts
            continue
        if n - pos < 4:
            raise _corrupt("xerial snappy block length is truncated")
        (size,) = _I32.unpack_from(view, pos)
        pos += 4
        if size < 0 or size > n - pos:
            raise _corrupt(f"xerial snappy block of {size} bytes overruns the {n - pos} bytes left")
        out += _snappy_block(view[pos : pos + size], max_output - len(out), max_output)
        pos += size
    return bytes(out)


# -- lz4 -----------------------------------------------------------------------------------------


def _lz4_decompress(data: Buffer, max_output: int) -> bytes:
    # python-lz4 allocates ``max_length`` up front, so ask for growing amounts rather than the
    # whole budget at once (a 64 MiB allocation per small batch costs more than decompressing it).
    out = bytearray()
    pending: Buffer = data
    while True:
        d = lz4.frame.LZ4FrameDecompressor()
        while True:
            want = min(max_output + 1 - len(out), max(len(out), 4 * len(pending), 4096))
            out += d.decompress(pending, max_length=want)
            pending = b""
            if len(out) > max_output:
                raise _too_big(Codec.LZ4, max_output)
            if d.eof:
                break
            if d.needs_input:
                raise _corrupt("lz4 frame is truncated")
        pending = d.unused_data
        if not pending:
            return bytes(out)


# -- zstd ----------------------------------------------------------------------------------------

# The most a zstd stream can expand per input byte: an RLE block is a 3-byte header plus one byte
# and regenerates up to 128 KiB. Feeding input in slices of (budget / this) bytes therefore keeps
# the output of any one call within the remaining budget, however hostile the input.
_ZSTD_MAX_RATIO = 128 * 1024 // 4
_ZSTD_MIN_SLICE = 64
_ZSTD_MAX_SLICE = 1024 * 1024


_zstd_local = threading.local()


def _zstd_dctx() -> zstandard.ZstdDecompressor:
    """This thread's decompression context (making one costs more than a small batch's decoding;
    a context must not be shared between threads)."""
    dctx: zstandard.ZstdDecompressor | None = getattr(_zstd_local, "dctx", None)
    if dctx is None:
        dctx = _zstd_local.dctx = zstandard.ZstdDecompressor()
    return dctx


def _zstd_decompress(data: Buffer, max_output: int) -> bytes:
    """Frame by frame with a streaming decompressor (no content size needed, truncation detected)."""
    view = memoryview(data)
    if not len(view):
        raise _corrupt("empty zstd data")
    dctx = _zstd_dctx()
    out = bytearray()
    pos, n = 0, len(view)
    while pos < n:
        obj = dctx.decompressobj()
        while not obj.eof:
            if pos >= n:
                raise _corrupt("zstd frame is truncated")
            budget = max_output + 1 - len(out)
            step = min(max(budget // _ZSTD_MAX_RATIO, _ZSTD_MIN_SLICE), _ZSTD_MAX_SLICE)
            chunk = view[pos : pos + step]
            out += obj.decompress(chunk)
            pos += len(chunk)
            if len(out) > max_output:
                raise _too_big(Codec.ZSTD, max_output)
        # The frame ended inside the last slice: what it did not use starts the next frame.
        pos -= len(obj.unused_data)
    return bytes(out)
