"""Stock clients' idempotent producers (InitProducerId, sequenced batches) against our broker."""

from __future__ import annotations

import asyncio

from confluent_kafka import Consumer, Producer, TopicPartition

from headwater.protocol.records.header import read_header
from tests.compat.test_stock_clients import create_topic
from tests.harness.broker import BrokerProcess

N = 300


def _values(bootstrap: str, topic: str, partitions: int) -> dict[int, list[bytes]]:
    """Every value of the topic by partition, in offset order (read to the end of each partition)."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "idem-verify",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    at_end: set[int] = set()
    try:
        for _ in range(2000):
            msg = c.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == -191:  # _PARTITION_EOF
                    at_end.add(msg.partition())
                    if len(at_end) == partitions:
                        break
                continue
            out[msg.partition()].append(msg.value())
    finally:
        c.close()
    assert len(at_end) == partitions, "did not reach the end of every partition"
    return out


def _producer_ids(broker: BrokerProcess, topic: str, partitions: int) -> set[int]:
    """The producer ids of every batch stored for the topic (read from the segment files)."""
    ids = set()
    for p in range(partitions):
        for seg in sorted((broker.log_dir / f"{topic}-{p}").glob("*.log")):
            data = seg.read_bytes()
            pos = 0
            while pos < len(data):
                h = read_header(data, pos)
                ids.add(h.producer_id)
                pos += h.size
    return ids


def _expected(partitions: int) -> dict[int, list[bytes]]:
    return {p: [f"r{i}".encode() for i in range(N) if i % partitions == p] for p in range(partitions)}


def test_confluent_idempotent_producer(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "idem-confluent", 2)
    errors: list[object] = []
    p = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 2})
    for i in range(N):
        p.produce(
            "idem-confluent", value=f"r{i}".encode(), partition=i % 2, on_delivery=lambda e, m: e and errors.append(e)
        )
        p.poll(0)
    assert p.flush(30) == 0
    assert not errors, errors
    assert _values(broker.bootstrap, "idem-confluent", 2) == _expected(2)
    ids = _producer_ids(broker, "idem-confluent", 2)
    assert len(ids) == 1 and min(ids) >= 0, f"batches not from one idempotent producer: {ids}"


def test_kafka_python_idempotent_producer(broker: BrokerProcess) -> None:
    from kafka import KafkaProducer

    create_topic(broker.bootstrap, "idem-kp", 2)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, enable_idempotence=True, acks="all", linger_ms=2)
    futures = [producer.send("idem-kp", value=f"r{i}".encode(), partition=i % 2) for i in range(N)]
    metas = [f.get(timeout=30) for f in futures]
    producer.close()
    assert all(m.offset >= 0 for m in metas)
    assert _values(broker.bootstrap, "idem-kp", 2) == _expected(2)
    ids = _producer_ids(broker, "idem-kp", 2)
    assert len(ids) == 1 and min(ids) >= 0, f"batches not from one idempotent producer: {ids}"


def test_aiokafka_idempotent_producer(broker: BrokerProcess) -> None:
    from aiokafka import AIOKafkaProducer

    create_topic(broker.bootstrap, "idem-aio", 2)

    async def run() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, enable_idempotence=True, linger_ms=2)
        await producer.start()
        try:
            futures = [await producer.send("idem-aio", value=f"r{i}".encode(), partition=i % 2) for i in range(N)]
            await asyncio.wait_for(asyncio.gather(*futures), 30)
        finally:
            await producer.stop()

    asyncio.run(run())
    assert _values(broker.bootstrap, "idem-aio", 2) == _expected(2)
    ids = _producer_ids(broker, "idem-aio", 2)
    assert len(ids) == 1 and min(ids) >= 0, f"batches not from one idempotent producer: {ids}"
