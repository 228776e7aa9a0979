"""The per-flow SourceFetcher: one Fetch per source broker for every partition waiting on it, each
copier answered with its own partition (and its own error)."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

import headwater.mirror.fetcher as fetcher_module
from headwater.client.errors import OffsetOutOfRangeError
from headwater.client.raw import RawPartition
from headwater.mirror.fetcher import SourceFetcher
from headwater.protocol.errors import KafkaError

TopicPartition = tuple[str, int]


class FakeSource:
    def __init__(self, leaders: dict[TopicPartition, int]) -> None:
        self.leaders = leaders
        self.refreshed: list[list[str]] = []

    def leader(self, topic: str, partition: int) -> int:
        return self.leaders.get((topic, partition), -1)

    async def refresh(self, topics: list[str]) -> None:
        self.refreshed.append(topics)


def test_one_fetch_per_broker_and_errors_stay_with_their_partition(monkeypatch: pytest.MonkeyPatch) -> None:
    requests: list[tuple[int, dict[TopicPartition, int]]] = []
    release = asyncio.Event()

    async def fetch_from_node(
        cluster: object, node: int, parts: dict[TopicPartition, int], **kwargs: object
    ) -> dict[TopicPartition, RawPartition | KafkaError]:
        requests.append((node, dict(parts)))
        await release.wait()  # a long poll
        out: dict[TopicPartition, RawPartition | KafkaError] = {}
        for tp, offset in parts.items():
            out[tp] = OffsetOutOfRangeError(*tp, offset) if tp == ("t", 2) else RawPartition([], offset + 10, 0)
        return out

    monkeypatch.setattr(fetcher_module, "fetch_from_node", fetch_from_node)

    async def main() -> None:
        leaders = {("t", 0): 1, ("t", 1): 1, ("t", 2): 1, ("u", 0): 2}
        f = SourceFetcher(cast(Any, FakeSource(leaders)), max_bytes=1 << 20, max_wait_ms=500)
        calls = [asyncio.ensure_future(f.fetch(tp, 5)) for tp in leaders]
        while len(requests) < 2:
            await asyncio.sleep(0)
        late = asyncio.ensure_future(f.fetch(("t", 0), 7))  # waits for the next round of broker 1
        for _ in range(10):
            await asyncio.sleep(0)
        assert sorted((n, sorted(p)) for n, p in requests) == [
            (1, [("t", 0), ("t", 1), ("t", 2)]),
            (2, [("u", 0)]),
        ]
        release.set()
        results = await asyncio.gather(*calls, return_exceptions=True)
        assert [r.high_watermark if isinstance(r, RawPartition) else type(r) for r in results] == [
            15,
            15,
            OffsetOutOfRangeError,
            15,
        ]
        assert (await late).high_watermark == 17
        assert requests[2] == (1, {("t", 0): 7})
        assert f.rounds_sent == 3
        await f.close()

    asyncio.run(main())


def test_fetch_max_in_flight_lets_a_second_round_go_out_while_the_first_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    requests: list[dict[TopicPartition, int]] = []
    release = asyncio.Event()

    async def fetch_from_node(
        cluster: object, node: int, parts: dict[TopicPartition, int], **kwargs: object
    ) -> dict[TopicPartition, RawPartition | KafkaError]:
        requests.append(dict(parts))
        await release.wait()
        return {tp: RawPartition([], offset, 0) for tp, offset in parts.items()}

    monkeypatch.setattr(fetcher_module, "fetch_from_node", fetch_from_node)

    async def main() -> None:
        source = FakeSource({("t", 0): 1, ("t", 1): 1, ("t", 2): 1})
        f = SourceFetcher(cast(Any, source), max_bytes=1 << 20, max_wait_ms=500, in_flight=2)
        first = asyncio.ensure_future(f.fetch(("t", 0), 1))
        await asyncio.sleep(0.01)
        second = asyncio.ensure_future(f.fetch(("t", 1), 2))  # the second round goes out at once
        await asyncio.sleep(0.01)
        third = asyncio.ensure_future(f.fetch(("t", 2), 3))  # both rounds busy: it waits
        await asyncio.sleep(0.01)
        assert requests == [{("t", 0): 1}, {("t", 1): 2}]
        release.set()
        await asyncio.gather(first, second, third)
        assert requests[2] == {("t", 2): 3}
        await f.close()

    asyncio.run(main())


def test_fetches_of_one_partition_at_several_offsets_go_into_successive_rounds_in_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A copier fetching ahead has several fetches of its partition waiting (issue 22): a Fetch
    carries a partition once, so each round takes the oldest, and each answer goes to its own
    fetch; one cancelled before a round took it is never sent."""
    requests: list[dict[TopicPartition, int]] = []
    release = asyncio.Event()

    async def fetch_from_node(
        cluster: object, node: int, parts: dict[TopicPartition, int], **kwargs: object
    ) -> dict[TopicPartition, RawPartition | KafkaError]:
        requests.append(dict(parts))
        await release.wait()
        return {tp: RawPartition([], offset * 10, 0) for tp, offset in parts.items()}

    monkeypatch.setattr(fetcher_module, "fetch_from_node", fetch_from_node)

    async def main() -> None:
        source = FakeSource({("t", 0): 1, ("t", 1): 1})
        f = SourceFetcher(cast(Any, source), max_bytes=1 << 20, max_wait_ms=500, in_flight=2)
        a = asyncio.ensure_future(f.fetch(("t", 0), 100))
        b = asyncio.ensure_future(f.fetch(("t", 0), 200))
        other = asyncio.ensure_future(f.fetch(("t", 1), 5))
        c = asyncio.ensure_future(f.fetch(("t", 0), 300))
        gone = asyncio.ensure_future(f.fetch(("t", 0), 400))
        await asyncio.sleep(0.01)
        assert requests == [{("t", 0): 100, ("t", 1): 5}, {("t", 0): 200}]
        gone.cancel()
        release.set()
        answers = await asyncio.gather(a, b, c, other)
        assert [p.high_watermark for p in answers] == [1000, 2000, 3000, 50]
        assert requests[2:] == [{("t", 0): 300}], "the cancelled fetch at 400 was never sent"
        await f.close()

    asyncio.run(main())
