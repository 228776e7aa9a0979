"""MirrorMaker 2 (connect-mirror 3.9.1, dedicated mode: ``connect-mirror-maker.sh mm2.properties``)
between two Headwater clusters, dc1 (one broker) -> agg (three): it creates the remote topic
``dc1.<topic>`` on agg and copies every record, with heartbeats and checkpoints, and
``RemoteClusterUtils.translateOffsets`` answers for a dc1 group."""

from __future__ import annotations

import itertools
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from headwater.bench.peers import mm2_command, mm2_properties, stop
from headwater.testing import java
from headwater.testing.zookeeper import ZooKeeperServer
from tests.cluster.harness import Cluster
from tests.java.conftest import SRC, Driver

_n = itertools.count()


@pytest.fixture
def dc1(java_deps: None, tmp_path: Path, zookeeper: ZooKeeperServer) -> Iterator[Cluster]:
    c = Cluster(
        tmp_path / "dc1", "127.0.0.1", zookeeper.port, f"/mm2-dc1-{next(_n)}", 1, offsets_topic_replication_factor=1
    )
    c.start()
    yield c
    c.close()


@pytest.mark.slow
def test_dedicated_mm2_copies_dc1_to_agg(dc1: Cluster, cluster: Cluster, tmp_path: Path) -> None:
    src, dst = Driver("4.x"), Driver("4.x")
    assert src.admin(dc1.bootstrap, "createTopic", "orders", "2", "1").get("result") == "created"
    produced = src.run("produce", dc1.bootstrap, "orders", "500", "50", "acks=all")["acked"]
    assert len(produced) == 500
    member = src.member(dc1.bootstrap, "orders", "g1")  # a group on dc1 whose offsets MM2 checkpoints
    try:
        assert member.assignment() == [0, 1]
        seen: set[tuple[int, int]] = set()
        while len(seen) < 500:
            seen |= {(p, o) for p, o in member.wait(lambda e: e["event"] == "polled")["records"]}
        member.send("commit")
    finally:
        member.close()
    committed = src.admin(dc1.bootstrap, "groupOffsets", "g1")["result"]
    assert sum(committed.values()) == 500
    props = mm2_properties(
        tmp_path / "mm2.properties", dc1.bootstrap, cluster.bootstrap, "orders", replication_factor=3
    )
    cmd = mm2_command(props)
    log = open(tmp_path / "mm2.log", "wb")  # noqa: SIM115 - closed below
    mm2 = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    try:

        def copied() -> bool:
            if mm2.poll() is not None:
                raise AssertionError((tmp_path / "mm2.log").read_text()[-3000:])
            topics = dst.admin(cluster.bootstrap, "listTopics").get("result", [])
            if "dc1.orders" not in topics:
                return False
            return (
                sum(
                    dst.admin(cluster.bootstrap, "listOffsets", "dc1.orders", str(p), "latest")["result"]
                    for p in range(2)
                )
                == 500
            )

        cluster.wait_for(copied, 240, "MM2 to copy dc1's 500 records to agg's dc1.orders")
        records = dst.run("consume", cluster.bootstrap, "dc1.orders", "500")["records"]
        assert sorted(r["k"] for r in records) == sorted(f"k{i}" for i in range(500))
        assert all(r["headers"] == {"h": r["k"][1:], "n": "x"} for r in records)
        topics = dst.admin(cluster.bootstrap, "listTopics")["result"]
        assert "heartbeats" in topics and "dc1.checkpoints.internal" in topics, topics
        # RemoteClusterUtils.translateOffsets: g1's dc1 offsets, in agg's dc1.orders
        classes = java.compile_sources(sorted((SRC / "mm2").glob("*.java")), "streams-mm2")
        translate = java.java_command("Translate", [cluster.bootstrap, "dc1", "g1"], "streams-mm2", extra=[classes])
        translated: dict[str, int] = {}

        def checkpointed() -> bool:
            proc = subprocess.run(translate, capture_output=True, text=True, timeout=120)
            assert proc.returncode == 0, proc.stderr[-3000:]
            translated.update(json.loads(proc.stdout.strip().splitlines()[-1]))
            return set(translated) == {"dc1.orders-0", "dc1.orders-1"}

        cluster.wait_for(checkpointed, 120, "MM2's checkpoints of g1")
        for p in (0, 1):  # never ahead of what g1 committed on dc1 (1:1 copies: the same offsets)
            assert 0 < translated[f"dc1.orders-{p}"] <= committed[f"orders-{p}"], (translated, committed)
    finally:
        stop(mm2)
        log.close()
