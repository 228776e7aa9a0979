"""Kafka's compression codecs: round trips, cross-checks with kafka-python's codec module, framing
(xerial snappy, zstd without content size), bounded output, and errors that are only KafkaError."""

from __future__ import annotations

import os
import struct
import tracemalloc

import lz4.frame
import pytest
import snappy
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka import codec as kcodec

from headwater.protocol.errors import ErrorCode, KafkaError
from headwater.protocol.records.compression import (
    DEFAULT_MAX_OUTPUT,
    Codec,
    codec_from_name,
    compress,
    decompress,
)

CODECS = list(Codec)
COMPRESSED = [c for c in Codec if c is not Codec.NONE]
TEXTISH = b"".join(b"record %d says hello to the log; " % i for i in range(4000))  # ~140 KiB, compressible

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def test_codec_ids_are_kafkas() -> None:
    assert [(c.name, int(c)) for c in Codec] == [("NONE", 0), ("GZIP", 1), ("SNAPPY", 2), ("LZ4", 3), ("ZSTD", 4)]


@pytest.mark.parametrize(
    ("name", "codec"),
    [("none", Codec.NONE), ("gzip", Codec.GZIP), ("snappy", Codec.SNAPPY), ("lz4", Codec.LZ4), ("ZSTD", Codec.ZSTD)],
)
def test_codec_from_name(name: str, codec: Codec) -> None:
    assert codec_from_name(name) is codec


@pytest.mark.parametrize("name", ["", "producer", "brotli", "gzip2"])
def test_codec_from_unknown_name(name: str) -> None:
    with pytest.raises(ValueError):
        codec_from_name(name)


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("size", [0, 1, 100, 32 * 1024, 32 * 1024 + 1, 64 * 1024 + 7, 300_000])
def test_round_trip_sizes(codec: Codec, size: int) -> None:
    data = (TEXTISH * 3)[: size // 2] + os.urandom(size - size // 2)
    packed = compress(codec, data)
    assert decompress(codec, packed) == data
    assert decompress(codec, bytearray(packed)) == data
    assert decompress(codec, memoryview(packed)) == data


@FAST
@given(codec=st.sampled_from(CODECS), data=st.binary(max_size=5000))
def test_round_trip_property(codec: Codec, data: bytes) -> None:
    assert decompress(codec, compress(codec, data)) == data


# -- cross-checks with kafka-python's codec implementations ------------------------------------

_THEIR_DECODE = {
    Codec.GZIP: kcodec.gzip_decode,
    Codec.SNAPPY: kcodec.snappy_decode,
    Codec.LZ4: kcodec.lz4_decode,
    Codec.ZSTD: kcodec.zstd_decode,
}
_THEIR_ENCODE = {
    Codec.GZIP: kcodec.gzip_encode,
    Codec.SNAPPY: kcodec.snappy_encode,
    Codec.LZ4: kcodec.lz4_encode,
    Codec.ZSTD: kcodec.zstd_encode,
}


@pytest.mark.parametrize("codec", COMPRESSED)
@pytest.mark.parametrize("data", [b"", b"x", TEXTISH, os.urandom(70_000)], ids=["empty", "one", "text", "random"])
def test_kafka_python_reads_ours(codec: Codec, data: bytes) -> None:
    assert bytes(_THEIR_DECODE[codec](compress(codec, data))) == data


@pytest.mark.parametrize("codec", COMPRESSED)
@pytest.mark.parametrize("data", [b"x", TEXTISH, os.urandom(70_000)], ids=["one", "text", "random"])
def test_we_read_kafka_pythons(codec: Codec, data: bytes) -> None:
    assert decompress(codec, _THEIR_ENCODE[codec](data)) == data


# -- snappy framing --------------------------------------------------------------------------


def test_snappy_compresses_with_xerial_framing_in_32k_blocks() -> None:
    data = TEXTISH[:100_000]
    packed = compress(Codec.SNAPPY, data)
    assert packed[:16] == b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    blocks = []
    pos = 16
    while pos < len(packed):
        (size,) = struct.unpack_from(">i", packed, pos)
        blocks.append(snappy.uncompress(packed[pos + 4 : pos + 4 + size]))
        pos += 4 + size
    assert pos == len(packed)
    assert [len(b) for b in blocks] == [32768, 32768, 32768, 100_000 - 3 * 32768]
    assert b"".join(blocks) == data


@pytest.mark.parametrize("data", [b"a", TEXTISH, os.urandom(50_000)], ids=["one", "text", "random"])
def test_snappy_decompresses_raw_and_xerial(data: bytes) -> None:
    assert decompress(Codec.SNAPPY, snappy.compress(data)) == data  # raw block (librdkafka "no framing")
    assert decompress(Codec.SNAPPY, kcodec.snappy_encode(data, xerial_compatible=False)) == data
    assert decompress(Codec.SNAPPY, kcodec.snappy_encode(data, xerial_compatible=True)) == data
    assert decompress(Codec.SNAPPY, kcodec.snappy_encode(data, xerial_blocksize=1000)) == data


def test_snappy_xerial_version_fields_are_ignored() -> None:
    # Some producers write the version fields little-endian; only the magic decides the framing.
    data = TEXTISH[:5000]
    packed = bytearray(compress(Codec.SNAPPY, data))
    packed[8:16] = struct.pack("<ii", 1, 1)
    assert decompress(Codec.SNAPPY, bytes(packed)) == data


def test_snappy_concatenated_xerial_streams() -> None:
    a, b = TEXTISH[:40_000], os.urandom(1000)
    assert decompress(Codec.SNAPPY, compress(Codec.SNAPPY, a) + compress(Codec.SNAPPY, b)) == a + b


def test_snappy_header_only_is_empty() -> None:
    assert decompress(Codec.SNAPPY, b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)) == b""


