"""Issue 32's acceptance test: a topic with every Kafka 2.3 topic config set to a non-default value,
created through confluent-kafka's AdminClient, is stored (ZooKeeper ``/config/topics``), described
with its source, and has the documented effects: LogAppendTime seen by librdkafka and by
ListOffsets by time, the stored batch in zstd, a dirty segment cleaned by age (max.compaction.lag.ms)
below the dirty ratio; and message.timestamp.difference.max.ms refuses an old record with
INVALID_TIMESTAMP. One real broker process."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

from confluent_kafka import (
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    Consumer,
    KafkaError,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, NewTopic
from kazoo.client import KazooClient

from headwater.broker.topic_configs import TOPIC_CONFIG_DEFS
from headwater.protocol.records.compression import Codec
from tests.harness.broker import BrokerProcess
from tests.mirror.util import raw_batches

TOPIC = "every-config"
#: a non-default value for every Kafka 2.3 topic config
NON_DEFAULT = {
    "cleanup.policy": "compact",
    "compression.type": "zstd",
    "delete.retention.ms": "3600000",
    "file.delete.delay.ms": "30000",
    "flush.messages": "100000",
    "flush.ms": "60000",
    "follower.replication.throttled.replicas": "0:0",
    "index.interval.bytes": "1024",
    "leader.replication.throttled.replicas": "*",
    "max.compaction.lag.ms": "3000",
    "max.message.bytes": "2000000",
    "message.downconversion.enable": "false",
    "message.format.version": "2.2-IV1",
    "message.timestamp.difference.max.ms": "86400000",
    "message.timestamp.type": "LogAppendTime",
    "min.cleanable.dirty.ratio": "0.99",
    "min.compaction.lag.ms": "1",
    "min.insync.replicas": "2",
    "preallocate": "true",
    "retention.bytes": "100000000",
    "retention.ms": "86400000",
    "segment.bytes": "52428800",
    "segment.index.bytes": "4096",
    "segment.jitter.ms": "10",
    "segment.ms": "600000",
    "unclean.leader.election.enable": "true",
}


def _wait(cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def _produce(bootstrap: str, topic: str, records: list[tuple[bytes, bytes]], timestamp: int = 0) -> list[object]:
    """acks=1 (min.insync.replicas=2 only binds acks=all); returns each record's delivery error (None: ok)."""
    errors: list[object] = []
    p = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 0, "compression.codec": "none"})
    for k, v in records:
        p.produce(topic, key=k, value=v, timestamp=timestamp, on_delivery=lambda err, _m: errors.append(err))
    assert p.flush(60) == 0
    return errors


