"""Headwater's own transactional producer (issue 41; lib/headwater/client/transactions.py) against
one real 3-broker cluster: commits and aborts as a read_committed librdkafka consumer sees them,
consume-transform-produce with ``send_offsets_to_transaction``, fencing by a second producer of the
same transactional id, and the AuditingProducer's counts of committed transactions only."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, TopicPartition

from headwater.client import AuditingProducer, Producer
from headwater.client.transactions import ProducerFencedError, TransactionState
from headwater.protocol.errors import KafkaError
from headwater.testing.cluster import LocalCluster
from headwater.testing.zookeeper import ZooKeeperServer
from tests.compat.test_transactions import OVERRIDES, create_topics, read_all


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, zookeeper: ZooKeeperServer) -> Iterator[LocalCluster]:
    tmp = tmp_path_factory.mktemp("hw-txn")
    with LocalCluster(tmp, 3, zk_connect=f"{zookeeper.connect}/hw-txn-{time.time_ns()}", overrides=OVERRIDES) as c:
        yield c


def test_commit_and_abort_seen_by_read_committed(cluster: LocalCluster) -> None:
    create_topics(cluster.bootstrap, "hw-orders")
    committed: list[bytes] = []
    aborted: list[bytes] = []

    async def run() -> None:
        async with Producer(cluster.bootstrap, transactional_id="hw-orders-app", linger_ms=5) as p:
            with pytest.raises(KafkaError, match="INVALID_TXN_STATE"):
                await p.send("hw-orders", b"before-init")
            await p.init_transactions()
            with pytest.raises(KafkaError, match="outside a transaction"):
                await p.send("hw-orders", b"no-txn")
            for t in range(6):
                p.begin_transaction()
                values = [f"t{t}-r{i}".encode() for i in range(20)]
                futs = [await p.send("hw-orders", v, partition=i % 2) for i, v in enumerate(values)]
                if t % 3 == 2:
                    await p.flush()
                    assert all(f.done() for f in futs)  # written before the abort
                    await p.abort_transaction()
                    aborted.extend(values)
                else:
                    await p.commit_transaction()
                    committed.extend(values)
                assert p.transaction is not None and p.transaction.state is TransactionState.READY

    asyncio.run(run())
    seen = read_all(cluster.bootstrap, "hw-orders", 2, "read_committed")
    assert sorted(seen) == sorted(committed), "every committed record once, no aborted one"
    everything = read_all(cluster.bootstrap, "hw-orders", 2, "read_uncommitted")
    assert set(aborted) <= set(everything), "the aborted records were written"


def test_consume_transform_produce_with_send_offsets(cluster: LocalCluster) -> None:
    create_topics(cluster.bootstrap, "hw-in", "hw-out")
    n = 60

    async def fill() -> None:
        async with Producer(cluster.bootstrap, acks="all") as p:
            for i in range(n):
                await p.send("hw-in", f"v{i}".encode(), partition=i % 2)
            await p.flush()

    asyncio.run(fill())
    c = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": "hw-ctp",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    c.assign([TopicPartition("hw-in", 0, 0), TopicPartition("hw-in", 1, 0)])

    async def loop() -> None:
        async with Producer(cluster.bootstrap, transactional_id="hw-ctp-app") as p:
            await p.init_transactions()
            done = 0
            rnd = 0
            deadline = time.monotonic() + 90
            while done < n:
                assert time.monotonic() < deadline, f"only {done} of {n} records transformed"
                msgs = [m for m in c.consume(20, 1.0) if not m.error()]
                if not msgs:
                    continue
                p.begin_transaction()
                for m in msgs:
                    await p.send("hw-out", b"T:" + m.value(), partition=m.partition())
                offsets = {("hw-in", m.partition()): m.offset() + 1 for m in msgs}
                await p.send_offsets_to_transaction(offsets, "hw-ctp")
                if rnd == 1:  # one round aborted on purpose: its outputs and offsets vanish
                    await p.abort_transaction()
                    committed = c.committed([TopicPartition("hw-in", 0), TopicPartition("hw-in", 1)], timeout=30)
                    for tp in committed:
                        c.seek(TopicPartition("hw-in", tp.partition, max(tp.offset, 0)))
                else:
                    await p.commit_transaction()
                    done += len(msgs)
                rnd += 1

    try:
        asyncio.run(loop())
    finally:
        c.close()
    out = read_all(cluster.bootstrap, "hw-out", 2, "read_committed")
    assert sorted(out) == sorted(f"T:v{i}".encode() for i in range(n)), "each input exactly once"
    check = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "hw-ctp"})
    try:
        offsets = check.committed([TopicPartition("hw-in", 0), TopicPartition("hw-in", 1)], timeout=30)
    finally:
        check.close()
    assert [o.offset for o in offsets] == [n // 2, n // 2], "the group's offsets committed with the outputs"


def test_abort_without_flush_fails_the_records_not_sent(cluster: LocalCluster) -> None:
    """Records still queued when abort_transaction() is called are failed, not sent (Java's
    abortUndrainedBatches), and the abort returns: nothing of the transaction is visible."""
    create_topics(cluster.bootstrap, "hw-undrained")

    async def run() -> None:
        async with Producer(cluster.bootstrap, transactional_id="hw-undrained-app", linger_ms=10_000) as p:
            await p.init_transactions()
            p.begin_transaction()
            futs = [await p.send("hw-undrained", f"a{i}".encode(), partition=i % 2) for i in range(10)]
            await p.abort_transaction()
            for f in futs:
                with pytest.raises(KafkaError, match="aborted"):
                    await f
            p.begin_transaction()
            await p.send("hw-undrained", b"kept", partition=0)
            await p.commit_transaction()

    asyncio.run(run())
    assert read_all(cluster.bootstrap, "hw-undrained", 2, "read_committed") == [b"kept"]


def test_second_producer_fences_the_first(cluster: LocalCluster) -> None:
    create_topics(cluster.bootstrap, "hw-fence")

    async def run() -> None:
        async with (
            Producer(cluster.bootstrap, transactional_id="hw-fence-app") as old,
            Producer(cluster.bootstrap, transactional_id="hw-fence-app") as new,
        ):
            await old.init_transactions()
            old.begin_transaction()
            await (await old.send("hw-fence", b"zombie", partition=0))
            await new.init_transactions()  # aborts the zombie's transaction, bumps the epoch
            new.begin_transaction()
            await new.send("hw-fence", b"live", partition=0)
            await new.commit_transaction()
            with pytest.raises(ProducerFencedError, match="fenced"):
                await old.commit_transaction()
            assert old.transaction is not None and old.transaction.state is TransactionState.FATAL_ERROR
            with pytest.raises(ProducerFencedError):
                old.begin_transaction()

    asyncio.run(run())
    assert read_all(cluster.bootstrap, "hw-fence", 2, "read_committed") == [b"live"]


def test_auditing_producer_counts_committed_transactions_only(cluster: LocalCluster) -> None:
    create_topics(cluster.bootstrap, "hw-audited")
    create_topics(cluster.bootstrap, "hw-audit-events", partitions=1)

    async def run() -> dict[tuple[str, int], int]:
        a = AuditingProducer(
            cluster.bootstrap,
            transactional_id="hw-audited-app",
            audit_topic="hw-audit-events",
            window_ms=3_600_000,
            datacenter="dc1",
        )
        await a.start()
        try:
            await a.init_transactions()
            for t in range(3):
                a.begin_transaction()
                for i in range(10):
                    await a.send("hw-audited", f"t{t}-{i}".encode(), partition=i % 2)
                if t == 1:
                    await a.flush()
                    await a.abort_transaction()
                else:
                    await a.commit_transaction()
            return a.counts()
        finally:
            await a.close()

    counts = asyncio.run(run())
    assert sum(counts.values()) == 20, counts
    events = [json.loads(v) for v in read_all(cluster.bootstrap, "hw-audit-events", 1, "read_committed")]
    assert sum(e["count"] for e in events) == 20, events
    data = read_all(cluster.bootstrap, "hw-audited", 2, "read_committed")
    assert len(data) == 20, "the audit balances with what read_committed consumers see"
