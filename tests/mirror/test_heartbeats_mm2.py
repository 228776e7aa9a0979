"""MirrorMaker 2's heartbeats: the mirror writes MM2's binary ``Heartbeat`` records, under
DefaultReplicationPolicy both straight into the target's ``heartbeats`` (MM2's heartbeat connector)
and, mirrored through the link, as ``dc1.heartbeats`` (MM2's name for the upstream heartbeats); a
second hop upstream (dc0 -> dc1 -> agg) arrives as ``dc1.dc0.heartbeats``. MM2's own
``RemoteClusterUtils.replicationHops`` (1 for dc1, 2 for dc0) and ``Heartbeat.deserializeRecord``
(connect-mirror-client 3.9.1) read them, when the pinned jars are cached (make java-deps); the rest
runs regardless."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from headwater.mirror.heartbeats import Heartbeat, decode_heartbeat
from headwater.testing import java
from tests.cluster.harness import Cluster
from tests.cluster.util import create_topic
from tests.mirror.util import MirrorProcess, flow_props, read_topic, wait_for, zk_connect

JAVA_SRC = Path(__file__).parent.parent / "java" / "src"


def _heartbeats(bootstrap: str, topic: str) -> list[Heartbeat]:
    return [decode_heartbeat(k, v) for _, _, k, v, _, _ in read_topic(bootstrap, topic)]


def test_mm2_heartbeats_in_the_target_and_mirrored_as_dc1_heartbeats(
    cluster_factory: Callable[..., Cluster], tmp_path: Path
) -> None:
    up = cluster_factory(1)
    src = cluster_factory(1)
    dst = cluster_factory(1)
    create_topic(src, "orders", partitions=1, rf=1, min_isr=1)
    upstream = {  # dc0 -> dc1: only heartbeats (dc0 has no orders)
        "clusters": "dc0, dc1",
        "dc0.zookeeper.connect": zk_connect(up),
        "dc0.bootstrap.servers": up.bootstrap,
        "dc1.bootstrap.servers": src.bootstrap,
        "dc0->dc1.enabled": "true",
        "dc0->dc1.topics": "orders",
        "replication.policy.class": "DefaultReplicationPolicy",
        "emit.heartbeats.interval.seconds": 0.5,
        "emit.checkpoints.enabled": "false",
        "fetch.max.wait.ms": 100,
    }
    props = {
        **flow_props(src, dst, "orders"),
        "replication.policy.class": "DefaultReplicationPolicy",
        "emit.heartbeats.interval.seconds": 0.5,
        "emit.checkpoints.enabled": "false",
        "fetch.max.wait.ms": 100,
    }
    started_ms = int(time.time() * 1000)
    m0 = MirrorProcess(tmp_path, "mirror-dc0", upstream).start()
    m = MirrorProcess(tmp_path, "mirror", props).start()
    try:

        def enough() -> bool:
            topics = ("heartbeats", "dc1.heartbeats", "dc1.dc0.heartbeats")
            return all(len(read_topic(dst.bootstrap, t)) >= 3 for t in topics)

        wait_for(enough, 90, "heartbeats in agg's heartbeats, dc1.heartbeats and dc1.dc0.heartbeats", m)
    finally:
        assert m.stop() == 0, m.log()[-3000:]
        assert m0.stop() == 0, m0.log()[-3000:]
    # two hops: dc0's flow's records, written in dc0, through dc1
    assert {(h.source, h.target) for h in _heartbeats(dst.bootstrap, "dc1.dc0.heartbeats")} == {("dc0", "dc1")}
    # agg's own: the flow's record (MM2's heartbeat connector); dc1's, mirrored: the flow's record
    # written there, and dc0 -> dc1's written straight into dc1 (its target)
    keys = {"heartbeats": {("dc1", "agg")}, "dc1.heartbeats": {("dc1", "agg"), ("dc0", "dc1")}}
    for topic, expected in keys.items():
        got = _heartbeats(dst.bootstrap, topic)
        assert {(h.source, h.target) for h in got} == expected, topic
        for key in expected:
            stamps = [h.timestamp_ms for h in got if (h.source, h.target) == key]
            assert stamps == sorted(stamps) and stamps[0] >= started_ms - 5000, (topic, key, stamps)
    # the mirrored ones are the source's, one for one, in order (dc0 -> dc1 stopped last: dc1 may hold more)
    mirrored = _heartbeats(dst.bootstrap, "dc1.heartbeats")
    assert _heartbeats(src.bootstrap, "heartbeats")[: len(mirrored)] == mirrored

    if java.unavailable() is None:
        classes = java.compile_sources([JAVA_SRC / "mm2" / "Heartbeats.java"], "streams-mm2")
        cmd = java.java_command(
            "Heartbeats", [dst.bootstrap, "dc1,dc0", "heartbeats", "dc1.heartbeats"], "streams-mm2", extra=[classes]
        )
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr[-3000:]
        by_mm2 = json.loads(proc.stdout.strip().splitlines()[-1])
        assert by_mm2["hops"] == {"dc1": 1, "dc0": 2}  # RemoteClusterUtils.replicationHops(agg, ...)
        assert {"heartbeats", "dc1.heartbeats", "dc1.dc0.heartbeats"} <= set(by_mm2["topics"])
        for topic in ("heartbeats", "dc1.heartbeats"):
            ours = [(topic, h.source, h.target, h.timestamp_ms) for h in _heartbeats(dst.bootstrap, topic)]
            assert [tuple(x) for x in by_mm2["heartbeats"] if x[0] == topic] == ours
