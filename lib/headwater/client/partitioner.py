"""Choosing a partition for a record, as the Java client does.

Keyed records go to ``toPositive(murmur2(key)) % numPartitions`` over all partitions, with the
exact ``org.apache.kafka.common.utils.Utils.murmur2`` (seed 0x9747b28c), so keys land where a
Java, librdkafka (``murmur2_random``) or kafka-python producer would put them. Records without a
key stick to one randomly chosen available partition until the producer closes a batch for it
(Kafka 2.4's sticky partitioner, KIP-480), which keeps batches large at low volume.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Protocol

__all__ = ["DefaultPartitioner", "Partitioner", "RoundRobinPartitioner", "murmur2", "to_positive"]

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes | bytearray | memoryview) -> int:
    """Kafka's murmur2 of ``data``: a signed 32-bit int, equal to Java's ``Utils.murmur2``."""
    buf = bytes(data)
    length = len(buf)
    h = (_SEED ^ length) & _MASK
    n4 = length & ~3
    for i in range(0, n4, 4):
        k = buf[i] | (buf[i + 1] << 8) | (buf[i + 2] << 16) | (buf[i + 3] << 24)
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    rest = length & 3
    if rest == 3:
        h ^= buf[n4 + 2] << 16
    if rest >= 2:
        h ^= buf[n4 + 1] << 8
    if rest >= 1:
        h ^= buf[n4]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(n: int) -> int:
    """Java's ``Utils.toPositive``: clear the sign bit (not ``abs``)."""
    return n & 0x7FFFFFFF


class Partitioner(Protocol):
    """What the producer needs from a partitioner.

    ``partitions`` are all partition ids of the topic (sorted), ``available`` those with a
    leader right now (possibly empty). ``on_new_batch`` is called when the producer closed the
    batch it was filling for (topic, partition), so a sticky partitioner can move on.
    """

    def partition(self, topic: str, key: bytes | None, partitions: Sequence[int], available: Sequence[int]) -> int: ...

    def on_new_batch(self, topic: str, partition: int) -> None: ...


class DefaultPartitioner:
    """murmur2 for keyed records, a sticky random partition for records without a key."""

    #: a null key's partition changes only after on_new_batch: the producer may skip asking again
    #: while the batch it last chose is open (``Producer.try_append_many``)
    sticky_until_new_batch = True

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()
        self._sticky: dict[str, int] = {}
        self._retired: dict[str, int] = {}  # the partition a topic just moved away from

    def partition(self, topic: str, key: bytes | None, partitions: Sequence[int], available: Sequence[int]) -> int:
        if not partitions:
            raise ValueError(f"topic {topic!r} has no partitions")
        if key is not None:
            return partitions[to_positive(murmur2(key)) % len(partitions)]
        sticky = self._sticky.get(topic)
        if sticky is not None and sticky in partitions and (not available or sticky in available):
            return sticky
        return self._choose(topic, partitions, available, exclude=self._retired.pop(topic, sticky))

    def on_new_batch(self, topic: str, partition: int) -> None:
        if self._sticky.get(topic) == partition:
            del self._sticky[topic]
            self._retired[topic] = partition

    def _choose(self, topic: str, partitions: Sequence[int], available: Sequence[int], exclude: int | None) -> int:
        pool = list(available or partitions)
        if len(pool) > 1 and exclude is not None and exclude in pool:
            pool.remove(exclude)
        chosen = self._rng.choice(pool)
        self._sticky[topic] = chosen
        return chosen


class RoundRobinPartitioner:
    """Every record (keyed or not) to the next partition in turn."""

    def __init__(self) -> None:
        self._next: dict[str, int] = {}

    def partition(self, topic: str, key: bytes | None, partitions: Sequence[int], available: Sequence[int]) -> int:
        pool = available or partitions
        i = self._next.get(topic, 0)
        self._next[topic] = i + 1
        return pool[i % len(pool)]

    def on_new_batch(self, topic: str, partition: int) -> None:
        pass