@pytest.mark.parametrize(
    "bad",
    [
        b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1) + b"\x00\x00",  # truncated block length
        b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1) + struct.pack(">i", 50) + b"abc",  # block overruns
        b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1) + struct.pack(">i", -1),
        b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1) + struct.pack(">i", 3) + b"\xff\xff\xff",
        b"\xff\xff\xff\xff\xff\xff",  # raw: preamble too long
        b"\x0aabc",  # raw: claims 10 bytes, holds a literal-less mess
    ],
)
def test_snappy_malformed(bad: bytes) -> None:
    with pytest.raises(KafkaError) as e:
        decompress(Codec.SNAPPY, bad)
    assert e.value.code == ErrorCode.CORRUPT_MESSAGE


# -- lz4 and zstd framing ----------------------------------------------------------------------


def test_lz4_frame_is_what_kafka_writes() -> None:
    packed = compress(Codec.LZ4, TEXTISH)
    assert packed[:4] == b"\x04\x22\x4d\x18"
    flg, bd = packed[4], packed[5]
    assert flg >> 6 == 1  # version 01
    assert flg & 0x20  # independent blocks
    assert not flg & (0x10 | 0x08 | 0x04 | 0x01)  # no block checksum, content size, content checksum, dict id
    assert (bd >> 4) & 0x7 == 4  # 64 KiB maximum block size


def test_lz4_reads_frames_with_content_size_and_checksums() -> None:
    packed = lz4.frame.compress(TEXTISH, store_size=True, content_checksum=True, block_linked=True)
    assert decompress(Codec.LZ4, packed) == TEXTISH


def test_zstd_without_content_size() -> None:
    packed = zstandard.ZstdCompressor(write_content_size=False).compress(TEXTISH)
    assert zstandard.frame_content_size(packed) == -1
    assert decompress(Codec.ZSTD, packed) == TEXTISH


def test_zstd_streamed_frame_and_several_frames() -> None:
    cctx = zstandard.ZstdCompressor()
    obj = cctx.compressobj()
    streamed = obj.compress(TEXTISH[:70_000]) + obj.flush()
    assert decompress(Codec.ZSTD, streamed) == TEXTISH[:70_000]
    two = cctx.compress(b"first ") + zstandard.ZstdCompressor(write_content_size=False).compress(b"second")
    assert decompress(Codec.ZSTD, two) == b"first second"


def test_gzip_concatenated_members() -> None:
    assert decompress(Codec.GZIP, compress(Codec.GZIP, b"one ") + compress(Codec.GZIP, b"two")) == b"one two"


# -- bounded output ----------------------------------------------------------------------------


