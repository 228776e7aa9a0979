"""Stock clients' consumer groups (``subscribe()`` with a group id) against one real broker.

Each client's scenario is the same: two consumers of one group split a 4-partition topic, read
batch A and commit; one leaves; the other takes over every partition and reads batch B from the
committed offsets -- all of B, nothing of A again. kcat -G resumes from its group's offsets
across runs. Every wait is for the condition asserted (assignments, records), never a fixed sleep.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer

from tests.compat.test_stock_clients import create_topic, produce_confluent
from tests.harness.broker import BrokerProcess

PARTITIONS = 4
PER_BATCH = 40
TIMEOUT_S = 60.0

# One broker: the offsets topic cannot have Kafka's default replication factor of 3.
GROUP_BROKER = {
    "offsets_topic_replication_factor": 1,
    "offsets_topic_num_partitions": 3,
    "group_initial_rebalance_delay_ms": 0,
}


@pytest.fixture
def group_broker(broker_factory: Callable[..., BrokerProcess]) -> BrokerProcess:
    return broker_factory(0, **GROUP_BROKER)


def _batch(bootstrap: str, topic: str, name: str) -> set[str]:
    values = [f"{name}-{i}" for i in range(PER_BATCH)]
    produce_confluent(
        bootstrap, topic, [{"value": v.encode(), "partition": i % PARTITIONS} for i, v in enumerate(values)]
    )
    return set(values)


def _until(what: str, done: Callable[[], bool], step: Callable[[], None]) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        step()


def _split_and_take_over(
    bootstrap: str,
    topic: str,
    poll: Callable[[Any], list[str]],
    assigned: Callable[[Any], set[int]],
    commit: Callable[[Any], None],
    close: Callable[[Any], None],
    consumers: tuple[Any, Any],
) -> None:
    """The scenario above, for any client given as five small functions."""
    c1, c2 = consumers
    seen: list[str] = []

    def both() -> None:
        seen.extend(poll(c1))
        seen.extend(poll(c2))

    def split() -> bool:
        a1, a2 = assigned(c1), assigned(c2)
        return bool(a1) and bool(a2) and not a1 & a2 and a1 | a2 == set(range(PARTITIONS))

    _until("the two consumers to split the partitions", split, both)
    batch_a = _batch(bootstrap, topic, "a")
    _until("the two consumers to read batch A", lambda: set(seen) >= batch_a, both)
    assert split()
    assert sorted(seen) == sorted(batch_a)  # each record once: the split is disjoint
    commit(c1)
    commit(c2)
    close(c1)
    batch_b = _batch(bootstrap, topic, "b")
    after: list[str] = []
    _until(
        "the remaining consumer to take over and read batch B",
        lambda: assigned(c2) == set(range(PARTITIONS)) and set(after) >= batch_b,
        lambda: after.extend(poll(c2)),
    )
    # B's records of the survivor's own partitions may come twice (read before the rebalance,
    # not committed, read again from the committed offset: at-least-once); A's never again.
    assert not set(after) & batch_a, "the survivor re-read records its group had committed"
    assert set(after) == batch_b


def _topic(prefix: str, bootstrap: str) -> tuple[str, str]:
    topic = f"{prefix}-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, partitions=PARTITIONS)
    return topic, f"{topic}-group"


def test_confluent_kafka_group_split_and_take_over(group_broker: BrokerProcess) -> None:
    topic, group = _topic("grp-ck", group_broker.bootstrap)

    def consumer(name: str) -> Consumer:
        c = Consumer(
            {
                "bootstrap.servers": group_broker.bootstrap,
                "group.id": group,
                "client.id": name,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "session.timeout.ms": 6000,
                "heartbeat.interval.ms": 500,
            }
        )
        c.subscribe([topic])
        return c

    def poll(c: Consumer) -> list[str]:
        msg = c.poll(0.2)
        if msg is None:
            return []
        assert msg.error() is None, msg.error()
        return [msg.value().decode()]

    _split_and_take_over(
        group_broker.bootstrap,
        topic,
        poll,
        lambda c: {tp.partition for tp in c.assignment()},
        lambda c: c.commit(asynchronous=False),
        lambda c: c.close(),
        (consumer("c1"), consumer("c2")),
    )


def test_kafka_python_group_split_and_take_over(group_broker: BrokerProcess) -> None:
    from kafka import KafkaConsumer

    topic, group = _topic("grp-kp", group_broker.bootstrap)

    def consumer(name: str) -> KafkaConsumer:
        return KafkaConsumer(
            topic,
            bootstrap_servers=group_broker.bootstrap,
            group_id=group,
            client_id=name,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=6000,
            heartbeat_interval_ms=500,
        )

    def poll(c: KafkaConsumer) -> list[str]:
        got = c.poll(timeout_ms=200)
        return [r.value.decode() for records in got.values() for r in records]

    c1, c2 = consumer("c1"), consumer("c2")
    try:
        _split_and_take_over(
            group_broker.bootstrap,
            topic,
            poll,
            lambda c: {tp.partition for tp in c.assignment()},
            lambda c: c.commit(),
            lambda c: c.close(),
            (c1, c2),
        )
    finally:
        c2.close()
        c1.close()


def test_aiokafka_group_split_and_take_over(group_broker: BrokerProcess) -> None:
    from aiokafka import AIOKafkaConsumer

    topic, group = _topic("grp-aio", group_broker.bootstrap)

    async def scenario() -> None:
        loop = asyncio.get_running_loop()

        async def consumer(name: str) -> AIOKafkaConsumer:
            c = AIOKafkaConsumer(
                topic,
                bootstrap_servers=group_broker.bootstrap,
                group_id=group,
                client_id=name,
                auto_offset_reset="earliest",
                enable_auto_commit=False,
                session_timeout_ms=6000,
                heartbeat_interval_ms=500,
            )
            await c.start()
            return c

        c1, c2 = await consumer("c1"), await consumer("c2")

        def run(coro: Any) -> Any:
            # the scenario's helpers are synchronous: step the loop from a worker thread
            return asyncio.run_coroutine_threadsafe(coro, loop).result(TIMEOUT_S)

        async def getmany(c: AIOKafkaConsumer) -> list[str]:
            got = await c.getmany(timeout_ms=200)
            return [r.value.decode() for records in got.values() for r in records]

        try:
            await asyncio.to_thread(
                _split_and_take_over,
                group_broker.bootstrap,
                topic,
                lambda c: run(getmany(c)),
                lambda c: {tp.partition for tp in c.assignment()},
                lambda c: run(c.commit()),
                lambda c: run(c.stop()),
                (c1, c2),
            )
        finally:
            await c2.stop()
            await c1.stop()

    asyncio.run(scenario())


def test_kcat_balanced_consumer_resumes_from_committed_offsets(group_broker: BrokerProcess) -> None:
    kcat = shutil.which("kcat")
    assert kcat, "kcat is not installed (make system-deps)"
    topic, group = _topic("grp-kcat", group_broker.bootstrap)

    def run_group(count: int) -> set[str]:
        # -G: librdkafka's balanced consumer (subscribe); it commits what it read when it exits.
        # (kcat's -o would assign that offset over the committed one: auto.offset.reset instead.)
        args = ["-G", group, "-X", "auto.offset.reset=earliest", "-c", str(count), "-f", "%s\n", topic]
        out = subprocess.run(
            [kcat, "-b", group_broker.bootstrap, *args],
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        )
        assert out.returncode == 0, out.stderr
        return set(out.stdout.split())

    batch_a = _batch(group_broker.bootstrap, topic, "a")
    assert run_group(PER_BATCH) == batch_a
    batch_b = _batch(group_broker.bootstrap, topic, "b")
    assert run_group(PER_BATCH) == batch_b  # from the group's committed offsets, not the beginning
