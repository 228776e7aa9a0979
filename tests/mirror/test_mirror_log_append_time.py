"""A LogAppendTime source topic (issue 32): the mirror creates its target topic in the aggregate
cluster (which refused ``message.timestamp.type=LogAppendTime`` before) and copies it with the
source leader's timestamps and timestamp type. Real clusters, a real mirror process, librdkafka."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource

from headwater.protocol.records.header import CRC_OFFSET, TIMESTAMP_TYPE_BIT
from tests.cluster.harness import Cluster
from tests.cluster.util import create_topic
from tests.mirror.util import MirrorProcess, flow_props, produce_keyed, raw_batches, wait_for

TOPIC = "stamped"
N = 300


def _timestamps(bootstrap: str) -> list[tuple[int, int, int, int]]:
    """(partition, offset, timestamp type, timestamp) of every record, as librdkafka reports them."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "ts-check", "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(TOPIC, 0, 0)])
        out: list[tuple[int, int, int, int]] = []
        deadline = time.monotonic() + 60
        while len(out) < N and time.monotonic() < deadline:
            msg = c.poll(1.0)
            if msg is None or msg.error():
                continue
            ts_type, ts = msg.timestamp()
            out.append((msg.partition(), msg.offset(), ts_type, ts))
        return out
    finally:
        c.close()


def test_a_log_append_time_topic_is_created_in_the_target_and_copied_with_its_timestamps(
    cluster_factory: Callable[..., Cluster], tmp_path: Path
) -> None:
    src, dst = cluster_factory(1), cluster_factory(1)
    create_topic(src, TOPIC, partitions=1, rf=1, min_isr=1, configs={"message.timestamp.type": "LogAppendTime"})
    before = int(time.time() * 1000)
    assert produce_keyed(src.bootstrap, TOPIC, N) == N
    source = _timestamps(src.bootstrap)
    assert len(source) == N
    # The source leader stamped every batch: librdkafka reports LogAppendTime with the broker's time.
    assert {t for _, _, t, _ in source} == {TIMESTAMP_LOG_APPEND_TIME}
    assert all(ts >= before for *_, ts in source)

    props = {
        **flow_props(src, dst, TOPIC),
        "offset.commit.interval.ms": 500,
        "fetch.max.wait.ms": 100,
    }
    m = MirrorProcess(tmp_path, "mirror", props)
    m.start()
    try:
        wait_for(lambda: len(_timestamps(dst.bootstrap)) == N, 120, f"all {N} records in the target", m)
    finally:
        assert m.stop() == 0, m.log()[-3000:]
    # Same timestamps and type in the aggregate: the source's append times, not the target's.
    assert _timestamps(dst.bootstrap) == source
    target_batches = raw_batches(dst.bootstrap, TOPIC, 0)
    assert target_batches and all(h.attributes & TIMESTAMP_TYPE_BIT for h, _ in target_batches)
    for (hs, bs), (ht, bt) in zip(raw_batches(src.bootstrap, TOPIC, 0), target_batches, strict=True):
        assert (ht.base_offset, ht.max_timestamp) == (hs.base_offset, hs.max_timestamp)
        assert bt[CRC_OFFSET:] == bs[CRC_OFFSET:]
    # The target topic was created as CreateTime (message.timestamp.type is not copied, as MM2).
    admin = AdminClient({"bootstrap.servers": dst.bootstrap})
    res = ConfigResource(ConfigResource.Type.TOPIC, TOPIC)
    described = admin.describe_configs([res])[res].result(30)
    assert described["message.timestamp.type"].value == "CreateTime"
