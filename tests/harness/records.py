"""Reading a keyed partition back with a stock client (confluent-kafka), for the compaction tests."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, KafkaError, TopicPartition

KeyedRecord = tuple[int, str, str | None]  # offset, key, value (None: a tombstone)


RawRecord = tuple[int, bytes | None, bytes | None]  # offset, key, value


def read_partition(
    bootstrap: str,
    topic: str,
    partition: int = 0,
    timeout: float = 60.0,
    isolation_level: str = "read_uncommitted",
) -> list[RawRecord]:
    """Every record a consumer with ``isolation_level`` reads from offset 0 to the consumer's end of
    the partition, in order."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "keyed-reader",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": isolation_level,
        }
    )
    c.assign([TopicPartition(topic, partition, 0)])
    out: list[RawRecord] = []
    deadline = time.monotonic() + timeout
    try:
        while True:
            assert time.monotonic() < deadline, f"the {isolation_level} consumer did not reach the end of the partition"
            msg = c.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    return out
                continue
            out.append((msg.offset(), msg.key(), msg.value()))
    finally:
        c.close()


def read_from_start(bootstrap: str, topic: str, partition: int = 0, timeout: float = 60.0) -> list[KeyedRecord]:
    """Every record of the partition from offset 0 to its end, keys and values decoded."""
    return [
        (offset, (key or b"").decode(), None if value is None else value.decode())
        for offset, key, value in read_partition(bootstrap, topic, partition, timeout)
    ]


def latest_by_key(records: list[KeyedRecord]) -> dict[str, str | None]:
    """What a consumer reading the records in offset order ends up with, per key."""
    return {k: v for _, k, v in sorted(records)}
