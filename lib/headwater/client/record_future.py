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

:class:`SyncRecordFuture` is the same two slots for threads (what :class:`~headwater.client.sync.SyncProducer`
returns): ``result(timeout)`` / ``exception(timeout)`` block the calling thread, ``add_done_callback``
runs its function on the client's loop thread when the batch settles. Its waiting state (a lock, an
event, callbacks) is created per *batch*, and only when some thread waits or adds a callback, so a
record nobody waits for costs two slots and nothing else.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import logging
import threading
from collections.abc import Callable, Generator, Sequence
from typing import Any, NamedTuple

__all__ = ["BatchOutcome", "RecordFuture", "RecordMetadata", "SyncRecordFuture", "on_settled"]

log = logging.getLogger("headwater.client.producer")


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
        "_sync",
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
        self._sync: _SyncState | None = None  # threads waiting or called back: made when first needed

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
        # settled first, then _sync read: a thread attaching _sync sees settled or is seen (_sync_state)
        self.settled = True
        callbacks, self._callbacks = self._callbacks, []
        call_soon = self.loop.call_soon
        for fut, fn, context in callbacks:
            call_soon(fn, fut, context=context)
        sync = self._sync
        if sync is not None:
            sync.settle()

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

    @property
    def outcome(self) -> BatchOutcome:
        """The outcome of the record's batch (shared by every record of that batch)."""
        return self._outcome

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


# -- for threads ------------------------------------------------------------------------------------

_ATTACH = threading.Lock()  # makes one _SyncState per outcome when two threads ask at once


class _SyncState:
    """Threads' interest in one batch: an event to wait on and functions to call when it settles."""

    __slots__ = ("callbacks", "done", "event", "lock")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.event = threading.Event()
        self.done = False
        self.callbacks: list[tuple[Callable[[Any], object], Any]] = []

    def settle(self) -> None:
        with self.lock:
            self.done = True
            callbacks, self.callbacks = self.callbacks, []
            self.event.set()
        for fn, arg in callbacks:
            _call(fn, arg)


def _sync_state(outcome: BatchOutcome) -> _SyncState:
    state = outcome._sync
    if state is None:
        with _ATTACH:
            state = outcome._sync
            if state is None:
                state = outcome._sync = _SyncState()
    return state


def _call(fn: Callable[[Any], object], arg: Any) -> None:
    try:
        fn(arg)
    except Exception:  # a caller's callback must not stop the others (concurrent.futures logs too)
        log.exception("exception calling callback for %r", arg)


def on_settled(outcome: BatchOutcome, fn: Callable[[Any], object], arg: Any) -> None:
    """Call ``fn(arg)`` when ``outcome`` settles: on the loop thread then, or now in this thread if it has."""
    state = _sync_state(outcome)
    with state.lock:
        if not (state.done or outcome.settled):
            state.callbacks.append((fn, arg))
            return
    _call(fn, arg)


class SyncRecordFuture:
    """One record's outcome for threads: ``concurrent.futures.Future``'s reading methods.

    ``result(timeout)`` and ``exception(timeout)`` block until the batch settles (``TimeoutError``
    after ``timeout`` seconds); ``add_done_callback(fn)`` calls ``fn(future)`` on the client's loop
    thread when it settles (at once, in this thread, if it has). A record cannot be taken back:
    ``cancel()`` returns False. ``concurrent.futures.wait`` does not take it: wait with
    :meth:`result` or the producer's ``flush()``.
    """

    __slots__ = ("_index", "_outcome")

    def __init__(self, outcome: BatchOutcome, index: int) -> None:
        self._outcome = outcome
        self._index = index

    @classmethod
    def failed(cls, loop: asyncio.AbstractEventLoop, topic: str, error: BaseException) -> SyncRecordFuture:
        """A record refused before it was queued (unserializable, too large, the producer closed)."""
        outcome = BatchOutcome(loop, topic, -1)
        outcome.failed(error)
        return cls(outcome, 0)

    @property
    def outcome(self) -> BatchOutcome:
        return self._outcome

    def __repr__(self) -> str:
        o = self._outcome
        state = "pending" if not o.settled else "failed" if o.error else "done"
        return f"<SyncRecordFuture {o.topic}-{o.partition} #{self._index} {state}>"

    def done(self) -> bool:
        return self._outcome.settled

    def running(self) -> bool:
        return not self._outcome.settled

    def cancelled(self) -> bool:
        return False

    def cancel(self) -> bool:
        return False

    def _wait(self, timeout: float | None) -> BatchOutcome:
        o = self._outcome
        if not o.settled:
            state = _sync_state(o)
            if not o.settled and not state.event.wait(timeout) and not o.settled:
                raise concurrent.futures.TimeoutError(f"the record was not acknowledged within {timeout:g}s")
        return o

    def result(self, timeout: float | None = None) -> RecordMetadata:
        o = self._wait(timeout)
        if o.error is not None:
            raise o.error
        return o.metadata(self._index)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        return self._wait(timeout).error

    def add_done_callback(self, fn: Callable[[SyncRecordFuture], object]) -> None:
        on_settled(self._outcome, fn, self)
