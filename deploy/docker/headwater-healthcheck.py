#!/usr/bin/env python3
"""Container health check for a Headwater broker: stdlib only, so it starts in milliseconds.

Healthy when the broker answers a Metadata request (v1, no topics) on its own listener and
lists itself among the live brokers, i.e. it is serving and registered in ZooKeeper.

Where to ask: HEADWATER_HEALTHCHECK_ADDR (host:port) if set, else the listener named by
KAFKA_INTER_BROKER_LISTENER_NAME (or the first one) in KAFKA_LISTENERS (default
PLAINTEXT://:9092), on 127.0.0.1 when the listener binds all interfaces. The broker id is
KAFKA_BROKER_ID (default 0); HEADWATER_HEALTHCHECK_ANY_BROKER=1 accepts any answer.
"""

import os
import re
import socket
import struct
import sys


def _target() -> tuple[str, int]:
    addr = os.environ.get("HEADWATER_HEALTHCHECK_ADDR")
    if addr:
        host, _, port = addr.rpartition(":")
        return host or "127.0.0.1", int(port)
    listeners = os.environ.get("KAFKA_LISTENERS", "PLAINTEXT://:9092")
    parsed = re.findall(r"([A-Za-z0-9_]+)://(\[[^\]]*\]|[^:,]*):(\d+)", listeners)
    if not parsed:
        raise SystemExit(f"unhealthy: cannot parse KAFKA_LISTENERS={listeners!r}")
    wanted = os.environ.get("KAFKA_INTER_BROKER_LISTENER_NAME", "").upper()
    _name, host, port = next((p for p in parsed if p[0].upper() == wanted), parsed[0])
    host = host.strip("[]")
    if host in ("", "0.0.0.0", "::"):
        host = "127.0.0.1"
    return host, int(port)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed")
        buf += chunk
    return buf


def _string(buf: bytes, pos: int) -> tuple[str | None, int]:
    (n,) = struct.unpack_from(">h", buf, pos)
    pos += 2
    if n < 0:
        return None, pos
    return buf[pos : pos + n].decode(), pos + n


def main() -> int:
    host, port = _target()
    client_id = b"healthcheck"
    # Metadata v1: header (api_key=3, version=1, correlation_id, client_id), topics = [] (none).
    body = struct.pack(">hhih", 3, 1, 7, len(client_id)) + client_id + struct.pack(">i", 0)
    with socket.create_connection((host, port), timeout=2.5) as sock:
        sock.sendall(struct.pack(">i", len(body)) + body)
        (size,) = struct.unpack(">i", _recv_exact(sock, 4))
        resp = _recv_exact(sock, size)
    correlation_id, nbrokers = struct.unpack_from(">ii", resp, 0)
    if correlation_id != 7:
        print(f"unhealthy: correlation id {correlation_id}")
        return 1
    pos, ids = 8, []
    for _ in range(nbrokers):
        (node_id,) = struct.unpack_from(">i", resp, pos)
        _, pos = _string(resp, pos + 4)
        _, pos = _string(resp, pos + 4)  # skip port, then rack
        ids.append(node_id)
    if os.environ.get("HEADWATER_HEALTHCHECK_ANY_BROKER") == "1":
        print(f"healthy: {host}:{port} answers, brokers {ids}")
        return 0
    me = int(os.environ.get("KAFKA_BROKER_ID", "0"))
    if me not in ids:
        print(f"unhealthy: broker {me} not among live brokers {ids}")
        return 1
    print(f"healthy: broker {me} on {host}:{port}, live brokers {sorted(ids)}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (OSError, ValueError, struct.error) as e:
        print(f"unhealthy: {e}")
        sys.exit(1)
