"""Offset ranges: Spark Kafka-source offset specs resolved against a cluster, and split for parallelism.

Specs, as Spark's Kafka source takes them: ``"earliest"``, ``"latest"``, or JSON
``{"topic": {"0": 23, "1": -2}}`` where -2 means earliest and -1 latest. A range is
``[start, end)`` of one topic-partition; one Spark input partition reads one range.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass

from headwater.client.admin import Admin
from headwater.client.consumer import Consumer

EARLIEST = -2
LATEST = -1


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


def _offset_for(spec: str | dict[str, dict[int, int]], topic: str, partition: int, default: int) -> int:
    if spec == "earliest":
        return EARLIEST
    if spec == "latest":
        return LATEST
    assert isinstance(spec, dict)
    return spec.get(topic, {}).get(partition, default)


async def _resolve(
    bootstrap: str,
    subscribe: list[str] | None,
    pattern: str | None,
    starting: str | dict[str, dict[int, int]],
    ending: str | dict[str, dict[int, int]],
) -> list[OffsetRange]:
    async with Admin(bootstrap) as admin:
        consumer = Consumer("", cluster=admin.cluster)
        if subscribe is not None:
            topics = subscribe
        else:
            assert pattern is not None
            regex = re.compile(pattern)
            topics = [t for t in await admin.list_topics(include_internal=False) if regex.fullmatch(t)]
        ranges: list[OffsetRange] = []
        for topic in sorted(topics):
            for p in sorted(await consumer.partitions_for(topic)):
                earliest = await consumer.earliest_offset(topic, p)
                latest = await consumer.latest_offset(topic, p)
                start = _offset_for(starting, topic, p, EARLIEST)
                end = _offset_for(ending, topic, p, LATEST)
                start = earliest if start == EARLIEST else latest if start == LATEST else max(start, earliest)
                end = latest if end == LATEST else earliest if end == EARLIEST else min(end, latest)
                ranges.append(OffsetRange(topic, p, start, max(end, start)))
        return ranges


def resolve(
    bootstrap: str,
    *,
    subscribe: list[str] | None = None,
    pattern: str | None = None,
    starting: str | dict[str, dict[int, int]] = "earliest",
    ending: str | dict[str, dict[int, int]] = "latest",
) -> list[OffsetRange]:
    """The ranges to read, with end offsets fixed now (the high watermark when ``latest``)."""
    if (subscribe is None) == (pattern is None):
        raise OffsetSpecError("exactly one of subscribe and subscribePattern must be set")
    return asyncio.run(_resolve(bootstrap, subscribe, pattern, starting, ending))


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
