"""Bounded catch-up: a run reads at most so many records, or for at most so long, and publishes that.

Without bounds a run reads everything from the last committed run's ends to the log end offsets it
fixed at start, and publishes only when all of it is written: a backlog the loader cannot read
within the systemd unit's ``TimeoutStartSec`` (``loader_run_timeout``, 6 h) is stopped before it
publishes anything, every night, while the backlog grows (docs/loader.md, "Bounded catch-up").
Two ``loader.properties`` settings (Camus's ``kafka.max.pull.hrs`` / ``kafka.max.pull.minutes.per.task``,
Gobblin's ``extract.limit.*``)::

    max.records.per.run = 50000000     # 0 (default): no bound
    max.duration.per.run = 4h          # ms, s, m, h or d, e.g. 4h30m; 0 (default): no bound
    max.records.per.round = 10000000   # how much a run reads between two looks at the clock

``max.records.per.run`` cuts the plan before anything is read: the bound is shared out evenly
among the partitions that have records to read (one with fewer takes what it has, the rest goes to
the others), so no partition waits for another's backlog. ``max.duration.per.run`` reads the
(possibly cut) plan in rounds of at most ``max.records.per.round`` records, shared out the same way,
and starts no round after the duration has passed (the first round always runs: every run makes
progress). Either way the run publishes what it read with the same commit as any run (the manifest's
``ranges`` are the offsets read, ``bounded`` says which bound cut it and how many offsets are left),
and the next run starts there. A run overshoots ``max.duration.per.run`` by at most one round and its
publish: choose the round so that a round takes minutes.
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from headwater.loader.offsets import OffsetRange

__all__ = ["BoundsConfigError", "Deadline", "RunBounds", "parse_bounds", "parse_duration_ms", "rounds", "share"]

MAX_RECORDS, MAX_DURATION, ROUND_RECORDS = "max.records.per.run", "max.duration.per.run", "max.records.per.round"
DEFAULT_ROUND_RECORDS = 10_000_000

_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_DURATION = re.compile(r"(\d+)(ms|s|m|h|d)")


class BoundsConfigError(ValueError):
    """One line naming the property and the value."""


@dataclass(frozen=True)
class RunBounds:
    max_records: int = 0  # 0: no bound
    max_duration_ms: int = 0  # 0: no bound
    round_records: int = DEFAULT_ROUND_RECORDS

    @property
    def bounded(self) -> bool:
        return bool(self.max_records or self.max_duration_ms)


def parse_duration_ms(key: str, text: str) -> int:
    """``4h``, ``90m``, ``4h30m``, ``45s``, ``500ms``, ``1d``, or a plain number of milliseconds."""
    raw = text.strip().replace(" ", "").lower()
    if raw.isdigit():
        return int(raw)
    if raw and _DURATION.sub("", raw) == "":
        return sum(int(n) * _UNITS_MS[unit] for n, unit in _DURATION.findall(raw))
    raise BoundsConfigError(f"{key}: {text!r} is not a duration (milliseconds, or e.g. 4h, 90m, 4h30m, 45s)")


def parse_bounds(props: dict[str, str]) -> RunBounds:
    def count(key: str, default: int) -> int:
        raw = props.get(key, "").strip().replace("_", "")
        if not raw:
            return default
        if not raw.isdigit():
            raise BoundsConfigError(f"{key}: {props[key]!r} is not a whole number of records (0: no bound)")
        return int(raw)

    duration = props.get(MAX_DURATION, "").strip()
    round_records = count(ROUND_RECORDS, DEFAULT_ROUND_RECORDS)
    if round_records <= 0:
        raise BoundsConfigError(f"{ROUND_RECORDS}: {round_records} must be positive")
    return RunBounds(
        max_records=count(MAX_RECORDS, 0),
        max_duration_ms=parse_duration_ms(MAX_DURATION, duration) if duration else 0,
        round_records=round_records,
    )


def share(ranges: Sequence[OffsetRange], budget: int) -> list[OffsetRange]:
    """``ranges`` cut so that together they hold at most ``budget`` offsets (``budget <= 0``: not cut).

    Water-filling: every partition with offsets to read gets an equal share; one that needs less
    keeps only what it needs and the rest is shared among the others; a remainder smaller than the
    partition count goes one offset each, in the order given. The result has one range per input
    range, in the same order (empty ones included), each starting where its input starts.
    """
    if budget <= 0:
        return list(ranges)
    taken = [0] * len(ranges)
    active = [i for i, r in enumerate(ranges) if r.size > 0]
    left = budget
    while left > 0 and active:
        each = left // len(active)
        if each == 0:
            for i in active[:left]:
                taken[i] += 1
            break
        still = []
        for i in active:
            more = min(each, ranges[i].size - taken[i])
            taken[i] += more
            left -= more
            if taken[i] < ranges[i].size:
                still.append(i)
        active = still
    return [dataclasses.replace(r, end=r.start + taken[i]) if r.size > 0 else r for i, r in enumerate(ranges)]


def rounds(ranges: Sequence[OffsetRange], per_round: int) -> list[list[OffsetRange]]:
    """``ranges`` read in consecutive rounds of at most ``per_round`` offsets each (``per_round <=
    0``: one round), shared out by :func:`share`. Each round has one range per input range (empty
    where that partition reads nothing in it); round ``k + 1`` starts each partition where round
    ``k`` ended it, and together they cover ``ranges`` exactly."""
    left = list(ranges)
    out: list[list[OffsetRange]] = []
    while any(r.size > 0 for r in left):
        piece = share(left, per_round)
        out.append(piece)
        left = [dataclasses.replace(r, start=p.end) if r.size > 0 else r for r, p in zip(left, piece, strict=True)]
    return out


class Deadline:
    """``max.duration.per.run`` from the run's start, on an injected clock (seconds, monotonic)."""

    def __init__(self, max_ms: int, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.started = clock()
        self.at = self.started + max_ms / 1000.0 if max_ms > 0 else None

    def passed(self) -> bool:
        return self.at is not None and self._clock() >= self.at

    def elapsed(self) -> float:
        return self._clock() - self.started
