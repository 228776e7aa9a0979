"""Followers fetch in sessions (KIP-227): idle partitions they no longer list stay in the ISR, while a
follower that stops fetching (SIGSTOP) is still shrunk after replica.lag.time.max.ms, and rejoins."""

from __future__ import annotations

import time
from collections.abc import Callable

from tests.cluster.harness import Cluster
from tests.cluster.util import create_topic, produce_acked, read_all

TOPIC = "sessions"
PARTITIONS = 12
LAG_MS = 3000  # the harness's replica.lag.time.max.ms


def _isrs(c: Cluster) -> dict[int, list[int]]:
    return {p: sorted(c.state(TOPIC, p)["isr"]) for p in range(PARTITIONS)}


def _shrinks(c: Cluster) -> float:
    return sum(c.metric(b, "kafka_server_replicamanager_isrshrinks_total") or 0.0 for b in c.brokers)


def test_idle_followers_in_sessions_stay_in_sync_and_a_paused_one_is_shrunk(
    cluster_factory: Callable[..., Cluster],
) -> None:
    c = cluster_factory(3)
    create_topic(c, TOPIC, partitions=PARTITIONS, rf=3, min_isr=2)
    assert len(produce_acked(c, TOPIC, [b"before-%d" % i for i in range(20)])) == 20

    # every follower opened a session with each leader it follows
    c.wait_for(
        lambda: all("fetch session" in b.output.read_text(errors="replace") for b in c.brokers.values()),
        60,
        "every broker to serve a follower's fetch session",
    )

    # idle for four times replica.lag.time.max.ms: followers list nothing, every ISR stays whole
    shrinks = _shrinks(c)
    idle_until = time.monotonic() + 4 * LAG_MS / 1000
    while time.monotonic() < idle_until:
        isrs = _isrs(c)
        assert all(isr == [1, 2, 3] for isr in isrs.values()), isrs
        time.sleep(0.5)
    assert _shrinks(c) == shrinks

    # a follower that stops fetching is shrunk out of every ISR it was in (it leads nothing then:
    # its partitions' leaders are the live brokers, which see its session go quiet)
    paused = 3
    followed = [p for p in range(PARTITIONS) if c.state(TOPIC, p)["leader"] != paused]
    assert followed
    c.pause(paused)
    try:
        c.wait_for(
            lambda: all(paused not in c.state(TOPIC, p)["isr"] for p in followed),
            120,
            f"broker {paused} to be shrunk out of the ISR of every partition it follows",
        )
        # the others stay in (their sessions go on)
        assert all({1, 2} <= set(c.state(TOPIC, p)["isr"]) for p in followed), _isrs(c)
    finally:
        c.resume(paused)

    # back: it fetches again (a new full request if its session is gone) and rejoins every ISR
    c.wait_for(lambda: all(isr == [1, 2, 3] for isr in _isrs(c).values()), 120, "every ISR whole again")
    acked = produce_acked(c, TOPIC, [b"after-%d" % i for i in range(20)])
    assert len(acked) == 20
    assert len(read_all(c, TOPIC)) == 40
