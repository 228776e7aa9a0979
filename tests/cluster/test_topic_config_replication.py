"""What the leader does to a producer's batches on append (issue 32) is replicated as bytes: a topic
with ``message.timestamp.type=LogAppendTime`` and ``compression.type=zstd`` on three brokers. The
leader stamps and recompresses; every follower's log holds the leader's bytes exactly (its own
clock and codec settings play no part); librdkafka's delivery reports carry the Produce response's
``log_append_time_ms``, and its consumer sees TIMESTAMP_LOG_APPEND_TIME."""

from __future__ import annotations

import time
from collections.abc import Callable

from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, Consumer, Producer, TopicPartition

from headwater.protocol.apis import DESCRIBE_CONFIGS, INCREMENTAL_ALTER_CONFIGS
from headwater.protocol.errors import ErrorCode
from headwater.protocol.records.compression import Codec
from headwater.protocol.records.header import LOG_OVERHEAD, read_header
from tests.broker.wire import Wire
from tests.cluster.harness import Cluster
from tests.cluster.util import create_topic, segment_bytes

TOPIC = "stamped"
N = 200


def _headers(data: bytes) -> list[tuple[int, int, int, bool]]:
    """(base offset, codec, max timestamp, LogAppendTime bit) of each batch in ``data`` (segment files joined)."""
    out, pos = [], 0
    while len(data) - pos >= 61:
        h = read_header(data, pos)
        out.append((h.base_offset, h.codec, h.max_timestamp, h.is_log_append_time))
        pos += LOG_OVERHEAD + h.batch_length
    return out


def test_followers_keep_the_leaders_stamped_and_recompressed_batches(
    cluster_factory: Callable[..., Cluster],
) -> None:
    c = cluster_factory(3)
    create_topic(
        c,
        TOPIC,
        partitions=1,
        rf=3,
        min_isr=2,
        configs={"message.timestamp.type": "LogAppendTime", "compression.type": "zstd"},
    )
    reports: list[tuple[int, int, int]] = []  # offset, timestamp type, timestamp from the Produce response

    def done(err: object, msg: object) -> None:
        assert err is None, err
        ts_type, ts = msg.timestamp()  # type: ignore[attr-defined]
        reports.append((msg.offset(), ts_type, ts))  # type: ignore[attr-defined]

    before = int(time.time() * 1000)
    p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "linger.ms": 5, "compression.codec": "lz4"})
    for i in range(N):
        p.produce(TOPIC, key=b"k%d" % i, value=b"v" * 100, timestamp=before - 3_600_000, on_delivery=done)
        p.poll(0)
    assert p.flush(60) == 0
    assert len(reports) == N
    # librdkafka reports LogAppendTime with the time the leader stamped (Produce's log_append_time_ms).
    assert {t for _, t, _ in reports} == {TIMESTAMP_LOG_APPEND_TIME}
    assert all(ts >= before for _, _, ts in reports)

    leader = int(c.state(TOPIC, 0)["leader"])
    c.wait_for(
        lambda: len({segment_bytes(c, b, TOPIC) for b in c.brokers}) == 1, 60, "every replica to hold the same bytes"
    )
    stored = _headers(segment_bytes(c, leader, TOPIC))
    assert stored and all(lat for *_, lat in stored)  # every stored batch carries the LogAppendTime bit
    assert {codec for _, codec, _, _ in stored} == {Codec.ZSTD}  # lz4 from the producer, zstd on disk
    by_offset = {o: ts for o, _, ts in reports}
    for base, _, max_ts, _ in stored:
        assert by_offset[base] == max_ts  # the reported append time is the stamped one

    cons = Consumer({"bootstrap.servers": c.bootstrap, "group.id": "check", "enable.auto.commit": False})
    try:
        cons.assign([TopicPartition(TOPIC, 0, 0)])
        seen: list[tuple[int, int, int]] = []
        deadline = time.monotonic() + 60
        while len(seen) < N and time.monotonic() < deadline:
            m = cons.poll(0.5)
            if m is not None and not m.error():
                seen.append((m.offset(), *m.timestamp()))
    finally:
        cons.close()
    assert sorted(seen) == sorted(reports)


def test_describe_configs_on_another_broker_shows_an_alteration_at_once(
    cluster_factory: Callable[..., Cluster],
) -> None:
    """Kafka 2.3 answers a TOPIC DescribeConfigs from the topic's config znode, so a describe sent to
    any broker right after IncrementalAlterConfigs returned shows the new value (the Java AdminClient
    sends the two to whichever broker it likes). Each round alters through broker 0 and describes
    through broker 1 at once, before broker 1 can have applied the change notification."""
    c = cluster_factory(2)
    create_topic(c, "described", partitions=1, rf=2, min_isr=1)
    first, second = sorted(c.brokers)
    alter, describe = Wire(c.brokers[first].bootstrap), Wire(c.brokers[second].bootstrap)
    try:
        for i in range(10):
            value = str(3_600_000 + i)
            resp = alter.request(
                INCREMENTAL_ALTER_CONFIGS,
                0,
                {
                    "resources": [
                        {
                            "resource_type": 2,
                            "resource_name": "described",
                            "configs": [{"name": "retention.ms", "config_operation": 0, "value": value}],
                        }
                    ],
                    "validate_only": False,
                },
            )
            assert resp["responses"][0]["error_code"] == ErrorCode.NONE, resp
            got = describe.request(
                DESCRIBE_CONFIGS,
                1,
                {
                    "resources": [
                        {"resource_type": 2, "resource_name": "described", "configuration_keys": ["retention.ms"]}
                    ],
                    "include_synonyms": False,
                },
            )["results"][0]
            assert got["error_code"] == ErrorCode.NONE, got
            assert [(e["name"], e["value"]) for e in got["configs"]] == [("retention.ms", value)], (i, got)
    finally:
        alter.close()
        describe.close()
