"""Headwater's group consumer (``Consumer(group_id=...)``) against a real 2-broker cluster shared by
the module: two members split a topic and hand it over when one leaves; a member killed with
kill -9 is replaced after its session timeout; the coordinator broker killed with kill -9 moves the
group without losing commits; a mixed group with a confluent-kafka member splits and hands over;
a pattern subscription picks up a new topic; a static member restarts without a rebalance and a
duplicate of it fences it.
Every wait is for the asserted condition, with a deadline."""

from __future__ import annotations

import asyncio
import itertools
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer as CKConsumer
from confluent_kafka import Producer as CKProducer

from headwater.client import Consumer, FencedInstanceError, RangeAssignor, RoundRobinAssignor
from headwater.client.assignors import Assignment, Subscription
from headwater.testing.zookeeper import ZooKeeperServer
from tests.cluster.harness import Cluster
from tests.cluster.util import create_topic

PARTITIONS = 4
TIMEOUT_S = 90.0
SESSION_MS = 6000
FAST = {"session_timeout_ms": SESSION_MS, "heartbeat_interval_ms": 500, "auto_commit_interval_ms": 500}
_chroot = itertools.count()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, zookeeper: ZooKeeperServer) -> Iterator[Cluster]:
    c = Cluster(
        tmp_path_factory.mktemp("groups"),
        "127.0.0.1",
        zookeeper.port,
        f"/group-consumer{next(_chroot)}",
        2,
        offsets_topic_replication_factor=2,
        offsets_topic_num_partitions=4,
        group_min_session_timeout_ms=1000,
    )
    try:
        yield c.start()
    finally:
        c.close()


def _topic(c: Cluster, prefix: str, partitions: int = PARTITIONS) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    create_topic(c, name, partitions=partitions, rf=2, min_isr=1)
    return name


def _produce(c: Cluster, topic: str, name: str, n: int = 40, partitions: int = PARTITIONS) -> set[str]:
    p = CKProducer({"bootstrap.servers": c.bootstrap, "acks": "all"})
    values = [f"{name}-{i}" for i in range(n)]
    for i, v in enumerate(values):
        p.produce(topic, value=v.encode(), partition=i % partitions)
    assert p.flush(60) == 0
    return set(values)


class Listener:
    def __init__(self) -> None:
        self.events: list[tuple[str, frozenset[tuple[str, int]]]] = []

    def on_partitions_revoked(self, revoked: set[tuple[str, int]]) -> None:
        self.events.append(("revoked", frozenset(revoked)))

    async def on_partitions_assigned(self, assigned: set[tuple[str, int]]) -> None:
        self.events.append(("assigned", frozenset(assigned)))


class Member:
    """A Headwater group consumer and what it read."""

    def __init__(self, c: Cluster, group: str, topics: list[str] | None = None, **kw: Any) -> None:
        pattern = kw.pop("pattern", None)
        self.consumer = Consumer(c.bootstrap, group_id=group, auto_offset_reset="earliest", **{**FAST, **kw})
        self.listener = Listener()
        self.seen: list[str] = []
        self.consumer.subscribe(topics, pattern=pattern, listener=self.listener)

    async def poll(self) -> None:
        self.seen.extend(r.value.decode() for r in await self.consumer.poll(200) if r.value is not None)

    def assigned(self) -> set[int]:
        return {p for _, p in self.consumer.assignment()}


async def _until(what: str, done: Callable[[], bool], *steps: Callable[[], Awaitable[None]]) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        if steps:
            await asyncio.gather(*(s() for s in steps))
        else:
            await asyncio.sleep(0.1)


def _split(*assignments: set[int]) -> bool:
    union: set[int] = set()
    for a in assignments:
        if not a or a & union:
            return False
        union |= a
    return union == set(range(PARTITIONS))


