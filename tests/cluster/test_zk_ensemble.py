"""A cluster on a 3-node ZooKeeper ensemble (issue 38 item 3): losing one ZooKeeper server (the
ensemble's leader) changes nothing for clients; losing the quorum stops cluster changes but loses
no acknowledged write, and the cluster serves again, every broker registered and every ISR full,
once the quorum returns.

Real ZooKeeper servers (Debian's package), real broker processes, a librdkafka acks=all writer.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from headwater.testing.zookeeper_ensemble import ZooKeeperEnsemble
from tests.cluster.harness import Cluster
from tests.cluster.test_nemesis import TOPIC, Writer, _replica_records
from tests.cluster.util import create_topic, read_all


@pytest.fixture
def ensemble(tmp_path: Path) -> Iterator[ZooKeeperEnsemble]:
    e = ZooKeeperEnsemble(tmp_path / "zk", 3)
    try:
        yield e.start()
    finally:
        e.stop()


def test_zookeeper_node_kill_and_quorum_loss_lose_nothing(ensemble: ZooKeeperEnsemble, tmp_path: Path) -> None:
    c = Cluster(
        tmp_path / "cluster",
        "127.0.0.1",
        0,
        "/ensemble",
        3,
        zk_ensemble=ensemble.connect,
        zookeeper_session_timeout_ms=6000,
    )
    try:
        c.start()
        create_topic(c, TOPIC, rf=3, min_isr=2)
        writer = Writer(c.bootstrap)
        writer.thread.start()
        report: list[str] = []

        def acked_again(what: str) -> None:
            before = len(writer.acked)
            c.wait_for(lambda: len(writer.acked) >= before + 100, 120, f"writes acknowledged again after {what}")

        def healthy(what: str) -> None:
            c.wait_for(lambda: c.live_ids() == [1, 2, 3], 120, f"every broker registered after {what}")
            c.wait_for(lambda: sorted(c.state(TOPIC, 0)["isr"]) == [1, 2, 3], 120, f"full ISR after {what}")
            c.wait_for(lambda: c.controller() is not None, 120, f"a controller after {what}")

        try:
            c.wait_for(lambda: len(writer.acked) >= 100, 60, "the writer's first acknowledged records")

            # 1. kill -9 of the ensemble's leader: the other two elect a new one; brokers move over.
            zk_leader = ensemble.leader()
            assert zk_leader is not None
            ensemble.kill(zk_leader)
            others = [s for s in ensemble.client_ports if s != zk_leader]
            ensemble.wait_serving(others)
            acked_again("the ZooKeeper leader's kill")
            healthy("the ZooKeeper leader's kill")
            report.append(f"killed ZooKeeper leader {zk_leader}: new leader {ensemble.leader()}")
            ensemble.start_server(zk_leader)
            ensemble.wait_serving(list(ensemble.client_ports))

            # 2. loss of quorum: two of three servers down, longer than the brokers' session timeout.
            first, second = ensemble.leader() or 1, others[0] if others[0] != ensemble.leader() else others[1]
            acked_before_loss = len(writer.acked)
            ensemble.kill(first)
            ensemble.kill(second)
            lost_at = time.monotonic()
            c.wait_for(lambda: time.monotonic() - lost_at >= 15, 30, "15 s without a quorum")
            ensemble.start_server(first)
            ensemble.start_server(second)
            ensemble.wait_serving(list(ensemble.client_ports))
            back_at = time.monotonic()
            healthy("the quorum's return")
            acked_again("the quorum's return")
            report.append(
                f"quorum lost for 15 s (servers {first}, {second}): {len(writer.acked) - acked_before_loss} more acked;"
                f" healthy {time.monotonic() - back_at:.1f} s after the quorum returned"
            )
        finally:
            writer.stop.set()
            writer.thread.join(150)
        print("\n".join(report))

        readable = read_all(c, TOPIC, timeout=120)
        lost = [o for o, v in writer.acked.items() if readable.get(o) != v]
        assert not lost, f"{len(lost)} acknowledged records lost or changed, e.g. {lost[:10]}\n" + "\n".join(report)
        hw = max(readable) + 1
        c.wait_for(
            lambda: len({tuple(_replica_records(c, b, hw)) for b in (1, 2, 3)}) == 1,
            60,
            "identical replicas up to the high watermark",
        )
    finally:
        c.close()
