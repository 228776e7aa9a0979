"""Fetching ahead (issue 22, mirror/headwater/mirror/fetch_ahead.py): a partition's next fetch goes
out while the previous batches are still being produced, within ``fetch.max.buffered.bytes``, in
offset order, and a failed fetch reaches the copier only behind the parts fetched before it
(unit tests: the real FetchAhead and, last, the real Mirror and Copier on fakes)."""

from __future__ import annotations

import asyncio
import random

import pytest

import headwater.mirror.copier as copier_module
from headwater.client.errors import OffsetOutOfRangeError
from headwater.client.raw import RawPartition
from headwater.mirror.fetch_ahead import FetchAhead, part_bytes
from headwater.mirror.mirror import FlowState
from headwater.mirror.plan import TopicPlan
from headwater.protocol.records.header import BatchHeader, read_header
from headwater.protocol.records.record import RecordInput, encode_batch
from tests.mirror.fakes import FakeFetcher, FakeGroup, fake_mirror, wait_until

TP = ("orders", 0)
RECORDS_PER_BATCH = 10


def _part(offset: int, batches: int = 1) -> RawPartition:
    """``batches`` batches of RECORDS_PER_BATCH records from ``offset``."""
    out = []
    for i in range(batches):
        base = offset + i * RECORDS_PER_BATCH
        b = encode_batch(
            [RecordInput(None, f"v{base + j:06d}".encode(), 1_700_000_000_000) for j in range(RECORDS_PER_BATCH)],
            base_offset=base,
        )
        out.append((read_header(b), memoryview(b)))
    return RawPartition(out, 10_000, 0)


def test_the_next_fetch_goes_out_while_the_previous_part_is_held_and_stops_at_the_bound() -> None:
    async def main() -> None:
        calls: list[int] = []

        async def fetch(tp: tuple[str, int], offset: int) -> RawPartition:
            calls.append(offset)
            return _part(offset)

        size = sum(len(b) for _, b in _part(0).batches)
        ahead = FetchAhead(fetch, TP, 0, max_buffered_bytes=3 * size)
        ahead.start()
        first = await ahead.next()
        assert [h.base_offset for h, _ in first.batches] == [0]
        # the first part is held (being produced, not acknowledged): the fetches after it went out
        # anyway, each at the offset the previous one ended at, until 3 parts are held
        await wait_until(lambda: len(calls) == 3, "three fetches")
        await asyncio.sleep(0.1)
        assert calls == [0, 10, 20], "no fourth fetch while three parts' bytes are held"
        assert ahead.buffered == 3 * size
        # taken one at a time, in offset order
        taken = [await ahead.next(), await ahead.next()]
        assert [h.base_offset for p in taken for h, _ in p.batches] == [10, 20]
        ahead.release(size)  # the first part acknowledged: room for one more fetch
        await wait_until(lambda: len(calls) == 4, "the fourth fetch")
        assert calls[-1] == 30
        await ahead.close()

    asyncio.run(main())


def test_zero_buffered_bytes_fetches_only_after_the_previous_part_was_acknowledged() -> None:
    async def main() -> None:
        calls: list[int] = []

        async def fetch(tp: tuple[str, int], offset: int) -> RawPartition:
            calls.append(offset)
            return _part(offset)

        ahead = FetchAhead(fetch, TP, 0, max_buffered_bytes=0)
        ahead.start()
        part = await ahead.next()
        await asyncio.sleep(0.1)
        assert calls == [0]
        ahead.release(part_bytes(part))
        await wait_until(lambda: calls == [0, 10], "the second fetch after the acknowledgement")
        await ahead.close()

    asyncio.run(main())


def test_a_failed_fetch_is_raised_only_behind_the_parts_fetched_before_it() -> None:
    async def main() -> None:
        async def fetch(tp: tuple[str, int], offset: int) -> RawPartition:
            if offset >= 20:
                raise OffsetOutOfRangeError(tp[0], tp[1], offset)
            return _part(offset)

        ahead = FetchAhead(fetch, TP, 0, max_buffered_bytes=1 << 20)
        ahead.start()
        got = []
        try:
            while True:
                got.extend(h.base_offset for h, _ in (await ahead.next()).batches)
        except OffsetOutOfRangeError as e:
            assert e.offset == 20
        assert got == [0, 10]
        await ahead.close()

    asyncio.run(main())


