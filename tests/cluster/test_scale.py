"""Thousands of partitions (issue 26), reduced: 2,000 partitions, RF 3, three brokers.

The full curve (1,000 / 5,000 / 10,000) is ``headwater bench --only scale``. This test guards
against a return to costs linear in per-partition round trips (one ZooKeeper write per partition
on the controller's path, one fsync per partition on LeaderAndIsr, one ISR notification per
partition): with them, each of the three steps below took tens of seconds to minutes at a few
thousand partitions on this machine; without them, a few seconds. The bounds are generous (a
loaded CI machine), not the issue's goals.
"""

from __future__ import annotations

import time
from pathlib import Path

from headwater.bench.scenarios.scale import OVERRIDES, create_topics, metadata_round_trips, partitions_seen, wait_until
from headwater.testing.cluster import LocalCluster

PARTITIONS = 2_000
PREFIX = "scale-"
BOUND_S = 40.0


def test_failover_restart_and_controlled_shutdown_with_2000_partitions(tmp_path: Path, zk_connect: str) -> None:
    with LocalCluster(tmp_path, 3, zk_connect=zk_connect, overrides=OVERRIDES) as cluster:
        create_topics(cluster.bootstrap, PREFIX, PARTITIONS, lambda _msg: None)
        assert all(t > 0 for t in metadata_round_trips(cluster.brokers[0].bootstrap, 2))  # the bench's raw request

        from confluent_kafka.admin import AdminClient

        controller = AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(timeout=60).controller_id
        victim = next(b for b in cluster.brokers if b.broker_id == controller)
        survivors = ",".join(b.bootstrap for b in cluster.brokers if b is not victim)
        victim.kill9()
        failover = wait_until(
            lambda: all(leader >= 0 and leader != controller for leader, _, _ in partitions_seen(survivors, PREFIX)),
            300,
            "a live leader for every partition after the controller's kill -9",
        )
        seen = partitions_seen(survivors, PREFIX)
        assert len(seen) == PARTITIONS

        start = time.monotonic()
        victim.start(timeout=300)
        wait_until(
            lambda: all(isr == 3 for _, isr, _ in partitions_seen(cluster.bootstrap, PREFIX)),
            300,
            f"broker {controller} back in every ISR",
        )
        restart = time.monotonic() - start

        controller = AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(timeout=60).controller_id
        other = next(b for b in cluster.brokers if b.broker_id != controller)
        start = time.monotonic()
        code = other.stop(timeout=300)
        shutdown = time.monotonic() - start
        assert code == 0
        remaining = ",".join(b.bootstrap for b in cluster.brokers if b is not other)
        assert all(leader not in (-1, other.broker_id) for leader, _, _ in partitions_seen(remaining, PREFIX))

        timings = f"failover {failover:.1f} s, restart {restart:.1f} s, controlled shutdown {shutdown:.1f} s"
        assert failover < BOUND_S, timings
        assert restart < BOUND_S, timings
        assert shutdown < BOUND_S, timings
