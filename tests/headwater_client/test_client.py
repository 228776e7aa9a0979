"""Headwater's own client (headwater.client) against a real broker process."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

import pytest

from headwater.client import (
    EARLIEST,
    LATEST,
    Admin,
    Consumer,
    ConsumerRecord,
    KafkaConnectionError,
    KafkaError,
    OffsetOutOfRangeError,
    Producer,
    SyncAdmin,
    SyncConsumer,
    SyncProducer,
    UnknownTopicError,
)
from headwater.client.connection import BrokerConnection
from headwater.client.partitioner import murmur2, to_positive
from headwater.protocol.apis import FETCH, METADATA, PRODUCE
from headwater.protocol.errors import ErrorCode
from tests.harness.broker import BrokerProcess
from tests.harness.clock import RECENT_MS

pytestmark = [pytest.mark.compat, pytest.mark.timeout(120)]

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T], timeout: float = 60) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(bounded())


async def create(bootstrap: str, name: str, partitions: int = 1, **configs: str) -> None:
    async with Admin(bootstrap) as admin:
        await admin.create_topic(name, partitions, 1, {k.replace("_", "."): v for k, v in configs.items()})
        await admin.wait_for_topic(name, timeout=20)


async def read_all(bootstrap: str, topic: str, partition: int, count: int, offset: int = 0) -> list[ConsumerRecord]:
    out: list[ConsumerRecord] = []
    async with Consumer(bootstrap) as consumer:
        while len(out) < count:
            records, _ = await consumer.fetch(topic, partition, offset, max_wait_ms=200)
            out.extend(records)
            if records:
                offset = records[-1].offset + 1
    return out


def test_connection_negotiates_versions(broker: BrokerProcess) -> None:
    async def go() -> None:
        conn = BrokerConnection("127.0.0.1", broker.port)
        await conn.connect()
        try:
            versions = conn.broker_versions
            assert PRODUCE.key in versions and FETCH.key in versions
            assert conn.version_for(METADATA) == min(METADATA.max_version, versions[METADATA.key][1])
            # pipelined: several requests in flight on one connection, answered in order
            answers = await asyncio.gather(*(conn.request(METADATA, {"topics": None}) for _ in range(20)))
            assert all(a["brokers"][0]["port"] == broker.port for a in answers)
        finally:
            await conn.close()

    run(go())


def test_unreachable_bootstrap_is_a_connection_error() -> None:
    async def go() -> None:
        async with Admin("127.0.0.1:1", connect_timeout_ms=2000) as admin:
            await admin.list_topics()

    with pytest.raises(KafkaConnectionError, match=r"127\.0\.0\.1:1"):
        run(go())


def test_admin_create_describe_list_delete(broker: BrokerProcess) -> None:
    async def go() -> None:
        async with Admin(broker.bootstrap) as admin:
            await admin.create_topic("adm", 3, 1, {"retention.ms": "3600000"})
            await admin.wait_for_topic("adm", timeout=20)
            assert "adm" in await admin.list_topics()
            (d,) = await admin.describe_topics(["adm"])
            assert [p.partition for p in d.partitions] == [0, 1, 2]
            assert all(p.leader == 0 and p.replicas == (0,) and p.isr == (0,) for p in d.partitions)
            assert d.replication_factor == 1
            configs = await admin.describe_configs("adm")
            assert configs["retention.ms"].value == "3600000"
            assert configs["retention.ms"].source == "DYNAMIC_TOPIC_CONFIG"
            with pytest.raises(KafkaError) as exists:
                await admin.create_topic("adm", 1, 1)
            assert exists.value.code is ErrorCode.TOPIC_ALREADY_EXISTS
            with pytest.raises(KafkaError) as bad_rf:
                await admin.create_topic("adm-rf", 1, 3)
            assert bad_rf.value.code is ErrorCode.INVALID_REPLICATION_FACTOR
            with pytest.raises(UnknownTopicError):
                await admin.describe_topics(["no-such-topic"])
            await admin.delete_topic("adm")
            await admin.wait_for_topic("adm", exists=False, timeout=30)
            assert "adm" not in await admin.list_topics()

    run(go())


def test_produce_acks(broker: BrokerProcess) -> None:
    async def go(acks: int) -> list[ConsumerRecord]:
        topic = f"acks{acks + 1}"
        await create(broker.bootstrap, topic)
        async with Producer(broker.bootstrap, acks=acks, linger_ms=2) as producer:
            futures = [await producer.send(topic, f"v{i}", key=f"k{i}") for i in range(50)]
            await producer.flush(30)
            metas = [f.result() for f in futures]
        expected = [-1] * 50 if acks == 0 else list(range(50))
        assert [m.offset for m in metas] == expected, f"acks={acks}"
        assert {(m.topic, m.partition) for m in metas} == {(topic, 0)}
        return await read_all(broker.bootstrap, topic, 0, 50)

    for acks in (0, 1, -1):
        got = run(go(acks))
        assert [(r.offset, r.key, r.value) for r in got] == [
            (i, f"k{i}".encode(), f"v{i}".encode()) for i in range(50)
        ], f"acks={acks}"


def test_codec_roundtrip(broker: BrokerProcess) -> None:
    values = [(f"value-{i}-" * (i % 13)).encode() or None for i in range(300)]

    async def go(codec: str) -> list[ConsumerRecord]:
        topic = f"codec-{codec}"
        await create(broker.bootstrap, topic)
        async with Producer(broker.bootstrap, compression=codec, linger_ms=20, batch_size=4096) as producer:
            futures = [
                await producer.send(
                    topic,
                    v,
                    key=None if i % 4 == 0 else f"k{i}",
                    headers=[("n", str(i)), ("null", None)],
                    timestamp_ms=RECENT_MS + i,
                )
                for i, v in enumerate(values)
            ]
            metas = await asyncio.gather(*futures)
        assert sorted(m.offset for m in metas) == list(range(300))
        return await read_all(broker.bootstrap, topic, 0, 300)

    for codec in CODECS:
        got = run(go(codec))
        assert [r.offset for r in got] == list(range(300)), codec
        for i, r in enumerate(got):
            assert r.value == values[i], codec
            assert r.key == (None if i % 4 == 0 else f"k{i}".encode()), codec
            assert r.headers == (("n", str(i).encode()), ("null", None)), codec
            assert r.timestamp == RECENT_MS + i, codec


def test_keyed_records_follow_murmur2(broker: BrokerProcess) -> None:
    topic = "keyed"

    async def go() -> dict[str, int]:
        await create(broker.bootstrap, topic, partitions=4)
        async with Producer(broker.bootstrap) as producer:
            futures = {f"key-{i}": await producer.send(topic, b"x", key=f"key-{i}") for i in range(40)}
            return {k: (await f).partition for k, f in futures.items()}

    placed = run(go())
    for key, partition in placed.items():
        assert partition == to_positive(murmur2(key.encode())) % 4


def test_offsets_before_and_list_offset(broker: BrokerProcess) -> None:
    topic = "offsets"

    async def go() -> None:
        await create(broker.bootstrap, topic)
        async with Producer(broker.bootstrap) as producer:
            for i in range(10):
                await producer.send_and_wait(topic, f"v{i}", timestamp_ms=1_000_000 + i * 1000)
        async with Consumer(broker.bootstrap) as consumer:
            assert await consumer.offsets_before(topic, 0, EARLIEST, 1) == [0]
            assert await consumer.offsets_before(topic, 0, LATEST, 1) == [10]
            assert (await consumer.list_offset(topic, 0, EARLIEST)).offset == 0
            assert (await consumer.list_offset(topic, 0, LATEST)).offset == 10
            assert (await consumer.list_offset(topic, 0, 1_000_000 + 4500)).offset == 5
            records, high_watermark = await consumer.fetch(topic, 0, 7)
            assert high_watermark == 10
            assert [r.value for r in records] == [b"v7", b"v8", b"v9"]
            empty, _ = await consumer.fetch(topic, 0, 10, max_wait_ms=100)
            assert empty == []
            with pytest.raises(OffsetOutOfRangeError):
                await consumer.fetch(topic, 0, 11)

    run(go())


def test_follow_all_partitions(broker: BrokerProcess) -> None:
    topic = "follow"

    async def go() -> list[ConsumerRecord]:
        await create(broker.bootstrap, topic, partitions=3)
        async with Consumer(broker.bootstrap) as consumer:
            sub = consumer.follow(topic, start="latest", max_wait_ms=100)
            assert await sub.poll() == []
            async with Producer(broker.bootstrap) as producer:
                for i in range(30):
                    await producer.send(topic, f"v{i}", key=f"k{i}")
            got: list[ConsumerRecord] = []
            async for record in sub:
                got.append(record)
                if len(got) == 30:
                    break
            return got

    got = run(go())
    assert sorted(r.value or b"" for r in got) == sorted(f"v{i}".encode() for i in range(30))
    assert {r.partition for r in got} <= {0, 1, 2}


def test_follow_fetches_ahead_but_a_seek_wins(broker: BrokerProcess) -> None:
    """A round that brought records starts the next fetch at once; moving ``positions`` drops it."""
    topic = "ahead"

    async def go() -> tuple[list[int], list[int]]:
        await create(broker.bootstrap, topic)
        async with Producer(broker.bootstrap, linger_ms=0) as producer:
            for i in range(60):  # one batch per record: a small max_bytes cuts a round short
                await (await producer.send(topic, b"x" * 100, key=b"%d" % i))
        async with Consumer(broker.bootstrap) as consumer:
            sub = consumer.follow(topic, 0, start="earliest", max_wait_ms=100, max_bytes=1000)
            first = await sub.poll()
            assert first and first[-1].offset < 59
            sub.positions[0] = 3  # a seek back, while the fetch ahead is under way
            after_seek = await sub.poll()
            offsets = [r.offset for r in after_seek]
            while offsets[-1] < 59:
                offsets += [r.offset for r in await sub.poll()]
            sub.close()
            return [r.offset for r in first], offsets

    first, rest = run(go())
    assert first == list(range(len(first)))
    assert rest == list(range(3, 60))  # from the seek on, in order, nothing missing or twice


def test_unknown_topic_without_auto_create(broker_factory: Any) -> None:
    b = broker_factory(0, auto_create_topics_enable="false")

    async def go() -> None:
        async with Producer(b.bootstrap, unknown_topic_timeout_ms=1000) as producer:
            with pytest.raises(UnknownTopicError, match="nope"):
                await producer.send("nope", b"x")
        async with Consumer(b.bootstrap, unknown_topic_timeout_ms=1000) as consumer:
            with pytest.raises(UnknownTopicError):
                await consumer.fetch("nope", 0, 0)

    run(go())


def test_sync_facade(broker: BrokerProcess) -> None:
    with SyncAdmin(broker.bootstrap) as admin:
        admin.create_topic("sync-topic", 2)
        admin.wait_for_topic("sync-topic", timeout=20)
        assert "sync-topic" in admin.list_topics()
    with SyncProducer(broker.bootstrap, linger_ms=5) as producer:
        futures = [producer.send("sync-topic", f"v{i}", partition=i % 2) for i in range(20)]
        producer.flush(30)
        metas = [f.result(10) for f in futures]
    assert [(m.partition, m.offset) for m in metas] == [(i % 2, i // 2) for i in range(20)]
    with SyncConsumer(broker.bootstrap) as consumer:
        assert consumer.offsets_before("sync-topic", 1, LATEST) == [10]
        records, hw = consumer.fetch("sync-topic", 1, 0)
        assert hw == 10 and [r.value for r in records] == [f"v{i}".encode() for i in range(1, 20, 2)]
        sub = consumer.follow("sync-topic", start="earliest")
        seen: list[ConsumerRecord] = []
        while len(seen) < 20:
            seen.extend(sub.poll(200))
        assert sub.positions == {0: 10, 1: 10}