def test_assignors_match_kafkas_and_the_protocol_bytes_round_trip() -> None:
    # the examples of Kafka's RangeAssignor / RoundRobinAssignor javadoc: 2 members, t0 and t1 with 3 partitions
    subs = {"c0": Subscription(("t0", "t1")), "c1": Subscription(("t0", "t1"))}
    counts = {"t0": 3, "t1": 3}
    assert RangeAssignor().assign(counts, subs) == {
        "c0": [("t0", 0), ("t0", 1), ("t1", 0), ("t1", 1)],
        "c1": [("t0", 2), ("t1", 2)],
    }
    assert RoundRobinAssignor().assign(counts, subs) == {
        "c0": [("t0", 0), ("t0", 2), ("t1", 1)],
        "c1": [("t0", 1), ("t1", 0), ("t1", 2)],
    }
    # a member subscribed to fewer topics only gets those
    subs2 = {"a": Subscription(("t0",)), "b": Subscription(("t0", "t1"))}
    assert RoundRobinAssignor().assign({"t0": 2, "t1": 2}, subs2) == {
        "a": [("t0", 0)],
        "b": [("t0", 1), ("t1", 0), ("t1", 1)],
    }
    # ConsumerProtocol v0 bytes: version, topics, user data (null)
    assert Subscription(("ab",)).encode() == bytes.fromhex("00000000000100026162ffffffff")
    a = Assignment((("t", 1), ("t", 0)))
    assert a.encode() == bytes.fromhex("000000000001000174000000020000000000000001ffffffff")
    assert Assignment.decode(a.encode()).partitions == (("t", 0), ("t", 1))
    assert Assignment.decode(b"").partitions == ()


def test_two_members_split_then_one_leaves_and_the_other_takes_over(cluster: Cluster) -> None:
    topic = _topic(cluster, "split")
    group = f"{topic}-g"

    async def scenario() -> None:
        a = Member(cluster, group, [topic])
        b = Member(cluster, group, [topic], partition_assignment_strategy=("roundrobin", "range"))
        try:
            await _until(
                "the two members to split the partitions", lambda: _split(a.assigned(), b.assigned()), a.poll, b.poll
            )
            batch_a = _produce(cluster, topic, "a")
            await _until("batch A read", lambda: set(a.seen) | set(b.seen) >= batch_a, a.poll, b.poll)
            assert sorted(a.seen + b.seen) == sorted(batch_a)  # each record once
            await a.consumer.commit()
            await b.consumer.commit()
            before = list(b.listener.events)
            await a.consumer.close()  # LeaveGroup: no session timeout to wait out
            assert a.listener.events[-1][0] == "revoked"
            batch_b = _produce(cluster, topic, "b")
            b.seen.clear()
            await _until(
                "the remaining member to take over and read batch B",
                lambda: b.assigned() == set(range(PARTITIONS)) and set(b.seen) >= batch_b,
                b.poll,
            )
            assert not set(b.seen) & batch_a, "batch A was read again although it was committed"
            after = b.listener.events[len(before) :]
            assert [e for e, _ in after] == ["revoked", "assigned"] and len(after[-1][1]) == PARTITIONS
            committed = await b.consumer.committed([(topic, p) for p in range(PARTITIONS)])
            assert all(o is not None for o in committed.values())
        finally:
            await b.consumer.close()
            await a.consumer.close()

    asyncio.run(scenario())


MEMBER_SCRIPT = """
import sys
from headwater.client import SyncGroupConsumer
c = SyncGroupConsumer(sys.argv[1], group_id=sys.argv[2], session_timeout_ms=SESSION_MS, heartbeat_interval_ms=500,
                      auto_offset_reset="earliest")
c.subscribe([sys.argv[3]])
while True:
    c.poll(200)
    print("assigned", sorted(p for _, p in c.assignment()), flush=True)
""".replace("SESSION_MS", str(SESSION_MS))


