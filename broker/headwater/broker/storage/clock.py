"""The clock the log reads, injected so tests can move time.

``time_ms`` is wall-clock time (milliseconds since the epoch): it is compared with record
timestamps (retention, ListOffsets) and stamped as a segment's last-modified time.
``monotonic_ms`` never goes backwards: it measures intervals (flush.ms, checks in ``tick``).
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def time_ms(self) -> int: ...

    def monotonic_ms(self) -> int: ...


class SystemClock:
    def time_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic_ms(self) -> int:
        return time.monotonic_ns() // 1_000_000


class ManualClock:
    """A clock that moves only when told to (for tests). Both readings advance together."""

    def __init__(self, time_ms: int = 1_700_000_000_000, monotonic_ms: int = 1_000_000) -> None:
        self._time_ms = time_ms
        self._monotonic_ms = monotonic_ms

    def time_ms(self) -> int:
        return self._time_ms

    def monotonic_ms(self) -> int:
        return self._monotonic_ms

    def advance(self, ms: int) -> None:
        if ms < 0:
            raise ValueError("a ManualClock only moves forward")
        self._time_ms += ms
        self._monotonic_ms += ms

    def set_time_ms(self, time_ms: int) -> None:
        """Set the wall clock (which, unlike the monotonic clock, may jump either way)."""
        self._time_ms = time_ms
