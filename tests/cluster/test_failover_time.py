"""How long until acks=all produce succeeds again after the leader goes away.

Prints the measured seconds (docs/failover.md records them); asserts only that writes resume
and nothing acknowledged is lost, never a duration.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from confluent_kafka import Producer

from tests.cluster.harness import Cluster
from tests.cluster.util import create_topic, read_all


def _time_until_produce_succeeds(c: Cluster, topic: str, started: float, limit: float = 60) -> float:
    p = Producer(
        {
            "bootstrap.servers": c.bootstrap,
            "acks": "all",
            "linger.ms": 0,
            "message.timeout.ms": 1000,
            "enable.idempotence": False,
            "topic.metadata.refresh.interval.ms": 1000,
        }
    )
    ok: list[int] = []
    while time.monotonic() - started < limit:
        p.produce(
            topic, value=b"probe", partition=0, on_delivery=lambda err, msg: ok.append(1) if err is None else None
        )
        p.flush(2)
        if ok:
            return time.monotonic() - started
    raise AssertionError(f"produce did not succeed within {limit}s")


def test_failover_time_after_kill9_and_controlled_shutdown(cluster_factory: Callable[..., Cluster]) -> None:
    session_ms = 6000
    c = cluster_factory(3, zookeeper_session_timeout_ms=session_ms)
    create_topic(c, "ft")
    results = {}
    for kind in ("kill -9", "controlled shutdown"):
        c.wait_for(lambda: sorted(c.state("ft", 0)["isr"]) == [1, 2, 3], 60, "full ISR")
        leader = int(c.state("ft", 0)["leader"])
        c.wait_for(lambda leader=leader: c.leader_isr_size(leader, "ft", 0) == 3, 60, "the leader's own ISR to be full")
        started = time.monotonic()
        if kind == "kill -9":
            c.kill9(leader)
        else:
            c.stop(leader)
        results[kind] = _time_until_produce_succeeds(c, "ft", started)
        c.restart(leader)
    print(
        f"failover (zookeeper.session.timeout.ms={session_ms}): "
        + ", ".join(f"{k}: {v:.2f}s" for k, v in results.items())
    )
    assert read_all(c, "ft")
