"""Offset ranges: Spark Kafka-source offset specs resolved against a cluster, and split for parallelism.

Specs, as Spark's Kafka source takes them: ``"earliest"``, ``"latest"``, or JSON
``{"topic": {"0": 23, "1": -2}}`` where -2 means earliest and -1 latest. A range is
``[start, end)`` of one topic-partition; one Spark input partition reads one range.

Isolation (Kafka's ``isolation.level``): ``latest`` is the high watermark for read_uncommitted and
the last stable offset (the first offset of the oldest open transaction) for read_committed, as a
Kafka consumer's ``endOffsets`` answers; an explicit end beyond it cannot be read and fails.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass

from headwater.client.admin import Admin
from headwater.client.consumer import Consumer
from headwater.client.raw import READ_COMMITTED, READ_UNCOMMITTED
from headwater.client.security import ClientSecurity

EARLIEST = -2
LATEST = -1
#: Kafka's ``isolation.level`` values (Spark's ``kafka.isolation.level``) and the Fetch field's
ISOLATION_LEVELS = {"read_uncommitted": READ_UNCOMMITTED, "read_committed": READ_COMMITTED}


def isolation_level(value: str | None, option: str = "kafka.isolation.level") -> int:
    """The Fetch/ListOffsets isolation_level of an ``isolation.level`` value (default read_uncommitted)."""
    raw = (value or "read_uncommitted").strip().lower()
    if raw not in ISOLATION_LEVELS:
        raise OffsetSpecError(f"{option}: {raw!r} is not read_uncommitted or read_committed")
    return ISOLATION_LEVELS[raw]


@dataclass(frozen=True)
class OffsetRange:
    topic: str
    partition: int
    start: int
    end: int  # exclusive

    @property
    def size(self) -> int:
        return max(self.end - self.start, 0)


class OffsetSpecError(ValueError):
    """A startingOffsets / endingOffsets / subscribe value we cannot use (the message names it)."""


def parse_spec(option: str, value: str | None, default: str) -> str | dict[str, dict[int, int]]:
    raw = (value or default).strip()
    if raw in ("earliest", "latest"):
        return raw
    try:
        data = json.loads(raw)
        return {str(t): {int(p): int(o) for p, o in parts.items()} for t, parts in data.items()}
    except (ValueError, AttributeError, TypeError):
        raise OffsetSpecError(
            f'{option}: {raw!r} is not earliest, latest or JSON like {{"topic": {{"0": 23}}}}'
        ) from None


def _offset_for(
    spec: str | dict[str, dict[int, int]], option: str, topic: str, partition: int, missing: int | None = None
) -> int:
    if spec == "earliest":
        return EARLIEST
    if spec == "latest":
        return LATEST
    assert isinstance(spec, dict)
    if partition not in spec.get(topic, {}):  # as Spark's Kafka source: JSON offsets name every partition
        if missing is not None:
            return missing
        raise OffsetSpecError(f"{option}: no offset for {topic}-{partition} (JSON offsets must name every partition)")
    return spec[topic][partition]


@dataclass(frozen=True)
class DataLoss:
    """Offsets a read was asked for that the partition no longer holds (as Spark's failOnDataLoss).

    ``[from_offset, to_offset)`` is what is gone. Retention (or DeleteRecords) moved the log start
    offset past the offset to read: the gap is exact. A topic deleted and re-created (or a log
    truncated) leaves the offset to read above the new log end offset: what the old log held past
    ``from_offset`` is unknown, so the range is empty and ``records`` 0.
    """

    topic: str
    partition: int
    from_offset: int
    to_offset: int
    reason: str  # "source retention" or "topic re-created" (the gap event's reasons)
    log_start: int
    log_end: int

    @property
    def records(self) -> int:
        return self.to_offset - self.from_offset

    def describe(self) -> str:
        tp = f"{self.topic}-{self.partition}"
        if self.reason == "topic re-created":
            return (
                f"{tp}: the offset to read, {self.from_offset}, is above the log end offset {self.log_end}: "
                f"the topic was re-created (or its log truncated); offsets from {self.from_offset} of the old "
                f"log were never read, the new log holds [{self.log_start}, {self.log_end})"
            )
        return (
            f"{tp}: offsets [{self.from_offset}, {self.to_offset}) are gone ({self.records} record(s)): "
            f"the log start offset {self.log_start} is past the offset to read (retention or DeleteRecords)"
        )


class DataLossError(RuntimeError):
    """Offsets to read are gone and ``failOnDataLoss`` is true (the default): nothing was read."""

    def __init__(self, losses: list[DataLoss]) -> None:
        self.losses = losses
        super().__init__(
            "data loss: "
            + "; ".join(loss.describe() for loss in losses)
            + ". Nothing was read. To read what remains and record the gap instead, set failOnDataLoss=false."
        )


def plan_range(
    topic: str, partition: int, start: int, end: int, earliest: int, latest: int, end_name: str = "log end offset"
) -> tuple[OffsetRange, DataLoss | None]:
    """The range ``[start, end)`` of one topic-partition whose log holds ``[earliest, latest)``,
    and the data lost before it, if any.

    ``start``/``end`` are offsets or EARLIEST/LATEST. An explicit start the log no longer holds is
    a :class:`DataLoss` (the range then starts at the log start). An explicit end above the log end
    offset, or a start above the end, cannot be honoured and raises :class:`OffsetSpecError`
    naming the partition: a read never quietly returns less than asked.
    """
    tp = f"{topic}-{partition}"
    if start < EARLIEST or end < EARLIEST:
        raise OffsetSpecError(f"{tp}: offsets must be >= 0, -2 (earliest) or -1 (latest), not {start}/{end}")
    e = latest if end == LATEST else earliest if end == EARLIEST else end
    if e > latest:
        raise OffsetSpecError(
            f"endingOffsets: {tp} ends at {e}, beyond its {end_name} {latest}: cannot read offsets that do not exist"
        )
    if start == EARLIEST:
        s, loss = earliest, None
    elif start == LATEST:
        s, loss = latest, None
    elif start > latest:
        s, loss = earliest, DataLoss(topic, partition, start, start, "topic re-created", earliest, latest)
    elif start < earliest:
        gone_to = min(earliest, max(e, start))  # an explicit end below the log start: all of it is gone
        s, loss = gone_to, DataLoss(topic, partition, start, gone_to, "source retention", earliest, latest)
    else:
        s, loss = start, None
    if s > e:
        raise OffsetSpecError(f"{tp}: the starting offset {s} is above the ending offset {e}")
    return OffsetRange(topic, partition, s, e), loss


@dataclass(frozen=True)
class Plan:
    """The ranges to read (one per topic-partition, empty ones too) and the data lost before them."""

    ranges: list[OffsetRange]
    losses: list[DataLoss]


async def _resolve(
    bootstrap: str,
    subscribe: list[str] | None,
    pattern: str | None,
    starting: str | dict[str, dict[int, int]],
    ending: str | dict[str, dict[int, int]],
    missing_start: int | None,
    security: ClientSecurity | None = None,
    isolation: int = READ_UNCOMMITTED,
) -> Plan:
    end_name = "last stable offset" if isolation == READ_COMMITTED else "log end offset"
    async with Admin(bootstrap, security=security) as admin:
        consumer = Consumer("", cluster=admin.cluster, isolation_level=isolation)
        if subscribe is not None:
            topics = subscribe
        else:
            assert pattern is not None
            regex = re.compile(pattern)
            topics = [t for t in await admin.list_topics(include_internal=False) if regex.fullmatch(t)]
        ranges: list[OffsetRange] = []
        losses: list[DataLoss] = []
        for topic in sorted(topics):
            for p in sorted(await consumer.partitions_for(topic)):
                earliest = await consumer.earliest_offset(topic, p)
                latest = await consumer.latest_offset(topic, p)
                start = _offset_for(starting, "startingOffsets", topic, p, missing_start)
                end = _offset_for(ending, "endingOffsets", topic, p)
                r, loss = plan_range(topic, p, start, end, earliest, latest, end_name)
                ranges.append(r)
                if loss:
                    losses.append(loss)
        return Plan(ranges, losses)


def resolve(
    bootstrap: str,
    *,
    subscribe: list[str] | None = None,
    pattern: str | None = None,
    starting: str | dict[str, dict[int, int]] = "earliest",
    ending: str | dict[str, dict[int, int]] = "latest",
    missing_start: int | None = None,
    fail_on_data_loss: bool = True,
    security: ClientSecurity | None = None,
    isolation: int = READ_UNCOMMITTED,
) -> Plan:
    """The ranges to read, with end offsets fixed now (when ``latest``: the high watermark, or
    the last stable offset for ``isolation`` read_committed).

    ``missing_start``: the start of a partition that JSON ``starting`` does not name (the loader
    passes EARLIEST for partitions never loaded); None makes that an error, as in Spark.
    Offsets the log no longer holds raise :class:`DataLossError` when ``fail_on_data_loss``;
    otherwise the ranges start at the log start and the plan lists the losses.
    """
    if (subscribe is None) == (pattern is None):
        raise OffsetSpecError("exactly one of subscribe and subscribePattern must be set")
    plan = asyncio.run(_resolve(bootstrap, subscribe, pattern, starting, ending, missing_start, security, isolation))
    if plan.losses and fail_on_data_loss:
        raise DataLossError(plan.losses)
    return plan


def split(ranges: Iterable[OffsetRange], min_partitions: int) -> list[OffsetRange]:
    """One range per topic-partition with data, the largest split further until there are at least
    ``min_partitions`` (as Spark's KafkaOffsetRangeCalculator does, in proportion to size)."""
    ranges = [r for r in ranges if r.size > 0]
    total = sum(r.size for r in ranges)
    if min_partitions <= len(ranges) or total == 0:
        return ranges
    out: list[OffsetRange] = []
    for r in ranges:
        parts = max(1, round(r.size * min_partitions / total))
        step = -(-r.size // parts)
        out.extend(OffsetRange(r.topic, r.partition, s, min(s + step, r.end)) for s in range(r.start, r.end, step))
    return out


def to_json(ranges: Iterable[OffsetRange], which: str) -> str:
    """Spark's per-partition JSON of the ranges' ``start`` or ``end`` offsets."""
    out: dict[str, dict[str, int]] = {}
    for r in ranges:
        out.setdefault(r.topic, {})[str(r.partition)] = r.start if which == "start" else r.end
    return json.dumps(out, sort_keys=True)
