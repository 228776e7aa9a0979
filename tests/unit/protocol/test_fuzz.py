"""Fuzzing the request decoder and the frame splitter: malformed input fails with one typed error.

``frames.decode_request`` may only return or raise ``DecodeError`` / ``KafkaError``; anything
else (IndexError, struct.error, UnicodeDecodeError, MemoryError, RecursionError...) would be a
crash in the broker's connection loop.
"""

from __future__ import annotations

import random
import struct
import tracemalloc
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headwater.protocol import frames
from headwater.protocol.apis import ALL_APIS, API_BY_KEY
from headwater.protocol.errors import DecodeError, KafkaError
from headwater.protocol.schema import Api, Array, Primitive, Struct

FUZZ = settings(max_examples=300, deadline=None, database=None)


def _decode_or_typed_error(frame: bytes) -> None:
    try:
        frames.decode_request(memoryview(frame))
    except (DecodeError, KafkaError):
        pass


# --- valid requests to mutate ------------------------------------------------------------------


def _filled(t: Primitive | Array | Struct, version: int, rng: random.Random) -> Any:
    """A value with every array non-empty, so that mutations reach every nested decoder."""
    if isinstance(t, Struct):
        return {f.name: _filled(f.type, version, rng) for f in t.fields_at(version)}
    if isinstance(t, Array):
        return [_filled(t.of, version, rng) for _ in range(rng.randint(1, 2))]
    if t.name in ("string", "nullable_string"):
        return rng.choice(("t", "größe", "topic-1"))
    if t.name in ("bytes", "nullable_bytes", "records"):
        return rng.randbytes(rng.randint(0, 12))
    if t.name == "bool":
        return True
    return rng.randint(-100, 100)


def _valid_frames() -> list[bytes]:
    out = []
    rng = random.Random(1)
    for api in ALL_APIS:
        for version in range(api.min_version, api.max_version + 1):
            body = _filled(api.request, version, rng)
            out.append(frames.encode_request(api, version, rng.randint(0, 1000), "fuzz", body)[4:])
    return out


VALID = _valid_frames()


def test_valid_frames_decode() -> None:
    for frame in VALID:
        header, api, _ = frames.decode_request(memoryview(frame))
        assert api is API_BY_KEY[header.api_key]


# --- arbitrary bytes ---------------------------------------------------------------------------


@FUZZ
@given(st.binary(max_size=256))
def test_arbitrary_bytes(data: bytes) -> None:
    _decode_or_typed_error(data)


_HEADER = struct.Struct(">hhi")
_SUPPORTED = [(api.key, v) for api in ALL_APIS for v in range(api.min_version, api.max_version + 1)]


@FUZZ
@given(
    st.sampled_from(_SUPPORTED),
    st.one_of(st.none(), st.binary(max_size=8)),
    st.binary(max_size=200),
)
def test_valid_header_then_arbitrary_body(target: tuple[int, int], client_id: bytes | None, body: bytes) -> None:
    """With a header naming a real API/version, random bytes reach the body decoders."""
    key, version = target
    cid = b"\xff\xff" if client_id is None else len(client_id).to_bytes(2, "big") + client_id
    _decode_or_typed_error(_HEADER.pack(key, version, 1) + cid + body)


@FUZZ
@given(st.integers(-(2**15), 2**15 - 1), st.integers(-(2**15), 2**15 - 1), st.binary(max_size=32))
def test_any_api_key_and_version(key: int, version: int, rest: bytes) -> None:
    frame = _HEADER.pack(key, version, 0) + b"\xff\xff" + rest
    try:
        frames.decode_request(memoryview(frame))
    except frames.UnsupportedRequest as e:
        assert e.header.api_key == key and e.header.api_version == version
        api = API_BY_KEY.get(key)
        assert api is None or not api.supports(version)
    except DecodeError:
        pass


# --- mutations of valid frames -----------------------------------------------------------------


@FUZZ
@given(st.sampled_from(VALID), st.data())
def test_truncated_frames(frame: bytes, data: st.DataObject) -> None:
    cut = data.draw(st.integers(0, len(frame) - 1))
    with pytest.raises((DecodeError, KafkaError)):
        frames.decode_request(memoryview(frame[:cut]))


@FUZZ
@given(st.sampled_from(VALID), st.binary(min_size=1, max_size=16))
def test_trailing_bytes_are_refused(frame: bytes, extra: bytes) -> None:
    with pytest.raises(DecodeError):
        frames.decode_request(memoryview(frame + extra))


_MUTATION = st.tuples(
    st.sampled_from(("flip", "set", "insert", "delete", "length")),
    st.integers(0, 1 << 16),
    st.integers(0, 255),
)


