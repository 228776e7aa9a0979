"""The headwater Spark data source against a real broker: every record, every column, by offset ranges."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Producer

from headwater.loader.offsets import OffsetRange, split
from tests.harness.broker import BrokerProcess
from tests.harness.clock import RECENT_MS


def produce(bootstrap: str, topic: str, n: int) -> list[tuple[int, bytes, bytes, list[tuple[str, bytes]], int]]:
    sent = []
    p = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 5, "compression.codec": "zstd", "partitioner": "murmur2_random"}
    )
    for i in range(n):
        key, value = f"member-{i % 13}".encode(), f"view-{i}".encode()
        headers = [("origin.dc", b"dc1"), ("i", str(i).encode())]
        ts = RECENT_MS + i * 1000
        p.produce(topic, key=key, value=value, headers=headers, timestamp=ts)
        sent.append((ts, key, value, headers, i))
    p.flush(60)
    return sent


def test_reads_every_record_with_spark_kafka_columns(spark: Any, broker_factory: Callable[..., BrokerProcess]) -> None:
    b = broker_factory(0, num_partitions=3, auto_create_topics_enable="true")
    sent = produce(b.bootstrap, "views", 600)
    df = (
        spark.read.format("headwater")
        .option("kafka.bootstrap.servers", b.bootstrap)
        .option("subscribe", "views")
        .option("minPartitions", 6)
        .load()
    )
    assert df.columns == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers"]
    assert df.rdd.getNumPartitions() >= 6  # three topic-partitions, split for minPartitions
    rows = df.collect()
    assert len(rows) == 600
    assert len({(r.partition, r.offset) for r in rows}) == 600
    got = {bytes(r.value): r for r in rows}
    for ts, key, value, headers, _ in sent:
        r = got[value]
        assert bytes(r.key) == key and r.topic == "views"
        assert int(r.timestamp.timestamp() * 1000) == ts and r.timestampType == 0
        assert [(h.key, bytes(h.value)) for h in r.headers] == headers

    # Per-partition JSON offsets: exactly the range asked for.
    ranged = (
        spark.read.format("headwater")
        .option("kafka.bootstrap.servers", b.bootstrap)
        .option("subscribePattern", "vie.*")
        .option("startingOffsets", json.dumps({"views": {"0": 5, "1": -2, "2": -1}}))
        .option("endingOffsets", json.dumps({"views": {"0": 15, "1": 3, "2": -1}}))
        .load()
        .collect()
    )
    assert sorted((r.partition, r.offset) for r in ranged) == [(0, o) for o in range(5, 15)] + [
        (1, o) for o in range(3)
    ]

    # An explicit end the log does not reach is not quietly cut short: the read fails, naming it.
    ends = {p: n for p, n in ((p, sum(1 for r in rows if r.partition == p)) for p in range(3))}
    beyond = json.dumps({"views": {str(p): n + (10 if p == 1 else 0) for p, n in ends.items()}})
    with pytest.raises(Exception, match=r"views-1 ends at \d+, beyond its log end offset"):
        (
            spark.read.format("headwater")
            .option("kafka.bootstrap.servers", b.bootstrap)
            .option("subscribe", "views")
            .option("endingOffsets", beyond)
            .load()
            .collect()
        )


def test_split_keeps_every_offset_once() -> None:
    ranges = [OffsetRange("t", 0, 0, 1000), OffsetRange("t", 1, 10, 20), OffsetRange("u", 0, 5, 5)]
    parts = split(ranges, 8)
    assert len(parts) >= 8
    covered = sorted((r.topic, r.partition, o) for r in parts for o in range(r.start, r.end))
    assert covered == [("t", 0, o) for o in range(1000)] + [("t", 1, o) for o in range(10, 20)]
