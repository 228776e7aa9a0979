"""Delayed operations ("purgatory"): requests that wait for something to happen to a partition.

A delayed Fetch waits until enough bytes are available (``min_bytes``) or ``max_wait_ms``
passes; a delayed acks=all Produce (the replication issue) waits for the high watermark. A
waiter registers a future under the partitions it watches; appends and high-watermark moves
call :meth:`Purgatory.notify`, which completes those futures. The waiter then re-checks its
condition. Nothing polls: between events a waiting request costs nothing.

Listeners (:meth:`Purgatory.listen`) are the persistent kind: registered once under a partition,
told of every notification of it until they unlisten. A fetch session (``fetch_session.py``)
listens to each of its partitions for as long as it holds them, so an idle follower's Fetch costs
no registration per partition and per request, and its next read looks only at the partitions
notified since (see the session's docstring for which events notify).

Notified: an append or truncation on the partition's log, a move of its log start offset (the log's
``on_offsets_moved``, set by the replica manager), a high-watermark or ISR move, a change of role
(LeaderAndIsr, StopReplica, the ZooKeeper session lost: :meth:`notify_all`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Protocol

TopicPartition = tuple[str, int]


class PartitionListener(Protocol):
    """Told of each notification of the partition it listens to (hashable: by identity)."""

    def notified(self) -> None: ...


def _settle(fut: asyncio.Future[bool], notified: bool) -> None:
    if not fut.done():
        fut.set_result(notified)


class Purgatory:
    """Futures by partition. A waiter's expiry is a plain loop timer, not ``wait_for`` (which costs a
    task per wait on Python 3.11): every acks=all Produce and every follower Fetch waits here."""

    def __init__(self) -> None:
        self._watchers: dict[TopicPartition, set[asyncio.Future[bool]]] = {}
        self._listeners: dict[TopicPartition, set[PartitionListener]] = {}

    def notify(self, tp: TopicPartition) -> None:
        waiters = self._watchers.pop(tp, None)
        if waiters:
            for fut in waiters:
                _settle(fut, True)
        listeners = self._listeners.get(tp)
        if listeners:
            for listener in list(listeners):
                listener.notified()

    def notify_all(self) -> None:
        for tp in {*self._watchers, *self._listeners}:
            self.notify(tp)

    def listen(self, tp: TopicPartition, listener: PartitionListener) -> None:
        """Tell ``listener`` of every notification of ``tp`` until :meth:`unlisten`."""
        self._listeners.setdefault(tp, set()).add(listener)

    def unlisten(self, tp: TopicPartition, listener: PartitionListener) -> None:
        ls = self._listeners.get(tp)
        if ls is not None:
            ls.discard(listener)
            if not ls:
                del self._listeners[tp]

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

    def listening(self) -> int:
        return sum(len(v) for v in self._listeners.values())
