"""Review finding 6: 80 idle partitions and 1 busy one, all led by one source broker. The busy
partition's delivery latency (librdkafka writing to the source, librdkafka reading the target)
stays under 2 s at p99 with the default fetch.max.wait.ms of 500 ms (real clusters)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

from tests.cluster.harness import Cluster
from tests.cluster.util import create_topic
from tests.mirror.test_mirror import _props
from tests.mirror.util import MirrorProcess, read_topic, wait_for

IDLE, BUSY = "idle", "busy"
RECORDS = 200


def test_a_busy_partition_is_not_held_up_by_80_idle_ones(
    cluster_factory: Callable[..., Cluster], tmp_path: Path
) -> None:
    src, dst = cluster_factory(1), cluster_factory(1)
    create_topic(src, IDLE, partitions=80, rf=1, min_isr=1)
    create_topic(src, BUSY, partitions=1, rf=1, min_isr=1)
    props = _props(src, dst, **{"dc1->agg.topics": f"{IDLE}, {BUSY}", "fetch.max.wait.ms": 500})
    m = MirrorProcess(tmp_path, "mirror", props).start()
    latencies: list[float] = []
    try:
        # 80 idle, the busy one, and the heartbeats partition (MM2-style heartbeats, mirrored like any topic)
        wait_for(lambda: "this process owns 82 partition(s)" in m.log(), 120, "the mirror to own all 82 partitions", m)
        p = Producer({"bootstrap.servers": src.bootstrap, "acks": "all", "linger.ms": 0})
        p.produce(BUSY, value=b"warm-up", partition=0)
        p.flush(30)
        wait_for(lambda: len(read_topic(dst.bootstrap, BUSY)) == 1, 120, "the first record in the target", m)

        c = Consumer(
            {
                "bootstrap.servers": dst.bootstrap,
                "group.id": "latency",
                "fetch.wait.max.ms": 10,
                "enable.auto.commit": False,
            }
        )
        c.assign([TopicPartition(BUSY, 0, 1)])
        done = threading.Event()

        def consume() -> None:
            while not done.is_set() and len(latencies) < RECORDS:
                msg = c.poll(0.05)
                if msg is None or msg.error():
                    continue
                latencies.append(time.time() - msg.timestamp()[1] / 1000.0)

        reader = threading.Thread(target=consume, daemon=True)
        reader.start()
        for i in range(RECORDS):
            p.produce(BUSY, value=f"r{i}".encode(), partition=0)
            p.poll(0)
            time.sleep(0.05)
        assert p.flush(30) == 0
        wait_for(lambda: len(latencies) >= RECORDS, 120, "every record read from the target", m)
        done.set()
        reader.join(30)
        c.close()
    finally:
        assert m.stop() == 0, m.log()[-3000:]
    ordered = sorted(latencies)
    p50, p99 = ordered[len(ordered) // 2], ordered[int(len(ordered) * 0.99) - 1]
    print(f"busy partition beside 80 idle ones: {len(ordered)} records, p50 {p50:.3f} s, p99 {p99:.3f} s")
    assert p99 < 2.0, f"p50 {p50:.3f} s, p99 {p99:.3f} s"
