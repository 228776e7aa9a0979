"""Helpers of the mirror tests: a mirror process, producing with librdkafka, reading a whole topic."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from headwater.client.cluster import Cluster as ClientCluster
from headwater.client.consumer import Consumer
from headwater.client.raw import fetch_raw
from headwater.protocol.records.header import BatchHeader
from tests.cluster.harness import Cluster

Row = tuple[
    int, int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...], int
]  # partition, offset, key, value, headers, ts


def zk_connect(c: Cluster) -> str:
    return f"{c.zk_host}:{c.zk_port}{c.chroot}"


def flow_props(src: Cluster, dst: Cluster, topics: str | None = None) -> dict[str, Any]:
    """The mirror properties of one flow ``dc1->agg`` from ``src`` to ``dst`` (of ``topics``, when
    given); a test adds its own settings to the dict."""
    props: dict[str, Any] = {
        "clusters": "dc1, agg",
        "dc1.zookeeper.connect": zk_connect(src),
        "dc1.bootstrap.servers": src.bootstrap,
        "agg.bootstrap.servers": dst.bootstrap,
        "dc1->agg.enabled": "true",
    }
    if topics is not None:
        props["dc1->agg.topics"] = topics
    return props


class MirrorProcess:
    """``headwater mirror`` (or another service: ``command``) as a child process; its output goes to
    a log file."""

    def __init__(self, workdir: Path, name: str, props: dict[str, Any], command: tuple[str, ...] = ("mirror",)) -> None:
        self.command = command
        self.workdir = workdir
        self.name = name
        self.config = workdir / f"{name}.properties"
        self.config.write_text("".join(f"{k} = {v}\n" for k, v in props.items()))
        self.log_path = workdir / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> MirrorProcess:
        out = open(self.log_path, "ab")  # noqa: SIM115 - owned by the child
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "headwater.cli.main", *self.command, "-c", str(self.config)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        out.close()
        return self

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def stop(self, timeout: float = 60) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(30)


def wait_for(cond: Any, timeout: float, what: str, proc: MirrorProcess | None = None) -> None:
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            if cond():
                return
        except Exception as e:
            last = e
        time.sleep(0.2)
    tail = "\n" + proc.log()[-4000:] if proc is not None else ""
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last error {last!r}){tail}")


def produce_keyed(bootstrap: str, topic: str, n: int, *, prefix: str = "k", compression: str = "lz4") -> int:
    """n keyed records with headers through librdkafka's default partitioner (murmur2 for Java
    compatibility); returns how many were acknowledged."""
    acked = [0]
    errors: list[object] = []

    def done(err: object, _msg: object) -> None:
        if err is None:
            acked[0] += 1
        else:
            errors.append(err)

    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 5,
            "compression.codec": compression,
            "partitioner": "murmur2_random",
            "enable.idempotence": False,
        }
    )
    for i in range(n):
        p.produce(
            topic,
            key=f"{prefix}{i % 97}".encode(),
            value=f"{prefix}-value-{i}".encode(),
            headers=[("origin.dc", b"dcX"), ("seq", str(i).encode())],
            on_delivery=done,
        )
        p.poll(0)
    p.flush(60)
    assert not errors, errors[:3]
    return acked[0]


def read_topic(bootstrap: str, topic: str) -> list[Row]:
    """Every record of every partition up to the high watermark."""

    async def main() -> list[Row]:
        async with Consumer(bootstrap) as c:
            rows: list[Row] = []
            for p in await c.partitions_for(topic):
                offset = await c.earliest_offset(topic, p)
                end = await c.latest_offset(topic, p)
                while offset < end:
                    res = await c.fetch(topic, p, offset, max_wait_ms=100)
                    for r in res.records:
                        rows.append((p, r.offset, r.key, r.value, r.headers, r.timestamp))
                        offset = r.offset + 1
            return rows

    return asyncio.run(main())


def raw_batches(bootstrap: str, topic: str, partition: int) -> list[tuple[BatchHeader, bytes]]:
    """The partition's batches as stored (bytes as the broker serves them)."""

    async def main() -> list[tuple[BatchHeader, bytes]]:
        cluster = ClientCluster(bootstrap)
        try:
            await cluster.refresh([topic])
            out: list[tuple[BatchHeader, bytes]] = []
            offset = 0
            while True:
                got, failed = await fetch_raw(cluster, [(topic, partition, offset)], max_wait_ms=0)
                assert not failed, failed
                part = got[(topic, partition)]
                if not part.batches:
                    return out
                for h, b in part.batches:
                    out.append((h, bytes(b)))
                    offset = h.next_offset
        finally:
            await cluster.close()

    return asyncio.run(main())


class AckedWriter:
    """librdkafka writing (acks=all) on a thread until ``stop`` is set, then flushing; ``acked`` holds
    the values the cluster acknowledged. Subclasses say what the i-th step writes (:meth:`write`)."""

    poll_s = 0.005
    flush_s = 60.0

    def __init__(self, bootstrap: str, **config: Any) -> None:
        self.acked: set[bytes] = set()
        self.stop = threading.Event()
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, **config})
        self.thread = threading.Thread(target=self._run, daemon=True)

    def write(self, i: int) -> None:
        raise NotImplementedError

    def _done(self, err: object, msg: object) -> None:
        if err is None:
            self.acked.add(msg.value())  # type: ignore[attr-defined]

    def _run(self) -> None:
        i = 0
        while not self.stop.is_set():
            try:
                self.write(i)
                i += 1
            except BufferError:
                pass
            self.producer.poll(self.poll_s)
        self.producer.flush(self.flush_s)