def test_a_member_killed_with_kill9_is_replaced_after_its_session_timeout(cluster: Cluster, tmp_path: Path) -> None:
    topic = _topic(cluster, "kill9")
    group = f"{topic}-g"
    proc = subprocess.Popen(
        [sys.executable, "-c", MEMBER_SCRIPT, cluster.bootstrap, group, topic],
        stdout=subprocess.PIPE,
        stderr=(tmp_path / "member.log").open("w"),
        text=True,
    )

    async def scenario() -> None:
        survivor = Member(cluster, group, [topic])
        try:
            # the other member is a separate process (the blocking facade): wait for a split
            await _until(
                "the two members to split",
                lambda: bool(survivor.assigned()) and len(survivor.assigned()) < PARTITIONS,
                survivor.poll,
            )
            proc.kill()  # SIGKILL: no LeaveGroup, no commit
            proc.wait(10)
            killed_at = time.monotonic()
            await _until(
                "the survivor to get every partition",
                lambda: survivor.assigned() == set(range(PARTITIONS)),
                survivor.poll,
            )
            # not before the session timeout removed the dead member (minus a heartbeat's slack)
            assert time.monotonic() - killed_at >= SESSION_MS / 1000.0 - 1.5
            batch = _produce(cluster, topic, "after")
            await _until("the survivor to read every partition", lambda: set(survivor.seen) >= batch, survivor.poll)
        finally:
            await survivor.consumer.close()

    try:
        asyncio.run(scenario())
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        assert proc.stdout is not None
        proc.stdout.close()


def test_a_mixed_group_with_a_confluent_kafka_member_splits_and_hands_over(cluster: Cluster) -> None:
    topic = _topic(cluster, "mixed")
    group = f"{topic}-g"

    async def scenario() -> None:
        hw = Member(cluster, group, [topic])
        await _until(
            "the Headwater member to be assigned (it leads)", lambda: len(hw.assigned()) == PARTITIONS, hw.poll
        )
        ck = CKConsumer(
            {
                "bootstrap.servers": cluster.bootstrap,
                "group.id": group,
                "auto.offset.reset": "earliest",
                "session.timeout.ms": SESSION_MS,
                "heartbeat.interval.ms": 500,
                "partition.assignment.strategy": "range",
            }
        )
        ck_seen: list[str] = []

        async def ck_poll() -> None:
            msg = await asyncio.to_thread(ck.poll, 0.2)
            if msg is not None and msg.error() is None:
                ck_seen.append(msg.value().decode())

        def ck_assigned() -> set[int]:
            return {tp.partition for tp in ck.assignment()}

        try:
            ck.subscribe([topic])
            # Headwater leads and assigns; librdkafka decodes its assignment bytes
            await _until("the mixed group to split", lambda: _split(hw.assigned(), ck_assigned()), hw.poll, ck_poll)
            batch_a = _produce(cluster, topic, "a")
            await _until("batch A read by both", lambda: set(hw.seen) | set(ck_seen) >= batch_a, hw.poll, ck_poll)
            assert hw.seen and ck_seen and sorted(hw.seen + ck_seen) == sorted(batch_a)
            # each member commits what it read: librdkafka now, while it still owns its partitions (after
            # the rebalance below its stored offsets of revoked partitions are gone: _NO_OFFSET, seen
            # under load), Headwater's on close (auto-commit, LeaveGroup); librdkafka leads and takes over
            await asyncio.to_thread(ck.commit, asynchronous=False)
            await hw.consumer.close()
            batch_b = _produce(cluster, topic, "b")
            ck_seen.clear()
            await _until(
                "the confluent-kafka member to take over and read batch B",
                lambda: ck_assigned() == set(range(PARTITIONS)) and set(ck_seen) >= batch_b,
                ck_poll,
            )
            assert not set(ck_seen) & batch_a, "records the Headwater member had committed were read again"
        finally:
            await asyncio.to_thread(ck.close)
            await hw.consumer.close()

    asyncio.run(scenario())


