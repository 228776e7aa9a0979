"""Stock clients (kcat, confluent-kafka/librdkafka, kafka-python, aiokafka) against our broker."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.harness.broker import BrokerProcess
from tests.harness.clock import RECENT_MS

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def create_topic(bootstrap: str, name: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    fut = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)], operation_timeout=30)
    fut[name].result(60)


def produce_confluent(bootstrap: str, topic: str, records: list[dict], **conf: object) -> list[tuple[int, int]]:
    delivered: list[tuple[int, int]] = []
    errors: list[object] = []

    def on_delivery(err: object, msg: object) -> None:
        if err is not None:
            errors.append(err)
        else:
            delivered.append((msg.partition(), msg.offset()))  # type: ignore[attr-defined]

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **conf})
    for r in records:
        p.produce(topic, on_delivery=on_delivery, **r)
    assert p.flush(30) == 0
    assert not errors, errors
    return delivered


def consume_confluent(bootstrap: str, topic: str, partition: int, count: int, timeout: float = 20) -> list[object]:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "compat-assign",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
        }
    )
    c.assign([TopicPartition(topic, partition, 0)])
    out: list[object] = []
    deadline = time.monotonic() + timeout
    try:
        while len(out) < count and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            out.append(msg)
    finally:
        c.close()
    return out


def test_kcat_metadata_produce_consume(broker: BrokerProcess) -> None:
    kcat = shutil.which("kcat")
    assert kcat, "kcat is not installed (make system-deps)"
    create_topic(broker.bootstrap, "kcat-topic", partitions=2)
    meta = subprocess.run([kcat, "-b", broker.bootstrap, "-L"], capture_output=True, text=True, timeout=30)
    assert meta.returncode == 0, meta.stderr
    assert "1 brokers:" in meta.stdout and f"broker 0 at 127.0.0.1:{broker.port}" in meta.stdout
    assert 'topic "kcat-topic" with 2 partitions' in meta.stdout
    lines = "".join(f"k{i}:v{i}\n" for i in range(100))
    prod = subprocess.run(
        [kcat, "-b", broker.bootstrap, "-t", "kcat-topic", "-p", "1", "-K", ":", "-P"],
        input=lines,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert prod.returncode == 0, prod.stderr
    cons = subprocess.run(
        [
            kcat,
            "-b",
            broker.bootstrap,
            "-t",
            "kcat-topic",
            "-p",
            "1",
            "-C",
            "-o",
            "beginning",
            "-e",
            "-f",
            "%k=%s@%o\n",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert cons.returncode == 0, cons.stderr
    assert cons.stdout.splitlines() == [f"k{i}=v{i}@{i}" for i in range(100)]


@pytest.mark.parametrize("codec", CODECS)
def test_confluent_each_codec_roundtrip(broker: BrokerProcess, codec: str) -> None:
    topic = f"confluent-{codec}"
    create_topic(broker.bootstrap, topic)
    records = [
        {
            "key": f"key-{i}".encode() if i % 3 else None,
            "value": (f"value-{i}-" * (i % 7)).encode(),
            "headers": [("h", f"{i}".encode()), ("empty", b"")],
            "timestamp": RECENT_MS + i,
        }
        for i in range(500)
    ]
    delivered = produce_confluent(
        broker.bootstrap, topic, records, **{"compression.type": codec, "batch.num.messages": 100}
    )
    assert sorted(o for _, o in delivered) == list(range(500))
    got = consume_confluent(broker.bootstrap, topic, 0, 500)
    assert [m.offset() for m in got] == list(range(500))  # type: ignore[attr-defined]
    for r, m in zip(records, got):
        assert m.key() == r["key"]  # type: ignore[attr-defined]
        assert m.value() == r["value"]  # type: ignore[attr-defined]
        assert m.headers() == r["headers"]  # type: ignore[attr-defined]
        assert m.timestamp()[1] == r["timestamp"]  # type: ignore[attr-defined]


def test_kafka_python_produce_consume(broker: BrokerProcess) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.structs import TopicPartition as KTP

    # kafka-python 3 turns idempotence on by default; test_idempotent_clients.py tests it.
    producer = KafkaProducer(
        bootstrap_servers=broker.bootstrap, compression_type="gzip", linger_ms=5, enable_idempotence=False
    )
    futures = [
        producer.send(
            "kp-topic",
            key=None if i % 2 else f"k{i}".encode(),
            value=f"v{i}".encode(),
            headers=[("n", str(i).encode())],
            timestamp_ms=RECENT_MS - 600_000 + i,
        )
        for i in range(200)
    ]
    metas = [f.get(timeout=30) for f in futures]
    producer.close()
    assert [m.offset for m in metas] == list(range(200))
    consumer = KafkaConsumer(
        bootstrap_servers=broker.bootstrap, group_id=None, enable_auto_commit=False, consumer_timeout_ms=5000
    )
    tp = KTP("kp-topic", 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    got = []
    for msg in consumer:
        got.append(msg)
        if len(got) == 200:
            break
    consumer.close()
    assert [(m.offset, m.key, m.value, m.timestamp, list(m.headers)) for m in got] == [
        (i, None if i % 2 else f"k{i}".encode(), f"v{i}".encode(), RECENT_MS - 600_000 + i, [("n", str(i).encode())])
        for i in range(200)
    ]


def test_aiokafka_produce_consume(broker: BrokerProcess) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import TopicPartition as ATP

    create_topic(broker.bootstrap, "aio-topic")

    async def run() -> list[tuple[int, bytes | None, bytes | None, int, list[tuple[str, bytes]]]]:
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, compression_type="lz4")
        await producer.start()
        try:
            for i in range(150):
                await producer.send_and_wait(
                    "aio-topic",
                    key=f"k{i}".encode(),
                    value=None if i == 7 else f"v{i}".encode(),
                    headers=[("i", str(i).encode())],
                    timestamp_ms=RECENT_MS - 1_200_000 + i,
                )
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None, enable_auto_commit=False)
        await consumer.start()
        out = []
        try:
            tp = ATP("aio-topic", 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            while len(out) < 150:
                batch = await asyncio.wait_for(consumer.getmany(tp, timeout_ms=1000), 10)
                for m in batch.get(tp, []):
                    out.append((m.offset, m.key, m.value, m.timestamp, list(m.headers)))
        finally:
            await consumer.stop()
        return out

    got = asyncio.run(run())
    assert got == [
        (i, f"k{i}".encode(), None if i == 7 else f"v{i}".encode(), RECENT_MS - 1_200_000 + i, [("i", str(i).encode())])
        for i in range(150)
    ]
