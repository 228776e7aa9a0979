"""One Apache Kafka broker and one Headwater broker for the module, on the session's ZooKeeper.

Both get the same settings (the ones a single-broker test cluster needs: an offsets topic of one
replica and one partition, no initial rebalance delay) and each its own chroot; the Kafka broker is
the pinned 2.3.1 (``headwater.testing.kafka``). Without the jars (``make java-deps``) the module skips
with the one line ``headwater.testing.java`` gives.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from headwater.testing import java
from headwater.testing.cluster import LocalCluster
from headwater.testing.kafka import KafkaCluster
from headwater.testing.zookeeper import ZooKeeperServer

_chroots = itertools.count()

#: Set on both brokers alike.
SETTINGS: dict[str, object] = {
    "offsets.topic.replication.factor": 1,
    "offsets.topic.num.partitions": 1,
    "group.initial.rebalance.delay.ms": 0,
    "log.retention.check.interval.ms": 1000,  # the purge scenario waits for a retention check
    # one broker: a __transaction_state it can hold (Kafka's default needs 3 replicas)
    "transaction.state.log.replication.factor": 1,
    "transaction.state.log.min.isr": 1,
    "transaction.state.log.num.partitions": 1,
}


@dataclass
class Pair:
    kafka: str
    headwater: str


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory, zookeeper: ZooKeeperServer) -> Iterator[Pair]:
    if java.unavailable() is not None and not java.UNREACHABLE.exists():
        java.fetch()
    reason = java.unavailable()
    if reason is not None:
        pytest.skip(reason)
    n = next(_chroots)
    kafka = KafkaCluster(
        tmp_path_factory.mktemp("kafka"), 1, zk_connect=zookeeper.connect, overrides=SETTINGS, chroot=f"/diffk{n}"
    )
    hw = LocalCluster(
        tmp_path_factory.mktemp("headwater"), 1, zk_connect=f"{zookeeper.connect}/diffh{n}", overrides=SETTINGS
    )
    try:
        kafka.start()
        hw.start()
        yield Pair(kafka.bootstrap, hw.bootstrap)
    finally:
        hw.stop()
        kafka.stop()
