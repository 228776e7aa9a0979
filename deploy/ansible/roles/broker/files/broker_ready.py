#!/usr/bin/env python3
"""Wait until a (re)started broker is back in its cluster, for the broker role.

The rolling restart's gate, as cp-ansible's wait for UnderReplicatedPartitions = 0: every broker
of the cluster that answers a Metadata request (v1, all topics) must

- list the broker (which must answer itself) ``--broker-id`` among its live brokers (it registered in ZooKeeper), and
- see no under-replicated partition (ISR smaller than the replica set),

and the restarted broker must know the same partitions as the others (its metadata cache was
filled by the controller: an empty cache right after a start would otherwise look healthy).
Brokers not answering are left out (on a first deployment the later brokers do not run yet).
A view that lags only makes the wait longer.

    broker_ready.py --broker-id 2 --self kafka2:9092 --bootstrap kafka1:9092 [--timeout 600]
    broker_ready.py --broker-id 2 --self kafka2:9093 --bootstrap kafka1:9093 --command-config admin.properties

Without ``--command-config`` it speaks PLAINTEXT with the standard library only. With it (a
secured deployment: the role runs it with the build's venv python) each request goes through
Headwater's client library, logged in as the file says (Kafka's client property names:
SASL_SSL with SCRAM as the admin principal), on the SECURE listener.

Exit 0 when ready, 1 (and what is missing) after the timeout.
"""

from __future__ import annotations

import argparse
import socket
import struct
import sys
import time
from dataclasses import dataclass


@dataclass
class View:
    """One broker's metadata: the live broker ids and, per (topic, partition), (replicas, isr)."""

    live: set[int]
    partitions: dict[tuple[str, int], tuple[tuple[int, ...], tuple[int, ...]]]


class Reader:
    def __init__(self, buf: bytes) -> None:
        self.buf, self.pos = buf, 0

    def take(self, fmt: str) -> int:
        (value,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += struct.calcsize(fmt)
        return int(value)

    def string(self) -> str | None:
        n = self.take(">h")
        if n < 0:
            return None
        s = self.buf[self.pos : self.pos + n].decode()
        self.pos += n
        return s

    def int32s(self) -> tuple[int, ...]:
        return tuple(self.take(">i") for _ in range(self.take(">i")))


def secured_metadata(address: str, props: dict[str, str], timeout: float = 5.0) -> View:
    """Metadata v1 for all topics from one broker, through Headwater's client (TLS, SASL)."""
    import asyncio

    from headwater.client.connection import BrokerConnection, parse_address
    from headwater.client.security import ClientSecurity
    from headwater.protocol.apis import METADATA

    async def ask() -> dict:
        host, port = parse_address(address)
        conn = BrokerConnection(
            host,
            port,
            client_id="broker-ready",
            connect_timeout=timeout,
            request_timeout=timeout,
            security=ClientSecurity.from_properties(props),
        )
        await conn.connect()
        try:
            return dict(await conn.request(METADATA, {"topics": None}, version=1))
        finally:
            await conn.close()

    body = asyncio.run(ask())
    live = {int(b["node_id"]) for b in body["brokers"]}
    partitions = {
        (t["name"], int(p["partition_index"])): (tuple(p["replica_nodes"]), tuple(p["isr_nodes"]))
        for t in body["topics"]
        for p in t["partitions"]
    }
    return View(live, partitions)


def metadata(address: str, timeout: float = 5.0) -> View:
    """Metadata v1 for all topics (topics = null) from one broker."""
    host, _, port = address.rpartition(":")
    client_id = b"broker-ready"
    # Request header (api_key 3, api_version 1, correlation_id, client_id), then topics = null.
    body = struct.pack(">hhih", 3, 1, 1, len(client_id)) + client_id + struct.pack(">i", -1)
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.sendall(struct.pack(">i", len(body)) + body)
        size = struct.unpack(">i", recv_exact(sock, 4))[0]
        r = Reader(recv_exact(sock, size))
    r.take(">i")  # correlation id
    live = set()
    for _ in range(r.take(">i")):
        live.add(r.take(">i"))  # node_id
        r.string()  # host
        r.take(">i")  # port
        r.string()  # rack
    r.take(">i")  # controller_id
    partitions = {}
    for _ in range(r.take(">i")):
        r.take(">h")  # error_code
        topic = r.string() or ""
        r.take(">b")  # is_internal
        for _ in range(r.take(">i")):
            r.take(">h")  # error_code
            index = r.take(">i")
            r.take(">i")  # leader
            replicas = r.int32s()
            isr = r.int32s()
            partitions[(topic, index)] = (replicas, isr)
    return View(live, partitions)


def recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed")
        buf += chunk
    return bytes(buf)


def problems(broker_id: int, me: str, views: dict[str, View]) -> list[str]:
    """What still keeps the cluster from being whole ([] = ready)."""
    if me not in views:
        return [f"broker {broker_id} does not answer at {me}"]
    out = []
    for address, view in sorted(views.items()):
        if broker_id not in view.live:
            out.append(f"{address} does not list broker {broker_id} as live ({sorted(view.live)})")
        under = sorted(
            f"{t}-{p} isr={list(isr)} replicas={list(reps)}"
            for (t, p), (reps, isr) in view.partitions.items()
            if len(isr) < len(reps)
        )
        if under:
            shown = ", ".join(under[:5]) + (f" and {len(under) - 5} more" if len(under) > 5 else "")
            out.append(f"{address} sees {len(under)} under-replicated partition(s): {shown}")
    known = [set(v.partitions) for v in views.values()]
    if any(k != known[0] for k in known):
        out.append(f"the brokers' metadata differ in partitions ({sorted(len(k) for k in known)}): still propagating")
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--broker-id", type=int, required=True)
    parser.add_argument("--self", dest="me", required=True, help="host:port of the broker waited for")
    parser.add_argument("--bootstrap", action="append", default=[], help="host:port of another broker of the cluster")
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--command-config", help="client properties: log in as they say (SECURE listener)")
    args = parser.parse_args()
    ask = metadata
    if args.command_config:
        from headwater.properties import parse_properties

        with open(args.command_config, encoding="utf-8") as f:
            props = parse_properties(f.read())

        def ask(address: str, timeout: float = 5.0) -> View:
            return secured_metadata(address, props, timeout)

    start = time.monotonic()
    said = ""
    while True:
        views: dict[str, View] = {}
        errors = []
        for address in dict.fromkeys([args.me, *args.bootstrap]):
            try:
                views[address] = ask(address)
            except Exception as e:  # not answering yet (refused, closed, login failed): retried
                errors.append(f"{address}: {type(e).__name__} {e}")
        missing = problems(args.broker_id, args.me, views)
        if not missing:
            n = len(next(iter(views.values())).partitions)
            print(
                f"broker {args.broker_id} is live in {len(views)} broker(s)' view, {n} partition(s), none under-replicated"
            )
            if errors:
                print("not answering: " + "; ".join(errors))
            return 0
        now = " | ".join(missing + errors)
        if now != said:  # shown in the task's output when the wait fails or ends
            print(f"{time.monotonic() - start:6.1f} s: {now}")
            said = now
        if time.monotonic() - start > args.timeout:
            print(f"broker {args.broker_id} not ready after {args.timeout:.0f} s: {now}", file=sys.stderr)
            return 1
        time.sleep(1)


if __name__ == "__main__":
    sys.exit(main())
