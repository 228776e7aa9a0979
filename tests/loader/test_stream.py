"""``readStream.format("headwater")`` and Spark's Kafka option names, against one real broker per module.

The session's Spark (tests/loader/conftest.py) and one broker are shared by every test here.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from headwater.loader.stream import rate_limit
from headwater.testing.zookeeper import ZooKeeperServer
from tests.harness.broker import BrokerProcess
from tests.harness.clock import RECENT_MS

_chroot = itertools.count()


@pytest.fixture(scope="module")
def kafka(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(
        tmp_path_factory.mktemp("stream-broker"),
        0,
        f"{zookeeper.connect}/stream{next(_chroot)}",
        num_partitions=3,
        auto_create_topics_enable="true",
    )
    b.start()
    yield b
    b.stop(timeout=5)


def produce(
    bootstrap: str, topic: str, n: int, start: int = 0
) -> dict[bytes, tuple[bytes, list[tuple[str, bytes]], int]]:
    """n records, the i-th to partition i % 3 stamped RECENT_MS + i seconds; {value: (key, headers, timestamp)}."""
    sent = {}
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
    for i in range(start, start + n):
        key, value = f"k-{i % 7}".encode(), f"{topic}-{i}".encode()
        headers = [("origin.dc", b"dc1"), ("i", str(i).encode())]
        ts = RECENT_MS + i * 1000
        p.produce(topic, key=key, value=value, headers=headers, timestamp=ts, partition=i % 3)
        sent[value] = (key, headers, ts)
    assert p.flush(60) == 0
    return sent


CONNECT_BACK = "failed to connect back"  # Spark's fixed 10 s for a query's planner process to start
ATTEMPTS = 6  # seen: three misses in a row at a load average of 90 on two cores


def run_to_end(build: Callable[[], Any], timeout: float = 600) -> Any:
    """Run an AvailableNow query to its end; started again (from its checkpoint) when its planner
    process missed Spark's fixed 10 s to connect back, as it can on a loaded machine."""
    for attempt in range(ATTEMPTS):
        q = build()
        try:
            assert q.awaitTermination(timeout), f"the query did not end in {timeout}s"
        except Exception as e:
            if CONNECT_BACK in str(e) and attempt < ATTEMPTS - 1:
                continue
            raise
        return q
    raise AssertionError("unreachable")


def started(build: Callable[[], Any], timeout: float = 300) -> Any:
    """A continuous query that has completed its first trigger (retried as :func:`run_to_end`)."""
    for attempt in range(ATTEMPTS):
        q = build()
        deadline = time.monotonic() + timeout
        while q.isActive and not q.recentProgress and time.monotonic() < deadline:
            time.sleep(0.2)
        if q.isActive and q.recentProgress:
            return q
        e = q.exception()
        q.stop()
        if e is not None and CONNECT_BACK in str(e) and attempt < ATTEMPTS - 1:
            continue
        raise AssertionError(f"the query did not start: {e}")
    raise AssertionError("unreachable")


def _check_rows(rows: list[Any], sent: dict[bytes, tuple[bytes, list[tuple[str, bytes]], int]], topic: str) -> None:
    assert len(rows) == len(sent)
    assert len({(r.partition, r.offset) for r in rows}) == len(sent)
    assert {bytes(r.value) for r in rows} == set(sent)
    for r in rows:
        key, headers, ts = sent[bytes(r.value)]
        assert bytes(r.key) == key and r.topic == topic
        assert [(h.key, bytes(h.value)) for h in r.headers] == headers
        assert int(r.timestamp.timestamp() * 1000) == ts


def test_rate_limit_shares_the_cap_in_proportion() -> None:
    start = {("t", 0): 0, ("t", 1): 10, ("t", 2): 5}
    latest = {("t", 0): 100, ("t", 1): 30, ("t", 2): 5, ("t", 3): 50}  # t-3 new: starts at its latest
    end = rate_limit(start, latest, 60)
    assert sum(end[tp] - start.get(tp, latest[tp]) for tp in latest) == 60
    assert end[("t", 2)] == 5 and end[("t", 3)] == 50
    assert end[("t", 0)] - 0 == 50 and end[("t", 1)] - 10 == 10  # 100 and 20 waiting: 5 to 1
    assert rate_limit(start, latest, 1000) == latest


