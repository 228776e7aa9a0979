"""Broker discovery through ZooKeeper (``zk://`` bootstrap), brokers joining picked up."""

from __future__ import annotations

from collections.abc import Callable

from headwater.client import SyncAdmin, SyncConsumer, SyncProducer
from tests.harness.broker import BrokerProcess


def test_producer_finds_brokers_in_zookeeper_and_sees_new_ones(
    broker_factory: Callable[..., BrokerProcess], zk_connect: str
) -> None:
    first = broker_factory(1)
    bootstrap = f"zk://{zk_connect}"
    with SyncAdmin(bootstrap) as admin:
        admin.create_topic("found", num_partitions=1, replication_factor=1)
    with SyncProducer(bootstrap, acks=-1) as producer:
        meta = producer.send("found", b"via zookeeper").result(30)
    assert meta.offset == 0
    first.stop()
    second = broker_factory(2)
    with SyncAdmin(bootstrap) as admin:
        admin.create_topic("found-later", num_partitions=1, replication_factor=1)
    with SyncProducer(bootstrap, acks=-1) as producer:
        assert producer.send("found-later", b"second broker").result(30).offset == 0
    with SyncConsumer(second.bootstrap) as consumer:
        records, _ = consumer.fetch("found-later", 0, 0)
    assert [r.value for r in records] == [b"second broker"]
