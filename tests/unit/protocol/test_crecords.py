"""The compiled record codec (_crecords.pyx) against the pure-Python reference in record.py.

Differential properties: for generated records both encoders give the same bytes, and for generated
payloads -- well formed, truncated, or with bytes flipped -- both decoders give equal records or
both fail with CORRUPT_MESSAGE. ``make test`` builds the extension; this module fails (rather than
skips) when it is missing, unless HEADWATER_NO_EXTENSIONS asks for the pure-Python codec.
"""

from __future__ import annotations

import gc
import os
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from headwater.client.consumer import ConsumerRecord
from headwater.protocol.errors import ErrorCode, KafkaError
from headwater.protocol.records import record as rec
from headwater.protocol.records.record import Record, RecordInput

if os.environ.get("HEADWATER_NO_EXTENSIONS", "") not in ("", "0"):
    pytest.skip("HEADWATER_NO_EXTENSIONS is set: no compiled codec to compare", allow_module_level=True)

from headwater.protocol.records import _crecords

PROPS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

INT64 = st.integers(-(1 << 63), (1 << 63) - 1)
BLOB = st.none() | st.binary(max_size=300)
HEADERS = st.lists(st.tuples(st.text(max_size=12), st.none() | st.binary(max_size=40)), max_size=4)
RECORDS = st.lists(
    st.builds(RecordInput, BLOB, BLOB, st.integers(-(1 << 40), 1 << 42), HEADERS),
    min_size=1,
    max_size=40,
)


def test_the_extension_is_in_use() -> None:
    assert rec.EXTENSION, "the compiled record codec is not built: `make deps` (hatch_build.py) builds it"


def encode_both(records: list[RecordInput], base_ts: int) -> tuple[Any, Any]:
    results = []
    for encode in (rec._encode_records, _crecords.encode_records):
        out = bytearray(b"header")
        try:
            max_ts = encode(out, records, base_ts)
        except (ValueError, OverflowError) as e:
            results.append(type(e).__name__)
        else:
            results.append((bytes(out), max_ts))
    return results[0], results[1]


@PROPS
@given(RECORDS)
def test_encoders_write_the_same_bytes(records: list[RecordInput]) -> None:
    py, c = encode_both(records, records[0].timestamp)
    assert py == c


# Headers in every shape a caller may hand encode_batch: a list or tuple of pairs, pairs as tuples
# or lists, values as bytes, bytearray or memoryview (the compiled encoder reads exact 2-tuples and
# bytes in place, the rest through the general path), keys repeated as one str object or not ASCII.
VALUE_SHAPES = st.sampled_from([bytes, bytearray, memoryview])
SHAPED_HEADER = st.tuples(
    st.sampled_from(["origin.host", "origin.dc", "origin.created", "ünïcødé-κλειδί", ""]) | st.text(max_size=12),
    st.none() | st.builds(lambda b, f: f(b), st.binary(max_size=200), VALUE_SHAPES),
    st.sampled_from([tuple, list]),
).map(lambda t: t[2]((t[0], t[1])))
SHAPED_RECORDS = st.lists(
    st.builds(
        RecordInput,
        BLOB,
        BLOB,
        st.integers(0, 1 << 20),
        st.lists(SHAPED_HEADER, max_size=70).flatmap(lambda h: st.sampled_from([h, tuple(h)])),
    ),
    min_size=1,
    max_size=20,
)


@PROPS
@given(SHAPED_RECORDS)
def test_encoders_write_the_same_header_bytes_for_every_header_shape(records: list[RecordInput]) -> None:
    py, c = encode_both(records, records[0].timestamp)
    assert py == c
    _, decoded = rec.decode_batch(rec.encode_batch(records))
    assert [r.headers for r in decoded] == [
        tuple((k, None if v is None else bytes(v)) for k, v in r.headers) for r in records
    ]


# Runs of records sharing one headers object (the auditing producer's origin headers, one tuple per
# millisecond), between records with their own headers or none, and long enough for ``out`` to be
# reallocated between a run's first record (encoded) and the next (copied from ``out``).
SHARED_RUNS = st.lists(
    st.tuples(st.integers(1, 300), st.lists(SHAPED_HEADER, max_size=5).map(tuple), BLOB),
    min_size=1,
    max_size=6,
)


@PROPS
@given(SHARED_RUNS)
def test_encoders_agree_on_runs_of_records_sharing_one_headers_object(runs: list[tuple[int, Any, Any]]) -> None:
    records = []
    for n, headers, value in runs:
        records.extend(RecordInput(None, value, 1_700_000_000_000 + i, headers) for i in range(n))
        records.append(RecordInput(None, b"own", 1_700_000_000_000, (("k", b"v"),)))
    py, c = encode_both(records, records[0].timestamp)
    assert py == c
    _, decoded = rec.decode_batch(rec.encode_batch(records))
    assert [r.headers for r in decoded] == [
        tuple((k, None if v is None else bytes(v)) for k, v in r.headers) for r in records
    ]


def outcome(encode: Any, records: list[Any]) -> Any:
    out = bytearray(b"header")
    try:
        encode(out, records, 0)
    except Exception as e:
        return type(e)
    return bytes(out)


