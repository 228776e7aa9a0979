"""Fetching ahead of the destination: a partition's next fetch is on the wire while the batches of
the previous ones are still being produced (issue 22).

Without it a copier fetched, produced what it got (acks=all), and only then fetched again: each
``fetch.max.bytes`` cost one round trip of the source link *plus* the destination's
acknowledgement, so at WAN round trips a partition moved at most ``fetch.max.bytes`` per RTT even
with an idle destination. Here one :class:`FetchAhead` per copier runs a small task that asks the
flow's :class:`~headwater.mirror.fetcher.SourceFetcher` for the partition at the offset right
after the last batch it fetched, and queues what comes back, in order; the copier takes from the
queue, produces, and only once the destination acknowledged a part does it :meth:`release` its
bytes. The next fetch goes out while the partition holds less than ``fetch.max.buffered.bytes``
(fetched and not yet acknowledged), so at most about ``fetch.max.buffered.bytes +
fetch.max.bytes`` of a partition's batches are in memory (the default, twice ``fetch.max.bytes``,
is one part being produced, one waiting and one on the wire).

What does not change:

- Order: one fetch per partition at a time, each at the offset the previous one ended at; the
  queue hands parts out in that order, so the copier produces batches in source order.
- Offsets and commits: the copier's acknowledged offset (``next_offset``, what is committed) still
  moves only past batches the destination acknowledged; what was fetched ahead and not produced
  is simply fetched again by whoever resumes (nothing lost, nothing skipped).
- Errors: a failed fetch (offset out of range, a leader moving, the link cut) is queued behind the
  parts fetched before it and the task stops; the copier meets the error only after it produced
  those parts, i.e. with ``next_offset`` equal to the offset that failed -- exactly as when it
  fetched itself (the gap report of :mod:`headwater.mirror.gaps` names the same range). The copier
  then drops this object and starts a new one from its acknowledged offset.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Awaitable, Callable

from headwater.client.raw import RawPartition

__all__ = ["FetchAhead", "part_bytes"]

TopicPartition = tuple[str, int]
Fetch = Callable[[TopicPartition, int], Awaitable[RawPartition]]


def part_bytes(part: RawPartition) -> int:
    """The bytes of a fetched part's batches (what it holds in memory)."""
    return sum(len(b) for _, b in part.batches)


class FetchAhead:
    """One partition's fetches, sent ahead of the copier that produces them.

    Owned by one copier, used from the event loop only. ``max_buffered_bytes`` 0 turns fetching
    ahead off: the next fetch waits until everything fetched was released (acknowledged).
    """

    def __init__(self, fetch: Fetch, tp: TopicPartition, offset: int, max_buffered_bytes: int) -> None:
        self._fetch = fetch
        self.tp = tp
        #: where the next fetch starts: right after the last batch fetched
        self.fetch_offset = offset
        #: where the parts taken so far end (the copier's acknowledged offset once it produced them)
        self.taken_to = offset
        self.max_buffered_bytes = max_buffered_bytes
        #: bytes fetched and not yet released (queued, or being produced by the copier)
        self.buffered = 0
        self._queue: deque[RawPartition | Exception] = deque()
        self._ready = asyncio.Event()
        self._room = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.fetches = 0  # sent, for tests and the curious

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.ensure_future(self._run())

    def _has_room(self) -> bool:
        return self.buffered == 0 or self.buffered < self.max_buffered_bytes

    async def _run(self) -> None:
        while True:
            while not self._has_room():
                self._room.clear()
                await self._room.wait()
            self.fetches += 1
            try:
                part = await self._fetch(self.tp, self.fetch_offset)
            except Exception as e:  # handed to the copier, behind the parts fetched before it
                self._put(e)
                return
            if part.batches:
                self.fetch_offset = max(self.fetch_offset, part.batches[-1][0].next_offset)
                self.buffered += part_bytes(part)
            self._put(part)

    def _put(self, item: RawPartition | Exception) -> None:
        last = self._queue[-1] if self._queue else None
        if isinstance(item, RawPartition) and not item.batches and isinstance(last, RawPartition) and not last.batches:
            self._queue[-1] = item  # long polls at the log end while the copier is busy: keep the newest
        else:
            self._queue.append(item)
        self._ready.set()

    async def next(self, max_bytes: int) -> list[RawPartition]:
        """The next queued parts, in fetch order: the first one, then those behind it while their
        batches together stay within ``max_bytes`` (one produce request). Raises the error of a
        failed fetch once every part fetched before it has been taken."""
        while not self._queue:
            self._ready.clear()
            await self._ready.wait()
        first = self._queue.popleft()
        if isinstance(first, Exception):
            raise first
        parts = [first]
        total = part_bytes(first)
        while self._queue:
            following = self._queue[0]
            if not isinstance(following, RawPartition):
                break
            size = part_bytes(following)
            if total + size > max_bytes and size:
                break
            parts.append(following)
            total += size
            self._queue.popleft()
        return parts

    def release(self, nbytes: int) -> None:
        """``nbytes`` of what was taken are acknowledged by the destination (or dropped): room for
        the next fetch."""
        self.buffered = max(self.buffered - nbytes, 0)
        self._room.set()

    async def close(self) -> None:
        """Stop fetching; whatever is queued is dropped (fetched again from the acknowledged offset)."""
        task, self._task = self._task, None
        self._queue.clear()
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
