"""Active/active without loops: dc1 -> dc2 and dc2 -> dc1 at once (two mirror processes), each
record in each cluster exactly once. DefaultReplicationPolicy: MM2's cycle detection (``dc2.orders``
in dc1 came from dc2, so it is never mirrored back; nor ``dc2.heartbeats``). IdentityReplicationPolicy:
the names say nothing, so the mirror stamps ``headwater.provenance`` (the clusters a record was
copied from) and never copies a record into a cluster it names; heartbeats written in the target are
not mirrored back either."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer

from headwater.mirror.heartbeats import decode_heartbeat
from tests.cluster.harness import Cluster
from tests.cluster.util import create_topic
from tests.mirror.util import MirrorProcess, read_topic, wait_for, zk_connect

N = 200


def _produce(bootstrap: str, dc: str) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(N):
        p.produce("orders", key=f"{dc}-{i}".encode(), value=f"{dc}-{i}".encode(), partition=i % 2)
    assert p.flush(60) == 0


def _values(bootstrap: str, topic: str) -> Counter[bytes]:
    return Counter(v for _, _, _, v, _, _ in read_topic(bootstrap, topic) if v is not None)


def _topics(c: Cluster) -> set[str]:
    return {t for t in c.zk.get_children("/brokers/topics") if not t.startswith("__")}


@pytest.mark.parametrize("policy", ["DefaultReplicationPolicy", "IdentityReplicationPolicy"])
def test_dc1_and_dc2_mirrored_both_ways_each_record_once(
    cluster_factory: Callable[..., Cluster], tmp_path: Path, policy: str
) -> None:
    clusters = {"dc1": cluster_factory(1), "dc2": cluster_factory(1)}
    for c in clusters.values():
        create_topic(c, "orders", partitions=2, rf=1, min_isr=1)
    mirrors = []
    for src, dst in (("dc1", "dc2"), ("dc2", "dc1")):
        props = {
            "clusters": "dc1, dc2",
            f"{src}.zookeeper.connect": zk_connect(clusters[src]),
            "dc1.bootstrap.servers": clusters["dc1"].bootstrap,
            "dc2.bootstrap.servers": clusters["dc2"].bootstrap,
            f"{src}->{dst}.enabled": "true",
            "replication.policy.class": policy,  # topics: every one (.*) but __.*
            "provenance.header.enabled": str(policy == "IdentityReplicationPolicy").lower(),
            "emit.heartbeats.interval.seconds": 0.5,
            "emit.checkpoints.enabled": "false",
            "fetch.max.wait.ms": 100,
        }
        mirrors.append(MirrorProcess(tmp_path, f"mirror-{src}-{dst}", props).start())
    try:
        for dc, c in clusters.items():
            _produce(c.bootstrap, dc)
        every = {f"{dc}-{i}".encode() for dc in clusters for i in range(N)}
        if policy == "DefaultReplicationPolicy":
            where = {dc: [("orders", dc), (f"{other}.orders", other)] for dc, other in (("dc1", "dc2"), ("dc2", "dc1"))}
        else:
            where = {dc: [("orders", None)] for dc in clusters}

        def copied() -> bool:
            return all(
                set().union(*(_values(clusters[dc].bootstrap, t) for t, _ in topics)) == every
                for dc, topics in where.items()
            )

        wait_for(copied, 120, "every record in both clusters", mirrors[0])
        # a loop would show within seconds (new topics are seen through ZooKeeper's watch): the
        # mirrors copy heartbeats written after this moment, so they kept going past it
        settled_ms = int(time.time() * 1000) + 3000
        for dc, other in (("dc1", "dc2"), ("dc2", "dc1")):
            topic = f"{other}.heartbeats" if policy == "DefaultReplicationPolicy" else "heartbeats"

            def fresh(dc: str = dc, other: str = other, topic: str = topic) -> bool:
                return any(
                    decode_heartbeat(k, v).source == other and decode_heartbeat(k, v).timestamp_ms > settled_ms
                    for _, _, k, v, _, _ in read_topic(clusters[dc].bootstrap, topic)
                )

            wait_for(fresh, 60, f"{other}'s heartbeats in {dc} after the records settled", mirrors[0])
    finally:
        for m in mirrors:
            assert m.stop() == 0, m.log()[-3000:]

    for dc, topics in where.items():
        total: Counter[bytes] = Counter()
        for t, came_from in topics:
            got = _values(clusters[dc].bootstrap, t)
            if came_from is not None:
                assert {v.split(b"-")[0] for v in got} == {came_from.encode()}, (dc, t)
            total += got
        assert set(total) == every and max(total.values()) == 1, (dc, total.most_common(3))
    if policy == "DefaultReplicationPolicy":
        assert _topics(clusters["dc1"]) >= {"orders", "dc2.orders", "heartbeats", "dc2.heartbeats"}
        for c in clusters.values():  # nothing went round: no dc1.dc2.orders, no dc2.dc1.heartbeats
            assert not [t for t in _topics(c) if t.count(".") > 1 and not t.endswith(".internal")], _topics(c)
    else:
        for dc, c in clusters.items():  # headers: what was copied names its origin, once
            for _, _, _, v, headers, _ in read_topic(c.bootstrap, "orders"):
                route = [h for h in headers if h[0] == "headwater.provenance"]
                assert route == ([] if v.startswith(dc.encode()) else [("headwater.provenance", v.split(b"-")[0])])
    for dc, c in clusters.items():  # heartbeats exactly once too
        for t in (
            "heartbeats",
            *([f"{o}.heartbeats" for o in clusters if o != dc] if policy.startswith("Default") else []),
        ):
            beats = Counter(
                (h.source, h.target, h.timestamp_ms)
                for h in (decode_heartbeat(k, v) for _, _, k, v, _, _ in read_topic(c.bootstrap, t))
            )
            assert beats and max(beats.values()) == 1, (dc, t, beats.most_common(2))