def test_a_pattern_subscription_picks_up_a_new_topic(cluster: Cluster) -> None:
    prefix = f"pat{uuid.uuid4().hex[:4]}"
    first = _topic(cluster, prefix, partitions=1)

    async def scenario() -> None:
        m = Member(cluster, f"{prefix}-g", pattern=rf"{prefix}-.*", metadata_max_age_ms=1000)
        try:
            await _until("the first topic to be assigned", lambda: m.consumer.assignment() == {(first, 0)}, m.poll)
            second = await asyncio.to_thread(_topic, cluster, prefix, 2)
            await _until(
                "the new topic matching the pattern to be assigned",
                lambda: m.consumer.assignment() == {(first, 0), (second, 0), (second, 1)},
                m.poll,
            )
            batch = await asyncio.to_thread(_produce, cluster, second, "new", 10, 2)
            await _until("the new topic's records", lambda: set(m.seen) >= batch, m.poll)
        finally:
            await m.consumer.close()

    asyncio.run(scenario())


def test_a_static_member_restarts_without_a_rebalance(cluster: Cluster) -> None:
    topic = _topic(cluster, "static")
    group = f"{topic}-g"

    async def scenario() -> None:
        one = Member(cluster, group, [topic], group_instance_id="one", session_timeout_ms=30000)
        two = Member(cluster, group, [topic], group_instance_id="two", session_timeout_ms=30000)
        try:
            await _until(
                "the static members to split", lambda: _split(one.assigned(), two.assigned()), one.poll, two.poll
            )
            mine, events = one.assigned(), list(two.listener.events)
            await one.consumer.close()  # a static member sends no LeaveGroup
            again = Member(cluster, group, [topic], group_instance_id="one", session_timeout_ms=30000)
            try:
                await _until(
                    "the restarted member to get its partitions back",
                    lambda: again.assigned() == mine,
                    again.poll,
                    two.poll,
                )
                for _ in range(10):  # many heartbeats (500 ms) in which a rebalance would reach "two"
                    await asyncio.gather(two.poll(), again.poll())
                assert two.listener.events == events, "the other static member was revoked by the restart"
                # a second process with the same instance id takes it over; the first is fenced
                dup = Member(cluster, group, [topic], group_instance_id="one", session_timeout_ms=30000)
                try:
                    await _until("the duplicate to take the partitions", lambda: dup.assigned() == mine, dup.poll)
                    with pytest.raises(FencedInstanceError):
                        await _until("the first process to be fenced", lambda: False, again.poll, two.poll)
                    assert not again.assigned() and two.listener.events == events
                finally:
                    await dup.consumer.close()
            finally:
                await again.consumer.close()
        finally:
            await two.consumer.close()
            await one.consumer.close()

    asyncio.run(scenario())


def test_the_group_survives_a_kill9_of_its_coordinator(cluster: Cluster) -> None:
    """Last in the module: it restarts the broker it kills."""
    topic = _topic(cluster, "coord")
    group = f"{topic}-g"

    async def scenario() -> None:
        m = Member(cluster, group, [topic], enable_auto_commit=False)
        try:
            await _until("the member to be assigned", lambda: len(m.assigned()) == PARTITIONS, m.poll)
            batch_a = await asyncio.to_thread(_produce, cluster, topic, "a")
            await _until("batch A", lambda: set(m.seen) >= batch_a, m.poll)
            await m.consumer.commit()
            assert m.consumer.group is not None and m.consumer.group.coordinator is not None
            coordinator = m.consumer.group.coordinator
            cluster.kill9(coordinator)
            try:
                batch_b = await asyncio.to_thread(_produce, cluster, topic, "b")
                await _until("batch B after the coordinator died", lambda: set(m.seen) >= batch_a | batch_b, m.poll)
                await m.consumer.commit()  # to the new coordinator
                assert m.consumer.group.coordinator != coordinator
                committed = await m.consumer.committed([(topic, p) for p in range(PARTITIONS)])
                assert sum(o or 0 for o in committed.values()) == len(batch_a) + len(batch_b)
            finally:
                cluster.restart(coordinator)
        finally:
            await m.consumer.close()

    asyncio.run(scenario())
