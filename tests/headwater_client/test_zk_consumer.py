"""The ZooKeeper high-level consumer (headwater.client.zk_consumer) with a real ZooKeeper and broker."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from headwater.client import SyncAdmin, SyncProducer
from headwater.client.zk_consumer import (
    ConsumerTimeoutError,
    KafkaStream,
    Whitelist,
    ZookeeperConsumerConnector,
    consume,
)
from tests.harness.broker import BrokerProcess

pytestmark = [pytest.mark.compat, pytest.mark.timeout(180)]

FAST: dict[str, Any] = {
    "auto_offset_reset": "smallest",
    "auto_commit_interval_ms": 200,
    "rebalance_backoff_ms": 300,
    "rebalance_max_retries": 30,
    "zookeeper_session_timeout_ms": 2000,
}

CHILD = textwrap.dedent(
    """
    import logging, os, sys, time
    from headwater.client.zk_consumer import ConsumerTimeoutError, ZookeeperConsumerConnector
    zk, group, cid, topic, out, stop = sys.argv[1:7]
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    c = ZookeeperConsumerConnector(
        zk, group, cid, auto_offset_reset="smallest", auto_commit_interval_ms=200,
        rebalance_backoff_ms=300, rebalance_max_retries=30, zookeeper_session_timeout_ms=2000,
        consumer_timeout_ms=100,
    )
    [stream] = c.create_message_streams({topic: 1})[topic]
    with open(out, "a") as f:
        f.write("ready\\n"); f.flush()
        while not os.path.exists(stop):
            try:
                for r in stream:
                    f.write(f"{r.partition} {r.offset} {r.value.decode()}\\n"); f.flush()
            except ConsumerTimeoutError:
                pass
    c.shutdown()
    """
)


@pytest.fixture
def zk(zk_connect: str) -> Iterator[KazooClient]:
    hosts, _, chroot = zk_connect.partition("/")
    client = KazooClient(hosts=hosts)
    client.start(10)
    client.ensure_path("/" + chroot)
    client.chroot = "/" + chroot
    yield client
    client.stop()
    client.close()


def create_topic(broker: BrokerProcess, name: str, partitions: int) -> None:
    with SyncAdmin(broker.bootstrap) as admin:
        admin.create_topic(name, partitions, 1)
        admin.wait_for_topic(name, timeout=20)


def produce(broker: BrokerProcess, topic: str, values: list[str]) -> None:
    with SyncProducer(broker.bootstrap, linger_ms=5) as producer:
        futures = [producer.send(topic, v, key=v) for v in values]
        for f in futures:
            f.result(30)


def wait_for(cond: Callable[[], object], timeout: float, what: str) -> object:
    deadline = time.monotonic() + timeout
    while True:
        got = cond()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def owners(zk: KazooClient, group: str, topic: str) -> dict[int, str]:
    path = f"/consumers/{group}/owners/{topic}"
    out: dict[int, str] = {}
    if not zk.exists(path):
        return out
    for p in zk.get_children(path):
        try:
            out[int(p)] = zk.get(f"{path}/{p}")[0].decode()
        except Exception:
            continue
    return out


def owner_counts(zk: KazooClient, group: str, topic: str) -> Counter[str]:
    return Counter(t.rpartition("-")[0] for t in owners(zk, group, topic).values())


class Child:
    def __init__(self, workdir: Path, zk_connect: str, group: str, cid: str, topic: str) -> None:
        self.out = workdir / f"{cid}.out"
        self.stop_file = workdir / f"{cid}.stop"
        self.err = open(workdir / f"{cid}.err", "ab")  # noqa: SIM115
        args = [zk_connect, group, cid, topic, str(self.out), str(self.stop_file)]
        self.proc = subprocess.Popen([sys.executable, "-c", CHILD, *args], stderr=self.err, start_new_session=True)
        wait_for(lambda: self.out.exists() and "ready" in self.out.read_text(), 30, f"{cid} to start")

    def records(self) -> list[str]:
        return [line.split()[2] for line in self.out.read_text().splitlines() if line != "ready"]

    def stop(self) -> None:
        self.stop_file.touch()
        assert self.proc.wait(30) == 0

    def kill9(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.kill9()
        self.err.close()


def test_three_processes_share_twelve_partitions_and_survive_a_kill(
    broker: BrokerProcess, zk: KazooClient, zk_connect: str, tmp_path: Path
) -> None:
    topic, group = "events", "grp"
    create_topic(broker, topic, 12)
    batch_a = [f"a{i}" for i in range(600)]
    produce(broker, topic, batch_a)
    children: dict[str, Child] = {}
    try:
        # members join one after another: each join is a clean rebalance with records flowing
        for cid in ("c1", "c2", "c3"):
            children[cid] = Child(tmp_path, zk_connect, group, cid, topic)
            time.sleep(0.5)
        wait_for(lambda: owner_counts(zk, group, topic) == {"c1": 4, "c2": 4, "c3": 4}, 30, "an even split")
        got = owners(zk, group, topic)
        assert sorted(got) == list(range(12))
        assert {p for p, t in got.items() if t == "c1-0"} == {0, 1, 2, 3}  # Algorithm 1, sorted members
        assert {p for p, t in got.items() if t == "c3-0"} == {8, 9, 10, 11}
        ids = sorted(zk.get_children(f"/consumers/{group}/ids"))
        assert ids == ["c1", "c2", "c3"]
        registration = json.loads(zk.get(f"/consumers/{group}/ids/c1")[0])
        assert registration["subscription"] == {topic: 1} and registration["pattern"] == "static"
        assert registration["version"] == 1 and int(registration["timestamp"]) > 0

        def all_records() -> Counter[str]:
            return Counter(v for c in children.values() for v in c.records())

        wait_for(lambda: set(batch_a) <= set(all_records()), 60, "batch A to be consumed")
        seen = all_records()
        assert [v for v in batch_a if seen[v] != 1] == []  # clean rebalances: no duplicates

        # offsets at the seeds' paths: the next offset of every partition, all of batch A
        def committed() -> int:
            total = 0
            for p in range(12):
                path = f"/consumers/{group}/offsets/{topic}/{p}"
                if zk.exists(path):
                    total += int(zk.get(path)[0].decode())
            return total

        wait_for(lambda: committed() == len(batch_a), 20, "offsets of batch A committed")

        # kill -9 one member: its partitions move to the others within a few seconds
        killed_at = time.monotonic()
        children["c3"].kill9()
        wait_for(lambda: owner_counts(zk, group, topic) == {"c1": 6, "c2": 6}, 20, "the survivors to take over")
        moved_after = time.monotonic() - killed_at
        assert moved_after < 10, moved_after
        batch_b = [f"b{i}" for i in range(600)]
        produce(broker, topic, batch_b)
        wait_for(lambda: set(batch_b) <= set(all_records()), 60, "batch B to be consumed")

        # a clean shutdown while records flow: c1 takes everything over, nothing twice
        batch_c = [f"c{i}" for i in range(900)]
        producer = threading.Thread(target=produce, args=(broker, topic, batch_c))
        producer.start()
        time.sleep(0.2)
        children["c2"].stop()
        producer.join(60)
        wait_for(lambda: owner_counts(zk, group, topic) == {"c1": 12}, 20, "c1 to own every partition")
        wait_for(lambda: set(batch_c) <= set(all_records()), 60, "batch C to be consumed")
        seen = all_records()
        assert [v for v in batch_c if seen[v] != 1] == []
        assert not zk.exists(f"/consumers/{group}/ids/c2")  # shutdown removed its registration
        wait_for(lambda: committed() == len(batch_a) + len(batch_b) + len(batch_c), 20, "every offset committed")
    finally:
        for c in children.values():
            c.close()


def drain(stream: KafkaStream, want: int, timeout: float) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    deadline = time.monotonic() + timeout
    while len(out) < want and time.monotonic() < deadline:
        try:
            for r in stream:
                assert r.value is not None
                out.append((r.topic, r.value.decode()))
                if len(out) >= want:
                    break
        except ConsumerTimeoutError:
            continue
    return out


def test_filter_consumer_picks_up_a_topic_created_later(
    broker: BrokerProcess, zk: KazooClient, zk_connect: str
) -> None:
    create_topic(broker, "flt-a", 2)
    create_topic(broker, "other", 1)
    produce(broker, "flt-a", [f"a{i}" for i in range(20)])
    produce(broker, "other", ["x"])
    with ZookeeperConsumerConnector(zk_connect, "fg", consumer_timeout_ms=200, **FAST) as connector:
        [stream] = connector.create_message_streams_by_filter(Whitelist("flt-.*"), 1)
        registration = json.loads(zk.get(f"/consumers/fg/ids/{connector.consumer_id}")[0])
        assert registration["pattern"] == "white_list" and registration["subscription"] == {"flt-.*": 1}
        first = drain(stream, 20, 30)
        assert sorted(v for _, v in first) == sorted(f"a{i}" for i in range(20))
        create_topic(broker, "flt-b", 3)
        produce(broker, "flt-b", [f"b{i}" for i in range(30)])
        later = drain(stream, 30, 30)
        assert sorted(later) == sorted(("flt-b", f"b{i}") for i in range(30))
        assert sorted(owners(zk, "fg", "flt-b")) == [0, 1, 2]
        assert not zk.exists("/consumers/fg/owners/other") or owners(zk, "fg", "other") == {}
        connector.commit_offsets()
        assert zk.get("/consumers/fg/offsets/flt-a/0")[0].decode().isdigit()
        total_b = sum(int(zk.get(f"/consumers/fg/offsets/flt-b/{p}")[0]) for p in range(3))
        assert total_b == 30
    # shutdown: registration and owner nodes gone, offsets kept
    assert zk.get_children("/consumers/fg/ids") == []
    assert owners(zk, "fg", "flt-b") == {}
    assert zk.exists("/consumers/fg/offsets/flt-b/0")


def test_streams_threads_and_largest_reset(broker: BrokerProcess, zk: KazooClient, zk_connect: str) -> None:
    create_topic(broker, "multi", 4)
    produce(broker, "multi", ["old"] * 8)
    opts = dict(FAST, auto_offset_reset="largest")
    with ZookeeperConsumerConnector(zk_connect, "mg", "m1", consumer_timeout_ms=200, **opts) as connector:
        streams = connector.create_message_streams({"multi": 2})["multi"]
        assert len(streams) == 2
        got = owners(zk, "mg", "multi")
        assert got == {0: "m1-0", 1: "m1-0", 2: "m1-1", 3: "m1-1"}
        # largest: the old records are skipped once the offsets are resolved
        wait_for(lambda: all(zk.exists(f"/consumers/mg/offsets/multi/{p}") for p in range(4)), 20, "offsets")
        produce(broker, "multi", [f"n{i}" for i in range(40)])
        values: list[str] = []
        stop = threading.Event()
        threads = consume(streams, lambda r: values.append((r.value or b"").decode()), stop)
        wait_for(lambda: len(values) >= 40, 20, "the new records on both streams")
        stop.set()
        for t in threads:
            t.join(5)
        assert sorted(values) == sorted(f"n{i}" for i in range(40))


def test_session_expiry_registers_again_and_keeps_consuming(
    broker: BrokerProcess, zk: KazooClient, zk_connect: str
) -> None:
    create_topic(broker, "exp", 2)
    produce(broker, "exp", [f"e{i}" for i in range(10)])
    with ZookeeperConsumerConnector(zk_connect, "eg", "e1", consumer_timeout_ms=200, **FAST) as connector:
        [stream] = connector.create_message_streams({"exp": 1})["exp"]
        assert sorted(v for _, v in drain(stream, 10, 20)) == sorted(f"e{i}" for i in range(10))
        connector.commit_offsets()
        # expire its session the ZooKeeper way: another client on the same session closes it
        session_id, password = connector._zk.client_id
        hosts = zk_connect.partition("/")[0]
        thief = KazooClient(hosts=hosts, client_id=(session_id, password))
        thief.start(10)
        thief.stop()
        thief.close()
        wait_for(lambda: (connector._zk.client_id or (session_id,))[0] != session_id, 20, "a new session")
        wait_for(lambda: zk.exists("/consumers/eg/ids/e1"), 20, "the registration to come back")
        wait_for(lambda: owners(zk, "eg", "exp") == {0: "e1-0", 1: "e1-0"}, 20, "the partitions to be owned again")
        produce(broker, "exp", [f"f{i}" for i in range(10)])
        assert sorted(v for _, v in drain(stream, 10, 20)) == sorted(f"f{i}" for i in range(10))
