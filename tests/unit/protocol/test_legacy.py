"""Legacy message sets (magic 0/1) up-converted to one magic-2 batch: message sets built by
kafka-python's LegacyRecordBatchBuilder for every codec it supports, hand-built edge cases, and
every way a produce request's message set can be wrong."""

from __future__ import annotations

import os
import struct
import zlib

import lz4.frame
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.codec import lz4_encode
from kafka.record.default_records import DefaultRecordBatch
from kafka.record.legacy_records import LegacyRecordBatchBuilder

from headwater.protocol.errors import ErrorCode, KafkaError
from headwater.protocol.records import header as h
from headwater.protocol.records.compression import Codec, compress
from headwater.protocol.records.legacy import fix_lz4_header_checksum, upconvert, xxh32_short
from headwater.protocol.records.record import Record, decode_batch

BIG = 1 << 20
Msg = tuple[bytes | None, bytes | None, int]


def sample(n: int = 12) -> list[Msg]:
    return [
        (
            None if i % 4 == 1 else b"key-%d" % i,
            None if i % 5 == 2 else (b"payload %d " % i * 20)[: i * 13],
            1_600_000_000_000 + i * 10 - (i % 3) * 25,
        )
        for i in range(n)
    ]


def old_kafka_lz4(payload: bytes) -> bytes:
    """An LZ4 frame as Kafka 0.8/0.9 (and kafka-python for magic 0) wrote it: no content size, and
    the header checksum computed over the frame magic as well as the descriptor (the bug)."""
    data = bytearray(lz4_encode(payload))
    if data[4] & 0x08:  # drop the content size, as old Kafka could not read it
        data[4] &= ~0x08
        del data[6:14]
    data[6] = (xxh32_short(bytes(data[0:6])) >> 8) & 0xFF
    return bytes(data)


def kafka_python_set(magic: int, codec: int, msgs: list[Msg]) -> bytes:
    builder = LegacyRecordBatchBuilder(magic, codec, BIG)
    for i, (key, value, ts) in enumerate(msgs):
        assert builder.append(i, ts, key, value) is not None
    return bytes(builder.build())


def message(
    magic: int,
    key: bytes | None,
    value: bytes | None,
    *,
    attributes: int = 0,
    timestamp: int = 0,
    offset: int = 0,
) -> bytes:
    """One legacy message built by hand (independently of kafka-python)."""

    def nb(b: bytes | None) -> bytes:
        return struct.pack(">i", -1) if b is None else struct.pack(">i", len(b)) + b

    body = struct.pack(">bB", magic, attributes)
    if magic == 1:
        body += struct.pack(">q", timestamp)
    body += nb(key) + nb(value)
    crc = zlib.crc32(body)
    return struct.pack(">qiI", offset, 4 + len(body), crc) + body


def wrapper(magic: int, codec: int, inner: bytes, *, attributes_extra: int = 0, timestamp: int = 0) -> bytes:
    return message(magic, None, compress(codec, inner), attributes=codec | attributes_extra, timestamp=timestamp)


def expected(msgs: list[Msg], magic: int) -> list[Record]:
    return [Record(i, ts if magic == 1 else -1, k, v) for i, (k, v, ts) in enumerate(msgs)]


def corrupt(buf: bytes, code: ErrorCode = ErrorCode.CORRUPT_MESSAGE) -> None:
    with pytest.raises(KafkaError) as e:
        upconvert(buf, max_batch_bytes=BIG)
    assert e.value.code == code


# -- kafka-python's message sets ----------------------------------------------------------------


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", [Codec.NONE, Codec.GZIP, Codec.SNAPPY, Codec.LZ4])
def test_kafka_python_message_sets(magic: int, codec: Codec, monkeypatch: pytest.MonkeyPatch) -> None:
    # kafka-python writes magic-0 LZ4 with Kafka 0.8's broken header checksum; its helper for that
    # needs the xxhash package, so we stand in the same algorithm.
    monkeypatch.setattr("kafka.record.legacy_records.lz4_encode_old_kafka", old_kafka_lz4)
    msgs = sample()
    buf = kafka_python_set(magic, codec, msgs)
    batch = upconvert(buf, max_batch_bytes=BIG)
    header, got = decode_batch(batch)
    assert got == expected(msgs, magic)
    assert header.codec == codec
    assert header.base_offset == 0
    assert header.records_count == len(msgs)
    assert header.producer_id == -1
    assert not header.attributes & h.TIMESTAMP_TYPE_BIT
    assert header.max_timestamp == (max(ts for *_, ts in msgs) if magic == 1 else -1)
    theirs = [(r.offset, r.timestamp, r.key, r.value) for r in DefaultRecordBatch(batch)]
    assert theirs == [(r.offset, r.timestamp, r.key, r.value) for r in got]


