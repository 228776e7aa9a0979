"""Issue 24 item 3: how long a rebalance takes when a second mirror process joins and then leaves,
2 processes x 200 partitions: the mirror's ZooKeeper group (rendezvous hashing, owner nodes) against
the Kafka group protocol (Headwater's group consumer, eager range assignment).

    python -m headwater.bench.group_rebalance [--partitions 200] [--workdir DIR]

Mirror: two ``headwater mirror`` processes over one source topic; the clock runs from the second
process's start (or SIGTERM) until the owner nodes ``/consumers/<group>/owners/<topic>/<p>`` show
the new split (every partition owned, by both / by the one left). Kafka group: two group consumers
in this process; the clock runs from the second one's ``subscribe`` (or ``close``) until both
assignments are the new split; also how long the first member owned nothing (eager rebalance:
revoked .. assigned). Prints one line per measurement.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from kazoo.client import KazooClient

from headwater.client import Consumer
from headwater.testing.cluster import LocalCluster
from headwater.zk.client import kazoo_client
from headwater.zk.paths import consumer_ids_path, consumer_owners_path


def _owners(zk: KazooClient, group: str, topic: str) -> dict[int, str]:
    base = consumer_owners_path(group, topic)
    out: dict[int, str] = {}
    if not zk.exists(base):
        return out
    for child in zk.get_children(base):
        try:
            out[int(child)] = zk.get(f"{base}/{child}")[0].decode()
        except Exception:
            continue
    return out


def _wait(what: str, cond: object, timeout: float = 600.0) -> float:
    start = time.monotonic()
    while not cond():  # type: ignore[operator]
        if time.monotonic() - start > timeout:
            raise TimeoutError(what)
        time.sleep(0.05)
    return time.monotonic() - start


def _mirror(workdir: Path, name: str, props: dict[str, str]) -> subprocess.Popen[bytes]:
    config = workdir / f"{name}.properties"
    config.write_text("".join(f"{k} = {v}\n" for k, v in props.items()))
    out = open(workdir / f"{name}.log", "ab")  # noqa: SIM115 - the process writes it until stopped
    return subprocess.Popen(
        [sys.executable, "-m", "headwater.cli.main", "mirror", "-c", str(config)],
        stdout=out,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def measure_mirror(src: LocalCluster, dst: LocalCluster, topic: str, partitions: int, workdir: Path) -> None:
    group = "rebalance-bench"
    props = {
        "clusters": "src, dst",
        "src.zookeeper.connect": src.zk_connect,
        "src.bootstrap.servers": src.bootstrap,
        "dst.bootstrap.servers": dst.bootstrap,
        "dst.zookeeper.connect": dst.zk_connect,
        "src->dst.enabled": "true",
        "src->dst.topics": topic,
        "group.id": group,
    }
    zk = kazoo_client(src.zk_connect)
    zk.start(15)
    a = _mirror(workdir, "mirror-a", props)
    b: subprocess.Popen[bytes] | None = None
    try:
        g = group  # one target: the flow's group is group.id itself
        took = _wait("mirror A to own every partition", lambda: len(set(_owners(zk, g, topic))) == partitions)
        print(f"mirror (ZooKeeper group): first process owns all {partitions} partitions after {took:.1f} s")
        b = _mirror(workdir, "mirror-b", props)
        _wait("mirror B to register", lambda: len(zk.get_children(consumer_ids_path(g))) == 2)
        started = time.monotonic()
        unowned = [0]

        def owned_by(n: int) -> bool:
            o = _owners(zk, g, topic)
            unowned[0] = max(unowned[0], partitions - len(o))
            return len(o) == partitions and len(set(o.values())) == n

        _wait("the two mirrors to split", lambda: owned_by(2))
        print(
            f"mirror (ZooKeeper group): join -> split in {time.monotonic() - started:.1f} s "
            f"(from its registration); at most {unowned[0]} of {partitions} partitions unowned at a time"
        )
        b.send_signal(signal.SIGTERM)
        started = time.monotonic()
        unowned[0] = 0
        _wait("the first mirror to own everything again", lambda: owned_by(1))
        print(
            f"mirror (ZooKeeper group): leave -> all with one in {time.monotonic() - started:.1f} s "
            f"(from SIGTERM); at most {unowned[0]} of {partitions} partitions unowned at a time"
        )
    finally:
        for p in (a, b):
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(60)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(10)
        zk.stop()
        zk.close()


async def measure_kafka_group(bootstrap: str, topic: str, partitions: int) -> None:
    group = "rebalance-bench-kafka"

    class Gap:
        def __init__(self) -> None:
            self.revoked_at: float | None = None
            self.gaps: list[float] = []

        def on_partitions_revoked(self, revoked: set[tuple[str, int]]) -> None:
            self.revoked_at = time.monotonic()

        def on_partitions_assigned(self, assigned: set[tuple[str, int]]) -> None:
            if self.revoked_at is not None:
                self.gaps.append(time.monotonic() - self.revoked_at)
                self.revoked_at = None

    opts: dict[str, Any] = {"session_timeout_ms": 10000, "heartbeat_interval_ms": 1000, "auto_offset_reset": "latest"}
    gap = Gap()
    a = Consumer(bootstrap, group_id=group, **opts)
    a.subscribe([topic], listener=gap)

    async def until(cond: object, *members: Consumer) -> float:
        start = time.monotonic()
        while not cond():  # type: ignore[operator]
            await asyncio.gather(*(m.poll(100) for m in members))
        return time.monotonic() - start

    took = await until(lambda: len(a.assignment()) == partitions, a)
    print(f"Kafka group: first member owns all {partitions} partitions after {took:.1f} s")
    b = Consumer(bootstrap, group_id=group, **opts)
    b.subscribe([topic])
    took = await until(
        lambda: (
            len(a.assignment()) + len(b.assignment()) == partitions and bool(a.assignment()) and bool(b.assignment())
        ),
        a,
        b,
    )
    print(f"Kafka group: join -> split in {took:.1f} s; the first member owned nothing for {gap.gaps[-1]:.2f} s")
    start = time.monotonic()
    await b.close()
    took = await until(lambda: len(a.assignment()) == partitions, a)
    print(
        f"Kafka group: leave -> all with one in {time.monotonic() - start:.1f} s; "
        f"the remaining member owned nothing for {gap.gaps[-1]:.2f} s"
    )
    await a.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--partitions", type=int, default=200)
    ap.add_argument("--workdir", type=Path, default=None)
    args = ap.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="group-rebalance-"))
    workdir.mkdir(parents=True, exist_ok=True)
    topic = "rebalance"
    with (
        LocalCluster(workdir / "src", 1) as src,
        LocalCluster(workdir / "dst", 1, zk_connect=src.zk_connect + "/dst") as dst,
    ):
        admin = AdminClient({"bootstrap.servers": src.bootstrap})
        admin.create_topics([NewTopic(topic, num_partitions=args.partitions, replication_factor=1)])[topic].result(120)
        asyncio.run(measure_kafka_group(src.bootstrap, topic, args.partitions))
        measure_mirror(src, dst, topic, args.partitions, workdir)
    print(f"logs in {workdir}")


if __name__ == "__main__":
    main()
