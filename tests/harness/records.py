"""Reading a keyed partition back with a stock client (confluent-kafka), for the compaction tests."""

from __future__ import annotations

import time
from collections.abc import Iterable

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, TopicPartition

KeyedRecord = tuple[int, str, str | None]  # offset, key, value (None: a tombstone)


RawRecord = tuple[int, bytes | None, bytes | None]  # offset, key, value


def read_partitions(
    bootstrap: str,
    topic: str,
    partitions: Iterable[int],
    isolation_level: str = "read_uncommitted",
    timeout: float = 60.0,
    *,
    from_log_start: bool = False,
) -> list[Message]:
    """Every message one consumer with ``isolation_level`` reads of ``partitions`` from offset 0
    (with ``from_log_start``: from each one's log start, OFFSET_BEGINNING) to the consumer's end of
    each; each partition's in offset order."""
    config: dict[str, str | bool] = {
        "bootstrap.servers": bootstrap,
        "group.id": f"verify-{isolation_level}",
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "isolation.level": isolation_level,
    }
    if from_log_start:
        config["auto.offset.reset"] = "earliest"
    want = set(partitions)
    c = Consumer(config)
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING if from_log_start else 0) for p in sorted(want)])
    out: list[Message] = []
    at_end: set[int | None] = set()
    deadline = time.monotonic() + timeout
    try:
        while at_end != want:
            assert time.monotonic() < deadline, (
                f"the {isolation_level} consumer did not reach the end of {topic} partitions "
                f"{[p for p in sorted(want) if p not in at_end]}: {len(out)} read"
            )
            msg = c.poll(0.5)
            if msg is None:
                continue
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    at_end.add(msg.partition())
                continue
            at_end.discard(msg.partition())
            out.append(msg)
    finally:
        c.close()
    return out


def read_partition(
    bootstrap: str,
    topic: str,
    partition: int = 0,
    timeout: float = 60.0,
    isolation_level: str = "read_uncommitted",
    *,
    from_log_start: bool = False,
) -> list[RawRecord]:
    """Every record of one partition (:func:`read_partitions`), in order."""
    msgs = read_partitions(bootstrap, topic, [partition], isolation_level, timeout, from_log_start=from_log_start)
    return [(_offset(m), m.key(), m.value()) for m in msgs]


def _offset(m: Message) -> int:
    offset = m.offset()
    assert offset is not None
    return offset


def read_from_start(bootstrap: str, topic: str, partition: int = 0, timeout: float = 60.0) -> list[KeyedRecord]:
    """Every record of the partition from offset 0 to its end, keys and values decoded."""
    return [
        (offset, (key or b"").decode(), None if value is None else value.decode())
        for offset, key, value in read_partition(bootstrap, topic, partition, timeout)
    ]


def latest_by_key(records: list[KeyedRecord]) -> dict[str, str | None]:
    """What a consumer reading the records in offset order ends up with, per key."""
    return {k: v for _, k, v in sorted(records)}
