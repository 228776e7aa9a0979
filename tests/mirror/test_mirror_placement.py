"""Load-aware placement against real clusters (issue 43, item 7): three mirror processes, one hot
partition among many cold ones; after a rebalance interval the hot partition's process holds
nothing else, the hot partition never stopped, and every record is in the target once, in order."""

from __future__ import annotations

import signal
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import Producer
from kazoo.client import KazooClient

from headwater.testing.zookeeper import free_port
from headwater.zk.paths import consumer_owner_path, mirror_placement_path
from tests.cluster.harness import Cluster
from tests.cluster.util import create_topic
from tests.mirror.util import AckedWriter, MirrorProcess, flow_props, read_topic, wait_for, zk_connect

TOPIC = "loads"
PARTITIONS = 24
HOT = 0
GROUP = "headwater-mirror"


class HotWriter(AckedWriter):
    """~100 KB/s into one partition: 1 KB records, a 10 ms poll between them."""

    poll_s = 0.01

    def write(self, i: int) -> None:
        self.producer.produce(
            TOPIC, partition=HOT, value=f"hot-{i:08d}-".encode().ljust(1000, b"."), on_delivery=self._done
        )


def _pid(consumer_id: str) -> int:
    """The process id in a mirror's consumer id (``<group>_<host>-<pid>-<uuid>``)."""
    return int(consumer_id.rsplit("-", 2)[-2])


def _owned(rebalanced: str) -> set[str]:
    """The partitions a "rebalanced among ..." log line says the process owns."""
    listed = rebalanced.split("partition(s): ", 1)[1].split("; ", 1)[0]
    return set() if listed == "none" else set(listed.split(", "))


def test_the_hot_partitions_process_gives_away_its_cold_ones(
    cluster_factory: Callable[..., Cluster], tmp_path: Path
) -> None:
    t0 = time.monotonic()
    src, dst = cluster_factory(1), cluster_factory(1)
    t_clusters = time.monotonic() - t0
    create_topic(src, TOPIC, partitions=PARTITIONS, rf=1, min_isr=1)
    cold = Producer({"bootstrap.servers": src.bootstrap, "acks": "all", "linger.ms": 5})
    for p in range(PARTITIONS):
        if p != HOT:
            for i in range(10):
                cold.produce(TOPIC, partition=p, value=f"cold-{p}-{i}".encode())
    assert cold.flush(30) == 0
    props = {
        **flow_props(src, dst, TOPIC),
        "offset.commit.interval.ms": 500,
        "fetch.max.wait.ms": 100,
        "placement.rebalance.interval.seconds": 1,
        "emit.heartbeats.enabled": "false",
        "emit.checkpoints.enabled": "false",
        "emit.offset-syncs.enabled": "false",
        "sync.topic.configs.enabled": "false",
    }
    t_topic = time.monotonic() - t0
    zk = KazooClient(hosts=zk_connect(src))
    zk.start(timeout=15)

    def owners() -> dict[int, str]:
        out = {}
        for p in range(PARTITIONS):
            try:
                out[p] = zk.get(consumer_owner_path(GROUP, TOPIC, p))[0].decode()
            except Exception:
                pass
        return out

    def hot_alone() -> bool:
        now = owners()
        return len(now) == PARTITIONS and [p for p, m in now.items() if m == now[HOT]] == [HOT]

    writer = HotWriter(src.bootstrap)
    writer.thread.start()
    ports = [free_port() for _ in range(3)]
    mirrors = [
        MirrorProcess(tmp_path, f"mirror{i}", {**props, "metrics.port": port}).start()
        for i, port in enumerate(ports, 1)
    ]

    def hot_rate() -> float:
        """What the hot partition's process publishes for it (its /metrics)."""
        pid = _pid(owners()[HOT])
        port = next(port for m, port in zip(mirrors, ports, strict=True) if m.proc is not None and m.proc.pid == pid)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            text = r.read().decode()
        line = f'headwater_mirror_partition_bytes_per_second{{flow="dc1->agg",partition="{HOT}",topic="{TOPIC}"}}'
        return float(next(x for x in text.splitlines() if x.startswith(line)).split()[-1])

    try:
        # count-based first: the three processes share the partitions (rendezvous hashing)
        wait_for(
            lambda: len(set(owners().values())) == 3 and len(owners()) == PARTITIONS, 60, "all three to own", mirrors[0]
        )
        t_owned = time.monotonic() - t0
        started = time.monotonic()
        wait_for(hot_alone, 60, "the hot partition's process to hold nothing else", mirrors[0])
        took = time.monotonic() - started
        settled = owners()
        seen: list[float] = []

        def plausible() -> bool:  # the writer's ~100 KB/s (less on a loaded machine), as its copier measures it
            seen.append(hot_rate())
            return 10_000 < seen[-1] < 1_000_000

        wait_for(plausible, 30, "a plausible byte rate of the hot partition")
        assert all(r < 1_000_000 for r in seen), seen
        rate = seen[-1]
        version = zk.exists(mirror_placement_path(GROUP)).version
        # it stays so: two more intervals, no new placement, the same owners
        deadline = time.monotonic() + 2.5
        while time.monotonic() < deadline:
            assert owners() == settled
            time.sleep(0.25)
        assert zk.exists(mirror_placement_path(GROUP)).version == version
        # the hot partition's copier never stopped: once all three had joined, from its claim on, every
        # rebalance of its process kept it (a hand-over away and back would show a rebalance without it)
        hot_process = next(m for m in mirrors if m.proc is not None and m.proc.pid == _pid(settled[HOT]))
        owned_after_each = [
            _owned(line) for line in hot_process.log().splitlines() if "rebalanced among 3 member(s)" in line
        ]
        first = next(i for i, owned in enumerate(owned_after_each) if f"{TOPIC}-{HOT}" in owned)
        assert all(f"{TOPIC}-{HOT}" in owned for owned in owned_after_each[first:]), owned_after_each
        writer.stop.set()
        writer.thread.join(60)
        assert len(writer.acked) > 0

        def source() -> list[tuple[int, int, bytes | None]]:
            return sorted((p, o, v) for p, o, _k, v, _h, _t in read_topic(src.bootstrap, TOPIC))

        expected = source()
        wait_for(
            lambda: sorted((p, o, v) for p, o, _k, v, _h, _t in read_topic(dst.bootstrap, TOPIC)) == expected,
            60,
            "every record in the target once, at its source offset",
            mirrors[0],
        )
        moves = [line for m in mirrors for line in m.log().splitlines() if "placement by byte rates: moving" in line]
        assert moves  # rendezvous hashing put cold ones with the hot one (not doing so: (2/3)^23, ~1e-4)
        assert not any(f" {TOPIC}-{HOT} to " in line for line in moves), moves  # the hot partition never moved
        print(
            f"clusters at {t_clusters:.1f}s, topic at {t_topic:.1f}s, mirrors owning at {t_owned:.1f}s; hot partition alone {took:.1f}s later; "
            f"read back at {time.monotonic() - t0:.1f}s; {len(expected)} records; hot partition {rate:.0f} B/s"
        )
    finally:
        writer.stop.set()
        for m in mirrors:  # all at once: one by one, each stop hands its partitions to the others
            if m.proc is not None and m.proc.poll() is None:
                m.proc.send_signal(signal.SIGTERM)
        for m in mirrors:
            m.stop()
        zk.stop()
        zk.close()
