"""Producer audit counts (headwater.client.audit) against a real broker process."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import Coroutine
from typing import Any, TypeVar

import pytest

from headwater.client import EARLIEST, LATEST, Admin, Consumer, ConsumerRecord, RecordMetadata
from headwater.client.audit import HEADER_CREATED, HEADER_DC, HEADER_HOST, AuditingProducer, SyncAuditingProducer
from tests.harness.broker import BrokerProcess

pytestmark = [pytest.mark.compat, pytest.mark.timeout(120)]

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T], timeout: float = 90) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(bounded())


async def create(bootstrap: str, name: str, partitions: int = 1) -> None:
    async with Admin(bootstrap) as admin:
        await admin.create_topic(name, partitions, 1)
        await admin.wait_for_topic(name, timeout=20)


async def read_topic(bootstrap: str, topic: str) -> list[ConsumerRecord]:
    out: list[ConsumerRecord] = []
    async with Consumer(bootstrap) as consumer:
        for p in await consumer.partitions_for(topic):
            offset = (await consumer.offsets_before(topic, p, EARLIEST, 1))[0]
            end = (await consumer.offsets_before(topic, p, LATEST, 1))[0]
            while offset < end:
                records, _ = await consumer.fetch(topic, p, offset, max_wait_ms=100)
                records = [r for r in records if r.offset >= offset]
                out.extend(records)
                if records:
                    offset = records[-1].offset + 1
    return out


async def audit_events(bootstrap: str) -> list[dict[str, Any]]:
    return [json.loads(r.value or b"") for r in await read_topic(bootstrap, "__audit")]


def header(record: ConsumerRecord, name: str) -> bytes | None:
    return dict(record.headers).get(name)


def test_audit_counts_equal_acknowledged_records(broker: BrokerProcess) -> None:
    async def go() -> None:
        await create(broker.bootstrap, "__audit")
        await create(broker.bootstrap, "clicks", 3)
        await create(broker.bootstrap, "views", 1)
        async with AuditingProducer(
            broker.bootstrap, window_ms=500, datacenter="dc1", application="web", host="web-7", linger_ms=2
        ) as producer:
            futures = []
            started = time.monotonic()
            i = 0
            while time.monotonic() - started < 1.6:  # several windows close while sending
                futures.append(await producer.send("clicks", f"c{i}", key=str(i)))
                if i % 3 == 0:
                    futures.append(await producer.send("views", f"v{i}"))
                i += 1
                await asyncio.sleep(0.002)
            await asyncio.gather(*futures)
            await asyncio.sleep(1.2)  # closed windows are published by the background task
            published_before_close = await audit_events(broker.bootstrap)
            assert published_before_close, "no window event before close()"
        events = await audit_events(broker.bootstrap)
        assert len({e["guid"] for e in events}) == len(events)
        for e in events:
            assert e["tier"] == "producer" and e["datacenter"] == "dc1" and e["host"] == "web-7"
            assert e["application"] == "web" and e["window_end"] - e["window_start"] == 500
            assert set(e) == {
                "guid", "tier", "datacenter", "host", "application", "topic", "window_start", "window_end", "count",
            }  # fmt: skip
        per_topic = Counter[str]()
        per_window = Counter[tuple[str, int]]()
        for e in events:
            per_topic[e["topic"]] += e["count"]
            per_window[(e["topic"], e["window_start"])] += e["count"]
        acked = Counter(f.result().topic for f in futures)
        assert per_topic == acked
        # each record's origin.created puts it in exactly the window its event counted
        from_records = Counter[tuple[str, int]]()
        for topic in ("clicks", "views"):
            records = await read_topic(broker.bootstrap, topic)
            assert len(records) == acked[topic]
            for r in records:
                assert header(r, HEADER_HOST) == b"web-7" and header(r, HEADER_DC) == b"dc1"
                created = int(header(r, HEADER_CREATED) or b"")
                assert r.timestamp == created
                from_records[(topic, created // 500 * 500)] += 1
        assert from_records == per_window

    run(go())


def test_audit_can_be_switched_off(broker: BrokerProcess) -> None:
    async def go() -> None:
        await create(broker.bootstrap, "__audit")
        await create(broker.bootstrap, "quiet")
        async with AuditingProducer(broker.bootstrap, audit=False, window_ms=100) as producer:
            await asyncio.gather(*[await producer.send("quiet", f"q{i}") for i in range(20)])
        records = await read_topic(broker.bootstrap, "quiet")
        assert len(records) == 20 and all(header(r, HEADER_CREATED) is None for r in records)
        assert await audit_events(broker.bootstrap) == []

    run(go())


def test_audit_counts_across_a_broker_restart(broker: BrokerProcess) -> None:
    """The broker is killed (-9) and restarted while records flow: they are retried, and the events
    count exactly the acknowledged ones."""

    async def go() -> None:
        await create(broker.bootstrap, "__audit")
        await create(broker.bootstrap, "orders", 2)
        producer = AuditingProducer(
            broker.bootstrap,
            window_ms=1000,
            datacenter="dc2",
            application="shop",
            acks="all",
            retry_backoff_ms=100,
            request_timeout_ms=3000,
            delivery_timeout_ms=30000,
            linger_ms=5,
        )
        futures: list[asyncio.Future[RecordMetadata]] = []
        sent_values: list[str] = []
        failures = 0
        await producer.start()
        loop = asyncio.get_running_loop()
        restarted = loop.run_in_executor(None, restart, broker)
        started = time.monotonic()
        i = 0
        while time.monotonic() - started < 4 or not restarted.done():
            try:
                futures.append(await producer.send("orders", f"o{i}", key=str(i % 7)))
                sent_values.append(f"o{i}")
            except Exception:
                failures += 1
            i += 1
            await asyncio.sleep(0.005)
        down, up = await restarted
        results = await asyncio.gather(*futures, return_exceptions=True)
        await producer.close()
        acked = [r for r in results if isinstance(r, RecordMetadata)]
        assert len(acked) > 100
        # some records were sent while the broker was down and acknowledged after it came back
        assert any(down <= r.timestamp < up for r in acked), (down, up)
        events = await audit_events(broker.bootstrap)
        assert sum(e["count"] for e in events if e["topic"] == "orders") == len(acked)
        # every acknowledged record is in the log (retries may have written some twice)
        values = {(r.value or b"").decode() for r in await read_topic(broker.bootstrap, "orders")}
        acked_values = {v for v, r in zip(sent_values, results, strict=True) if isinstance(r, RecordMetadata)}
        assert acked_values <= values

    run(go())


def restart(broker: BrokerProcess) -> tuple[int, int]:
    """Kill -9 the broker, start it again; the outage as (down, up) in ms since the epoch."""
    time.sleep(1.0)
    broker.kill9()
    down = int(time.time() * 1000)
    time.sleep(1.5)
    broker.start()
    return down, int(time.time() * 1000)


def test_sync_auditing_producer(broker: BrokerProcess) -> None:
    run(create(broker.bootstrap, "__audit"))
    run(create(broker.bootstrap, "sync-audited", 2))
    with SyncAuditingProducer(broker.bootstrap, window_ms=60000, datacenter="dc3") as producer:
        futures = [producer.send("sync-audited", f"s{i}", key=str(i)) for i in range(50)]
        assert all(f.result(30).offset >= 0 for f in futures)
        producer.flush()
        assert sum(producer.counts().values()) == 50
    events = run(audit_events(broker.bootstrap))
    assert {(e["topic"], e["datacenter"]) for e in events} == {("sync-audited", "dc3")}
    assert sum(e["count"] for e in events) == 50  # one event, or two if a minute began meanwhile
