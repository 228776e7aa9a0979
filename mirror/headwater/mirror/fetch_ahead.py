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
(fetched and not yet acknowledged).

Several fetches in flight per partition. The offset a fetch must start at is known only when the
previous answer arrived (it ends at a batch boundary). So while the source has more than the
fetches on the wire cover (its high watermark, from the last answer), up to ``fetch.max.in.flight``
fetches of a partition are on the wire at once: the first at the exact offset, each further one
*speculatively* the last full fetch's offset span, less its largest batch, after the one before.
Answers are used in order. A speculative answer is used only from the exact offset the previous
answer ended at -- the batches before it (the overlap) are dropped; if it does not reach back to
that offset (a gap: the guess went too far), or it failed, it and the fetches after it are thrown
away and the next fetch is exact again. Speculation never decides which offsets are copied, only
whether a round trip was saved. The flow's fetcher puts a partition's fetches into successive
rounds of its source broker, so ``fetch.max.in.flight`` is also the number of rounds per broker.
At most about ``fetch.max.buffered.bytes + fetch.max.in.flight * fetch.max.bytes`` of a partition's
batches are in memory (the buffered bound when only ``fetch.max.in.flight`` is raised, twice
``fetch.max.bytes``, is one part being produced and one waiting).

Off by default since issue 40 (``fetch.max.in.flight`` 1, ``fetch.max.buffered.bytes`` 0: one
exact fetch at a time), which bench 9 measured faster on loopback and through a capped link; the
lag metric no longer depends on fetching ahead to see the source grow (:mod:`headwater.mirror.lag`).

What does not change:

- Order: each answer is used only from the offset the previous one ended at; the queue hands
  parts out in that order, so the copier produces batches in source order, each once.
- Offsets and commits: the copier's acknowledged offset (``next_offset``, what is committed) still
  moves only past batches the destination acknowledged; what was fetched ahead and not produced
  is simply fetched again by whoever resumes (nothing lost, nothing skipped).
- Errors: a failed exact fetch (offset out of range, a leader moving, the link cut) is queued behind
  the parts fetched before it and the task stops; the copier meets the error only after it produced
  those parts, i.e. with ``next_offset`` equal to the offset that failed -- exactly as when it
  fetched itself (the gap report of :mod:`headwater.mirror.gaps` names the same range). The copier
  then drops this object and starts a new one from its acknowledged offset. A failed speculative
  fetch is never reported: the exact fetch that replaces it meets the error if there is one.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from headwater.client.raw import RawPartition

__all__ = ["FetchAhead", "part_bytes"]

TopicPartition = tuple[str, int]
Fetch = Callable[[TopicPartition, int], Awaitable[RawPartition]]


def part_bytes(part: RawPartition) -> int:
    """The bytes of a fetched part's batches (what it holds in memory)."""
    return sum(len(b) for _, b in part.batches)


@dataclass
class _InFlight:
    start: int
    speculative: bool
    task: asyncio.Task[RawPartition]