@pytest.mark.timeout(900)  # Spark (session start-up on first use, micro-batches): slow on a loaded machine
def test_stream_max_offsets_per_trigger_available_now_and_restart(
    spark: Any, kafka: BrokerProcess, tmp_path: Path
) -> None:
    """AvailableNow with maxOffsetsPerTrigger: several capped batches, every record once; a second run
    from the same checkpoint reads only what came since."""
    sent = produce(kafka.bootstrap, "stream-views", 200)
    out, ck = tmp_path / "out", tmp_path / "ck"

    def run() -> Any:
        q = run_to_end(
            lambda: (
                spark.readStream.format("headwater")
                .option("kafka.bootstrap.servers", kafka.bootstrap)
                .option("subscribe", "stream-views")
                .option("startingOffsets", "earliest")
                .option("maxOffsetsPerTrigger", 60)
                .load()
                .writeStream.format("parquet")
                .option("checkpointLocation", str(ck))
                .trigger(availableNow=True)
                .start(str(out))
            )
        )
        assert not q.isActive and q.exception() is None
        return q

    q = run()
    rows = [p for p in q.recentProgress if p["numInputRows"]]
    assert max(p["numInputRows"] for p in rows) <= 60 and len(rows) >= 4
    _check_rows(spark.read.parquet(str(out)).collect(), sent, "stream-views")
    offsets = json.loads(q.lastProgress["sources"][0]["endOffset"])
    assert sum(offsets["stream-views"].values()) == 200

    more = produce(kafka.bootstrap, "stream-views", 30, start=200)
    run()
    _check_rows(spark.read.parquet(str(out)).collect(), {**sent, **more}, "stream-views")


@pytest.mark.timeout(900)  # Spark (session start-up on first use, micro-batches): slow on a loaded machine
def test_stream_starts_latest_by_default_and_takes_new_partitions(spark: Any, kafka: BrokerProcess) -> None:
    """startingOffsets defaults to latest for a stream, as Spark's; a topic created later that matches
    subscribePattern is read from its start."""
    produce(kafka.bootstrap, "late-a", 30)  # before the query: not read
    q = started(
        lambda: (
            spark.readStream.format("headwater")
            .option("kafka.bootstrap.servers", kafka.bootstrap)
            .option("subscribePattern", "late-.*")
            .load()
            .writeStream.format("memory")
            .queryName("late_rows")
            .trigger(processingTime="500 milliseconds")
            .start()
        )
    )
    try:
        deadline = time.monotonic() + 300
        sent = produce(kafka.bootstrap, "late-a", 20, start=30)
        sent_b = produce(kafka.bootstrap, "late-b", 25)
        want = {*sent, *sent_b}
        got: list[bytes] = []
        while time.monotonic() < deadline:
            got = [bytes(r.value) for r in spark.sql("select value from late_rows").collect()]
            if len(got) >= len(want):
                break
            time.sleep(0.5)
        assert sorted(got) == sorted(want)
    finally:
        q.stop()