@pytest.mark.parametrize(
    "headers",
    [
        [(b"bytes-key", b"v")],  # a key that is not a str
        [(7, b"v")],
        [("k", "a str value")],  # a value that is not a buffer
        [("k", 7)],
        [("\udc80", b"v")],  # a key UTF-8 cannot encode
        [("k", b"v", b"extra")],  # not a pair
        [("k",)],
        [("ok", b"v"), ("k", 1.5)],  # a bad header after a good one
    ],
)
def test_encoders_refuse_bad_headers_alike(headers: list[Any]) -> None:
    records = [(None, b"v", 0, ()), (None, b"v", 0, headers)]
    py, c = outcome(rec._encode_records, records), outcome(_crecords.encode_records, records)
    assert isinstance(py, type) and issubclass(py, Exception)
    assert py == c


@PROPS
@given(RECORDS, INT64)
def test_encoders_agree_on_timestamps_out_of_range(records: list[RecordInput], base_ts: int) -> None:
    py, c = encode_both(records, base_ts)
    if isinstance(py, str):  # a delta that does not fit a varlong: both refuse (C may say OverflowError)
        assert isinstance(c, str)
    else:
        assert py == c


def decode_both(
    data: bytes, count: int, base_offset: int, base_ts: int, max_ts: int, log_append: bool, **kw: Any
) -> tuple[Any, Any]:
    cls = kw.get("cls", Record)
    prefix = kw.get("prefix", ())
    min_offset = kw.get("min_offset", -1)
    results: list[Any] = []
    for parse in (rec._parse_records, _crecords.parse_records):
        try:
            results.append(parse(data, count, base_offset, base_ts, max_ts, log_append, cls, prefix, min_offset))
        except KafkaError as e:
            assert e.code == ErrorCode.CORRUPT_MESSAGE
            results.append("corrupt")
        except (IndexError, UnicodeDecodeError):
            results.append("corrupt")  # the Python parser's raw errors; _parse turns them into CORRUPT_MESSAGE
    return results[0], results[1]


def payload(records: list[RecordInput]) -> bytes:
    out = bytearray()
    rec._encode_records(out, records, records[0].timestamp)
    return bytes(out)


@PROPS
@given(RECORDS, st.integers(0, 1 << 40), st.booleans())
def test_decoders_read_the_same_records(records: list[RecordInput], base_offset: int, log_append: bool) -> None:
    data = payload(records)
    base_ts = records[0].timestamp
    max_ts = max(r.timestamp for r in records)
    py, c = decode_both(data, len(records), base_offset, base_ts, max_ts, log_append)
    assert py == c
    assert [type(r) for r in c] == [Record] * len(records)
    assert [r.offset for r in c] == [base_offset + i for i in range(len(records))]


@PROPS
@given(RECORDS, st.integers(0, 45))
def test_decoders_agree_with_a_prefix_and_a_start_offset(records: list[RecordInput], min_offset: int) -> None:
    data = payload(records)
    ts = records[0].timestamp
    py, c = decode_both(
        data, len(records), 0, ts, ts, False, cls=ConsumerRecord, prefix=("t", 3), min_offset=min_offset
    )
    assert py == c
    assert all(type(r) is ConsumerRecord and r.topic == "t" and r.partition == 3 for r in c)
    assert [r.offset for r in c] == list(range(min(min_offset, len(records)), len(records)))
    # A fresh record holds its fields (nothing borrowed from the decoder's buffer): bytes hold no cycles,
    # so dropping the last reference frees the buffer at once (a gc.collect() per example cost ~45 s).
    del data
    assert [r.key for r in c] == [None if r.key is None else bytes(r.key) for r in records[min_offset:]]


@PROPS
@given(RECORDS, st.data())
def test_decoders_agree_on_damaged_payloads(records: list[RecordInput], data: st.DataObject) -> None:
    raw = bytearray(payload(records))
    how = data.draw(st.sampled_from(["truncate", "flip", "extend", "count"]))
    count = len(records)
    if how == "truncate":
        del raw[data.draw(st.integers(0, len(raw) - 1)) :]
    elif how == "flip":
        for _ in range(data.draw(st.integers(1, 4))):
            i = data.draw(st.integers(0, len(raw) - 1))
            raw[i] = data.draw(st.integers(0, 255))
    elif how == "extend":
        raw += data.draw(st.binary(min_size=1, max_size=20))
    else:
        count = data.draw(st.integers(0, count + 3).filter(lambda n: n != len(records)))
    ts = records[0].timestamp
    py, c = decode_both(bytes(raw), count, 0, ts, ts, False)
    assert py == c


def test_empty_payload_with_records_is_corrupt() -> None:
    assert decode_both(b"", 1, 0, 0, 0, False) == ("corrupt", "corrupt")
    assert decode_both(b"", 0, 0, 0, 0, False) == ([], [])


def test_decoded_records_outlive_their_source_and_compare_as_tuples() -> None:
    records = [RecordInput(b"k%d" % i, b"v" * i, 1000 + i, [("h", b"x")] if i % 2 else []) for i in range(100)]
    got = _crecords.parse_records(payload(records), 100, 7, 1000, 1099, False, Record, (), -1)
    gc.collect()
    assert got == rec._parse_records(payload(records), 100, 7, 1000, 1099, False, Record, (), -1)
    assert got[5] == (12, 1005, b"k5", b"vvvvv", (("h", b"x"),))
    assert got[5]._replace(key=None).key is None
