"""FrameDecoder memory follows the bytes that arrived, never a size a peer announced (review H3)."""

from __future__ import annotations

import struct
import tracemalloc

from headwater.protocol import frames

MIB = 1 << 20


def test_an_announced_100_mib_frame_allocates_nothing_like_it() -> None:
    dec = frames.FrameDecoder(100 * MIB)
    tracemalloc.start()
    try:
        assert dec.feed(struct.pack(">i", 100 * MIB) + b"x" * 100) == []
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < MIB, peak
    assert dec.allocated() < MIB and dec.pending() == 100


def test_a_new_decoder_is_small_and_grows_for_a_busy_stream() -> None:
    dec = frames.FrameDecoder(100 * MIB)
    assert dec.allocated() <= 8 * 1024  # an idle connection costs a few KiB, not 256 KiB
    payloads = [bytes([i % 251]) * (100 * 1024) for i in range(20)]  # 100 KiB: small frames
    stream = b"".join(struct.pack(">i", len(p)) + p for p in payloads)
    got: list[bytes] = []
    pos = 0
    while pos < len(stream):
        room = dec.buffer()
        n = min(len(room), len(stream) - pos)
        room[:n] = stream[pos : pos + n]
        del room
        got.extend(bytes(f) for f in dec.received(n))
        pos += n
    assert got == payloads
    assert dec.allocated() == 256 * 1024  # grown to the full receive buffer, and no further


def test_a_large_frame_grows_with_what_arrived_and_arrives_whole() -> None:
    size = 10 * MIB
    payload = bytes(range(256)) * (size // 256)
    stream = struct.pack(">i", size) + payload
    dec = frames.FrameDecoder(100 * MIB)
    got: list[bytes] = []
    pos = 0
    while pos < len(stream):
        room = dec.buffer()
        n = min(len(room), 300_000, len(stream) - pos)
        room[:n] = stream[pos : pos + n]
        del room
        got.extend(bytes(f) for f in dec.received(n))
        pos += n
        if not got:
            assert dec.allocated() <= 2 * pos + 64 * 1024 + 256 * 1024, (pos, dec.allocated())
    assert got == [payload]
    assert dec.pending() == 0
