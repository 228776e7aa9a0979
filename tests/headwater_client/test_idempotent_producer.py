"""Headwater's producer with enable_idempotence against a real broker: producer id and sequences on
the wire, and a retry after a lost answer written once and answered with the original offset."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from headwater.client import Consumer, Producer
from headwater.client.connection import BrokerConnection
from headwater.client.errors import KafkaTimeoutError
from headwater.protocol.apis import PRODUCE
from headwater.protocol.records.header import read_header
from tests.broker.test_bad_input import _latest
from tests.broker.wire import Wire
from tests.harness.broker import BrokerProcess
from tests.headwater_client.test_cli import fails, ok
from tests.headwater_client.test_client import create, read_all, run

pytestmark = [pytest.mark.timeout(120)]


def test_idempotence_needs_acks_all() -> None:
    with pytest.raises(ValueError, match="acks=all"):
        Producer("127.0.0.1:1", enable_idempotence=True, acks=1)
    assert Producer("127.0.0.1:1", enable_idempotence=True).acks == -1


def test_batches_carry_the_producer_id_and_consecutive_sequences(broker: BrokerProcess) -> None:
    seen: list[tuple[int, int, int, int]] = []  # (partition, producer id, base sequence, records)
    real_request = BrokerConnection.request

    async def spy(self: BrokerConnection, api: Any, body: Any, version: Any = None, **kw: Any) -> Any:
        if api is PRODUCE:
            for t in body["topics"]:
                for p in t["partitions"]:
                    h = read_header(p["records"])
                    seen.append((p["partition_index"], h.producer_id, h.base_sequence, h.records_count))
        return await real_request(self, api, body, version, **kw)

    async def go() -> None:
        await create(broker.bootstrap, "idem-seq", 2)
        async with Producer(broker.bootstrap, enable_idempotence=True, linger_ms=0, batch_size=200) as p:
            futures = [await p.send("idem-seq", f"v{i}".encode() * 20, partition=i % 2) for i in range(40)]
            for f in futures:
                await f

    BrokerConnection.request = spy  # type: ignore[method-assign]
    try:
        run(go())
    finally:
        BrokerConnection.request = real_request  # type: ignore[method-assign]
    assert seen and len({pid for _, pid, _, _ in seen}) == 1 and seen[0][1] >= 0
    for part in (0, 1):
        expected = 0
        for q, _, seq, n in seen:
            if q == part:
                assert seq == expected, f"partition {part}: sequence {seq}, expected {expected}"
                expected += n
        assert expected == 20


def test_a_retry_after_a_lost_answer_is_written_once(broker: BrokerProcess) -> None:
    real_request = BrokerConnection.request
    dropped = []

    async def lose_first_answer(self: BrokerConnection, api: Any, body: Any, version: Any = None, **kw: Any) -> Any:
        response = await real_request(self, api, body, version, **kw)
        if api is PRODUCE and not dropped:
            dropped.append(response)  # the broker wrote it; the producer never hears
            raise KafkaTimeoutError("the answer was lost (test)")
        return response

    async def go() -> tuple[int, list[bytes | None]]:
        await create(broker.bootstrap, "idem-retry")
        BrokerConnection.request = lose_first_answer  # type: ignore[method-assign]
        try:
            async with Producer(broker.bootstrap, enable_idempotence=True, retry_backoff_ms=10) as p:
                offset = (await p.send_and_wait("idem-retry", b"only-once")).offset
        finally:
            BrokerConnection.request = real_request  # type: ignore[method-assign]
        records = await read_all(broker.bootstrap, "idem-retry", 0, 1)
        return offset, [r.value for r in records]

    offset, values = run(go())
    assert dropped, "the first answer was not dropped: the test did not test a retry"
    assert offset == 0
    assert values == [b"only-once"]
    assert _latest(Wire(broker.bootstrap), "idem-retry") == 1, "the retry must not be written again"


def test_console_producer_with_enable_idempotence(broker: BrokerProcess) -> None:
    bs = broker.bootstrap
    ok("topics", "-b", bs, "create", "--topic", "cli-idem")
    ok("produce", "-b", bs, "--topic", "cli-idem", "--enable-idempotence", stdin="a\nb\nc\n")
    out = ok(
        "consume", "-b", bs, "--topic", "cli-idem", "--from-beginning", "--max-messages", "3", "--timeout-ms", "10000"
    )
    assert out.splitlines() == ["a", "b", "c"]
    data = b"".join(f.read_bytes() for f in sorted((broker.log_dir / "cli-idem-0").glob("*.log")))
    assert read_header(data).producer_id >= 0
    assert "--enable-idempotence needs --acks all" in fails(
        "produce", "-b", bs, "--topic", "cli-idem", "--enable-idempotence", "--acks", "1", stdin="x\n"
    )


def test_a_producer_forgotten_after_retention_starts_again_under_a_new_id(broker: BrokerProcess) -> None:
    """Retention deletes every batch of an idle idempotent producer, so the broker forgets it; its
    next batch (sequence 1) gets UNKNOWN_PRODUCER_ID and is sent again under a new producer id."""

    async def go() -> tuple[list[int], list[bytes | None]]:
        await create(broker.bootstrap, "idem-forgotten", segment_bytes="1024", retention_bytes="1")
        async with Producer(broker.bootstrap, enable_idempotence=True) as idle:
            first = (await idle.send_and_wait("idem-forgotten", b"first")).offset
            pid_before = idle._producer_id
            async with Producer(broker.bootstrap, linger_ms=0) as other:  # rolls segments past it
                for i in range(40):
                    await other.send_and_wait("idem-forgotten", f"filler-{i}".encode() * 10)
            async with Consumer(broker.bootstrap) as consumer:
                deadline = asyncio.get_running_loop().time() + 30
                while await consumer.earliest_offset("idem-forgotten", 0) <= first:
                    assert asyncio.get_running_loop().time() < deadline, "retention did not delete the batch"
                    await asyncio.sleep(0.2)
            second = await idle.send_and_wait("idem-forgotten", b"second")
            assert idle._producer_id not in (-1, pid_before), "the producer did not take a new id"
            end = second.offset
        records = await read_all(broker.bootstrap, "idem-forgotten", 0, 1, offset=end)
        return [first, end], [r.value for r in records]

    (first, end), values = run(go())
    assert end > first and values == [b"second"]
