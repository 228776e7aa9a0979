"""Magic-2 records: our batches against kafka-python's reader and builder, property round trips,
header fields, control and empty batches, and corruption (CRC, truncation, garbage)."""

from __future__ import annotations

import os
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from headwater.protocol.errors import ErrorCode, KafkaError
from headwater.protocol.records import header as h
from headwater.protocol.records.compression import Codec
from headwater.protocol.records.record import Record, RecordInput, decode_batch, encode_batch, iter_batches

CODECS = list(Codec)
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

HeaderList = list[tuple[str, bytes | None]]


def sample_records(n: int = 20, *, value_size: int = 200) -> list[RecordInput]:
    """Compressible, varied records: null keys and values, empty values, headers, timestamps that go back."""
    out = []
    for i in range(n):
        key = None if i % 5 == 3 else b"key-%d" % i
        value = None if i % 7 == 4 else b"" if i % 7 == 5 else (b"value %d " % i * value_size)[:value_size]
        headers: HeaderList = [("trace", b"t%d" % i), ("ünïcødé", None)] if i % 3 == 0 else []
        out.append(RecordInput(key, value, 1_700_000_000_000 + (i * 37) % 11 - 5, headers))
    return out


def expected(records: list[RecordInput], base_offset: int = 0) -> list[Record]:
    return [
        Record(
            base_offset + i,
            r.timestamp,
            None if r.key is None else bytes(r.key),
            None if r.value is None else bytes(r.value),
            tuple((k, None if v is None else bytes(v)) for k, v in r.headers),
        )
        for i, r in enumerate(records)
    ]


def recrc(batch: bytes | bytearray) -> bytes:
    """``batch`` with its CRC-32C recomputed (so a mutation gets past the CRC check)."""
    out = bytearray(batch)
    struct.pack_into(">I", out, h.CRC_OFFSET, h.compute_crc(out, 0, len(out)))
    return bytes(out)


