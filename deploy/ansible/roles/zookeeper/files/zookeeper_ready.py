#!/usr/bin/env python3
"""Wait until this ZooKeeper server serves, for the zookeeper role's handlers (stdlib only).

A server serves once it is standalone or has joined a quorum: its ``srvr`` four-letter word then
answers with a ``Mode:`` line (before that: "not currently serving requests"). A new ensemble
started one server at a time cannot have a quorum yet, so the wait also ends when fewer servers
of the ensemble answer than a quorum needs (said so in the output); in a rolling restart the
others serve and this one must rejoin them.

    zookeeper_ready.py --self 127.0.0.1:2181 [--peer zk2:2181 ...] [--timeout 120]
"""

from __future__ import annotations

import argparse
import socket
import sys
import time


def srvr(address: str) -> str:
    host, _, port = address.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=3) as s:
        s.sendall(b"srvr")
        return b"".join(iter(lambda: s.recv(4096), b"")).decode(errors="replace")


def serving(address: str) -> bool:
    try:
        return "Mode:" in srvr(address)
    except OSError:
        return False


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--self", dest="me", required=True)
    parser.add_argument("--peer", action="append", default=[])
    parser.add_argument("--timeout", type=float, default=120.0)
    args = parser.parse_args()
    quorum = (len(args.peer) + 1) // 2 + 1
    deadline = time.monotonic() + args.timeout
    last = ""
    while True:
        try:
            last = srvr(args.me)
            if "Mode:" in last:
                print(last.strip())
                return 0
            up = 1 + sum(1 for p in args.peer if serving(p))
            if up < quorum:
                print(f"{args.me} answers; the ensemble is still forming ({up} of {quorum} servers for a quorum)")
                return 0
        except OSError as e:
            last = str(e)
        if time.monotonic() > deadline:
            print(f"ZooKeeper at {args.me} is not serving after {args.timeout:.0f} s: {last.strip()}", file=sys.stderr)
            return 1
        time.sleep(1)


if __name__ == "__main__":
    sys.exit(main())
