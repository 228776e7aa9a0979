"""Fetching ahead under a destination leader move (issue 22, real brokers, a real mirror process).

The mirror copies a backlog through a WAN link (30 ms one way) with small fetches, so it always has
fetches on the link and batches fetched ahead while it produces. Mid-copy the destination
partition's leader is shut down (controlled shutdown: the produce requests the old leader still
gets are answered NOT_LEADER_FOR_PARTITION, and the ones on its connection when it closes get no
answer): afterwards the destination holds every source record exactly once, in source order, per
partition, and the committed offsets are the source's log end.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from headwater.lab.link import LinkSettings, LinkThread
from headwater.testing.cluster import LocalCluster
from headwater.testing.zookeeper import ZooKeeperServer, free_port
from tests.cluster.harness import Cluster
from tests.cluster.util import create_topic
from tests.mirror.util import MirrorProcess, read_topic, wait_for

TOPIC = "orders"
PARTITIONS = 2
RECORDS = 100_000
_chroots = itertools.count()


def _fill(bootstrap: str) -> dict[int, list[bytes]]:
    """RECORDS records of ~100 B, numbered per partition; what each partition holds, in order."""
    sent: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    errors: list[object] = []
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "enable.idempotence": False})
    for i in range(RECORDS):
        partition = i % PARTITIONS
        value = f"{partition}-{len(sent[partition]):08d}-".encode().ljust(100, b"x")
        sent[partition].append(value)
        p.produce(TOPIC, value=value, partition=partition, on_delivery=lambda e, _m: e and errors.append(e))
        if i % 1000 == 0:
            p.poll(0)
    assert p.flush(60) == 0
    assert not errors, errors[:3]
    return sent


def _held(bootstrap: str) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "watch", "enable.auto.commit": False})
    try:
        return sum(c.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10)[1] for p in range(PARTITIONS))
    finally:
        c.close()


def test_fetching_ahead_keeps_order_and_loses_nothing_when_the_destination_leader_moves(
    cluster_factory: Callable[..., Cluster], zookeeper: ZooKeeperServer, tmp_path: Path
) -> None:
    link = LinkThread("src", LinkSettings(delay_ms=30)).start()
    try:
        with LocalCluster(
            tmp_path / "src",
            1,
            zk_connect=f"{zookeeper.connect}/fetch-ahead{next(_chroots)}",
            wan=lambda port: link.add_route("127.0.0.1", port),
        ) as src:
            agg = cluster_factory(2)
            admin = AdminClient({"bootstrap.servers": src.bootstrap})  # kept alive until its future is done
            admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(90)
            create_topic(agg, TOPIC, partitions=PARTITIONS, rf=2, min_isr=1)
            sent = _fill(src.bootstrap)
            props = {
                "clusters": "src, agg",
                "src.zookeeper.connect": src.zk_connect,
                "src.bootstrap.servers": src.wan_bootstrap,  # through the link
                "agg.bootstrap.servers": agg.bootstrap,
                "src->agg.enabled": "true",
                "src->agg.topics": TOPIC,
                "group.id": "fetch-ahead",
                "fetch.max.bytes": 16384,  # ~140 records a fetch: many fetches on the link, several ahead
                "fetch.max.in.flight": 2,  # fetching ahead, off by default
                "fetch.max.buffered.bytes": 3 * 16384,
                "fetch.max.wait.ms": 100,
                "offset.commit.interval.ms": 500,
                "emit.heartbeats.enabled": "false",
                "metrics.port": free_port(),
                "metrics.host": "127.0.0.1",
            }
            mirror = MirrorProcess(tmp_path, "mirror", props).start()
            try:
                wait_for(lambda: _held(agg.bootstrap) >= RECORDS // 10, 120, "a tenth of the backlog copied", mirror)
                old = int(agg.state(TOPIC, 0)["leader"])
                agg.stop(old)  # controlled shutdown: leadership moves to the other broker
                agg.wait_for(lambda: int(agg.state(TOPIC, 0)["leader"]) not in (old, -1), 60, "a new leader")
                assert _held(agg.bootstrap) < RECORDS, "the move happened mid-copy"
                wait_for(lambda: _held(agg.bootstrap) >= RECORDS, 240, "the whole backlog copied", mirror)
                assert mirror.stop() == 0
            finally:
                mirror.stop()
            got: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
            for partition, _, _, value, _, _ in sorted(read_topic(agg.bootstrap, TOPIC), key=lambda r: (r[0], r[1])):
                assert value is not None
                got[partition].append(value)
            for partition in range(PARTITIONS):
                assert len(got[partition]) == len(sent[partition]), f"partition {partition}: lost or duplicated"
                assert got[partition] == sent[partition], f"partition {partition}: out of order"
            log = mirror.log()
            assert f"producing to {TOPIC}-0: " in log, "the move reached the mirror's produce"
    finally:
        link.stop()
