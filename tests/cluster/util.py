"""Helpers shared by the cluster tests: topics, producing with acks=all, reading everything back."""

from __future__ import annotations

import time
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.cluster.harness import Cluster


def create_topic(
    c: Cluster, name: str, partitions: int = 1, rf: int = 3, min_isr: int = 2, configs: dict[str, str] | None = None
) -> None:
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    config = {"min.insync.replicas": str(min_isr), **(configs or {})}
    fut = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=rf, config=config)],
        operation_timeout=20,
    )
    fut[name].result(30)
    for p in range(partitions):
        c.wait_for(lambda p=p: len(c.state(name, p)["isr"]) == rf, 30, f"{name}-{p} fully in sync")
        # ...and the leader itself has applied that state (LeaderAndIsr reached it), not just ZooKeeper.
        c.wait_for(
            lambda p=p: c.leader_isr_size(int(c.state(name, p)["leader"]), name, p) == rf,
            30,
            f"the leader of {name}-{p} to lead it with the full ISR",
        )


def produce_acked(c: Cluster, topic: str, values: list[bytes], timeout: float = 60) -> dict[int, bytes]:
    """Produce with acks=all; returns offset -> value for every acknowledged record."""
    acked: dict[int, bytes] = {}
    failed: list[KafkaError] = []

    def on_delivery(err: KafkaError | None, msg: object) -> None:
        if err is None:
            acked[msg.offset()] = msg.value()  # type: ignore[attr-defined]
        else:
            failed.append(err)

    p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "linger.ms": 2, "enable.idempotence": False})
    for v in values:
        p.produce(topic, value=v, partition=0, on_delivery=on_delivery)
        p.poll(0)
    p.flush(timeout)
    return acked


def read_all(c: Cluster, topic: str, partition: int = 0, timeout: float = 60) -> dict[int, bytes]:
    """Everything readable (up to the high watermark) from the partition's leader."""
    cons = Consumer(
        {
            "bootstrap.servers": c.bootstrap,
            "group.id": "verify",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    cons.assign([TopicPartition(topic, partition, 0)])
    out: dict[int, bytes] = {}
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            msg = cons.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    break
                continue
            out[msg.offset()] = msg.value()
    finally:
        cons.close()
    return out


def segment_bytes(c: Cluster, broker: int, topic: str, partition: int = 0) -> bytes:
    d = Path(c.brokers[broker].log_dir) / f"{topic}-{partition}"
    return b"".join(f.read_bytes() for f in sorted(d.glob("*.log")))
