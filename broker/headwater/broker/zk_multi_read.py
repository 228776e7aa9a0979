"""ZooKeeper's ``multiRead`` request (opcode 22, ZooKeeper 3.6+, ZOOKEEPER-3296): many getData in
one request, as a kazoo request object (kazoo 2.11 has ``multi`` for writes only).

Why: the controller reads every partition state when it takes over (10,000 at the goal's scale).
Pipelined ``get_async`` costs kazoo ~0.17 ms of Python per znode (a request object, an
``AsyncResult``, a socket write and a response read each); one multiRead of 500 states costs
about as much as a handful of single reads (measured: 10,000 states in ~0.06 s instead of ~1.8 s).

Request body (after kazoo's length, xid and the opcode 22), jute ``MultiOperationRecord``::

    repeated per path:
      int32   type     4 (getData)
      bool    done     0
      int32   err      -1
      string  path     int32 length + UTF-8 (the chroot prefixed)
      bool    watch    0
    int32 -1, bool 1, int32 -1                 the end marker (type -1, done)

Response body, jute ``MultiResponse``, one entry per path in order::

      int32   type     4: getData answered; -1: that read failed
      bool    done     0
      int32   err      the read's error code (0 when answered)
      type 4:  buffer data (int32 length, -1 for null, then bytes), then the 68-byte Stat
      type -1: int32 error code (e.g. -101 NONODE)
    int32 -1, bool 1, int32 -1                 the end marker

A server older than 3.6 does not know opcode 22: it answers UNIMPLEMENTED and closes the
connection (``UnimplementedRequestProcessor``), so :class:`headwater.broker.zk.ZooKeeper` sends it
only to a server whose ``srvr`` answer says 3.6 or newer, and falls back to pipelined reads.
"""

from __future__ import annotations

import re
import struct
from typing import Any, NamedTuple

from kazoo.exceptions import EXCEPTIONS, ZookeeperError
from kazoo.protocol.states import ZnodeStat

#: (type, done, err) of a multi header.
_HEADER = struct.Struct(">i?i")
_INT = struct.Struct(">i")
#: czxid, mzxid, ctime, mtime, version, cversion, aversion, ephemeralOwner, dataLength, numChildren, pzxid
_STAT = struct.Struct(">qqqqiiiqiiq")
_GET_DATA = 4
_ERROR = -1
_END = _HEADER.pack(-1, True, -1)

#: The first ZooKeeper release with multiRead.
MULTI_READ_SINCE = (3, 6, 0)
_SRVR_VERSION = re.compile(r"Zookeeper version: (\d+)\.(\d+)\.(\d+)")


class MultiReadDecodeError(ValueError):
    """A multiRead response that does not follow the layout above."""


class MultiRead(NamedTuple):
    """A kazoo request object: ``client._call(MultiRead(paths), async_result)``; the result is one
    ``(data, ZnodeStat)`` or exception instance (``NoNodeError``...) per path, in order."""

    paths: tuple[str, ...]

    @property
    def type(self) -> int:  # kazoo reads ``request.type`` for the opcode
        return 22

    def serialize(self) -> bytearray:
        out = bytearray()
        for path in self.paths:
            encoded = path.encode()
            out += _HEADER.pack(_GET_DATA, False, -1)
            out += _INT.pack(len(encoded))
            out += encoded
            out += b"\x00"
        out += _END
        return out

    @classmethod
    def deserialize(cls, buf: bytes, offset: int) -> list[tuple[bytes | None, ZnodeStat] | ZookeeperError]:
        results: list[tuple[bytes | None, ZnodeStat] | ZookeeperError] = []
        try:
            while True:
                kind, done, _err = _HEADER.unpack_from(buf, offset)
                offset += _HEADER.size
                if done:
                    return results
                if kind == _GET_DATA:
                    (length,) = _INT.unpack_from(buf, offset)
                    offset += _INT.size
                    data: bytes | None = None
                    if length >= 0:
                        if offset + length > len(buf):
                            raise MultiReadDecodeError("multiRead response: data past the end of the packet")
                        data = bytes(buf[offset : offset + length])
                        offset += length
                    stat = ZnodeStat._make(_STAT.unpack_from(buf, offset))
                    offset += _STAT.size
                    results.append((data, stat))
                elif kind == _ERROR:
                    (code,) = _INT.unpack_from(buf, offset)
                    offset += _INT.size
                    results.append(_error(code))
                else:
                    raise MultiReadDecodeError(f"multiRead response: unexpected result type {kind}")
        except struct.error as e:
            raise MultiReadDecodeError(f"multiRead response truncated: {e}") from None


def _error(code: int) -> ZookeeperError:
    try:
        error_class: Any = EXCEPTIONS[code]  # kazoo's table raises RuntimeError for an unknown code
    except RuntimeError:
        return ZookeeperError(f"ZooKeeper error code {code}")
    error: ZookeeperError = error_class()
    return error


def server_version(srvr_answer: str) -> tuple[int, int, int] | None:
    """The version in a ``srvr`` four-letter-word answer ("Zookeeper version: 3.8.0-..."), or None
    (e.g. "srvr is not executed because it is not in the whitelist.")."""
    match = _SRVR_VERSION.search(srvr_answer)
    if match is None:
        return None
    return int(match.group(1)), int(match.group(2)), int(match.group(3))
