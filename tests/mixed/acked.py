"""What a stock client (confluent-kafka, librdkafka) was acknowledged and what it reads back, for the
mixed-cluster tests (issue 45): records by (partition, offset), a compacted topic's latest values, a
transaction's committed records and a group's committed offsets."""

from __future__ import annotations

from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition

from tests.harness import records

#: (offset, key, value); None for a missing key or a tombstone
Record = tuple[int, str | None, str | None]


def _text(b: bytes | None) -> str | None:
    return None if b is None else b.decode()


@dataclass
class Acked:
    """Every record a producer was acknowledged, by partition, at its offset."""

    topic: str
    records: dict[int, list[Record]] = field(default_factory=dict)
    failed: list[str] = field(default_factory=list)

    def callback(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            self.failed.append(f"{err}")
            return
        partition, offset = msg.partition(), msg.offset()
        assert partition is not None and offset is not None
        self.records.setdefault(partition, []).append((offset, _text(msg.key()), _text(msg.value())))

    def count(self) -> int:
        return sum(len(r) for r in self.records.values())

    def sorted(self, partition: int) -> list[Record]:
        return sorted(self.records.get(partition, []))


def produce(
    producer: Producer, acked: Acked, values: list[tuple[str | None, str | None]], partition: int = -1, every: int = 1
) -> None:
    """Produce ``(key, value)`` pairs, flushing every ``every`` records (a batch each, for small
    segments); each acknowledgement lands in ``acked``."""
    for i, (k, v) in enumerate(values):
        producer.produce(
            acked.topic,
            key=None if k is None else k.encode(),
            value=None if v is None else v.encode(),
            partition=partition,
            on_delivery=acked.callback,
        )
        if (i + 1) % every == 0:
            assert producer.flush(60) == 0
    assert producer.flush(60) == 0


def read_partition(
    bootstrap: str, topic: str, partition: int, *, committed_only: bool = False, timeout: float = 60.0
) -> list[Record]:
    """Every record of the partition from its log start to its end (read_committed if asked)."""
    isolation_level = "read_committed" if committed_only else "read_uncommitted"
    raw = records.read_partition(bootstrap, topic, partition, timeout, isolation_level, from_log_start=True)
    return [(offset, _text(key), _text(value)) for offset, key, value in raw]


def latest_by_key(records: list[Record]) -> dict[str | None, str | None]:
    """What a reader in offset order ends up with, per key (None: deleted by a tombstone)."""
    return {k: v for _, k, v in sorted(records)}


def commit_offsets(bootstrap: str, group: str, offsets: dict[tuple[str, int], int]) -> None:
    """Commit ``offsets`` for ``group`` (OffsetCommit through the group coordinator, no subscription)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        tps = [TopicPartition(t, p, o) for (t, p), o in offsets.items()]
        c.assign(tps)
        c.commit(offsets=tps, asynchronous=False)
    finally:
        c.close()


def committed_offsets(bootstrap: str, group: str, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
    """The group's committed offsets (OffsetFetch) for ``partitions``; -1001 where none."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        got = c.committed([TopicPartition(t, p) for t, p in partitions], timeout=60)
        return {(tp.topic, tp.partition): tp.offset for tp in got}
    finally:
        c.close()