def test_magic0_lz4_with_a_correct_header_checksum_is_accepted_too() -> None:
    msgs = sample(3)
    inner = kafka_python_set(0, 0, msgs)
    assert decode_batch(upconvert(wrapper(0, Codec.LZ4, inner), max_batch_bytes=BIG))[1] == expected(msgs, 0)


def test_magic1_lz4_must_have_a_correct_header_checksum() -> None:
    inner = kafka_python_set(1, 0, sample(3))
    corrupt(message(1, None, old_kafka_lz4(inner), attributes=Codec.LZ4))


def test_several_wrappers_and_plain_messages_in_one_set() -> None:
    a, b, c = sample(12)[:4], sample(12)[4:5], sample(12)[5:]
    buf = kafka_python_set(1, Codec.GZIP, a) + kafka_python_set(1, 0, b) + kafka_python_set(1, Codec.SNAPPY, c)
    header, got = decode_batch(upconvert(buf, max_batch_bytes=BIG))
    assert got == expected(a + b + c, 1)
    assert header.codec == Codec.SNAPPY  # the last wrapper's codec, as Kafka's source codec


def test_mixed_magic_messages() -> None:
    buf = message(0, b"a", b"1") + message(1, b"b", b"2", timestamp=77)
    assert decode_batch(upconvert(buf, max_batch_bytes=BIG))[1] == [
        Record(0, -1, b"a", b"1"),
        Record(1, 77, b"b", b"2"),
    ]


def test_wrapper_log_append_time_overrides_inner_timestamps() -> None:
    inner = message(1, b"a", b"1", timestamp=5, offset=0) + message(1, b"b", b"2", timestamp=6, offset=1)
    buf = wrapper(1, Codec.GZIP, inner, attributes_extra=0x08, timestamp=999)
    assert [r.timestamp for r in decode_batch(upconvert(buf, max_batch_bytes=BIG))[1]] == [999, 999]
    create_time = wrapper(1, Codec.GZIP, inner, timestamp=999)
    assert [r.timestamp for r in decode_batch(upconvert(create_time, max_batch_bytes=BIG))[1]] == [5, 6]


def test_inner_offsets_are_ignored() -> None:
    # Absolute (magic 0), relative (magic 1) or nonsense: the batch always starts at 0.
    inner = message(1, b"a", b"1", offset=500) + message(1, b"b", b"2", offset=3)
    got = decode_batch(upconvert(wrapper(1, Codec.GZIP, inner), max_batch_bytes=BIG))[1]
    assert [r.offset for r in got] == [0, 1]


def test_large_values_across_compression_blocks() -> None:
    msgs: list[Msg] = [(b"k", os.urandom(100_000), 1), (None, b"z" * 200_000, 2)]
    for codec in (Codec.GZIP, Codec.SNAPPY, Codec.LZ4):
        batch = upconvert(kafka_python_set(1, codec, msgs), max_batch_bytes=BIG)
        assert decode_batch(batch)[1] == expected(msgs, 1)


# -- the LZ4 header checksum ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"store_size": False}, {"content_checksum": True}, {"block_checksum": True, "block_linked": False}],
)
@pytest.mark.parametrize("data", [b"", b"abc", os.urandom(3000)])
def test_xxh32_matches_lz4s_header_checksum(kwargs: dict[str, bool], data: bytes) -> None:
    frame = lz4.frame.compress(data, **kwargs)
    hc_at = 6 + (8 if frame[4] & 0x08 else 0)
    assert frame[hc_at] == (xxh32_short(frame[4:hc_at]) >> 8) & 0xFF
    assert fix_lz4_header_checksum(frame) == frame
    broken = bytearray(frame)
    broken[hc_at] ^= 0xFF
    assert fix_lz4_header_checksum(bytes(broken)) == frame


def test_xxh32_known_values() -> None:
    # Reference values of XXH32 with seed 0.
    assert xxh32_short(b"") == 0x02CC5D05
    assert xxh32_short(b"a") == 0x550D7456
    assert xxh32_short(b"abc") == 0x32D153FF
    with pytest.raises(ValueError):
        xxh32_short(bytes(16))


# -- errors ------------------------------------------------------------------------------------


def test_empty_set() -> None:
    corrupt(b"")


def test_truncated_trailing_message_is_an_error() -> None:
    buf = kafka_python_set(1, 0, sample(3))
    last = len(kafka_python_set(1, 0, sample(2)))
    for cut in range(last + 1, len(buf)):
        corrupt(buf[:cut])


@pytest.mark.parametrize("magic", [0, 1])
def test_every_flipped_byte_is_caught(magic: int) -> None:
    buf = kafka_python_set(magic, Codec.GZIP, sample(3))
    for i in range(8, len(buf)):  # the offset (bytes 0-7) is not checked by anyone
        bad = bytearray(buf)
        bad[i] ^= 0x10
        with pytest.raises(KafkaError) as e:
            upconvert(bytes(bad), max_batch_bytes=BIG)
        assert e.value.code in (ErrorCode.CORRUPT_MESSAGE, ErrorCode.UNSUPPORTED_COMPRESSION_TYPE), i