class FetchAhead:
    """One partition's fetches, sent ahead of the copier that produces them.

    Owned by one copier, used from the event loop only. ``max_buffered_bytes`` 0 turns fetching
    ahead off: the next fetch waits until everything fetched was released (acknowledged).
    ``in_flight`` fetches at most on the wire at once (see the module docstring: the second and
    later ones start at an estimated offset and are used only where they continue the first).
    """

    def __init__(
        self,
        fetch: Fetch,
        tp: TopicPartition,
        offset: int,
        max_buffered_bytes: int,
        *,
        in_flight: int = 1,
        fetch_max_bytes: int = 0,
    ) -> None:
        self._fetch = fetch
        self.tp = tp
        #: where the next fetch starts: right after the last batch fetched
        self.fetch_offset = offset
        #: where the parts taken so far end (the copier's acknowledged offset once it produced them)
        self.taken_to = offset
        self.max_buffered_bytes = max_buffered_bytes
        self.in_flight = max(1, in_flight) if max_buffered_bytes > 0 else 1
        self.fetch_max_bytes = fetch_max_bytes
        #: bytes fetched and not yet released (queued, or being produced by the copier)
        self.buffered = 0
        self._queue: deque[RawPartition | Exception] = deque()
        self._ready = asyncio.Event()
        self._room = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._wire: deque[_InFlight] = deque()
        self._span = 0  # offsets a full fetch covered last time (0: none seen, no speculation)
        self._largest_batch = 0  # offsets of the largest batch of that fetch
        self._high_watermark = -1
        self.fetches = 0  # sent, for tests and the curious
        self.speculative_used = 0
        self.speculative_dropped = 0

    @property
    def high_watermark(self) -> int:
        """The source's high watermark in the newest answer (-1: none yet), even one the copier has not taken;
        for a read_committed fetch its last stable offset (the end of what the copier may copy)."""
        return self._high_watermark

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.ensure_future(self._run())

    def _has_room(self) -> bool:
        return self.buffered == 0 or self.buffered < self.max_buffered_bytes

    def _send(self, start: int, speculative: bool) -> None:
        self.fetches += 1
        self._wire.append(_InFlight(start, speculative, asyncio.ensure_future(self._fetch(self.tp, start))))

    def _fill_the_wire(self) -> None:
        """Send fetches while there is room: the first at the exact offset, then -- while the
        source's high watermark says there is more than the fetches on the wire cover -- at
        estimated offsets after it."""
        while self._has_room() and len(self._wire) < self.in_flight:
            if not self._wire:
                self._send(self.fetch_offset, False)
                continue
            # the last full fetch's span less its largest batch: an overlap of about one batch
            # (dropped) is cheaper than a gap (the whole answer thrown away); a fetch of a single
            # batch gives nothing to guess with
            step = self._span - self._largest_batch
            start = self._wire[-1].start + step
            if step <= 0 or start + self._span > self._high_watermark:
                return
            self._send(start, True)

    async def _drop_wire(self) -> None:
        wire, self._wire = list(self._wire), deque()
        for f in wire:
            f.task.cancel()
        await asyncio.gather(*(f.task for f in wire), return_exceptions=True)

    async def _run(self) -> None:
        try:
            while True:
                self._fill_the_wire()
                if not self._wire:
                    self._room.clear()
                    await self._room.wait()
                    continue
                await asyncio.wait([self._wire[0].task])
                # every answer already in, in order, before the next fetches go out: a speculative
                # start is then guessed from the newest known end, not from an older guess
                while self._wire and self._wire[0].task.done():
                    if not await self._take_head():
                        return
        finally:
            await self._drop_wire()

    async def _take_head(self) -> bool:
        """Use (or drop) the answer at the head of the wire; False once a failed exact fetch was
        handed to the copier (this object then fetches no more)."""
        head = self._wire.popleft()
        try:
            part = head.task.result()
        except Exception as e:
            await self._drop_wire()
            if head.speculative:  # a guess that failed (e.g. past the log end): ask exactly
                self.speculative_dropped += 1
                return True
            self._put(e)  # handed to the copier, behind the parts fetched before it
            return False
        if head.speculative:
            kept = [(h, b) for h, b in part.batches if h.base_offset >= self.fetch_offset]
            if not kept or kept[0][0].base_offset != self.fetch_offset:
                # a gap before it (the guess went too far) or nothing new: ask exactly
                self.speculative_dropped += 1
                await self._drop_wire()
                return True
            self.speculative_used += 1
            part = part.but(kept)
        self._accept(part)
        return True

    def _accept(self, part: RawPartition) -> None:
        self._high_watermark = part.end_offset  # read_committed: the LSO, what a fetch can return
        if part.batches:
            end = part.batches[-1][0].next_offset
            size = part_bytes(part)
            if self.fetch_max_bytes and size * 2 >= self.fetch_max_bytes:  # a full fetch: its span
                self._span = end - part.batches[0][0].base_offset
                self._largest_batch = max(h.next_offset - h.base_offset for h, _ in part.batches)
            self.fetch_offset = max(self.fetch_offset, end)
            self.buffered += size
        self._put(part)

    def _put(self, item: RawPartition | Exception) -> None:
        last = self._queue[-1] if self._queue else None
        if isinstance(item, RawPartition) and not item.batches and isinstance(last, RawPartition) and not last.batches:
            self._queue[-1] = item  # long polls at the log end while the copier is busy: keep the newest
        else:
            self._queue.append(item)
        self._ready.set()

    async def next(self) -> RawPartition:
        """The next fetched part, in fetch order. Raises the error of a failed fetch once every part
        fetched before it has been taken.

        One part at a time, never several joined into one produce: a part is what one source fetch
        returned, which a broker reads from one log segment, so it fits the target topic's
        ``segment.bytes`` (copied from the source) -- two joined need not, and the target refuses a
        record set larger than a segment (RECORD_LIST_TOO_LARGE)."""
        while not self._queue:
            self._ready.clear()
            await self._ready.wait()
        first = self._queue.popleft()
        if isinstance(first, Exception):
            raise first
        return first

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
