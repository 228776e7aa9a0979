"""One Kafka request over a plain socket, for the tests and the bench: the answer's frame read whole
and decoded with Headwater's codec (no client library between the caller and the broker)."""

from __future__ import annotations

import socket
from typing import Any

from headwater.protocol.frames import decode_response, encode_request


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    """``n`` bytes from ``sock``; OSError if the peer closes the connection first."""
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), 1 << 20))  # recv(n) allocates n bytes each call: a large frame
        if not chunk:
            raise OSError(f"connection closed after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def read_frame(sock: socket.socket) -> bytes:
    """One size-prefixed response frame (without its size) from ``sock``."""
    return recv_exactly(sock, int.from_bytes(recv_exactly(sock, 4), "big"))


def request(
    host: str,
    port: int,
    api: Any,
    version: int,
    body: dict[str, Any],
    *,
    timeout: float = 10.0,
    client_id: str = "headwater-testing",
) -> dict[str, Any]:
    """Send one ``api`` request at ``version`` on a new connection to ``host:port``; the decoded
    response body."""
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.settimeout(timeout)
        sock.sendall(encode_request(api, version, 1, client_id, body))
        frame = read_frame(sock)
    _, response = decode_response(api, version, memoryview(frame))
    return dict(response)
