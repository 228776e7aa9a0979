"""Reading a keyed partition back with a stock client (confluent-kafka), for the compaction tests."""

from __future__ import annotations

import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

KeyedRecord = tuple[int, str, str | None]  # offset, key, value (None: a tombstone)


RawRecord = tuple[int, bytes | None, bytes | None]  # offset, key, value


def read_partition(
    bootstrap: str,
    topic: str,
    partition: int = 0,
    timeout: float = 60.0,
    isolation_level: str = "read_uncommitted",
    *,
    from_log_start: bool = False,
) -> list[RawRecord]:
    """Every record a consumer with ``isolation_level`` reads from offset 0 (with ``from_log_start``:
    from the partition's log start, OFFSET_BEGINNING) to the consumer's end of the partition, in order."""
    config: dict[str, str | bool] = {
        "bootstrap.servers": bootstrap,
        "group.id": "keyed-reader",
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "isolation.level": isolation_level,
    }
    if from_log_start:
        config["auto.offset.reset"] = "earliest"
    c = Consumer(config)
    c.assign([TopicPartition(topic, partition, OFFSET_BEGINNING if from_log_start else 0)])
    out: list[RawRecord] = []
    deadline = time.monotonic() + timeout
    try:
        while True:
            assert time.monotonic() < deadline, (
                f"the {isolation_level} consumer did not reach the end of {topic}-{partition}: {len(out)} read"
            )
            msg = c.poll(0.5)
            if msg is None:
                continue
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    return out
                continue
            offset = msg.offset()
            assert offset is not None
            out.append((offset, msg.key(), msg.value()))
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
