"""Review findings 2 and 3: a copier that dies is seen and restarted, and one topic that cannot be
planned neither hides nor blocks the others (unit tests: real Mirror, Copier and Supervisor, fake
group and source)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from headwater.client.errors import KafkaConnectionError, OffsetOutOfRangeError
from headwater.client.raw import RawPartition
from headwater.mirror.copier import Copier
from headwater.mirror.group import assign
from headwater.mirror.mirror import FlowState
from headwater.mirror.plan import TopicPlan
from headwater.protocol.errors import ErrorCode, KafkaError
from tests.mirror.fakes import FakeFetcher, FakeGroup, fake_mirror, wait_until

TP = ("page-views", 0)


def _failures(registry: object, flow: str) -> float:
    return registry.get_sample_value("headwater_mirror_task_failures_total", {"flow": flow}) or 0.0  # type: ignore[attr-defined]


def test_a_copier_that_dies_is_unhealthy_restarted_and_still_handed_over(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The review's trigger: the fetch says OFFSET_OUT_OF_RANGE and the ListOffsets of the reset
    fails (the source leader is moving). Before: the task died unseen, /healthz said 200, and the
    hand-over raised before commit and release."""
    broken = {"reset": True}

    async def reset_offset(self: Copier) -> int:
        if broken["reset"]:
            raise KafkaConnectionError("connection to broker 127.0.0.1:1 was closed")
        return 7

    async def answer(tp: tuple[str, int], offset: int) -> RawPartition:
        if offset < 7:
            raise OffsetOutOfRangeError(tp[0], tp[1], offset)
        return await FakeFetcher.idle(tp, offset)

    monkeypatch.setattr(Copier, "reset_offset", reset_offset)

    async def main() -> None:
        group = FakeGroup("mirror-a", {"page-views": 1})
        group.offsets[TP] = 3
        m, f = fake_mirror(group, FakeFetcher(answer))

        async def plan(f: FlowState, topic: str, n: int) -> TopicPlan:
            return TopicPlan(topic, n, n)

        m._plan_topic = plan  # type: ignore[method-assign]
        await m._rebalance(f)
        assert TP in f.copiers
        unit = m.supervisor.unit(f.copiers[TP].unit_name)
        assert unit is not None
        await wait_until(lambda: unit.state == "restarting", "the copier to fail")
        ok, why = m.health()
        assert not ok
        assert "dc1->agg page-views-0: restarting: KafkaConnectionError" in why
        assert _failures(m.metrics.registry, "dc1->agg") >= 1
        assert any(
            r.levelno == logging.ERROR
            and "dc1->agg page-views-0" in r.getMessage()
            and "next offset 3" in r.getMessage()
            for r in caplog.records
        )

        broken["reset"] = False  # the source is back: the supervisor's restart recovers the copier
        await wait_until(lambda: f.copiers[TP].next_offset == 7 and m.health()[0], "the copier to recover")

        # a second member takes the partition: committed and released although the copier had failed
        broken["reset"] = True
        f.copiers[TP].next_offset = 3
        await wait_until(lambda: unit.state == "restarting", "the copier to fail again")
        other = next(f"mirror-{i}" for i in range(50) if assign([TP], ["mirror-a", f"mirror-{i}"], f"mirror-{i}"))
        group.member_list.append(other)
        f.copiers[TP].next_offset = 5  # what the target acknowledged before it failed
        await m._rebalance(f)
        assert TP not in f.copiers
        assert group.released == [TP]
        assert group.offsets[TP] == 5
        assert m.health()[0], "a partition handed over is no longer this process's problem"
        await m._shutdown()
        assert group.stopped
        assert m.supervisor.running() == []

    asyncio.run(main())


