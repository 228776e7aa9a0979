"""Thousands of partitions (issue 26), reduced: 2,000 partitions, RF 3, three brokers.

The full curve (1,000 / 5,000 / 10,000) is ``headwater bench --only scale``. This test guards
against a return to costs linear in per-partition round trips (one ZooKeeper write per partition
on the controller's path, one fsync per partition on LeaderAndIsr, one ISR notification per
partition): with them, each of the three steps below took tens of seconds to minutes at a few
thousand partitions on this machine; without them, a few seconds. The bounds are generous (a
loaded CI machine), not the issue's goals.

Every view is each broker's own answer, read with a raw Metadata request to that broker alone, and
must list all 2,000 partitions (issue 38, item 6): a wait for "every partition has a live leader"
over a client's answer from whichever broker it picked also held for an answer that left
partitions out, and the next read then found 1,987.
"""

from __future__ import annotations

import time
from pathlib import Path

from headwater.bench.scenarios.scale import OVERRIDES, create_topics, metadata_round_trips, partitions_seen, wait_until
from headwater.protocol.apis import METADATA
from headwater.testing.cluster import LocalBroker, LocalCluster
from headwater.testing.wire import request

PARTITIONS = 2_000
PREFIX = "scale-"
BOUND_S = 40.0


def broker_view(broker: LocalBroker) -> dict[tuple[str, int], tuple[int, int, int]]:
    """(error code, leader, ISR size) of every partition of the ``PREFIX`` topics, as ``broker``
    itself answers Metadata (v7, every topic)."""
    body = {"topics": None, "allow_auto_topic_creation": False}
    response = request("127.0.0.1", broker.port, METADATA, 7, body, timeout=120, client_id="scale-test")
    return {
        (t["name"], p["partition_index"]): (p["error_code"], p["leader_id"], len(p["isr_nodes"]))
        for t in response["topics"]
        if t["name"].startswith(PREFIX)
        for p in t["partitions"]
    }


def every_broker_sees(brokers: list[LocalBroker], ok: object) -> bool:
    """Whether each of ``brokers`` answers all PARTITIONS partitions, each passing ``ok``."""
    for b in brokers:
        view = broker_view(b)
        if len(view) != PARTITIONS or not all(ok(*v) for v in view.values()):  # type: ignore[operator]
            return False
    return True


def test_failover_restart_and_controlled_shutdown_with_2000_partitions(tmp_path: Path, zk_connect: str) -> None:
    with LocalCluster(tmp_path, 3, zk_connect=zk_connect, overrides=OVERRIDES) as cluster:
        create_topics(cluster.bootstrap, PREFIX, PARTITIONS, lambda _msg: None)
        assert all(t > 0 for t in metadata_round_trips(cluster.brokers[0].bootstrap, 2))  # the bench's raw request

        from confluent_kafka.admin import AdminClient

        controller = AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(timeout=60).controller_id
        victim = next(b for b in cluster.brokers if b.broker_id == controller)
        survivors = [b for b in cluster.brokers if b is not victim]
        victim.kill9()
        failover = wait_until(
            lambda: every_broker_sees(
                survivors, lambda code, leader, _isr: code == 0 and leader >= 0 and leader != controller
            ),
            300,
            "a live leader for every partition after the controller's kill -9, on each survivor",
        )
        for b in survivors:  # and each answer lists every partition, every time
            assert len(broker_view(b)) == PARTITIONS
            assert len(partitions_seen(b.bootstrap, PREFIX)) == PARTITIONS  # a stock client's view too

        start = time.monotonic()
        victim.start(timeout=300)
        wait_until(
            lambda: every_broker_sees(cluster.brokers, lambda code, leader, isr: code == 0 and isr == 3),
            300,
            f"broker {controller} back in every ISR, on every broker",
        )
        restart = time.monotonic() - start

        controller = AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(timeout=60).controller_id
        other = next(b for b in cluster.brokers if b.broker_id != controller)
        start = time.monotonic()
        code = other.stop(timeout=300)
        shutdown = time.monotonic() - start
        assert code == 0
        remaining = [b for b in cluster.brokers if b is not other]
        wait_until(
            lambda: every_broker_sees(
                remaining, lambda code, leader, _isr: code == 0 and leader not in (-1, other.broker_id)
            ),
            60,
            f"every partition led off broker {other.broker_id}, on each remaining broker",
        )

        timings = f"failover {failover:.1f} s, restart {restart:.1f} s, controlled shutdown {shutdown:.1f} s"
        assert failover < BOUND_S, timings
        assert restart < BOUND_S, timings
        assert shutdown < BOUND_S, timings
