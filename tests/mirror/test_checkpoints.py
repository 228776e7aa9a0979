"""Consumer failover between clusters with MirrorMaker 2's checkpoints: a confluent-kafka group reads half
of a dc1 topic, the mirror writes offset syncs (dc1) and checkpoints (agg), ``headwater mirror translate``
prints the translated offsets, and the group resumes in agg from them: nothing skipped, at most
``offset.lag.max`` records read again."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from headwater.mirror.checkpoints import decode_offset_sync, offset_syncs_topic
from headwater.testing import java
from headwater.testing.zookeeper import free_port
from tests.cluster.harness import Cluster
from tests.cluster.util import create_topic
from tests.mirror.util import MirrorProcess, flow_props, produce_keyed, read_topic, wait_for

LAG_MAX = 10
TOTAL = 2000
JAVA_SRC = Path(__file__).parent.parent / "java" / "src"
_CLI = (sys.executable, "-m", "headwater.cli.main")
PREFIX = 37  # records already in each target partition: target offsets differ from the source's


def _committed_in(bootstrap: str, target: str) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "billing"})
    try:
        got = c.committed([TopicPartition(target, p) for p in (0, 1)], timeout=10)
        return {tp.partition: tp.offset for tp in got if tp.offset >= 0}
    finally:
        c.close()


def _consume(
    bootstrap: str, group: str, n: int | None, *, topic: str = "orders", until_eof: int | None = None
) -> list[object]:
    """``n`` records, ``n / 2`` from each of two partitions, or (``until_eof``) until that many
    partitions reached their end, through librdkafka, subscribed as a group member; commits the
    positions when it read ``n``."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": True,
        }
    )
    out: list[object] = []
    try:
        c.subscribe([topic])
        eof: set[int] = set()
        taken: dict[int, int] = {}
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is None:
                continue
            if m.error():
                if m.error().code() == -191:  # _PARTITION_EOF
                    eof.add(m.partition())
                    if until_eof is not None and len(eof) == until_eof:
                        break
                    continue
                raise AssertionError(m.error())
            if n is not None and taken.get(m.partition(), 0) >= n // 2:
                continue  # half of it from each partition: the group has an offset in both
            taken[m.partition()] = taken.get(m.partition(), 0) + 1
            out.append(m)
            if n is not None and len(out) == n:
                break
        if n is not None:
            positions: dict[int, int] = {}
            for m in out:
                positions[m.partition()] = max(positions.get(m.partition(), 0), m.offset() + 1)
            c.commit(offsets=[TopicPartition(topic, p, o) for p, o in positions.items()], asynchronous=False)
    finally:
        c.close()
    return out


