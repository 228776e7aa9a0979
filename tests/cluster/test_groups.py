"""A consumer group outlives its coordinator: kill -9 of the broker leading the group's partition of
``__consumer_offsets``, and the group resumes from its committed offsets on the new coordinator."""

from __future__ import annotations

import time
from collections.abc import Callable

from confluent_kafka import Consumer, Producer

from headwater.broker.group.formats import OFFSETS_TOPIC, partition_for
from tests.cluster.harness import Cluster
from tests.cluster.util import create_topic

PARTITIONS = 2
OFFSETS_PARTITIONS = 3
TIMEOUT_S = 90.0


def _produce(c: Cluster, topic: str, name: str, n: int) -> set[str]:
    values = [f"{name}-{i}" for i in range(n)]
    failed: list[object] = []
    p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "linger.ms": 2, "enable.idempotence": False})
    for i, v in enumerate(values):
        p.produce(topic, value=v.encode(), partition=i % PARTITIONS, on_delivery=lambda e, _m: e and failed.append(e))
    assert p.flush(TIMEOUT_S) == 0 and not failed, failed
    return set(values)


def _consumer(c: Cluster, group: str, topic: str) -> Consumer:
    cons = Consumer(
        {
            "bootstrap.servers": c.bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
            "topic.metadata.refresh.interval.ms": 1000,
        }
    )
    cons.subscribe([topic])
    return cons


def _read_until(cons: Consumer, want: set[str]) -> list[str]:
    got: list[str] = []
    deadline = time.monotonic() + TIMEOUT_S
    while not set(got) >= want:
        assert time.monotonic() < deadline, f"read {len(set(got) & want)} of {len(want)} records"
        msg = cons.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append(msg.value().decode())
    return got


def test_group_resumes_from_committed_offsets_after_coordinator_kill9(cluster_factory: Callable[..., Cluster]) -> None:
    c = cluster_factory(3, offsets_topic_num_partitions=OFFSETS_PARTITIONS)
    topic, group = "orders", "billing"
    create_topic(c, topic, partitions=PARTITIONS)
    batch_a = _produce(c, topic, "a", 200)

    first = _consumer(c, group, topic)
    try:
        assert sorted(_read_until(first, batch_a)) == sorted(batch_a)
        # The offsets topic exists now (the consumer's FindCoordinator created it): wait until the
        # coordinator leads the group's partition with every replica in sync, so the commit is on all three.
        p = partition_for(group, OFFSETS_PARTITIONS)
        c.wait_for(lambda: len(c.state(OFFSETS_TOPIC, p)["isr"]) == 3, 60, "the offsets partition fully in sync")
        coordinator = int(c.state(OFFSETS_TOPIC, p)["leader"])
        c.wait_for(
            lambda: c.leader_isr_size(coordinator, OFFSETS_TOPIC, p) == 3, 60, "the coordinator to lead with 3 in sync"
        )
        first.commit(asynchronous=False)
    finally:
        first.close()

    c.kill9(coordinator)
    c.wait_for(
        lambda: int(c.state(OFFSETS_TOPIC, p)["leader"]) not in (-1, coordinator),
        60,
        "a new leader of the offsets partition",
    )
    batch_b = _produce(c, topic, "b", 200)

    second = _consumer(c, group, topic)
    try:
        after = _read_until(second, batch_b)
    finally:
        second.close()
    assert not set(after) & batch_a, "the group read again what it had committed before the coordinator died"
    assert sorted(after) == sorted(batch_b)
