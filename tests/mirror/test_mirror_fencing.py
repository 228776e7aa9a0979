"""Review finding 4: a member whose ZooKeeper session expires while another member takes its
partition over can no longer commit over the new owner's offsets (real ZooKeeper), and a member
whose connection is suspended does not produce (unit test, fake group)."""

from __future__ import annotations

import asyncio
import time

import pytest
from kazoo.client import KazooClient

import headwater.mirror.copier as copier_module
from headwater.client.errors import KafkaConnectionError
from headwater.mirror.group import FencedError, ZkGroup
from headwater.mirror.mirror import FlowState
from tests.mirror.fakes import wait_until
from tests.mirror.test_mirror_produce_errors import TP, _mirror

TOPIC_PARTITION = ("page-views", 0)


def _expire(group: ZkGroup, hosts: str) -> None:
    """Expire the group's session as the server would after a long pause: another client opens
    the same session and closes it (kazoo's own test harness does the same)."""
    session_id, password = group.zk.client_id
    other = KazooClient(hosts=hosts, client_id=(session_id, password))
    other.start(timeout=15)
    other.stop()
    other.close()


def test_an_expired_member_cannot_commit_over_the_new_owner(zk_connect: str) -> None:
    changes: list[int] = []
    a = ZkGroup(zk_connect, "mirror", "member-a", ["page-views"])
    b = ZkGroup(zk_connect, "mirror", "member-b", ["page-views"])
    a.start(lambda: changes.append(1))
    b.start(lambda: None)
    try:
        assert a.claim(TOPIC_PARTITION)
        assert a.take_over(TOPIC_PARTITION) is None
        a.commit_offset(TOPIC_PARTITION, 100, 1000)
        assert not b.claim(TOPIC_PARTITION)

        _expire(a, zk_connect)
        deadline = time.monotonic() + 60
        while not b.claim(TOPIC_PARTITION):  # a's owner node went with its session
            assert time.monotonic() < deadline, "member-b never got the partition"
            time.sleep(0.1)
        assert b.take_over(TOPIC_PARTITION) == 100
        b.commit_offset(TOPIC_PARTITION, 150, 1050)

        # member-a, back from its pause, still believes it owns the partition: its commit is refused
        deadline = time.monotonic() + 60
        while True:
            try:
                a.commit_offset(TOPIC_PARTITION, 120, 1020)
            except FencedError:
                break
            except Exception:  # still reconnecting with a new session
                assert time.monotonic() < deadline, "member-a's commit neither refused nor possible"
                time.sleep(0.2)
                continue
            raise AssertionError("member-a's commit went through")
        assert a.session_lost
        assert b.read_offset(TOPIC_PARTITION) == 150
        assert b.read_target_offset(TOPIC_PARTITION) == 1050
        b.commit_offset(TOPIC_PARTITION, 160, 1060)  # the new owner goes on
        assert b.read_offset(TOPIC_PARTITION) == 160
        with pytest.raises(FencedError):
            a.commit_offset(TOPIC_PARTITION, 170, 1070)  # and stays fenced
    finally:
        a.stop()
        b.stop()


def test_the_lease_runs_out_while_zookeeper_cannot_be_reached(zk_connect: str) -> None:
    """A member paused or cut off from ZooKeeper stops producing within LEASE_S (well before its
    session can expire), and may produce again once a round trip succeeds."""
    import headwater.mirror.group as group_module

    a = ZkGroup(zk_connect, "mirror", "member-a", ["page-views"])
    a.start(lambda: None)
    try:
        deadline = time.monotonic() + 30
        while not a.may_produce():
            assert time.monotonic() < deadline, "no lease after joining"
            time.sleep(0.05)
        a._lease_stop.set()  # no round trip gets through any more (as if paused, or ZooKeeper cut off)
        assert a._lease_thread is not None
        a._lease_thread.join(15)
        cut = time.monotonic()
        while a.may_produce():
            time.sleep(0.05)
        assert time.monotonic() - cut <= group_module.LEASE_S + 2.0
        assert group_module.LEASE_S < group_module.SESSION_TIMEOUT_S / 2
    finally:
        a.stop()


def test_a_suspended_member_does_not_produce(monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[float] = []

    async def produce_raw(*args: object, **kwargs: object) -> int:
        sent.append(time.monotonic())
        return 0

    monkeypatch.setattr(copier_module, "produce_raw", produce_raw)

    async def main() -> None:
        m, f = _mirror()
        group = f.group
        group.suspended = True  # kazoo said SUSPENDED
        await m._rebalance(f)
        c = f.copiers[TP]
        await asyncio.sleep(1.0)
        assert sent == [] and c.next_offset == 10
        ok, why = m.health()
        assert not ok and "dc1->agg: no recent contact with the source ZooKeeper (the session may expire)" in why
        group.suspended = False  # CONNECTED, same session
        await wait_until(lambda: c.next_offset == 11, "the batch to be produced after the reconnect")
        assert len(sent) == 1
        assert m.health()[0]
        await m._shutdown()

    asyncio.run(main())


def test_a_retried_produce_waits_for_the_lease(monkeypatch: pytest.MonkeyPatch) -> None:
    """test_mirror_under_faults' duplicate: a copier retrying a produce (the target leader down)
    is paused past its session meanwhile; another member takes the partition over and copies
    on. When the paused copier runs again, its retry must not go out before the lease is back
    (it never is for a lost session: the copier is stopped) -- sent, the stale batch lands at
    the target's end a second time, out of order."""
    sent: list[bool] = []
    state: dict[str, FlowState] = {}

    async def produce_raw(*args: object, **kwargs: object) -> int:
        group = state["flow"].group
        sent.append(group.suspended)
        if len(sent) == 1:
            group.suspended = True  # paused while it backs off: the session may expire meanwhile
            raise KafkaConnectionError("could not connect to the target leader")
        return 0

    monkeypatch.setattr(copier_module, "produce_raw", produce_raw)

    async def main() -> None:
        m, f = _mirror()
        state["flow"] = f
        await m._rebalance(f)
        c = f.copiers[TP]
        await wait_until(lambda: len(sent) == 1, "the first produce")
        await asyncio.sleep(1.5)  # many times the first retry's backoff (0.1 s)
        assert sent == [False], "a produce was retried without the lease"
        assert c.next_offset == 10
        f.group.suspended = False  # back within the session: the retry goes out
        await wait_until(lambda: c.next_offset == 11, "the batch to be produced once the lease is back")
        assert sent == [False, False]
        await m._shutdown()

    asyncio.run(main())
