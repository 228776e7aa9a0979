"""The outcome of one produced record: an asyncio-compatible future read from its batch's outcome.

A batch of records succeeds or fails as a whole: one Produce answer gives its base offset (or an
error) for every record in it. So the producer keeps one :class:`BatchOutcome` per batch and hands
out, per record, a :class:`RecordFuture` -- two slots: the outcome and the record's index -- whose
:class:`~headwater.client.producer.RecordMetadata` is computed only when asked for. That replaces an
``asyncio.Future`` and a metadata object per record, which were most of the producer's per-record
cost (allocation, and the garbage collector walking them while batches were in flight).

RecordFuture follows asyncio's future protocol (``asyncio.isfuture`` is true of it): ``await``,
``done``, ``result``, ``exception``, ``add_done_callback`` / ``remove_done_callback`` (callbacks
run through the loop, as asyncio's own futures run them), ``cancel`` (the future is cancelled; the
record is still sent, as before), ``get_loop``; ``asyncio.gather``, ``wait`` and ``wait_for`` take
it. Results cannot be set from outside: only the batch's outcome settles it.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable, Generator, Sequence
from typing import Any, NamedTuple

__all__ = ["BatchOutcome", "RecordFuture", "RecordMetadata"]


class RecordMetadata(NamedTuple):
    """Where a record was written. ``offset`` is -1 with acks=0 (the broker does not say)."""

    topic: str
    partition: int
    offset: int
    timestamp: int


_Callback = Callable[["RecordFuture"], object]


class BatchOutcome:
    """What happened to one batch: its base offset and append time, or the error; pending until then."""

    __slots__ = (
        "_callbacks",
        "_timestamps",
        "base_offset",
        "error",
        "log_append_time",
        "loop",
        "partition",
        "settled",
        "topic",
    )

    def __init__(self, loop: asyncio.AbstractEventLoop, topic: str, partition: int) -> None:
        self.loop = loop
        self.topic = topic
        self.partition = partition
        self.settled = False
        self.base_offset = -1
        self.log_append_time = -1
        self.error: BaseException | None = None
        self._timestamps: list[int] = []
        self._callbacks: list[tuple[RecordFuture, _Callback, contextvars.Context | None]] = []

    def succeeded(self, base_offset: int, log_append_time: int, timestamps: Sequence[int]) -> None:
        """The batch was written at ``base_offset``; ``timestamps`` are its records' (CreateTime)."""
        if self.settled:
            return
        self.base_offset = base_offset
        self.log_append_time = log_append_time
        if log_append_time < 0:
            self._timestamps = list(timestamps)
        self._settle()

    def failed(self, error: BaseException) -> None:
        if not self.settled:
            self.error = error
            self._settle()

    def _settle(self) -> None:
        self.settled = True
        callbacks, self._callbacks = self._callbacks, []
        call_soon = self.loop.call_soon
        for fut, fn, context in callbacks:
            call_soon(fn, fut, context=context)

    def metadata(self, index: int) -> RecordMetadata:
        offset = self.base_offset + index if self.base_offset >= 0 else -1
        ts = self.log_append_time if self.log_append_time >= 0 else self._timestamps[index]
        return tuple.__new__(RecordMetadata, (self.topic, self.partition, offset, ts))


class RecordFuture:
    """One record's outcome (see the module docstring)."""

    __slots__ = ("_asyncio_future_blocking", "_cancelled", "_index", "_outcome")

    def __init__(self, outcome: BatchOutcome, index: int) -> None:
        self._outcome = outcome
        self._index = index
        self._cancelled = False
        self._asyncio_future_blocking = False  # asyncio's duck-typing marker (asyncio.isfuture)

    def __repr__(self) -> str:
        o = self._outcome
        state = "cancelled" if self._cancelled else "pending" if not o.settled else "failed" if o.error else "done"
        return f"<RecordFuture {o.topic}-{o.partition} #{self._index} {state}>"

    def get_loop(self) -> asyncio.AbstractEventLoop:
        return self._outcome.loop

    def done(self) -> bool:
        return self._cancelled or self._outcome.settled

    def cancelled(self) -> bool:
        return self._cancelled

    def result(self) -> RecordMetadata:
        o = self._outcome
        if self._cancelled:
            raise asyncio.CancelledError()
        if not o.settled:
            raise asyncio.InvalidStateError("the record is not acknowledged yet")
        if o.error is not None:
            raise o.error
        return o.metadata(self._index)

    def exception(self) -> BaseException | None:
        if self._cancelled:
            raise asyncio.CancelledError()
        if not self._outcome.settled:
            raise asyncio.InvalidStateError("the record is not acknowledged yet")
        return self._outcome.error

    def add_done_callback(self, fn: _Callback, *, context: contextvars.Context | None = None) -> None:
        if self.done():
            self._outcome.loop.call_soon(fn, self, context=context)
        else:
            self._outcome._callbacks.append((self, fn, context))

    def remove_done_callback(self, fn: _Callback) -> int:
        o = self._outcome
        kept = [c for c in o._callbacks if not (c[0] is self and c[1] == fn)]
        removed = len(o._callbacks) - len(kept)
        o._callbacks = kept
        return removed

    def cancel(self, msg: Any = None) -> bool:
        """Stop waiting for this record (its callbacks run now); the record itself is still sent."""
        if self.done():
            return False
        self._cancelled = True
        o = self._outcome
        mine = [c for c in o._callbacks if c[0] is self]
        o._callbacks = [c for c in o._callbacks if c[0] is not self]
        for fut, fn, context in mine:
            o.loop.call_soon(fn, fut, context=context)
        return True

    def __await__(self) -> Generator[Any, None, RecordMetadata]:
        if not self.done():
            self._asyncio_future_blocking = True
            yield self  # a Task waits for the done callback it adds
        if not self.done():
            raise RuntimeError("await wasn't used with future")
        return self.result()

    __iter__ = __await__
