"""The purgatory: waiters woken by notify, expired by their timer, never left behind."""

from __future__ import annotations

import asyncio

import pytest

from headwater.broker.purgatory import Purgatory


def test_notify_wakes_every_waiter_of_that_partition_only() -> None:
    async def main() -> None:
        p = Purgatory()
        a = asyncio.ensure_future(p.wait([("t", 0)], 30))
        b = asyncio.ensure_future(p.wait([("t", 0), ("t", 1)], 30))
        c = asyncio.ensure_future(p.wait([("t", 1)], 30))
        await asyncio.sleep(0)
        assert p.watched() == 4
        p.notify(("t", 0))
        assert await a is True and await b is True
        assert not c.done()
        assert p.watched() == 1  # b's registration under t-1 went with it
        p.notify_all()
        assert await c is True
        assert p.watched() == 0

    asyncio.run(main())


def test_a_waiter_expires_false_and_unregisters() -> None:
    async def main() -> None:
        p = Purgatory()
        assert await p.wait([("t", 0)], 0.01) is False
        assert await p.wait([("t", 0)], 0) is False
        assert p.watched() == 0

    asyncio.run(main())


def test_a_cancelled_waiter_unregisters() -> None:
    async def main() -> None:
        p = Purgatory()
        w = asyncio.ensure_future(p.wait([("t", 0)], 30))
        await asyncio.sleep(0)
        w.cancel()
        with pytest.raises(asyncio.CancelledError):
            await w
        assert p.watched() == 0
        p.notify(("t", 0))  # nothing left to wake

    asyncio.run(main())