def test_shutdown_commits_every_partition_although_one_copier_failed() -> None:
    async def main() -> None:
        group = FakeGroup("m1", {"t": 3})

        async def answer(tp: tuple[str, int], offset: int) -> RawPartition:
            if tp == ("t", 1):
                raise RuntimeError("a bug in the copy loop")
            return await FakeFetcher.idle(tp, offset)

        m, f = fake_mirror(group, FakeFetcher(answer))
        for p in range(3):
            group.offsets[("t", p)] = 10

        async def plan(f: FlowState, topic: str, n: int) -> TopicPlan:
            return TopicPlan(topic, n, n)

        m._plan_topic = plan  # type: ignore[method-assign]
        await m._rebalance(f)
        unit = m.supervisor.unit(f.copiers[("t", 1)].unit_name)
        assert unit is not None
        await wait_until(lambda: unit.state == "restarting", "the copier of t-1 to fail")
        assert "t-1: restarting: RuntimeError: a bug in the copy loop" in m.health()[1]
        for p in range(3):
            f.copiers[("t", p)].next_offset = 20 + p
        t0 = asyncio.get_running_loop().time()
        await m._shutdown()
        assert asyncio.get_running_loop().time() - t0 < 10, "no 60 s wait for a copier in its restart backoff"
        assert {tp: o for tp, o in group.offsets.items()} == {("t", p): 20 + p for p in range(3)}
        assert sorted(group.released) == [("t", p) for p in range(3)]
        assert group.stopped

    asyncio.run(main())


def test_a_topic_that_cannot_be_planned_is_reported_and_does_not_block_the_others() -> None:
    """The target refuses topic B (INVALID_CONFIG, e.g. LogAppendTime). Before: the whole rebalance
    raised every second, A's partitions owed to a new member were never released, and /healthz
    answered 200."""

    async def main() -> None:
        owners: dict[tuple[str, int], str] = {}
        group = FakeGroup("m1", {"a": 8, "b": 2}, owners)
        group.offsets.update({("a", p): 0 for p in range(8)})
        m, f = fake_mirror(group, FakeFetcher())

        async def plan(f: FlowState, topic: str, n: int) -> TopicPlan:
            if topic == "b":
                raise KafkaError(ErrorCode.INVALID_CONFIG, "only CreateTime is supported")
            return TopicPlan(topic, n, n)

        m._plan_topic = plan  # type: ignore[method-assign]
        await m._rebalance(f)
        assert set(f.copiers) == {("a", p) for p in range(8)}
        ok, why = m.health()
        assert not ok
        assert "dc1->agg: topic b: cannot be mirrored (retrying): KafkaError: INVALID_CONFIG" in why
        assert m.metrics.registry.get_sample_value(
            "headwater_mirror_topic_plan_failures_total", {"flow": "dc1->agg", "topic": "b"}
        )

        group.member_list.append("m2")
        await m._rebalance(f)
        theirs = assign([("a", p) for p in range(8)], ["m1", "m2"], "m2")
        assert theirs, "rendezvous hashing gives m2 some of eight partitions"
        assert sorted(group.released) == sorted(theirs)
        assert set(f.copiers) == {("a", p) for p in range(8)} - theirs
        await m._shutdown()

    asyncio.run(main())


def test_shutdown_without_a_zookeeper_session_does_not_wait_for_one() -> None:
    """A commit could neither be fenced nor reach ZooKeeper: the copiers stop, nothing is committed."""

    async def main() -> None:
        group = FakeGroup("m1", {"t": 2})
        m, f = fake_mirror(group, FakeFetcher())
        for p in range(2):
            group.offsets[("t", p)] = 10

        async def plan(f: FlowState, topic: str, n: int) -> TopicPlan:
            return TopicPlan(topic, n, n)

        m._plan_topic = plan  # type: ignore[method-assign]
        await m._rebalance(f)
        for c in f.copiers.values():
            c.next_offset = 20
        group.suspended = True  # the source ZooKeeper is gone
        await asyncio.wait_for(m._shutdown(), 30)
        assert group.commits == [] and group.released == []
        assert m.supervisor.running() == []

    asyncio.run(main())