def _translate(config: Path, target: str) -> dict[int, tuple[int, int]]:
    r = subprocess.run(
        [*_CLI, "mirror", "translate", "-c", str(config), "--group", "billing", "--source", "dc1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if r.returncode != 0:
        raise AssertionError(r.stderr)
    lines = r.stdout.splitlines()
    assert lines[0] == "topic\tpartition\toffset\tsource_offset"
    out = {}
    for line in lines[1:]:
        topic, partition, offset, source_offset = line.split("\t")
        assert topic == target
        out[int(partition)] = (int(offset), int(source_offset))
    return out


def _checkpoint_latencies(port: int) -> dict[tuple[str, str, str], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    return {
        (s.labels["group"], s.labels["topic"], s.labels["partition"]): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == "headwater_mirror_checkpoint_latency_ms"
    }


@pytest.mark.parametrize(
    ("policy", "target"), [("DefaultReplicationPolicy", "dc1.orders"), ("IdentityReplicationPolicy", "orders")]
)
def test_group_fails_over_to_agg_with_translated_offsets(
    cluster_factory: Callable[..., Cluster], tmp_path: Path, policy: str, target: str
) -> None:
    # one broker each: the groups' __consumer_offsets with one replica
    src = cluster_factory(1, offsets_topic_replication_factor=1)
    dst = cluster_factory(1, offsets_topic_replication_factor=1)
    create_topic(src, "orders", partitions=2, rf=1, min_isr=1)
    create_topic(dst, target, partitions=2, rf=1, min_isr=1)
    p = Producer({"bootstrap.servers": dst.bootstrap})
    for partition in (0, 1):
        for i in range(PREFIX):
            p.produce(target, value=f"older-{i}".encode(), partition=partition)
    assert p.flush(60) == 0
    assert produce_keyed(src.bootstrap, "orders", TOTAL) == TOTAL
    read_in_dc1 = _consume(src.bootstrap, "billing", TOTAL // 2)
    committed: dict[int, int] = {}
    for m in read_in_dc1:
        committed[m.partition()] = max(committed.get(m.partition(), 0), m.offset() + 1)  # type: ignore[attr-defined]
    assert set(committed) == {0, 1}

    metrics_port = free_port()
    props = {
        **flow_props(src, dst, "orders"),
        "replication.policy.class": policy,
        "offset.lag.max": LAG_MAX,
        "emit.checkpoints.interval.seconds": 1,
        "sync.group.offsets.enabled": "true",  # KIP-545: the group's offsets in agg, committed by the mirror
        "sync.group.offsets.interval.seconds": 1,
        "fetch.max.wait.ms": 100,
        "metrics.port": metrics_port,
    }
    m = MirrorProcess(tmp_path, "mirror", props).start()
    try:
        wait_for(lambda: len(read_topic(dst.bootstrap, target)) == TOTAL + 2 * PREFIX, 120, "everything mirrored", m)
        # the checkpoints settle once every sync is written: the same answer three intervals running
        seen: list[dict[int, tuple[int, int]]] = []

        def settled() -> bool:
            got = _translate(m.config, target)
            seen.append(got)
            if {p: s for p, (_, s) in got.items()} != committed:
                return False
            return len(seen) >= 4 and seen[-4] == seen[-3] == seen[-2] == got

        wait_for(settled, 120, "checkpoints of group billing at its committed offsets", m)
        translated = seen[-1]
        # MM2's checkpoint-latency-ms, per group and partition
        latencies = _checkpoint_latencies(metrics_port)
        assert set(latencies) == {("billing", target, "0"), ("billing", target, "1")}, latencies
        assert all(0 <= ms < 60_000 for ms in latencies.values()), latencies
        # sync.group.offsets: the mirror committed the translated offsets into agg's group billing
        wait_for(
            lambda: _committed_in(dst.bootstrap, target) == {p: off for p, (off, _) in translated.items()},
            60,
            "the translated offsets committed in agg",
            m,
        )
    finally:
        assert m.stop() == 0, m.log()[-3000:]

    # MM2's own RemoteClusterUtils.translateOffsets (connect-mirror-client 3.9.1) reads the same offsets
    # from agg (when the pinned jars are cached: make java-deps; the rest of the test runs regardless)
    if java.unavailable() is None:
        classes = java.compile_sources([JAVA_SRC / "mm2" / "Translate.java"], "streams-mm2")
        cmd = java.java_command("Translate", [dst.bootstrap, "dc1", "billing"], "streams-mm2", extra=[classes])
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr[-3000:]
        by_mm2 = json.loads(proc.stdout.strip().splitlines()[-1])
        assert by_mm2 == {f"{target}-{p}": off for p, (off, _) in translated.items()}

    # the syncs are MM2's records in dc1's mm2-offset-syncs.agg.internal
    syncs = [
        decode_offset_sync(k, v)
        for _, _, k, v, _, _ in read_topic(src.bootstrap, offset_syncs_topic("agg"))
        if k is not None and v is not None
    ]
    assert {(s.topic, s.partition) for s in syncs} == {("orders", 0), ("orders", 1)}
    assert all(s.downstream == s.upstream + PREFIX for s in syncs)

    # fail over: the group subscribes in agg, resumes from the offsets the mirror committed there, reads to the end
    read_in_agg = _consume(dst.bootstrap, "billing", None, topic=target, until_eof=2)
    values_dc1 = [x.value() for x in read_in_dc1]  # type: ignore[attr-defined]
    values_agg = [x.value() for x in read_in_agg]  # type: ignore[attr-defined]
    assert not any(v.startswith(b"older-") for v in values_agg)
    every = {row[3] for row in read_topic(src.bootstrap, "orders")}
    assert set(values_dc1) | set(values_agg) == every  # no record skipped
    for partition in (0, 1):
        again = {x.value() for x in read_in_dc1 if x.partition() == partition} & {  # type: ignore[attr-defined]
            x.value()
            for x in read_in_agg
            if x.partition() == partition  # type: ignore[attr-defined]
        }
        assert len(again) <= LAG_MAX, (partition, len(again))
