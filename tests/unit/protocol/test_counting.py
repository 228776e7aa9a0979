"""Counting records per (window, origin): the compiled loop (_crecords.count_origins) against the
pure-Python reference (counting._count_origins), on generated batches.

Generated records carry no headers, the origin headers in any order (repeated, null, empty,
non-UTF-8, creation times that are not plain digits or out of range) and other headers; batches
are compressed or not, with CreateTime or LogAppendTime. Damaged payloads: whenever the compiled
loop answers, the reference answers the same (it declines, and the reference decides, otherwise).
Like test_crecords.py this fails when the extension is missing, unless HEADWATER_NO_EXTENSIONS is set.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from headwater.protocol.errors import ErrorCode, KafkaError
from headwater.protocol.records import counting
from headwater.protocol.records import record as rec
from headwater.protocol.records.compression import Codec
from headwater.protocol.records.record import RecordInput, encode_batch

if os.environ.get("HEADWATER_NO_EXTENSIONS", "") not in ("", "0"):
    pytest.skip("HEADWATER_NO_EXTENSIONS is set: no compiled codec to compare", allow_module_level=True)

from headwater.protocol.records import _crecords

PROPS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
DC, CREATED = "origin.dc", "origin.created"
MAX_TIME = 2**62
W = 60_000

CREATED_VALUES = st.integers(0, 2 * 10**13).map(lambda n: str(n).encode()) | st.sampled_from(
    [
        b"",
        b"abc",
        b" 12 ",
        b"\x0b7",
        b"+5",
        b"-0",
        b"-5",
        b"1_000",
        b"1__0",
        b"0012",
        b"\xd9\xa3",
        b"12\x00",
        str(MAX_TIME).encode(),
        str(MAX_TIME - 1).encode(),
        b"9" * 18,
        b"9" * 19,
        b"0" * 30 + b"5",
        b"0" * 5000 + b"1",  # beyond Python's int() digit limit: not a time
    ]
)
DC_VALUES = st.sampled_from([b"dc1", b"dc2", b"", b"\xff\xfe", "d\u00e9".encode()]) | st.binary(max_size=6)
HEADER = (
    st.tuples(st.just(DC), st.none() | DC_VALUES)
    | st.tuples(st.just(CREATED), st.none() | CREATED_VALUES)
    | st.tuples(
        st.sampled_from(["origin.host", "origin.dcx", "origin.create", "", "é"]), st.none() | st.binary(max_size=8)
    )
    | st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=8))
)
TIMESTAMPS = st.integers(-(2**40), 2**41) | st.sampled_from(
    [-1, MAX_TIME - 1, MAX_TIME, -MAX_TIME, -MAX_TIME - 1, 2**63 - 1]
)
RECORDS = st.lists(
    st.builds(
        RecordInput,
        st.none() | st.binary(max_size=20),
        st.none() | st.binary(max_size=120),
        TIMESTAMPS,
        st.lists(HEADER, max_size=6),
    ),
    min_size=1,
    max_size=40,
)
CODECS = st.sampled_from([Codec.NONE, Codec.NONE, Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD])


def test_the_compiled_loop_is_built() -> None:
    assert counting.COMPILED, "the compiled codec predates count_origins: rebuild it (`make deps`, hatch_build.py)"


def audited(n: int, created: int, dc: bytes = b"dc1") -> RecordInput:
    return RecordInput(
        b"k", b"v" * 100, created, [("origin.host", b"web-7"), (DC, dc), (CREATED, str(created).encode())]
    )


def both(batch: bytes, window_ms: int, min_offset: int) -> tuple[Any, Any]:
    """(compiled, reference) results of count_origins on one batch: counts or "corrupt"."""
    results: list[Any] = []
    for c in (rec._C, None):
        saved = rec._C
        rec._C = c
        try:
            results.append(counting.count_origins(batch, window_ms, min_offset, DC, CREATED, MAX_TIME))
        except KafkaError as e:
            assert e.code == ErrorCode.CORRUPT_MESSAGE
            results.append("corrupt")
        finally:
            rec._C = saved
    return results[0], results[1]


def fits_int64(records: list[RecordInput]) -> bool:
    base = records[0].timestamp
    return all(-(2**63) <= r.timestamp - base < 2**63 for r in records)


@PROPS
@given(
    RECORDS, CODECS, st.booleans(), st.integers(0, 1 << 40), st.integers(0, 45), st.sampled_from([1, 7, W, 3_600_000])
)
def test_compiled_and_reference_count_every_batch_alike(
    records: list[RecordInput], codec: Codec, log_append: bool, base_offset: int, skip: int, window_ms: int
) -> None:
    if not fits_int64(records):
        return
    batch = encode_batch(records, base_offset=base_offset, compression=codec, timestamp_type=int(log_append))
    compiled, reference = both(batch, window_ms, base_offset + skip)
    assert compiled == reference
    assert sum(reference.values()) == max(len(records) - skip, 0)


@PROPS
@given(RECORDS, st.booleans(), st.integers(0, 45))
def test_the_compiled_loop_answers_well_formed_payloads_itself(
    records: list[RecordInput], log_append: bool, min_offset: int
) -> None:
    """It declines only what is malformed or overflows: a generated batch is counted in C."""
    if not fits_int64(records):
        return
    out = bytearray()
    rec._encode_records(out, records, records[0].timestamp)
    args = (
        bytes(out),
        len(records),
        0,
        records[0].timestamp,
        max(r.timestamp for r in records),
        log_append,
        min_offset,
        W,
    )
    got = _crecords.count_origins(*args, DC.encode(), CREATED.encode(), MAX_TIME, counting.created_value)
    assert got is not None
    assert got == counting._count_origins(*args, DC, CREATED, MAX_TIME)


@PROPS
@given(RECORDS, st.data())
def test_on_damaged_payloads_the_compiled_loop_answers_as_the_reference_or_declines(
    records: list[RecordInput], data: st.DataObject
) -> None:
    if not fits_int64(records):
        return
    out = bytearray()
    rec._encode_records(out, records, records[0].timestamp)
    raw = out
    how = data.draw(st.sampled_from(["truncate", "flip", "extend", "count"]))
    count = len(records)
    if how == "truncate":
        del raw[data.draw(st.integers(0, len(raw) - 1)) :]
    elif how == "flip":
        for _ in range(data.draw(st.integers(1, 4))):
            raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    elif how == "extend":
        raw += data.draw(st.binary(min_size=1, max_size=20))
    else:
        count = data.draw(st.integers(0, count + 3).filter(lambda n: n != len(records)))
    args = (bytes(raw), count, 0, records[0].timestamp, records[0].timestamp, False, 0, W)
    got = _crecords.count_origins(*args, DC.encode(), CREATED.encode(), MAX_TIME, counting.created_value)
    try:
        expected: Any = counting._count_origins(*args, DC, CREATED, MAX_TIME)
    except KafkaError as e:
        assert e.code == ErrorCode.CORRUPT_MESSAGE
        expected = "corrupt"
    if got is not None:
        assert got == expected


def test_a_varint_beyond_64_bits_is_left_to_the_reference() -> None:
    # One record whose timestamp delta is a 10-byte varint with bits above bit 63: Python reads a
    # time beyond any int64 (unaudited, window -1); the compiled loop declines rather than wrap it.
    body = b"\x00" + b"\xff" * 9 + b"\x7f" + b"\x00" + b"\x01" + b"\x01" + b"\x00"
    payload = bytes([len(body) << 1]) + body
    args = (payload, 1, 0, 0, 0, False, 0, W)
    assert _crecords.count_origins(*args, DC.encode(), CREATED.encode(), MAX_TIME, counting.created_value) is None
    assert counting._count_origins(*args, DC, CREATED, MAX_TIME) == {(-W, None): 1}


def test_counts_by_creation_time_and_origin_with_the_last_header_winning() -> None:
    records = [
        audited(0, W - 1),
        audited(1, W),
        RecordInput(None, b"v", 5, [(CREATED, b"100"), (DC, b"dc2"), (DC, None)]),  # a null dc does not reset
        RecordInput(None, b"v", 5, [(DC, b"dc2"), (CREATED, b"100"), (CREATED, b"x")]),  # a bad later one does
        RecordInput(None, b"v", 2 * W + 1, []),
        RecordInput(None, b"v", MAX_TIME, [(DC, b"dc1"), (CREATED, str(MAX_TIME).encode())]),
    ]
    batch = encode_batch(records, compression=Codec.LZ4)
    compiled, reference = both(batch, W, 0)
    assert (
        compiled
        == reference
        == {(0, "dc1"): 1, (W, "dc1"): 1, (0, "dc2"): 1, (0, None): 1, (2 * W, None): 1, (-W, None): 1}
    )


def test_a_corrupt_batch_raises_corrupt_message_on_both_paths() -> None:
    batch = bytearray(encode_batch([audited(i, 1000 + i) for i in range(5)]))
    batch[-3] ^= 0xFF  # inside the CRC'd range
    assert both(bytes(batch), W, 0) == ("corrupt", "corrupt")
    with pytest.raises(ValueError):
        counting.count_origins(bytes(batch), 0, 0, DC, CREATED, MAX_TIME)


def test_more_origins_than_the_compiled_loop_keeps_at_once() -> None:
    records = [audited(i, i * W, b"dc%d" % (i % 7)) for i in range(100)]
    compiled, reference = both(encode_batch(records), W, 0)
    assert compiled == reference
    assert len(compiled) == 100
