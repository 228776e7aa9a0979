"""A raw-socket Kafka client for tests that send exactly the bytes they mean to."""

from __future__ import annotations

import socket
import struct
from typing import Any

from headwater.protocol.frames import decode_response, encode_request
from headwater.protocol.schema import Api


class Wire:
    def __init__(self, bootstrap: str, timeout: float = 10.0) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.correlation = 0

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv_frame(self) -> bytes:
        size = struct.unpack(">i", self._exact(4))[0]
        return self._exact(size)

    def _exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("closed by broker")
            buf += chunk
        return bytes(buf)

    def request(self, api: Api, version: int, body: dict[str, Any]) -> dict[str, Any]:
        self.correlation += 1
        self.send_raw(encode_request(api, version, self.correlation, "wire-test", body))
        cid, resp = decode_response(api, version, memoryview(self.recv_frame()))
        assert cid == self.correlation
        return resp

    def is_closed(self, timeout: float = 5.0) -> bool:
        self.sock.settimeout(timeout)
        try:
            return self.sock.recv(1) == b""
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False

    def close(self) -> None:
        self.sock.close()
