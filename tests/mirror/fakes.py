"""Fakes for the mirror's unit tests: a group in memory, a scripted source fetcher, a mirror wired to them.

Only the parts around the component under test are fake: the Mirror, its Copier, the Supervisor
and the HealthRegistry are the real ones.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, cast

from headwater.client.raw import RawPartition
from headwater.mirror.config import parse
from headwater.mirror.mirror import FlowState, Mirror

TopicPartition = tuple[str, int]


class FakeGroup:
    """ZkGroup's interface in memory; ``owners`` may be shared by several members' groups."""

    def __init__(
        self, consumer_id: str, topics: dict[str, int], owners: dict[TopicPartition, str] | None = None
    ) -> None:
        self.consumer_id = consumer_id
        self.session_lost = False
        self.suspended = False
        self.topic_partitions = topics
        self.member_list = [consumer_id]
        self.owners: dict[TopicPartition, str] = {} if owners is None else owners
        self.offsets: dict[TopicPartition, int] = {}
        self.released: list[TopicPartition] = []
        self.commits: list[tuple[TopicPartition, int]] = []
        self.stopped = False
        #: the placement node (overrides, znode version) and every member's published rates
        self.placement: dict[TopicPartition, str] = {}
        self.placement_version: int | None = None
        self.rates: dict[str, dict[TopicPartition, float]] = {}

    def members(self) -> list[str]:
        return sorted(self.member_list)

    def topics(self) -> list[str]:
        return sorted(self.topic_partitions)

    def deleting(self) -> set[str]:
        return set()

    def partitions(self, topic: str) -> list[int]:
        return list(range(self.topic_partitions.get(topic, 0)))

    def claim(self, tp: TopicPartition) -> bool:
        return self.owners.setdefault(tp, self.consumer_id) == self.consumer_id

    def release(self, tp: TopicPartition) -> None:
        if self.owners.get(tp) == self.consumer_id:
            del self.owners[tp]
        self.released.append(tp)

    def read_offset(self, tp: TopicPartition) -> int | None:
        return self.offsets.get(tp)

    def may_produce(self) -> bool:
        return not self.suspended

    def take_over(self, tp: TopicPartition) -> int | None:
        return self.offsets.get(tp)

    def has_target_offsets(self, topic: str) -> bool:
        return False

    def read_target_offset(self, tp: TopicPartition) -> int | None:
        return None

    def commit_offset(self, tp: TopicPartition, offset: int, target_offset: int | None = None) -> None:
        self.offsets[tp] = offset
        self.commits.append((tp, offset))

    def register(self) -> None:
        self.session_lost = False

    def read_placement(self) -> tuple[dict[TopicPartition, str], int | None]:
        return dict(self.placement), self.placement_version

    def write_placement(self, owners: dict[TopicPartition, str], version: int | None) -> bool:
        if version != self.placement_version:
            return False
        self.placement = dict(owners)
        self.placement_version = 0 if version is None else version + 1
        return True

    def publish_rates(self, rates: dict[TopicPartition, float], window_s: float) -> None:
        self.rates[self.consumer_id] = dict(rates)

    def read_rates(self) -> dict[str, dict[TopicPartition, float]]:
        return {m: dict(r) for m, r in self.rates.items()}

    def stop(self) -> None:
        self.stopped = True


class FakeFetcher:
    """Answers each fetch with ``answer(tp, offset)`` (which may raise); idle answers wait a little,
    like a long poll."""

    def __init__(self, answer: Callable[[TopicPartition, int], Awaitable[RawPartition]] | None = None) -> None:
        self.answer = answer or self.idle
        self.calls: list[tuple[TopicPartition, int]] = []

    @staticmethod
    async def idle(tp: TopicPartition, offset: int) -> RawPartition:
        await asyncio.sleep(0.02)
        return RawPartition([], offset, 0)

    async def fetch(self, tp: TopicPartition, offset: int) -> RawPartition:
        self.calls.append((tp, offset))
        return await self.answer(tp, offset)

    async def close(self) -> None:
        pass


class _FakeSource:
    async def close(self) -> None:
        pass

    async def refresh(self, topics: list[str]) -> None:
        pass


def fake_mirror(group: FakeGroup, fetcher: FakeFetcher, **props: str) -> tuple[Mirror, FlowState]:
    """A started Mirror with one flow (dc1->agg) on the fake group and fetcher; nothing connects
    anywhere until a copier produces."""
    config = parse(
        {
            "clusters": "dc1, agg",
            "dc1.zookeeper.connect": "127.0.0.1:1",
            "dc1.bootstrap.servers": "127.0.0.1:1",
            "agg.bootstrap.servers": "127.0.0.1:1",
            "dc1->agg.enabled": "true",
            **props,
        }
    )
    m = Mirror(config)
    f = FlowState(config.flows[0], cast(Any, group), cast(Any, _FakeSource()), cast(Any, None), cast(Any, fetcher))
    m.flows.append(f)
    m.started = True
    f.joined = True
    return m, f


async def wait_until(cond: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not cond():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.01)