@FUZZ
@given(st.sampled_from(VALID), st.lists(_MUTATION, min_size=1, max_size=4))
def test_mutated_frames(frame: bytes, mutations: list[tuple[str, int, int]]) -> None:
    buf = bytearray(frame)
    for kind, where, byte in mutations:
        i = where % max(len(buf), 1)
        if kind == "flip" and buf:
            buf[i] ^= 1 << (byte % 8)
        elif kind == "set" and buf:
            buf[i] = byte
        elif kind == "insert":
            buf[i:i] = bytes([byte])
        elif kind == "delete" and buf:
            del buf[i]
        elif kind == "length" and len(buf) >= 4:
            # overwrite what may be a length prefix with an extreme value
            i = min(i, len(buf) - 4)
            buf[i : i + 4] = random.Random(byte).choice((b"\x7f\xff\xff\xff", b"\xff\xff\xff\xfe", b"\x80\x00\x00\x00"))
    _decode_or_typed_error(bytes(buf))


def test_huge_array_length_fails_fast_without_allocating() -> None:
    # Metadata v1 request whose topics array claims 2**31-1 elements
    frame = _HEADER.pack(3, 1, 0) + b"\xff\xff" + b"\x7f\xff\xff\xff"
    tracemalloc.start()
    try:
        with pytest.raises(DecodeError):
            frames.decode_request(memoryview(frame))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20


# --- FrameDecoder ------------------------------------------------------------------------------

LIMIT = 1 << 20


def test_frame_decoder_refuses_oversized_frame_from_its_size_prefix() -> None:
    dec = frames.FrameDecoder(LIMIT)
    assert dec.feed(b"\x00\x10") == []  # half a size prefix: nothing to decide yet
    with pytest.raises(frames.FrameTooLarge) as info:
        dec.feed(b"\x00\x01")  # 0x00100001 = LIMIT + 1, refused before any body byte arrives
    assert (info.value.size, info.value.limit) == (LIMIT + 1, LIMIT)
    assert isinstance(info.value, DecodeError)


def test_frame_decoder_refuses_huge_frame_without_buffering_it() -> None:
    dec = frames.FrameDecoder(LIMIT)
    tracemalloc.start()
    try:
        with pytest.raises(frames.FrameTooLarge):
            dec.feed(struct.pack(">i", 2**31 - 1) + b"x" * 100)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20
    assert dec.pending() < 200


def test_frame_decoder_refuses_oversized_frame_after_valid_ones() -> None:
    dec = frames.FrameDecoder(LIMIT)
    assert dec.feed(struct.pack(">i", 3) + b"abc") == [b"abc"]
    with pytest.raises(frames.FrameTooLarge):
        dec.feed(struct.pack(">i", LIMIT + 1))


def test_frame_decoder_refuses_negative_size() -> None:
    with pytest.raises(DecodeError):
        frames.FrameDecoder(LIMIT).feed(b"\xff\xff\xff\xff")


def test_frame_decoder_accepts_frame_at_the_limit() -> None:
    dec = frames.FrameDecoder(16)
    assert dec.feed(struct.pack(">i", 16) + b"y" * 16 + struct.pack(">i", 0)) == [b"y" * 16, b""]
    assert dec.pending() == 0


@settings(max_examples=100, deadline=None, database=None)
@given(st.lists(st.binary(max_size=40), max_size=8), st.lists(st.integers(1, 50), min_size=1, max_size=30))
def test_frame_decoder_any_chunking(payloads: list[bytes], cuts: list[int]) -> None:
    stream = b"".join(struct.pack(">i", len(p)) + p for p in payloads)
    dec = frames.FrameDecoder(64)
    got: list[bytes] = []
    pos = 0
    i = 0
    while pos < len(stream):
        n = cuts[i % len(cuts)]
        got.extend(bytes(f) for f in dec.feed(stream[pos : pos + n]))
        pos += n
        i += 1
    assert got == payloads
    assert dec.pending() == 0


@settings(max_examples=200, deadline=None, database=None)
@given(
    st.lists(st.binary(max_size=300), max_size=10),
    st.lists(st.integers(1, 400), min_size=1, max_size=30),
    st.integers(16, 128),
)
def test_frame_decoder_receive_in_place_any_chunking(payloads: list[bytes], cuts: list[int], buffer_bytes: int) -> None:
    """The socket path (recv_into ``buffer()``, then ``received(n)``) with a small receive buffer, so
    frames larger than half of it are received in place and the buffer compacts often."""
    stream = b"".join(struct.pack(">i", len(p)) + p for p in payloads)
    dec = frames.FrameDecoder(1 << 20, buffer_bytes=buffer_bytes)
    got: list[bytes] = []
    pos = 0
    i = 0
    while pos < len(stream):
        room = dec.buffer()
        assert len(room) > 0
        n = min(cuts[i % len(cuts)], len(room), len(stream) - pos)
        room[:n] = stream[pos : pos + n]
        got.extend(bytes(f) for f in dec.received(n))
        pos += n
        i += 1
    assert got == payloads
    assert dec.pending() == 0


@pytest.mark.parametrize("api", ALL_APIS, ids=lambda a: a.name)
def test_every_api_is_fuzzed(api: Api) -> None:
    keys = {int.from_bytes(f[:2], "big", signed=True) for f in VALID}
    assert api.key in keys
