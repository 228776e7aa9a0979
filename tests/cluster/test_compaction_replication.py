"""A compacted partition across replicas: a follower cut off while its leader writes and compacts
catches up across the gaps the leader's cleaner left, and then serves every key's latest value
as the only replica left."""

from __future__ import annotations

from collections.abc import Callable

from confluent_kafka import Producer

from tests.cluster.harness import Cluster
from tests.cluster.util import create_topic
from tests.harness.records import latest_by_key, read_from_start

TOPIC = "kv"
KEYS = 20
TIMEOUT_S = 90.0


def test_a_follower_catches_up_across_a_compacted_leaders_gaps(cluster_factory: Callable[..., Cluster]) -> None:
    c = cluster_factory(3, log_cleaner_backoff_ms=200)
    configs = {"cleanup.policy": "compact", "segment.bytes": "4096", "min.cleanable.dirty.ratio": "0.01"}
    create_topic(c, TOPIC, rf=3, min_isr=1, configs=configs)
    leader = int(c.state(TOPIC, 0)["leader"])
    follower, other = (b for b in (1, 2, 3) if b != leader)

    c.isolate(follower)  # it fetches nothing while the leader takes writes and compacts them
    p = Producer({"bootstrap.servers": c.bootstrap, "acks": "1", "batch.size": 2000, "enable.idempotence": False})
    expected = {}
    for r in range(100):
        for k in range(KEYS):
            p.produce(TOPIC, key=f"key-{k}".encode(), value=f"v{r}".encode(), partition=0)
            expected[f"key-{k}"] = f"v{r}"
        p.poll(0)
    assert p.flush(60) == 0
    c.wait_for(lambda: f"cleaned {TOPIC}-0" in c.brokers[leader].output.read_text(), 60, "the leader to compact")

    c.heal(follower)
    c.wait_for(lambda: c.leader_isr_size(leader, TOPIC, 0) == 3, TIMEOUT_S, "the follower back in the ISR")
    c.kill9(leader)
    c.kill9(other)
    c.wait_for(lambda: c.leader_isr_size(follower, TOPIC, 0) is not None, TIMEOUT_S, "the follower to lead")
    assert latest_by_key(read_from_start(c.brokers[follower].bootstrap, TOPIC, timeout=TIMEOUT_S)) == expected
