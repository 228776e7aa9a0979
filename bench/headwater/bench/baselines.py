"""The machine's own limits, measured in the same run as the broker (no Kafka logic at all).

Baseline W (write): a client streams requests of about ``request_size`` bytes over loopback TCP
to a sink process that appends each request to a file with one ``write``: what a broker must do
at least for a produce request of that size. Each request is framed by a 4-byte big-endian length
and sized uniformly within +-10 % of ``request_size`` (a fixed seed), because the kernel's write
speed into the page cache depends on the exact size (on this machine 1,048,576-byte appends run at
a fraction of the speed of 1,000,000-byte ones) and real produce requests vary too. The sender
packs many requests into each ``send``, so the figure is the sink's (the broker's side), not the
sender's. No responses are sent back.

Baseline R (read): a source process sends a warm (page-cached) file to a loopback socket with
``os.sendfile`` in ``chunk`` bytes per call; the receiver reads into a buffer and drops it — what
a broker must do at least for fetch responses of that size.

Both peers are separate processes (``python -m headwater.bench.baselines sink|source``), as the
broker is; each prints ``PORT <n>`` when it listens and one JSON line when done.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import struct
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

MIB = 1 << 20


@dataclass
class WriteResult:
    request_size: int
    mib_per_s: float
    requests_per_s: float
    cpu_s_per_mib: float  # the sink's CPU seconds per MiB appended


@dataclass
class ReadResult:
    chunk: int
    mib_per_s: float


# -- the peers (separate processes) ---------------------------------------------------------


def _listen() -> socket.socket:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    print(f"PORT {server.getsockname()[1]}", flush=True)
    return server


def _cpu() -> float:
    t = os.times()
    return t.user + t.system


_LENGTH = struct.Struct(">I")


def request_sizes(request_size: int, count: int, seed: int = 42) -> list[int]:
    """``count`` sizes uniformly within +-10 % of ``request_size`` (at least 1 byte)."""
    rng = random.Random(seed)
    low, high = max(1, int(request_size * 0.9)), max(1, int(request_size * 1.1))
    return [rng.randint(low, high) for _ in range(count)]


def sink(path: Path, request_size: int, timeout: float) -> dict[str, float]:
    """Accept one connection; append each complete request (length-framed) to ``path`` with one write."""
    server = _listen()
    server.settimeout(timeout)
    conn, _ = server.accept()
    conn.settimeout(timeout)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    buf = bytearray(max(8 * request_size, 2 * MIB))
    view = memoryview(buf)
    unpack = _LENGTH.unpack_from
    filled = appended = requests = 0
    started = 0.0
    cpu0 = _cpu()
    try:
        while True:
            n = conn.recv_into(view[filled:])
            if not n:
                break
            if not started:
                started = time.perf_counter()
            filled += n
            pos = 0
            while filled - pos >= 4:
                (size,) = unpack(buf, pos)
                end = pos + 4 + size
                if end > filled:
                    break
                os.write(fd, view[pos + 4 : end])
                appended += size
                requests += 1
                pos = end
            if pos:
                rest = filled - pos
                buf[:rest] = view[pos:filled]
                filled = rest
        elapsed = time.perf_counter() - started if started else 0.0
    finally:
        os.close(fd)
        conn.close()
        server.close()
    return {"bytes": appended, "requests": requests, "seconds": elapsed, "cpu": _cpu() - cpu0}


def source(path: Path, chunk: int, total: int, timeout: float) -> dict[str, float]:
    """Accept one connection; ``sendfile`` ``path`` to it (from the start again at its end) until
    ``total`` bytes are sent or ``timeout`` seconds passed."""
    size = path.stat().st_size
    server = _listen()
    server.settimeout(timeout)
    conn, _ = server.accept()
    sent = 0
    fd = os.open(path, os.O_RDONLY)
    started = time.perf_counter()
    deadline = started + timeout
    try:
        offset = 0
        while sent < total and time.perf_counter() < deadline:
            n = os.sendfile(conn.fileno(), fd, offset, min(chunk, size - offset, total - sent))
            if n == 0:
                break
            sent += n
            offset = (offset + n) % size
        conn.shutdown(socket.SHUT_WR)
    finally:
        os.close(fd)
        conn.close()
        server.close()
    return {"bytes": sent, "seconds": time.perf_counter() - started}


def _peer_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m headwater.bench.baselines")
    sub = parser.add_subparsers(dest="role", required=True)
    s = sub.add_parser("sink")
    s.add_argument("path", type=Path)
    s.add_argument("--request-size", type=int, required=True)
    s.add_argument("--timeout", type=float, default=60.0)
    r = sub.add_parser("source")
    r.add_argument("path", type=Path)
    r.add_argument("--chunk", type=int, required=True)
    r.add_argument("--total", type=int, required=True)
    r.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args(argv)
    if args.role == "sink":
        result = sink(args.path, args.request_size, args.timeout)
    else:
        result = source(args.path, args.chunk, args.total, args.timeout)
    print(json.dumps(result), flush=True)
    return 0


# -- the measuring side (the bench runner) ----------------------------------------------------


class _Peer:
    """A peer process; ``port`` once it listens, ``result()`` its JSON line."""

    def __init__(self, args: list[str], timeout: float) -> None:
        self.timeout = timeout
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "headwater.bench.baselines", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("PORT "):
            self.kill()
            raise RuntimeError(f"baseline peer failed to start: {line}{self._stderr()}")
        self.port = int(line.split()[1])

    def _stderr(self) -> str:
        return self.proc.stderr.read() if self.proc.stderr else ""

    def result(self) -> dict[str, float]:
        try:
            out, err = self.proc.communicate(timeout=self.timeout + 10)
        except subprocess.TimeoutExpired:
            self.kill()
            raise RuntimeError("baseline peer did not finish in time") from None
        lines = [ln for ln in out.splitlines() if ln.startswith("{")]
        if self.proc.returncode != 0 or not lines:
            raise RuntimeError(f"baseline peer failed ({self.proc.returncode}): {err[-1000:]}")
        return dict(json.loads(lines[-1]))

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


def measure_write(workdir: Path, request_size: int, total_bytes: int, max_seconds: float) -> WriteResult:
    """Baseline W at one request size: ``total_bytes`` (at most ``max_seconds`` of sending)."""
    request_size = max(1, request_size)
    path = workdir / f"baseline-w-{request_size}.data"
    path.unlink(missing_ok=True)
    peer = _Peer(
        ["sink", str(path), "--request-size", str(request_size), "--timeout", str(max_seconds + 30)], max_seconds + 30
    )
    try:
        # a few MiB of framed requests, sent again and again
        sizes = request_sizes(request_size, max(16, 4 * MIB // request_size))
        body = bytes(range(256)) * (max(sizes) // 256 + 1)
        payload = b"".join(_LENGTH.pack(n) + body[:n] for n in sizes)
        with socket.create_connection(("127.0.0.1", peer.port)) as sock:
            sent = 0
            deadline = time.perf_counter() + max_seconds
            while sent < total_bytes and time.perf_counter() < deadline:
                sock.sendall(payload)
                sent += len(payload)
        got = peer.result()
    finally:
        peer.kill()
        path.unlink(missing_ok=True)
    seconds = got["seconds"] or float("nan")
    mib = got["bytes"] / MIB
    return WriteResult(
        request_size, mib / seconds, got["requests"] / seconds, got["cpu"] / mib if mib else float("nan")
    )


def make_file(path: Path, size: int) -> Path:
    """A file of ``size`` bytes (written once, so it is in the page cache)."""
    if path.exists() and path.stat().st_size == size:
        return path
    block = bytes(range(256)) * 4096  # 1 MiB
    with open(path, "wb") as f:
        left = size
        while left > 0:
            f.write(block[: min(left, len(block))])
            left -= len(block)
    return path


def measure_read(path: Path, chunk: int, total_bytes: int, max_seconds: float) -> ReadResult:
    """Baseline R: ``sendfile`` from ``path`` (warm) in ``chunk`` bytes per call to our socket."""
    peer = _Peer(
        ["source", str(path), "--chunk", str(chunk), "--total", str(total_bytes), "--timeout", str(max_seconds)],
        max_seconds + 30,
    )
    try:
        buf = bytearray(4 * MIB)
        view = memoryview(buf)
        got = 0
        started = 0.0
        with socket.create_connection(("127.0.0.1", peer.port)) as sock:
            sock.settimeout(max_seconds + 30)
            while True:
                n = sock.recv_into(view)
                if not n:
                    break
                if not started:
                    started = time.perf_counter()
                got += n
            elapsed = time.perf_counter() - started
        peer.result()
    finally:
        peer.kill()
    return ReadResult(chunk, got / MIB / elapsed if elapsed > 0 else float("nan"))


if __name__ == "__main__":
    sys.exit(_peer_main(sys.argv[1:]))