# -- cross-checks with kafka-python ------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_reads_our_batches(codec: Codec) -> None:
    records = sample_records(30)
    batch = encode_batch(
        records,
        compression=codec,
        base_offset=1000,
        producer_id=77,
        producer_epoch=3,
        base_sequence=500,
        partition_leader_epoch=9,
        transactional=True,
    )
    theirs = DefaultRecordBatch(batch)
    assert theirs.validate_crc()
    assert theirs.magic == 2
    assert theirs.compression_type == codec
    assert theirs.base_offset == 1000
    assert theirs.leader_epoch == 9
    assert theirs.records_count == 30
    assert theirs.last_offset_delta == 29
    assert (theirs.producer_id, theirs.producer_epoch, theirs.base_sequence) == (77, 3, 500)
    assert theirs.is_transactional and not theirs.is_control_batch
    assert theirs.first_timestamp == records[0].timestamp
    assert theirs.max_timestamp == max(r.timestamp for r in records)
    got = [Record(r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in theirs]
    assert got == expected(records, 1000)


@pytest.mark.parametrize("codec", CODECS)
def test_we_read_kafka_python_batches(codec: Codec) -> None:
    records = sample_records(40)
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    for i, r in enumerate(records):
        assert builder.append(i, r.timestamp, r.key, r.value, list(r.headers)) is not None
    batch = bytes(builder.build())
    header, got = decode_batch(batch)
    assert header.codec == codec  # the values compress well, so kafka-python keeps the codec
    assert header.records_count == 40
    assert header.base_timestamp == records[0].timestamp
    assert got == expected(records)
    assert [g for _, rs in iter_batches(batch) for g in rs] == got


@pytest.mark.parametrize("codec", CODECS)
def test_log_append_time(codec: Codec) -> None:
    records = sample_records(10)
    batch = encode_batch(records, compression=codec, timestamp_type=1)
    header, got = decode_batch(batch)
    assert header.attributes & h.TIMESTAMP_TYPE_BIT
    assert {r.timestamp for r in got} == {header.max_timestamp}
    assert [r.timestamp for r in DefaultRecordBatch(batch)] == [header.max_timestamp] * 10


def test_kafka_python_reads_varint_boundaries() -> None:
    # Lengths and deltas around the 1-, 2- and 3-byte varint boundaries, and past the encoder's table.
    sizes = [0, 1, 63, 64, 65, 8191, 8192, 8193, 16383, 16384, 100_000]
    records = [
        RecordInput(os.urandom(s), os.urandom(sizes[-1 - i]), ts, [("h" * s, os.urandom(s))])
        for i, (s, ts) in enumerate(zip(sizes, [0, -1, 63, -64, 8191, -8192, 2**40, -(2**40), 2**61, -(2**61), 5]))
    ]
    batch = encode_batch(records)
    got = [Record(r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in DefaultRecordBatch(batch)]
    assert got == expected(records)
    assert decode_batch(batch)[1] == got


def test_many_records_past_the_offset_delta_table() -> None:
    records = [RecordInput(None, b"%d" % i, i, ()) for i in range(10_000)]
    batch = encode_batch(records, compression=Codec.LZ4)
    header, got = decode_batch(batch)
    assert header.last_offset_delta == 9_999
    assert got == expected(records)
    assert [r.offset for r in DefaultRecordBatch(batch)] == list(range(10_000))


# -- property round trips -----------------------------------------------------------------------

_bytes_or_none = st.one_of(st.none(), st.binary(max_size=300))
_big = st.tuples(st.binary(min_size=1, max_size=8), st.integers(0, 12_000)).map(lambda t: t[0] * t[1])
_record = st.builds(
    RecordInput,
    key=_bytes_or_none,
    value=st.one_of(st.none(), st.binary(max_size=300), _big),
    timestamp=st.integers(-(2**61), 2**61),
    headers=st.lists(
        st.tuples(st.text(max_size=20), st.one_of(st.none(), st.binary(max_size=40))),
        max_size=12,
    ),
)


@FAST
@given(records=st.lists(_record, min_size=1, max_size=25), codec=st.sampled_from(CODECS), base=st.integers(0, 2**50))
def test_round_trip(records: list[RecordInput], codec: Codec, base: int) -> None:
    batch = encode_batch(records, compression=codec, base_offset=base)
    header, got = decode_batch(batch)
    assert got == expected(records, base)
    assert header.records_count == len(records)
    assert header.base_timestamp == records[0].timestamp
    assert header.max_timestamp == max(r.timestamp for r in records)
    assert h.validate_batches(batch, 1 << 30)[0].header == header


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=st.lists(_record, min_size=1, max_size=10), codec=st.sampled_from(CODECS))
def test_round_trip_through_kafka_python(records: list[RecordInput], codec: Codec) -> None:
    batch = encode_batch(records, compression=codec)
    got = [Record(r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in DefaultRecordBatch(batch)]
    assert got == expected(records)


# -- header fields, special batches ----------------------------------------------------------------


def test_header_fields() -> None:
    records = [RecordInput(b"k", b"v", ts, ()) for ts in (500, 100, 900, 300)]
    batch = encode_batch(records, base_offset=42, partition_leader_epoch=7, producer_id=5, producer_epoch=1)
    header = h.read_header(batch)
    assert header.base_offset == 42
    assert header.partition_leader_epoch == 7
    assert header.size == len(batch)
    assert header.attributes == 0
    assert header.last_offset_delta == 3
    assert (header.base_timestamp, header.max_timestamp) == (500, 900)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (5, 1, -1)
    assert header.records_count == 4
    assert h.crc_matches(batch, 0, header)


def test_rewriting_offset_and_epoch_keeps_the_crc() -> None:
    batch = bytearray(encode_batch(sample_records(5)))
    h.rewrite_offset_and_epoch(batch, 0, 12345, 6)
    header, got = decode_batch(batch)
    assert (header.base_offset, header.partition_leader_epoch) == (12345, 6)
    assert [r.offset for r in got] == list(range(12345, 12350))


def test_encode_rejects_empty_and_out_of_range() -> None:
    with pytest.raises(ValueError):
        encode_batch([])
    with pytest.raises(ValueError):
        encode_batch([RecordInput(None, b"", -(2**63), ()), RecordInput(None, b"", 2**63 - 1, ())])
    with pytest.raises(ValueError):
        encode_batch([RecordInput(None, b"", 0, ())], producer_epoch=2**15)


def test_control_batch() -> None:
    # An end-transaction marker: key = version 0, type 1 (commit); value = version 0, coordinator epoch 4.
    marker = [RecordInput(struct.pack(">hh", 0, 1), struct.pack(">hi", 0, 4), 1000, ())]
    control = encode_batch(marker, control=True, transactional=True, producer_id=9, producer_epoch=0, base_offset=5)
    data = encode_batch(sample_records(3), base_offset=6)
    header, got = decode_batch(control)
    assert header.is_control
    assert got == [Record(5, 1000, marker[0].key, marker[0].value)]  # type: ignore[arg-type]
    theirs = list(DefaultRecordBatch(control))
    assert theirs[0].commit and theirs[0].type == 1
    walked = list(iter_batches(control + data))
    assert [(b.is_control, len(rs)) for b, rs in walked] == [(True, 0), (False, 3)]


def test_empty_batch_left_by_compaction() -> None:
    batch = bytearray(h.HEADER_SIZE)
    h.HEADER.pack_into(batch, 0, 100, h.HEADER_SIZE - 12, 0, 2, 0, 0, 4, 10, 20, 3, 0, 0, 0)
    batch = bytearray(recrc(batch))
    header, got = decode_batch(batch)
    assert got == [] and header.last_offset_delta == 4
    assert [rs for _, rs in iter_batches(bytes(batch))] == [[]]


# -- iter_batches: walking a fetched record set -------------------------------------------------------


def test_iter_batches_walks_all() -> None:
    batches = [
        encode_batch(sample_records(n), base_offset=o, compression=c) for n, o, c in [(3, 0, 0), (5, 3, 1), (2, 8, 4)]
    ]
    walked = list(iter_batches(b"".join(batches)))
    assert [b.base_offset for b, _ in walked] == [0, 3, 8]
    assert [r.offset for _, rs in walked for r in rs] == list(range(10))
    assert list(iter_batches(b"")) == []


def test_iter_batches_stops_silently_at_a_truncated_trailing_batch() -> None:
    first = encode_batch(sample_records(4))
    last = encode_batch(sample_records(6), base_offset=4, compression=Codec.GZIP)
    for cut in range(len(last)):
        walked = list(iter_batches(first + last[:cut]))
        assert len(walked) == 1 and len(walked[0][1]) == 4, cut


def test_iter_batches_raises_on_a_bad_crc_in_the_middle() -> None:
    a, b, c = (encode_batch(sample_records(3), base_offset=3 * i) for i in range(3))
    bad = bytearray(b)
    bad[-2] ^= 0x01  # the last byte of the last value: only the CRC can tell
    it = iter_batches(a + bytes(bad) + c)
    assert len(next(it)[1]) == 3
    with pytest.raises(KafkaError) as e:
        next(it)
    assert e.value.code == ErrorCode.CORRUPT_MESSAGE
    assert len(list(iter_batches(a + bytes(bad) + c, verify_crc=False))) == 3


def test_iter_batches_raises_on_a_batch_truncated_in_the_middle() -> None:
    # The first batch lost its tail: its length now reaches into the next batch.
    a, b = encode_batch(sample_records(5)), encode_batch(sample_records(5), base_offset=5)
    with pytest.raises(KafkaError) as e:
        list(iter_batches(a[:-10] + b))
    assert e.value.code == ErrorCode.CORRUPT_MESSAGE


def test_iter_batches_rejects_a_short_length_and_legacy_magic() -> None:
    a = bytearray(encode_batch(sample_records(2)))
    short = bytearray(a)
    struct.pack_into(">i", short, 8, 10)
    with pytest.raises(KafkaError):
        list(iter_batches(bytes(short)))
    legacy = bytearray(a)
    legacy[h.MAGIC_OFFSET] = 1
    with pytest.raises(KafkaError):
        list(iter_batches(bytes(legacy)))


# -- corruption -----------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
def test_every_flipped_byte_in_the_crc_range_is_caught(codec: Codec) -> None:
    batch = encode_batch(sample_records(4, value_size=30), compression=codec)
    for i in range(h.ATTRIBUTES_OFFSET, len(batch)):
        bad = bytearray(batch)
        bad[i] ^= 0x40
        with pytest.raises(KafkaError) as e:
            decode_batch(bytes(bad))
        assert e.value.code == ErrorCode.CORRUPT_MESSAGE, i


def test_verify_crc_false_skips_the_check() -> None:
    batch = bytearray(encode_batch([RecordInput(b"k", b"value", 1, ())]))
    batch[batch.rindex(b"value") + 2] ^= 0x01  # inside the value: structure intact
    with pytest.raises(KafkaError):
        decode_batch(bytes(batch))
    _, got = decode_batch(bytes(batch), verify_crc=False)
    assert got[0].value == b"vamue"


@pytest.mark.parametrize("codec", CODECS)
def test_truncated_batch(codec: Codec) -> None:
    batch = encode_batch(sample_records(5), compression=codec)
    for cut in (0, 11, 12, 60, 61, len(batch) // 2, len(batch) - 1):
        with pytest.raises(KafkaError) as e:
            decode_batch(batch[:cut])
        assert e.value.code == ErrorCode.CORRUPT_MESSAGE


def test_record_count_must_match() -> None:
    batch = encode_batch(sample_records(3))
    for count in (0, 2, 4, 1000, -1):
        bad = bytearray(batch)
        struct.pack_into(">i", bad, 57, count)
        with pytest.raises(KafkaError) as e:
            decode_batch(recrc(bad))
        assert e.value.code == ErrorCode.CORRUPT_MESSAGE, count


def test_trailing_bytes_after_the_records() -> None:
    batch = bytearray(encode_batch(sample_records(3)) + b"\x00\x00")
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    with pytest.raises(KafkaError) as e:
        decode_batch(recrc(batch))
    assert e.value.code == ErrorCode.CORRUPT_MESSAGE


def test_invalid_utf8_header_key() -> None:
    batch = encode_batch([RecordInput(None, None, 0, [("ab", None)])])
    bad = bytearray(batch)
    i = bad.rindex(b"ab")
    bad[i] = 0xFF
    with pytest.raises(KafkaError) as e:
        decode_batch(recrc(bad))
    assert e.value.code == ErrorCode.CORRUPT_MESSAGE


@FAST
@given(data=st.binary(max_size=400))
def test_random_bytes_raise_only_kafka_error(data: bytes) -> None:
    for f in (lambda: decode_batch(data), lambda: list(iter_batches(data))):
        try:
            f()
        except KafkaError as e:
            assert e.code in (ErrorCode.CORRUPT_MESSAGE, ErrorCode.UNSUPPORTED_COMPRESSION_TYPE)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), codec=st.sampled_from([Codec.NONE, Codec.NONE, Codec.GZIP]))
def test_mutated_records_with_a_valid_crc_raise_only_kafka_error(data: st.DataObject, codec: Codec) -> None:
    # Past the CRC check, the record parser itself must be total.
    batch = bytearray(encode_batch(sample_records(4, value_size=20), compression=codec))
    for _ in range(data.draw(st.integers(1, 3))):
        i = data.draw(st.integers(h.ATTRIBUTES_OFFSET + 2, len(batch) - 1))
        batch[i] = data.draw(st.integers(0, 255))
    try:
        decode_batch(recrc(batch))
    except KafkaError as e:
        assert e.code in (ErrorCode.CORRUPT_MESSAGE, ErrorCode.UNSUPPORTED_COMPRESSION_TYPE)


def test_unsupported_codec_in_attributes() -> None:
    bad = bytearray(encode_batch(sample_records(2)))
    struct.pack_into(">h", bad, h.ATTRIBUTES_OFFSET, 6)
    with pytest.raises(KafkaError) as e:
        decode_batch(recrc(bad))
    assert e.value.code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
