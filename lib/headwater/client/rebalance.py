"""Algorithm 1 of the seeds: the range assignment of a topic's partitions to consumer threads.

Pure functions, no ZooKeeper: :func:`range_assign` is what every member of a consumer group computes
independently during a rebalance, so that all of them agree on who owns what without talking to each
other. Consumer threads are named ``<consumer id>-<n>`` (Kafka's ``ConsumerThreadId``) and sorted by
``(consumer id, n)``; partitions are sorted by id. With ``N = len(partitions) // len(threads)`` and
``M = len(partitions) % len(threads)``, thread ``i`` gets the ``N`` (``N + 1`` when ``i < M``)
partitions starting at ``i * N + min(i, M)``. Threads past the partitions get nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

__all__ = ["ConsumerThreadId", "assign_group", "range_assign", "thread_ids"]


class ConsumerThreadId(str):
    """``<consumer id>-<n>``; sorts by (consumer id, n), so ``c-10`` comes after ``c-9``."""

    __slots__ = ()

    @property
    def consumer(self) -> str:
        return self.rpartition("-")[0]

    @property
    def thread(self) -> int:
        return int(self.rpartition("-")[2])

    def sort_key(self) -> tuple[str, int]:
        return (self.consumer, self.thread)

    @classmethod
    def of(cls, consumer_id: str, n: int) -> ConsumerThreadId:
        return cls(f"{consumer_id}-{n}")


def thread_ids(consumer_id: str, n_streams: int) -> list[ConsumerThreadId]:
    """The thread ids of one consumer subscribing to a topic with ``n_streams`` streams."""
    return [ConsumerThreadId.of(consumer_id, i) for i in range(n_streams)]


def range_assign(partitions: Iterable[int], threads: Iterable[str]) -> dict[str, list[int]]:
    """Every thread's share of ``partitions`` (each thread appears, possibly with an empty list)."""
    parts = sorted(set(partitions))
    ordered = sorted({ConsumerThreadId(t) for t in threads}, key=ConsumerThreadId.sort_key)
    out: dict[str, list[int]] = {str(t): [] for t in ordered}
    if not ordered:
        return out
    n, m = divmod(len(parts), len(ordered))
    for i, t in enumerate(ordered):
        start = i * n + min(i, m)
        count = n + (1 if i < m else 0)
        out[str(t)] = parts[start : start + count]
    return out


def assign_group(
    partitions_per_topic: Mapping[str, Iterable[int]], threads_per_topic: Mapping[str, Iterable[str]]
) -> dict[str, dict[str, list[int]]]:
    """:func:`range_assign` for each topic: ``{topic: {thread: [partition, ...]}}``."""
    return {
        topic: range_assign(partitions_per_topic.get(topic, ()), threads)
        for topic, threads in threads_per_topic.items()
    }