class _Log:
    """A source partition in memory: batches of varying record counts, served like a broker
    (from the batch holding the offset, whole batches up to ``max_bytes``), after ``rtt`` seconds."""

    def __init__(self, records: int, seed: int, rtt: float = 0.01, max_bytes: int = 2000) -> None:
        rng = random.Random(seed)
        self.batches: list[tuple[BatchHeader, memoryview]] = []
        offset = 0
        while offset < records:
            n = min(rng.randint(3, 15), records - offset)
            b = encode_batch(
                [RecordInput(None, f"v{offset + j:06d}".encode(), 0) for j in range(n)], base_offset=offset
            )
            self.batches.append((read_header(b), memoryview(b)))
            offset += n
        self.end = offset
        self.rtt = rtt
        self.max_bytes = max_bytes
        self.on_the_wire = 0
        self.most_on_the_wire = 0
        self.asked: list[int] = []

    async def fetch(self, tp: tuple[str, int], offset: int) -> RawPartition:
        self.asked.append(offset)
        self.on_the_wire += 1
        self.most_on_the_wire = max(self.most_on_the_wire, self.on_the_wire)
        try:
            await asyncio.sleep(self.rtt)
        finally:
            self.on_the_wire -= 1
        if offset > self.end:
            raise OffsetOutOfRangeError(tp[0], tp[1], offset)
        out, size = [], 0
        for h, b in self.batches:
            if h.next_offset <= offset:
                continue
            if out and size + len(b) > self.max_bytes:
                break
            out.append((h, b))
            size += len(b)
        return RawPartition(out, self.end, 0)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_speculative_fetches_overlap_on_the_wire_and_every_offset_is_handed_out_once_in_order(seed: int) -> None:
    async def main() -> None:
        source = _Log(3000, seed)
        ahead = FetchAhead(source.fetch, TP, 0, 1 << 20, in_flight=3, fetch_max_bytes=source.max_bytes)
        ahead.start()
        offsets: list[int] = []
        while len(offsets) < source.end:
            part = await ahead.next()
            for h, _ in part.batches:
                offsets.extend(range(h.base_offset, h.next_offset))
            ahead.release(part_bytes(part))
        await ahead.close()
        assert offsets == list(range(source.end)), "every offset once, in order"
        assert source.most_on_the_wire == 3, "three fetches of the partition on the wire at once"
        assert ahead.speculative_used > 0
        # an exact fetch for every answer but the speculative ones used: round trips saved
        exact = ahead.fetches - ahead.speculative_used - ahead.speculative_dropped
        assert exact < len(source.asked) * 0.75

    asyncio.run(main())


def test_a_speculative_fetch_past_the_log_end_is_never_reported() -> None:
    async def main() -> None:
        source = _Log(300, seed=4, rtt=0.005)
        ahead = FetchAhead(source.fetch, TP, 0, 1 << 20, in_flight=2, fetch_max_bytes=source.max_bytes)
        ahead._span = 10_000  # a wildly wrong estimate: every guess is past the log end
        ahead._high_watermark = 10**9
        ahead.start()
        offsets: list[int] = []
        while len(offsets) < source.end:
            part = await ahead.next()
            for h, _ in part.batches:
                offsets.extend(range(h.base_offset, h.next_offset))
            ahead.release(part_bytes(part))
        await ahead.close()
        assert offsets == list(range(source.end))
        assert any(offset > source.end for offset in source.asked), "the guess went past the log end"

    asyncio.run(main())


def test_a_copier_produces_in_source_order_and_acknowledges_only_what_the_target_took(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The real Copier with a slow target: fetches run ahead of the produce, every batch is
    produced once, in offset order, and the acknowledged offset never passes what was produced."""
    produced: list[int] = []
    #: (offset fetched, the copier's acknowledged offset at that moment)
    fetched: list[tuple[int, int]] = []
    flows: list[FlowState] = []
    end = 200

    async def answer(tp: tuple[str, int], offset: int) -> RawPartition:
        fetched.append((offset, flows[0].copiers[TP].next_offset))
        if offset >= end:
            return await FakeFetcher.idle(tp, offset)
        return _part(offset, batches=2)

    async def produce_raw(cluster: object, topic: str, partition: int, records: bytes, **kwargs: object) -> int:
        await asyncio.sleep(0.05)  # the destination's acknowledgement takes a while
        view = memoryview(records)
        pos = 0
        while pos < len(view):
            h = read_header(view, pos)
            produced.extend(range(h.base_offset, h.next_offset))
            pos += h.size
        c = flows[0].copiers[TP]
        assert c.next_offset <= h.base_offset, "acknowledged before the target took it"
        return len(produced)

    class Target:
        async def refresh(self, topics: list[str]) -> None:
            pass

        async def close(self) -> None:
            pass

    async def plan(f: FlowState, topic: str, n: int) -> TopicPlan:
        return TopicPlan(topic, n, n)

    monkeypatch.setattr(copier_module, "produce_raw", produce_raw)

    async def main() -> None:
        group = FakeGroup("m1", {"orders": 1})
        group.offsets[TP] = 0
        # fetching ahead (off by default): twice fetch.max.bytes buffered, two fetches on the wire
        ahead_props = {"fetch.max.bytes": "2048", "fetch.max.buffered.bytes": "4096", "fetch.max.in.flight": "2"}
        m, f = fake_mirror(group, FakeFetcher(answer), **ahead_props)
        flows.append(f)
        m.target = Target()  # type: ignore[assignment]
        m._plan_topic = plan  # type: ignore[method-assign]
        await m._rebalance(f)
        c = f.copiers[TP]
        await wait_until(lambda: c.next_offset == end, "everything acknowledged")
        await m._shutdown()
        assert produced == list(range(end)), "every record once, in source order"
        assert group.offsets[TP] == end, "the commit is the acknowledged offset"

    asyncio.run(main())
    ahead = [offset - acked for offset, acked in fetched if offset < end]
    assert max(ahead) >= 2 * 2 * RECORDS_PER_BATCH, "fetches went out before the previous batches were acknowledged"