def test_bad_crc() -> None:
    bad = bytearray(message(1, b"k", b"value"))
    bad[-1] ^= 1
    corrupt(bytes(bad))


@pytest.mark.parametrize("magic", [2, 3, -1])
def test_bad_magic(magic: int) -> None:
    bad = bytearray(message(1, b"k", b"value"))
    bad[16] = magic & 0xFF
    struct.pack_into(">I", bad, 12, zlib.crc32(bad[16:]))
    corrupt(bytes(bad))


def test_bytes_after_the_value() -> None:
    good = message(0, b"k", b"v")
    body = good[16:] + b"xx"
    corrupt(struct.pack(">qiI", 0, 4 + len(body), zlib.crc32(body)) + body)


@pytest.mark.parametrize("bad_len", [-2, 1000])
def test_bad_key_length(bad_len: int) -> None:
    body = struct.pack(">bBi", 0, 0, bad_len) + struct.pack(">i", 1) + b"v"
    corrupt(struct.pack(">qiI", 0, 4 + len(body), zlib.crc32(body)) + body)


def test_size_below_minimum() -> None:
    corrupt(struct.pack(">qiI", 0, 5, 0) + bytes(20))


def test_nested_compression() -> None:
    inner = wrapper(1, Codec.GZIP, message(1, b"a", b"1"))
    corrupt(wrapper(1, Codec.GZIP, inner))


def test_inner_magic_must_match_the_wrapper() -> None:
    corrupt(wrapper(1, Codec.GZIP, message(0, b"a", b"1")))


def test_empty_inner_set() -> None:
    corrupt(wrapper(1, Codec.GZIP, b""))


def test_wrapper_with_a_null_value() -> None:
    corrupt(message(1, None, None, attributes=Codec.GZIP))


def test_wrapper_with_undecompressable_value() -> None:
    corrupt(message(1, None, b"not gzip", attributes=Codec.GZIP))


def test_truncated_inner_message() -> None:
    inner = message(1, b"a", b"1") + message(1, b"b", b"2")
    corrupt(wrapper(1, Codec.SNAPPY, inner[:-3]))


@pytest.mark.parametrize("codec", [4, 5, 6, 7])
def test_unsupported_codecs(codec: int) -> None:
    corrupt(message(1, None, b"whatever", attributes=codec), ErrorCode.UNSUPPORTED_COMPRESSION_TYPE)


def test_result_above_max_batch_bytes() -> None:
    buf = kafka_python_set(1, 0, [(None, b"x" * 1000, 1)])
    batch = upconvert(buf, max_batch_bytes=BIG)
    assert upconvert(buf, max_batch_bytes=len(batch)) == batch
    with pytest.raises(KafkaError) as e:
        upconvert(buf, max_batch_bytes=len(batch) - 1)
    assert e.value.code == ErrorCode.MESSAGE_TOO_LARGE


def test_decompression_bomb_in_a_wrapper() -> None:
    inner = message(1, None, bytes(3_000_000))
    with pytest.raises(KafkaError) as e:
        upconvert(wrapper(1, Codec.GZIP, inner), max_batch_bytes=BIG, max_decompressed_bytes=1_000_000)
    assert e.value.code == ErrorCode.CORRUPT_MESSAGE


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.binary(max_size=300))
def test_random_bytes_raise_only_kafka_error(data: bytes) -> None:
    try:
        upconvert(data, max_batch_bytes=BIG)
    except KafkaError as e:
        assert e.code in (ErrorCode.CORRUPT_MESSAGE, ErrorCode.UNSUPPORTED_COMPRESSION_TYPE)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_mutated_sets_with_valid_crcs_raise_only_kafka_error(data: st.DataObject) -> None:
    # Mutate an uncompressed message body, then fix its CRC: the structure checks must hold alone.
    buf = bytearray(message(1, b"key", b"value", timestamp=1) + message(0, None, b"v2"))
    first = len(message(1, b"key", b"value", timestamp=1))
    for _ in range(data.draw(st.integers(1, 3))):
        i = data.draw(st.integers(8, len(buf) - 1))
        buf[i] = data.draw(st.integers(0, 255))
    for start, end in ((0, first), (first, len(buf))):
        struct.pack_into(">I", buf, start + 12, zlib.crc32(buf[start + 16 : end]))
    try:
        upconvert(bytes(buf), max_batch_bytes=BIG)
    except KafkaError as e:
        assert e.code in (ErrorCode.CORRUPT_MESSAGE, ErrorCode.UNSUPPORTED_COMPRESSION_TYPE)