def _consume(bootstrap: str, topic: str, n: int) -> list[tuple[int, bytes, int, int]]:
    """(offset, key, timestamp type, timestamp) of the first ``n`` records from the start."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "check", "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        out: list[tuple[int, bytes, int, int]] = []
        deadline = time.monotonic() + 60
        while len(out) < n and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                ts_type, ts = m.timestamp()
                out.append((m.offset(), m.key(), ts_type, ts))
        return out
    finally:
        c.close()


def _offset_for_time(bootstrap: str, topic: str, ts: int) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "check"})
    try:
        return int(c.offsets_for_times([TopicPartition(topic, 0, ts)], timeout=30)[0].offset)
    finally:
        c.close()


def test_every_kafka_2_3_topic_config_is_stored_described_and_honoured(
    broker_factory: Callable[..., BrokerProcess], zk_connect: str
) -> None:
    assert set(NON_DEFAULT) == set(TOPIC_CONFIG_DEFS)
    assert all(v != TOPIC_CONFIG_DEFS[k].default for k, v in NON_DEFAULT.items())
    b = broker_factory(0, log_cleaner_backoff_ms=200, log_retention_check_interval_ms=300, log_roll_jitter_ms=5)
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    futures = admin.create_topics(
        [
            NewTopic(TOPIC, num_partitions=1, replication_factor=1, config=NON_DEFAULT),
            NewTopic("windowed", 1, 1, config={"message.timestamp.difference.max.ms": "60000"}),
        ],
        operation_timeout=30,
    )
    for f in futures.values():
        f.result(60)

    # Stored: the topic's config znode holds every override.
    zk = KazooClient(hosts=zk_connect)
    zk.start(timeout=15)
    try:
        stored = json.loads(zk.get(f"/config/topics/{TOPIC}")[0])["config"]
    finally:
        zk.stop()
        zk.close()
    assert stored == NON_DEFAULT

    # Described with its source: every override DYNAMIC_TOPIC_CONFIG; on the other topic a broker
    # property (log.roll.jitter.ms) shows as STATIC_BROKER_CONFIG and the rest as DEFAULT_CONFIG.
    res = ConfigResource(ConfigResource.Type.TOPIC, TOPIC)
    described = admin.describe_configs([res])[res].result(30)
    assert {k: (e.value, e.source) for k, e in described.items()} == {
        k: (v, ConfigSource.DYNAMIC_TOPIC_CONFIG.value) for k, v in NON_DEFAULT.items()
    }
    res = ConfigResource(ConfigResource.Type.TOPIC, "windowed")
    other = admin.describe_configs([res])[res].result(30)
    assert (other["segment.jitter.ms"].value, other["segment.jitter.ms"].source) == (
        "5",
        ConfigSource.STATIC_BROKER_CONFIG.value,
    )
    assert (other["message.timestamp.type"].value, other["message.timestamp.type"].source) == (
        "CreateTime",
        ConfigSource.DEFAULT_CONFIG.value,
    )
    assert other["message.timestamp.difference.max.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value

    # message.timestamp.difference.max.ms: an hour-old record is refused, a current one is not.
    now = int(time.time() * 1000)
    errors = _produce(b.bootstrap, "windowed", [(b"k", b"old")], timestamp=now - 3_600_000)
    assert [e.code() for e in errors if isinstance(e, KafkaError)] == [KafkaError.INVALID_TIMESTAMP]
    assert _produce(b.bootstrap, "windowed", [(b"k", b"now")]) == [None]
    assert _consume(b.bootstrap, "windowed", 1)[0][2] == TIMESTAMP_CREATE_TIME

    # LogAppendTime: librdkafka sees the broker's append time, not the producer's (a day-old) timestamp.
    produced_at = int(time.time() * 1000)
    keys = [b"k%d" % i for i in range(10)]
    assert (
        _produce(b.bootstrap, TOPIC, [(k, b"first") for k in keys], timestamp=produced_at - 86_400_000) == [None] * 10
    )
    first = _consume(b.bootstrap, TOPIC, 10)
    assert [(o, k, t) for o, k, t, _ in first] == [(i, keys[i], TIMESTAMP_LOG_APPEND_TIME) for i in range(10)]
    first_time = first[-1][3]
    assert first_time >= produced_at
    # compression.type=zstd: the uncompressed batches were stored recompressed.
    assert {h.codec for h, _ in raw_batches(b.bootstrap, TOPIC, 0)} == {Codec.ZSTD}

    # max.compaction.lag.ms: the first cleaning (everything dirty, ratio 1.0) makes 0..9 the clean
    # head (the active segment rolled by the lag: segment.ms is 10 minutes).
    checkpoint = b.log_dir / "cleaner-offset-checkpoint"
    _wait(lambda: checkpoint.exists() and f"{TOPIC} 0 10" in checkpoint.read_text(), 90, "the first cleaning")
    _wait(lambda: int(time.time() * 1000) > first_time, 10, "the clock to move past the first append")
    assert _produce(b.bootstrap, TOPIC, [(b"k0", b"second")]) == [None]
    # ListOffsets by time answers by append time.
    assert _offset_for_time(b.bootstrap, TOPIC, first[0][3]) == 0
    assert _offset_for_time(b.bootstrap, TOPIC, first_time + 1) == 10
    # One record over a ten-record clean head is far below min.cleanable.dirty.ratio 0.99; it is
    # cleaned once older than the lag, and k0's first record goes.
    _wait(lambda: f"{TOPIC} 0 11" in checkpoint.read_text(), 90, "the cleaning by age")
    after = _consume(b.bootstrap, TOPIC, 10)
    assert [(o, k) for o, k, _, _ in after] == [(i, keys[i]) for i in range(1, 10)] + [(10, b"k0")]
