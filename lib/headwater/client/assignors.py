"""Kafka's consumer protocol (``protocol_type`` "consumer") and its ``range`` and ``roundrobin``
assignors, byte for byte and partition for partition as Kafka's clients and librdkafka do them, so
that Headwater and stock consumers can share a group (whichever member is the leader assigns).

Subscription (JoinGroup metadata): version int16, topics [string], user_data bytes (nullable).
Assignment (SyncGroup): version int16, topics [topic string, partitions [int32]], user_data bytes.
Version 0 is written (Kafka 2.3); later versions' extra fields (owned partitions, KIP-429) are
ignored on read.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from headwater.protocol.errors import DecodeError
from headwater.protocol.primitives import Reader, Writer

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class Subscription:
    topics: tuple[str, ...]
    user_data: bytes | None = None

    def encode(self) -> bytes:
        w = Writer()
        w.int16(0)
        w.int32(len(self.topics))
        for t in self.topics:
            w.string(t)
        w.nullable_bytes(self.user_data)
        return w.getvalue()

    @classmethod
    def decode(cls, data: bytes) -> Subscription:
        r = Reader(data)
        r.int16()
        topics = tuple(r.string() for _ in range(r.array_length()))
        user_data = r.nullable_bytes() if r.remaining() >= 4 else None
        return cls(topics, user_data)


@dataclass(frozen=True)
class Assignment:
    partitions: tuple[TopicPartition, ...]
    user_data: bytes | None = None

    def encode(self) -> bytes:
        by_topic: dict[str, list[int]] = {}
        for t, p in sorted(self.partitions):
            by_topic.setdefault(t, []).append(p)
        w = Writer()
        w.int16(0)
        w.int32(len(by_topic))
        for t, ps in by_topic.items():
            w.string(t)
            w.int32(len(ps))
            for p in ps:
                w.int32(p)
        w.nullable_bytes(self.user_data)
        return w.getvalue()

    @classmethod
    def decode(cls, data: bytes) -> Assignment:
        """An empty assignment for empty bytes (a member the leader gave nothing)."""
        if not data:
            return cls(())
        r = Reader(data)
        r.int16()
        out: list[TopicPartition] = []
        for _ in range(r.array_length()):
            topic = r.string()
            out.extend((topic, r.int32()) for _ in range(r.array_length()))
        user_data = r.nullable_bytes() if r.remaining() >= 4 else None
        return cls(tuple(out), user_data)


class Assignor(Protocol):
    name: str

    def assign(
        self, partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
    ) -> dict[str, list[TopicPartition]]:
        """member id -> its partitions, for every member in ``subscriptions``."""
        ...


class RangeAssignor:
    """Per topic: the members subscribed to it, sorted by member id, each get a consecutive range;
    the first ``partitions % members`` get one more (Kafka's RangeAssignor)."""

    name = "range"

    def assign(
        self, partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
    ) -> dict[str, list[TopicPartition]]:
        out: dict[str, list[TopicPartition]] = {m: [] for m in subscriptions}
        for topic, count in sorted(partitions_per_topic.items()):
            members = sorted(m for m, s in subscriptions.items() if topic in s.topics)
            if not members:
                continue
            per, extra = divmod(count, len(members))
            start = 0
            for i, m in enumerate(members):
                n = per + (1 if i < extra else 0)
                out[m].extend((topic, p) for p in range(start, start + n))
                start += n
        return out


class RoundRobinAssignor:
    """Every subscribed partition, sorted by (topic, partition), dealt to the members sorted by
    member id in turn, skipping members not subscribed to its topic (Kafka's RoundRobinAssignor)."""

    name = "roundrobin"

    def assign(
        self, partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
    ) -> dict[str, list[TopicPartition]]:
        out: dict[str, list[TopicPartition]] = {m: [] for m in subscriptions}
        members = sorted(subscriptions)
        if not members:
            return out
        i = 0
        for topic in sorted(partitions_per_topic):
            if not any(topic in subscriptions[m].topics for m in members):
                continue
            for p in range(partitions_per_topic[topic]):
                while topic not in subscriptions[members[i % len(members)]].topics:
                    i += 1
                out[members[i % len(members)]].append((topic, p))
                i += 1
        return out


ASSIGNORS: dict[str, Assignor] = {a.name: a for a in (RangeAssignor(), RoundRobinAssignor())}


def assignors_named(names: Iterable[str]) -> list[Assignor]:
    """The assignors for ``partition_assignment_strategy`` names, in preference order."""
    out = []
    for n in names:
        if n not in ASSIGNORS:
            raise ValueError(f"unknown partition assignment strategy {n!r}: use one of {', '.join(ASSIGNORS)}")
        out.append(ASSIGNORS[n])
    if not out:
        raise ValueError("at least one partition assignment strategy is needed")
    return out


def decode_subscription(data: bytes) -> Subscription:
    """A member's subscription; DecodeError (with what was wrong) for bytes that are not one."""
    try:
        return Subscription.decode(data)
    except DecodeError as e:
        raise DecodeError(f"a group member's subscription is not consumer-protocol bytes: {e}") from e