@pytest.mark.timeout(900)  # Spark (session start-up on first use, micro-batches): slow on a loaded machine
def test_spark_kafka_options(spark: Any, kafka: BrokerProcess) -> None:
    """assign, the timestamp options, includeHeaders, and a clear error naming each bad option."""
    sent = produce(kafka.bootstrap, "opts", 90)

    def read(**options: Any) -> list[Any]:
        r = spark.read.format("headwater").option("kafka.bootstrap.servers", kafka.bootstrap)
        for k, v in options.items():
            r = r.option(k, v)
        return list(r.load().collect())

    everything = read(subscribe="opts")
    _check_rows(everything, sent, "opts")
    by_tp = {(r.partition, r.offset): r for r in everything}
    ts_of = {(r.partition, r.offset): int(r.timestamp.timestamp() * 1000) for r in everything}

    # assign: those partitions only.
    got = read(assign=json.dumps({"opts": [0, 2]}))
    assert sorted((r.partition, r.offset) for r in got) == sorted(k for k in by_tp if k[0] in (0, 2))

    # startingTimestamp: every partition from its first record at or after it.
    cut = RECENT_MS + 40_000
    got = read(subscribe="opts", startingTimestamp=str(cut))
    assert sorted((r.partition, r.offset) for r in got) == sorted(k for k, ts in ts_of.items() if ts >= cut)

    # startingOffsetsByTimestamp / endingOffsetsByTimestamp per partition (ending exclusive, as Kafka's
    # offsetsForTimes: the first offset at or after the timestamp).
    lo, hi = RECENT_MS + 20_000, RECENT_MS + 70_000
    got = read(
        subscribe="opts",
        startingOffsetsByTimestamp=json.dumps({"opts": {str(p): lo for p in range(3)}}),
        endingOffsetsByTimestamp=json.dumps({"opts": {str(p): hi for p in range(3)}}),
    )
    assert sorted((r.partition, r.offset) for r in got) == sorted(k for k, ts in ts_of.items() if lo <= ts < hi)

    # An ending timestamp after every record ends at the latest offset; a starting one fails, unless
    # startingOffsetsByTimestampStrategy=latest.
    future = RECENT_MS + 10_000_000
    assert len(read(subscribe="opts", endingTimestamp=str(future))) == 90
    with pytest.raises(Exception, match=r"startingTimestamp: no record of opts-\d has a timestamp at or after"):
        read(subscribe="opts", startingTimestamp=str(future))
    assert read(subscribe="opts", startingTimestamp=str(future), startingOffsetsByTimestampStrategy="latest") == []

    # includeHeaders=false: Spark's columns without headers.
    df = spark.read.format("headwater").option("kafka.bootstrap.servers", kafka.bootstrap)
    df = df.option("subscribe", "opts").option("includeHeaders", "false").load()
    assert df.columns == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
    assert df.count() == 90

    bad = [
        (
            {"subscribe": "opts", "assign": '{"opts": [0]}'},
            "exactly one of the options assign, subscribe and subscribePattern",
        ),
        ({"assign": "opts-0"}, "option assign: 'opts-0' is not JSON"),
        ({"assign": '{"opts": [7]}'}, "option assign: opts has no partition 7"),
        ({"subscribe": "opts", "startingOffsets": "first"}, "startingOffsets: 'first' is not earliest, latest or JSON"),
        (
            {"subscribe": "opts", "startingTimestamp": "yesterday"},
            "option startingTimestamp: 'yesterday' is not a timestamp",
        ),
        ({"subscribe": "opts", "startingOffsetsByTimestamp": '{"opts": {"0": 1}}'}, "no timestamp for opts-1"),
        ({"subscribe": "opts", "endingOffsets": '{"other": {"0": 1}}'}, "other-0 not in the partitions read"),
        ({"subscribe": "opts", "includeHeaders": "yes"}, "option includeHeaders: 'yes' is not true or false"),
        ({"subscribe": "opts", "kafka.isolation.level": "committed"}, "kafka.isolation.level: 'committed' is not"),
        (
            {"subscribe": "opts", "kafka.auto.offset.reset": "earliest"},
            "option kafka.auto.offset.reset is not supported",
        ),
        ({"subscribe": "opts", "subscribePattern": ""}, None),  # an empty one is not set: fine
    ]
    for options, message in bad:
        if message is None:
            assert len(read(**options)) == 90
            continue
        with pytest.raises(Exception, match=message.replace("(", r"\(").replace(")", r"\)")):
            read(**options)

    for options, message in [
        ({"subscribe": "opts", "endingOffsets": "latest"}, "option endingOffsets is not valid in streaming queries"),
        ({"subscribe": "opts", "maxOffsetsPerTrigger": "0"}, "option maxOffsetsPerTrigger: 0 must be >= 1"),
        ({"subscribe": "opts", "maxTriggerDelay": "soon"}, "option maxTriggerDelay: 'soon' is not a duration"),
    ]:
        s = spark.readStream.format("headwater").option("kafka.bootstrap.servers", kafka.bootstrap)  # option() mutates
        for k, v in options.items():
            s = s.option(k, v)
        with pytest.raises(Exception, match=message):
            run_to_end(
                lambda s=s: (
                    s.load().writeStream.format("memory").queryName("bad_opts").trigger(availableNow=True).start()
                )
            )