@pytest.mark.parametrize("codec", COMPRESSED)
def test_output_over_the_cap_raises(codec: Codec) -> None:
    data = bytes(200_000)
    packed = compress(codec, data)
    assert decompress(codec, packed, max_output=200_000) == data
    with pytest.raises(KafkaError) as e:
        decompress(codec, packed, max_output=199_999)
    assert e.value.code == ErrorCode.CORRUPT_MESSAGE
    assert "beyond the limit" in e.value.message


def test_zstd_bomb_with_lying_content_size_is_bounded() -> None:
    # 256 MiB of zeros compress to a few KiB; the frame declares its content size, which a naive
    # one-shot decompress would allocate in full.
    cap = 4 * 1024 * 1024
    bomb = zstandard.ZstdCompressor(level=1).compress(bytes(256 * 1024 * 1024))
    assert len(bomb) < 64 * 1024
    tracemalloc.start()
    try:
        with pytest.raises(KafkaError) as e:
            decompress(Codec.ZSTD, bomb, max_output=cap)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert e.value.code == ErrorCode.CORRUPT_MESSAGE
    assert peak < 3 * cap


def test_zstd_bomb_over_the_default_cap() -> None:
    bomb = zstandard.ZstdCompressor(level=1, write_content_size=False).compress(bytes(DEFAULT_MAX_OUTPUT + 1))
    with pytest.raises(KafkaError) as e:
        decompress(Codec.ZSTD, bomb)
    assert e.value.code == ErrorCode.CORRUPT_MESSAGE


def test_snappy_bomb_is_refused_before_allocating() -> None:
    # A raw block whose preamble claims 2^32-1 bytes.
    claim = b"\xff\xff\xff\xff\x0f" + b"\x00" * 10
    with pytest.raises(KafkaError) as e:
        decompress(Codec.SNAPPY, claim)
    assert e.value.code == ErrorCode.CORRUPT_MESSAGE


# -- errors ------------------------------------------------------------------------------------


@pytest.mark.parametrize("codec_id", [5, 6, 7])
def test_reserved_codec_ids(codec_id: int) -> None:
    for f in (compress, decompress):
        with pytest.raises(KafkaError) as e:
            f(codec_id, b"abc")
        assert e.value.code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE


@pytest.mark.parametrize("codec", COMPRESSED)
def test_truncated_input(codec: Codec) -> None:
    packed = compress(codec, TEXTISH[:20_000] + os.urandom(2000))
    for cut in sorted({0, 1, 5, len(packed) // 3, len(packed) // 2, len(packed) - 2, len(packed) - 1}):
        with pytest.raises(KafkaError) as e:
            decompress(codec, packed[:cut])
        assert e.value.code == ErrorCode.CORRUPT_MESSAGE, (codec, cut)


@pytest.mark.parametrize("codec", [Codec.GZIP, Codec.LZ4, Codec.ZSTD])
def test_trailing_garbage(codec: Codec) -> None:
    with pytest.raises(KafkaError) as e:
        decompress(codec, compress(codec, b"payload") + b"\x00garbage")
    assert e.value.code == ErrorCode.CORRUPT_MESSAGE


@FAST
@given(codec=st.sampled_from(COMPRESSED), data=st.binary(max_size=300))
def test_random_bytes_raise_only_kafka_error(codec: Codec, data: bytes) -> None:
    try:
        decompress(codec, data, max_output=1 << 20)
    except KafkaError as e:
        assert e.code == ErrorCode.CORRUPT_MESSAGE


@FAST
@given(codec=st.sampled_from(COMPRESSED), data=st.data())
def test_mutated_streams_raise_only_kafka_error(codec: Codec, data: st.DataObject) -> None:
    packed = bytearray(compress(codec, TEXTISH[:3000]))
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(packed) - 1))
        packed[i] ^= data.draw(st.integers(1, 255))
    try:
        decompress(codec, bytes(packed), max_output=1 << 20)
    except KafkaError as e:
        assert e.code == ErrorCode.CORRUPT_MESSAGE


@pytest.mark.parametrize("codec", COMPRESSED)
def test_a_failure_leaves_no_state_behind(codec: Codec) -> None:
    packed = compress(codec, TEXTISH[:10_000])
    for bad in (packed[: len(packed) // 2], packed[:-1], b"\x00" * 40):
        with pytest.raises(KafkaError):
            decompress(codec, bad)
        assert decompress(codec, packed) == TEXTISH[:10_000]
