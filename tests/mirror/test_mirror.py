"""The mirror against real clusters: fast path byte for byte (and a source topic that grows is grown in
the target), re-partitioning, topics found live."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewPartitions
from kazoo.client import KazooClient

from headwater.client.partitioner import murmur2, to_positive
from headwater.protocol.records.header import CRC_OFFSET
from headwater.testing.zookeeper import free_port
from tests.cluster.harness import Cluster
from tests.cluster.util import create_topic
from tests.mirror.util import MirrorProcess, flow_props, produce_keyed, raw_batches, read_topic, wait_for, zk_connect


def _props(src: Cluster, dst: Cluster, **extra: object) -> dict[str, object]:
    return {
        **flow_props(src, dst),
        "offset.commit.interval.ms": 500,
        "fetch.max.wait.ms": 100,
        **extra,
    }


def _healthz(port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


def test_fast_path_copies_batches_byte_for_byte_and_commits_after_acks(
    cluster_factory: Callable[..., Cluster], tmp_path: Path
) -> None:
    src, dst = cluster_factory(1), cluster_factory(1)
    create_topic(src, "page-views", partitions=3, rf=1, min_isr=1)
    assert produce_keyed(src.bootstrap, "page-views", 3000) == 3000
    port = free_port()
    m = MirrorProcess(tmp_path, "mirror", _props(src, dst, **{"dc1->agg.topics": "page-views", "metrics.port": port}))
    m.start()
    try:
        wait_for(lambda: len(read_topic(dst.bootstrap, "page-views")) == 3000, 90, "all 3000 records in the target", m)
        wait_for(lambda: _healthz(port) == 200, 30, "the mirror to report healthy", m)
        # Same partitions, same records, same offsets (the batches were copied whole from offset 0)
        assert sorted(read_topic(dst.bootstrap, "page-views")) == sorted(read_topic(src.bootstrap, "page-views"))
        for p in range(3):
            source, target = raw_batches(src.bootstrap, "page-views", p), raw_batches(dst.bootstrap, "page-views", p)
            assert len(source) == len(target) > 0
            for (hs, bs), (ht, bt) in zip(source, target, strict=True):
                assert ht.base_offset == hs.base_offset
                assert bt[CRC_OFFSET:] == bs[CRC_OFFSET:]  # CRC, attributes, timestamps, records: untouched
        assert "this process owns 4 partition(s): heartbeats-0, page-views-0" in m.log()  # and MM2-style heartbeats

        # The source topic grows (kafka-topics --alter --partitions 4): the mirror adds the partition
        # to the target topic and copies it like the others, partition for partition.
        admin = AdminClient({"bootstrap.servers": src.bootstrap})
        fut = admin.create_partitions([NewPartitions("page-views", 4)], operation_timeout=30)
        fut["page-views"].result(60)
        assert produce_keyed(src.bootstrap, "page-views", 400, prefix="grown") == 400
        source_now = read_topic(src.bootstrap, "page-views")
        assert any(p == 3 for p, *_ in source_now)
        wait_for(
            lambda: sorted(read_topic(dst.bootstrap, "page-views")) == sorted(source_now),
            120,
            "the grown topic mirrored partition for partition",
            m,
        )
        assert "added partitions 3..3 to page-views in the target" in m.log()
        wait_for(lambda: _healthz(port) == 200, 30, "the mirror to report healthy", m)
    finally:
        assert m.stop() == 0, m.log()[-3000:]
    # Offsets committed in the source's ZooKeeper, the seeds' layout, at the log end after a clean stop
    zk = KazooClient(hosts=zk_connect(src))
    zk.start(timeout=15)
    try:
        committed = {p: int(zk.get(f"/consumers/headwater-mirror/offsets/page-views/{p}")[0]) for p in range(4)}
        assert zk.get_children("/consumers/headwater-mirror/ids") == []
    finally:
        zk.stop()
        zk.close()
    ends = Counter(p for p, *_ in read_topic(src.bootstrap, "page-views"))
    assert committed == {p: ends[p] for p in range(4)}


def test_repartitions_by_key_when_counts_differ_and_picks_up_new_topics(
    cluster_factory: Callable[..., Cluster], tmp_path: Path
) -> None:
    src, dst = cluster_factory(1), cluster_factory(1)
    create_topic(src, "clicks", partitions=3, rf=1, min_isr=1)
    create_topic(dst, "clicks", partitions=5, rf=1, min_isr=1)  # the target already has it, with 5 partitions
    assert produce_keyed(src.bootstrap, "clicks", 1000, compression="snappy") == 1000
    m = MirrorProcess(tmp_path, "mirror", _props(src, dst, **{"dc1->agg.topics": "clicks.*"}))
    m.start()
    try:
        wait_for(lambda: len(read_topic(dst.bootstrap, "clicks")) == 1000, 90, "all 1000 records in the target", m)
        source = {(k, v): (h, ts) for _, _, k, v, h, ts in read_topic(src.bootstrap, "clicks")}
        for p, _, k, v, h, ts in read_topic(dst.bootstrap, "clicks"):
            assert k is not None
            assert p == to_positive(murmur2(k)) % 5  # the partition the Java client would choose
            assert source[(k, v)] == (h, ts)  # headers and CreateTime kept
        assert "re-partitioned by key" in m.log()

        # A topic created after the mirror started is mirrored without a restart.
        create_topic(src, "clicks-late", partitions=2, rf=1, min_isr=1)
        assert produce_keyed(src.bootstrap, "clicks-late", 200, prefix="late") == 200
        wait_for(lambda: len(read_topic(dst.bootstrap, "clicks-late")) == 200, 90, "the new topic mirrored", m)
    finally:
        assert m.stop() == 0, m.log()[-3000:]
