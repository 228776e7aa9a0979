"""Topic configs (issue 9, defect 2 and the compact policy): a value the log could not use is refused
at CreateTopics with INVALID_CONFIG, so it never reaches LeaderAndIsr, Produce or the ISR task; and a
compacted topic's data is not deleted by retention (until compaction exists)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest
from confluent_kafka import Producer

from headwater.client.admin import Admin, NewTopic
from headwater.client.sync import SyncConsumer
from headwater.protocol.errors import ErrorCode
from tests.harness.broker import BrokerProcess

BAD = [
    {"segment.bytes": "10"},
    {"segment.ms": "0"},
    {"flush.messages": "-1"},
    {"min.insync.replicas": "abc"},
    {"min.insync.replicas": "0"},
    {"cleanup.policy": "shred"},
    {"unclean.leader.election.enable": "maybe"},
    {"min.cleanable.dirty.ratio": "2"},
]


@pytest.mark.parametrize("configs", BAD, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
def test_a_config_the_log_cannot_use_is_refused(broker: BrokerProcess, configs: dict[str, str]) -> None:
    async def main() -> None:
        async with Admin(broker.bootstrap) as admin:
            result = await admin.create_topics([NewTopic("bad", 1, 1, configs), NewTopic("good", 1, 1)])
            error = result["bad"]
            assert error is not None and error.code is ErrorCode.INVALID_CONFIG, result
            assert next(iter(configs)) in error.message
            assert result["good"] is None  # the request's other topic is created as usual
            await admin.wait_for_topic("good")
            assert "bad" not in await admin.list_topics()

    asyncio.run(main())


def test_retention_spares_compacted_topics(broker_factory: Callable[..., BrokerProcess]) -> None:
    b = broker_factory(0, log_roll_ms=500, log_retention_ms=2000, log_retention_check_interval_ms=300)

    async def create() -> None:
        async with Admin(b.bootstrap) as admin:
            for name, policy in (("deleted", "delete"), ("compacted", "compact")):
                await admin.create_topic(name, 1, 1, {"cleanup.policy": policy})

    asyncio.run(create())
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0})
    for topic in ("deleted", "compacted"):
        for i in range(10):
            p.produce(topic, key=f"k{i}".encode(), value=b"v", timestamp=int(time.time() * 1000))
    assert p.flush(30) == 0
    with SyncConsumer(b.bootstrap) as c:
        deadline = time.monotonic() + 60
        # The same retention runs over both: once the delete-policy topic has expired...
        while c.offsets_before("deleted", 0, -2, 1) != [10]:
            assert time.monotonic() < deadline, "the delete-policy topic never expired"
            time.sleep(0.2)
        # ...the compacted one still holds everything.
        assert c.offsets_before("compacted", 0, -2, 1) == [0]
        assert c.offsets_before("compacted", 0, -1, 1) == [10]
