"""Delayed operations ("purgatory"): requests that wait for something to happen to a partition.

A delayed Fetch waits until enough bytes are available (``min_bytes``) or ``max_wait_ms``
passes; a delayed acks=all Produce (the replication issue) waits for the high watermark. A
waiter registers a future under the partitions it watches; appends and high-watermark moves
call :meth:`Purgatory.notify`, which completes those futures. The waiter then re-checks its
condition. Nothing polls: between events a waiting request costs nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

TopicPartition = tuple[str, int]


def _settle(fut: asyncio.Future[bool], notified: bool) -> None:
    if not fut.done():
        fut.set_result(notified)


class Purgatory:
    """Futures by partition. A waiter's expiry is a plain loop timer, not ``wait_for`` (which costs a
    task per wait on Python 3.11): every acks=all Produce and every follower Fetch waits here."""

    def __init__(self) -> None:
        self._watchers: dict[TopicPartition, set[asyncio.Future[bool]]] = {}

    def notify(self, tp: TopicPartition) -> None:
        waiters = self._watchers.pop(tp, None)
        if waiters:
            for fut in waiters:
                _settle(fut, True)

    def notify_all(self) -> None:
        for tp in list(self._watchers):
            self.notify(tp)

    async def wait(self, keys: Iterable[TopicPartition], timeout_s: float) -> bool:
        """Wait until any key is notified (True) or the timeout passes (False)."""
        if timeout_s <= 0:
            return False
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[bool] = loop.create_future()
        keys = list(keys)
        for k in keys:
            self._watchers.setdefault(k, set()).add(fut)
        timer = loop.call_later(timeout_s, _settle, fut, False)
        try:
            return await fut
        finally:
            timer.cancel()
            for k in keys:
                ws = self._watchers.get(k)
                if ws is not None:
                    ws.discard(fut)
                    if not ws:
                        del self._watchers[k]

    def watched(self) -> int:
        return sum(len(v) for v in self._watchers.values())
