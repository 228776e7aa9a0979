"""Review finding 8: the resume scan's memory is bounded per partition (resume.scan.max.bytes) and
in total (resume.scan.total.max.bytes), measured with tracemalloc against a target partition of
many tiny batches (a fake fetch: the scan's own data structures are what is measured)."""

from __future__ import annotations

import asyncio
import struct
import tracemalloc
from typing import Any, cast

import pytest

import headwater.mirror.copies as copies_module
from headwater.client.raw import RawPartition
from headwater.mirror.copies import ENTRY_BYTES, ScanBudget, scan_target
from headwater.protocol.records.header import read_header
from headwater.protocol.records.record import RecordInput, encode_batch

BATCHES = 160_000  # ~16 MB of 1-record batches of 100 bytes in the target partition
CHUNK = 5_000  # batches per fetch answer


def _tiny_target(monkeypatch: pytest.MonkeyPatch) -> None:
    template = encode_batch([RecordInput(b"key", b"v" * 40, 1_700_000_000_000)])
    header = read_header(template)

    async def fetch_raw(cluster: object, requests: list[tuple[str, int, int]], **kwargs: object) -> Any:
        ((topic, partition, offset),) = requests
        batches = []
        for o in range(offset, min(offset + CHUNK, BATCHES)):
            b = bytearray(template)
            struct.pack_into(">q", b, len(b) - 8, o)  # a distinct batch (its key is over these bytes)
            batches.append((header._replace(base_offset=o), memoryview(bytes(b))))
        return {(topic, partition): RawPartition(batches, BATCHES, 0)}, {}

    monkeypatch.setattr(copies_module, "fetch_raw", fetch_raw)


def _peak_of_scan(**kwargs: Any) -> tuple[int, bool]:
    async def main() -> bool:
        copies, hw = await scan_target(cast(Any, None), "t", 0, 0, **kwargs)
        assert hw == BATCHES
        return copies is None

    tracemalloc.start()
    try:
        gave_up = asyncio.run(main())
        return tracemalloc.get_traced_memory()[1], gave_up
    finally:
        tracemalloc.stop()


def test_a_scan_holds_at_most_its_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    _tiny_target(monkeypatch)
    bound = 8 * 1024 * 1024
    unbounded, gave_up = _peak_of_scan()
    assert not gave_up
    bounded, gave_up = _peak_of_scan(max_held_bytes=bound)
    assert gave_up, "more than the bound to hold: the scan gives up (at-least-once)"
    baseline, _ = _peak_of_scan(max_held_bytes=ENTRY_BYTES)  # one fetch answer in flight, nothing held
    print(
        f"scan of {BATCHES} tiny batches: peak {unbounded / 1e6:.1f} MB unbounded, {bounded / 1e6:.1f} MB with "
        f"resume.scan.max.bytes = {bound / 1e6:.1f} MB, {baseline / 1e6:.1f} MB for one fetch answer"
    )
    assert unbounded > 4 * bound, "the measurement sees the entries the scan holds"
    # the dict doubles its table when it grows: for a moment both tables live
    assert bounded - baseline < bound * 2, f"peak {bounded} ({baseline} for the fetch) for a bound of {bound}"
    assert unbounded / BATCHES < ENTRY_BYTES * 1.3, "ENTRY_BYTES is a fair estimate"


def test_the_total_budget_lets_only_so_many_scans_hold_entries_at_once() -> None:
    async def main() -> None:
        budget = ScanBudget(64 << 20, 256 << 20)
        assert budget.slots == 4
        for _ in range(4):
            await budget.acquire()
        fifth = asyncio.ensure_future(budget.acquire())
        await asyncio.sleep(0.05)
        assert not fifth.done()
        budget.release()
        await asyncio.wait_for(fifth, 5)

    asyncio.run(main())
