"""Framing and headers: size-prefixed frames in, request/response messages out. No I/O.

Wire layout of every frame::

    int32 size            -- bytes that follow
    request header v1:    int16 api_key, int16 api_version, int32 correlation_id,
                          nullable_string client_id
    response header v0:   int32 correlation_id
    (a flexible version, KIP-482 -- CreateTopics v5: request header v2 = v1 + tagged fields,
    response header v1 = v0 + tagged fields; ApiVersions responses always use v0)
    body                  -- the API's request or response struct at api_version

:class:`FrameDecoder` is fed bytes as they arrive and yields complete frames; a declared
size above the limit is refused before anything is buffered, and a size below it is never
allocated up front: buffers grow as the frame's bytes arrive.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from headwater.protocol.apis import API_BY_KEY
from headwater.protocol.errors import DecodeError, ErrorCode, KafkaError
from headwater.protocol.lean import LEAN_REQUEST_DECODERS, LEAN_RESPONSE_ENCODERS
from headwater.protocol.primitives import FileRegion, Reader, Writer
from headwater.protocol.schema import Api, Message

_SIZE = struct.Struct(">i")
#: A frame larger than the small-frame threshold starts with a buffer this large (or what arrived
#: with its size), doubling as bytes arrive: an announced size is never allocated up front.
LARGE_FRAME_FIRST_BYTES = 64 * 1024


class FrameTooLarge(DecodeError):
    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"frame of {size} bytes is larger than the limit of {limit} bytes")
        self.size = size
        self.limit = limit


class FrameDecoder:
    """Splits a byte stream into frames (without their 4-byte size prefix). No I/O.

    The caller receives straight into :meth:`buffer` (``sock.recv_into``) and reports the count
    with :meth:`received`, which returns the frames completed. :meth:`feed` is the same for bytes
    already in hand.

    Memory follows the bytes that arrived, never a size a peer announced (a 4-byte prefix saying
    100 MiB must not cost 100 MiB: security review H3):

    - Small frames (up to half of ``buffer_bytes``) are assembled in one reusable receive buffer
      and copied out once each (a frame outlives the buffer). The buffer starts at
      ``initial_buffer_bytes`` (an idle connection costs little) and doubles, up to
      ``buffer_bytes``, when the unparsed bytes fill it or a read filled all the room offered
      (a busy connection soon reads in large chunks).
    - A larger frame -- its size checked against the limit first -- is received in place into a
      buffer of its own that starts at :data:`LARGE_FRAME_FIRST_BYTES` (or what already arrived)
      and doubles as it fills, capped at the announced size: at most twice what arrived is ever
      allocated, and the frame handed out is that buffer (no copy at the end).

    Layout of the receive buffer: ``[consumed | unparsed: _start.._end | free]``; when the free
    tail runs out the unparsed bytes (less than one small frame) move to the front.

    ``max_frame_bytes`` may be changed between calls (a SASL listener caps frames before
    authentication); it applies to every size prefix parsed afterwards.
    """

    def __init__(self, max_frame_bytes: int, buffer_bytes: int = 256 * 1024, initial_buffer_bytes: int = 4096) -> None:
        self.max_frame_bytes = max_frame_bytes
        self._max_buffer = buffer_bytes
        self._small = buffer_bytes // 2  # frames up to this size are assembled in the receive buffer
        self._buf = bytearray(max(1, min(initial_buffer_bytes, buffer_bytes)))
        self._view = memoryview(self._buf)
        self._start = 0
        self._end = 0
        self._offered = 0  # room handed out by the last buffer() call
        self._read_filled = False  # the last read filled all the room offered: grow before the next
        self._large: bytearray | None = None  # a large frame being received in place
        self._large_size = 0  # its announced size
        self._filled = 0

    def buffer(self) -> memoryview:
        """Where the next received bytes go (never empty)."""
        large = self._large
        if large is not None:
            if self._filled == len(large):
                large = self._grow_large(self._filled)
            return memoryview(large)[self._filled :]
        if self._end == len(self._buf):
            if len(self._buf) < self._max_buffer and (self._start == 0 or self._read_filled):
                self._resize(min(2 * len(self._buf), self._max_buffer))
            else:
                self._compact()
        room = self._view[self._end :]
        self._offered = len(room)
        return room

    def received(self, n: int) -> list[memoryview]:
        """``n`` bytes were written at the start of :meth:`buffer`; the frames they complete."""
        if self._large is not None:
            self._filled += n
            if self._filled < self._large_size:
                return []
            frame, self._large = self._large, None  # its length is the announced size
            return [memoryview(frame)]
        self._read_filled = n >= self._offered
        self._end += n
        return self._parse()

    def feed(self, data: bytes | bytearray | memoryview) -> list[memoryview]:
        """The frames completed by ``data`` (bytes already received elsewhere)."""
        frames: list[memoryview] = []
        src = memoryview(data).cast("B")
        while src:
            dst = self.buffer()
            k = min(len(dst), len(src))
            dst[:k] = src[:k]
            del dst
            src = src[k:]
            frames.extend(self.received(k))
        return frames

    def pending(self) -> int:
        """Bytes of an incomplete frame held so far."""
        return self._filled if self._large is not None else self._end - self._start

    def allocated(self) -> int:
        """Bytes of buffer this decoder holds (the receive buffer and a large frame's)."""
        return len(self._buf) + (len(self._large) if self._large is not None else 0)

    def _parse(self) -> list[memoryview]:
        frames: list[memoryview] = []
        view, pos, end = self._view, self._start, self._end
        while end - pos >= 4:
            (size,) = _SIZE.unpack_from(view, pos)
            if size < 0 or size > self.max_frame_bytes:
                self._start = pos
                raise (
                    FrameTooLarge(size, self.max_frame_bytes)
                    if size > 0
                    else DecodeError(f"negative frame size {size}")
                )
            if end - pos - 4 >= size:
                frames.append(memoryview(view[pos + 4 : pos + 4 + size].tobytes()))
                pos += 4 + size
            elif size > self._small:
                # Receive the rest of this frame in place; what came with its size moves once.
                have = end - pos - 4
                self._large_size = size
                self._large = self._grow_large(0, max(have, 1))
                self._large[:have] = view[pos + 4 : end]
                self._filled = have
                pos = end
                break
            else:
                break
        if pos == end:
            pos = end = 0
        self._start, self._end = pos, end
        return frames

    def _grow_large(self, keep: int, at_least: int = 0) -> bytearray:
        """A large frame's buffer, doubled (or LARGE_FRAME_FIRST_BYTES, or ``at_least``), never past
        its announced size; the first ``keep`` bytes move along."""
        old = self._large
        capacity = min(self._large_size, max(2 * len(old) if old is not None else 0, LARGE_FRAME_FIRST_BYTES, at_least))
        new = bytearray(capacity)
        if old is not None and keep:
            new[:keep] = old[:keep]
        self._large = new
        return new

    def _resize(self, size: int) -> None:
        n = self._end - self._start
        buf = bytearray(size)
        buf[:n] = self._view[self._start : self._end]
        self._buf, self._view = buf, memoryview(buf)
        self._start, self._end = 0, n
        self._read_filled = False

    def _compact(self) -> None:
        n = self._end - self._start
        self._buf[:n] = self._view[self._start : self._end]
        self._start, self._end = 0, n


class RequestHeader(NamedTuple):
    """The request header (v1: with client_id), as every request of the APIs we speak carries it."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


_HEADER = struct.Struct(">hhih")
_API_VERSIONS_KEY = 18


def decode_request_header(frame: memoryview) -> tuple[RequestHeader, Reader]:
    if len(frame) >= 10:  # the usual case in one unpack; anything odd is read field by field
        key, version, correlation_id, n = _HEADER.unpack_from(frame, 0)
        if n == -1 or 0 <= n <= len(frame) - 10:
            try:
                client_id = None if n < 0 else str(frame[10 : 10 + n], "utf-8")
            except UnicodeDecodeError:
                pass
            else:
                return RequestHeader(key, version, correlation_id, client_id), Reader(frame, 10 + max(n, 0))
    r = Reader(frame)
    header = RequestHeader(r.int16(), r.int16(), r.int32(), r.nullable_string())
    return header, r


def decode_request(frame: memoryview) -> tuple[RequestHeader, Api, Message]:
    """Decode a whole request frame.

    Raises :class:`DecodeError` for malformed bytes and :class:`KafkaError` with
    UNSUPPORTED_VERSION (or INVALID_REQUEST for an unknown key) for a valid header naming an
    API or version we do not implement; the header is then available on the exception.
    """
    header, r = decode_request_header(frame)
    api = API_BY_KEY.get(header.api_key)
    if api is None:
        raise UnsupportedRequest(header, ErrorCode.INVALID_REQUEST, f"unknown api key {header.api_key}")
    if not api.supports(header.api_version):
        raise UnsupportedRequest(
            header,
            ErrorCode.UNSUPPORTED_VERSION,
            f"{api.name} v{header.api_version} is outside v{api.min_version}-{api.max_version}",
        )
    flexible = api.is_flexible(header.api_version)
    if flexible:
        r.skip_tagged_fields()  # request header v2
    lean = LEAN_REQUEST_DECODERS.get(header.api_key)
    if lean is not None and not flexible:
        got = lean(r.buf, r.pos, r.end, header.api_version)
        if got is not None and got[1] == r.end:
            return header, api, got[0]
    body = api.request.decode(r, header.api_version, flexible)  # also what the lean path leaves to it
    if r.remaining():
        raise DecodeError(f"{r.remaining()} unexpected bytes after {api.name} v{header.api_version} request")
    return header, api, body


class UnsupportedRequest(KafkaError):
    def __init__(self, header: RequestHeader, code: ErrorCode, message: str) -> None:
        super().__init__(code, message)
        self.header = header


def encode_response(correlation_id: int, api: Api, version: int, body: Message) -> list[bytes | FileRegion]:
    """A response frame as parts (size prefix included); FileRegions are sent zero-copy."""
    lean = LEAN_RESPONSE_ENCODERS.get(api.key)
    if lean is not None:
        got = lean(correlation_id, version, body)
        if got is not None:
            return list(got)
    w = Writer()
    w.int32(0)  # size placeholder, patched below
    w.int32(correlation_id)
    flexible = api.is_flexible(version)
    if flexible and api.key != _API_VERSIONS_KEY:
        w.empty_tagged_fields()  # response header v1 (ApiVersions keeps v0, KIP-511)
    api.response.encode(w, version, body, flexible)
    parts = w.parts()
    size = w.size() - 4
    first = parts[0]
    assert isinstance(first, bytes)
    parts[0] = _SIZE.pack(size) + first[4:]
    return parts


def encode_request(api: Api, version: int, correlation_id: int, client_id: str | None, body: Message) -> bytes:
    """A request frame (size prefix included)."""
    w = Writer()
    w.int16(api.key)
    w.int16(version)
    w.int32(correlation_id)
    w.nullable_string(client_id)
    flexible = api.is_flexible(version)
    if flexible:
        w.empty_tagged_fields()  # request header v2
    api.request.encode(w, version, body, flexible)
    payload = w.getvalue()
    return _SIZE.pack(len(payload)) + payload


def decode_response(api: Api, version: int, frame: memoryview) -> tuple[int, Message]:
    """(correlation_id, body) of a response frame (without its size prefix)."""
    r = Reader(frame)
    correlation_id = r.int32()
    flexible = api.is_flexible(version)
    if flexible and api.key != _API_VERSIONS_KEY:
        r.skip_tagged_fields()
    return correlation_id, api.response.decode(r, version, flexible)