@pytest.mark.timeout(900)  # Spark (session start-up on first use, micro-batches): slow on a loaded machine
def test_writer_round_trip_batch_and_stream(spark: Any, kafka: BrokerProcess, tmp_path: Path) -> None:
    """write.format("headwater") and writeStream.format("headwater"): what is written reads back
    exactly (key, value, partition, headers), through the idempotent producer; bad columns fail."""
    from pyspark.sql import functions as F

    rows = [
        (f"k{i}" if i % 5 else None, f"v{i}".encode(), "sink-a", i % 3, [(f"h{i}", str(i).encode())]) for i in range(60)
    ]
    df = spark.createDataFrame(
        rows, "key string, value binary, topic string, partition int, headers array<struct<key: string, value: binary>>"
    )
    df.write.format("headwater").option("kafka.bootstrap.servers", kafka.bootstrap).mode("append").save()
    back = (
        spark.read.format("headwater")
        .option("kafka.bootstrap.servers", kafka.bootstrap)
        .option("subscribe", "sink-a")
        .load()
        .collect()
    )
    got = [
        (
            r.key.decode() if r.key is not None else None,
            bytes(r.value),
            r.topic,
            r.partition,
            [(h.key, bytes(h.value)) for h in r.headers],
        )
        for r in back
    ]
    assert sorted(got, key=str) == sorted(rows, key=str)
    assert len(back) == 60 and len({(r.partition, r.offset) for r in back}) == 60

    # Streaming: sink-a copied to sink-b (the topic option wins over the topic column, as Spark's).
    q = run_to_end(
        lambda: (
            spark.readStream.format("headwater")
            .option("kafka.bootstrap.servers", kafka.bootstrap)
            .option("subscribe", "sink-a")
            .option("startingOffsets", "earliest")
            .load()
            .select("key", "value", "headers", "topic")
            .writeStream.format("headwater")
            .option("kafka.bootstrap.servers", kafka.bootstrap)
            .option("topic", "sink-b")
            .option("checkpointLocation", str(tmp_path / "ck-sink"))
            .trigger(availableNow=True)
            .start()
        )
    )
    assert q.exception() is None
    copied = (
        spark.read.format("headwater")
        .option("kafka.bootstrap.servers", kafka.bootstrap)
        .option("subscribe", "sink-b")
        .load()
        .collect()
    )
    assert sorted(
        (r.key, bytes(r.value), [tuple(h) for h in r.headers]) for r in copied if r.key is not None
    ) == sorted((r.key, bytes(r.value), [tuple(h) for h in r.headers]) for r in back if r.key is not None)
    assert len(copied) == 60 and {r.topic for r in copied} == {"sink-b"}

    w = df.write.format("headwater").option("kafka.bootstrap.servers", kafka.bootstrap).mode("append")
    with pytest.raises(Exception, match="extra is not one of them"):
        df.withColumn("extra", F.lit(1)).write.format("headwater").option(
            "kafka.bootstrap.servers", kafka.bootstrap
        ).mode("append").save()
    with pytest.raises(Exception, match="needs the topic option or a topic column"):
        df.drop("topic").write.format("headwater").option("kafka.bootstrap.servers", kafka.bootstrap).mode(
            "append"
        ).save()
    with pytest.raises(Exception, match=r"option kafka\.acks: '1'"):
        w.option("kafka.acks", "1").save()
