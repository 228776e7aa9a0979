"""Replication with ISR, acks=all, and failover that never loses an acknowledged write."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from headwater.protocol.apis import PRODUCE
from headwater.protocol.errors import ErrorCode
from headwater.protocol.records.record import RecordInput, encode_batch
from tests.broker.wire import Wire
from tests.cluster.harness import Cluster
from tests.cluster.util import create_topic, produce_acked, read_all, segment_bytes


def _leader(c: Cluster, topic: str) -> int:
    return int(c.state(topic, 0)["leader"])


def test_rf3_acks_all_replicates_identical_logs(cluster_factory: Callable[..., Cluster]) -> None:
    c = cluster_factory(3)
    create_topic(c, "rep")
    acked = produce_acked(c, "rep", [f"r{i}".encode() for i in range(2000)])
    assert sorted(acked) == list(range(2000))
    assert read_all(c, "rep") == acked
    c.wait_for(lambda: len({segment_bytes(c, b, "rep") for b in (1, 2, 3)}) == 1, 20, "identical replicas")
    state = c.state("rep", 0)
    assert sorted(state["isr"]) == [1, 2, 3] and state["leader"] in (1, 2, 3)


def test_jepsen_2013_isr_of_leader_alone_refuses_acks_all(cluster_factory: Callable[..., Cluster]) -> None:
    c = cluster_factory(3)
    create_topic(c, "jepsen")
    leader = _leader(c, "jepsen")
    followers = [b for b in (1, 2, 3) if b != leader]
    for f in followers:
        c.pause(f)
    try:
        # The leader's own view, not ZooKeeper's: ZooKeeper shows the shrunk ISR a moment before the
        # leader applies it, and in that moment acks=all is still accepted (then fails after the append).
        c.wait_for(
            lambda: c.leader_isr_size(leader, "jepsen", 0) == 1, 30, "the leader to shrink its ISR to itself alone"
        )
        w = Wire(c.brokers[leader].bootstrap)
        batch = encode_batch([RecordInput(None, b"must-not-be-acked", int(time.time() * 1000))])
        resp = w.request(
            PRODUCE,
            7,
            {
                "acks": -1,
                "timeout_ms": 5000,
                "topics": [{"name": "jepsen", "partitions": [{"partition_index": 0, "records": batch}]}],
            },
        )
        assert resp["responses"][0]["partitions"][0]["error_code"] == ErrorCode.NOT_ENOUGH_REPLICAS
        resp1 = w.request(
            PRODUCE,
            7,
            {
                "acks": 1,
                "timeout_ms": 5000,
                "topics": [{"name": "jepsen", "partitions": [{"partition_index": 0, "records": batch}]}],
            },
        )
        assert resp1["responses"][0]["partitions"][0]["error_code"] == ErrorCode.NONE  # acks=1 still works
    finally:
        for f in followers:
            c.resume(f)
    c.wait_for(lambda: c.leader_isr_size(leader, "jepsen", 0) == 3, 30, "followers back in the leader's ISR")
    assert sorted(produce_acked(c, "jepsen", [b"after"]).keys()) == [1]


def test_leader_kill9_fails_over_and_old_leader_rejoins(cluster_factory: Callable[..., Cluster]) -> None:
    c = cluster_factory(3)
    create_topic(c, "failover")
    acked = produce_acked(c, "failover", [f"a{i}".encode() for i in range(500)])
    old = _leader(c, "failover")
    c.kill9(old)
    c.wait_for(lambda: _leader(c, "failover") not in (old, -1), 30, "a new leader")
    acked.update(produce_acked(c, "failover", [f"b{i}".encode() for i in range(500)]))
    assert len(acked) == 1000
    c.restart(old)
    c.wait_for(lambda: old in c.state("failover", 0)["isr"], 60, "the old leader back in the ISR")
    assert read_all(c, "failover") == acked
    c.wait_for(lambda: len({segment_bytes(c, b, "failover") for b in (1, 2, 3)}) == 1, 30, "identical replicas")


def test_controlled_shutdown_moves_leadership_before_exit(cluster_factory: Callable[..., Cluster]) -> None:
    c = cluster_factory(3)
    create_topic(c, "cs", partitions=3)
    leader = _leader(c, "cs")
    c.stop(leader)
    log = c.brokers[leader].tail(200000)
    assert "controlled shutdown succeeded" in log
    for p in range(3):
        assert c.state("cs", p)["leader"] != leader
        assert leader not in c.state("cs", p)["isr"]


def test_controller_failover_takes_a_higher_epoch(cluster_factory: Callable[..., Cluster]) -> None:
    c = cluster_factory(3)
    first = c.controller()
    assert first is not None
    epoch = int(c.zk.get("/controller_epoch")[0])
    c.kill9(first)
    c.wait_for(lambda: c.controller() not in (None, first), 30, "a new controller")
    assert int(c.zk.get("/controller_epoch")[0]) > epoch
    create_topic(c, "after-controller-change", rf=2, min_isr=1)


def test_session_expiry_stops_the_leader_and_it_rejoins(cluster_factory: Callable[..., Cluster]) -> None:
    c = cluster_factory(3, zookeeper_session_timeout_ms=4000)
    create_topic(c, "expiry")
    acked = produce_acked(c, "expiry", [f"e{i}".encode() for i in range(200)])
    leader = _leader(c, "expiry")
    c.expire_session(leader)
    c.wait_for(lambda: _leader(c, "expiry") != leader, 30, "leadership to move off the expired broker")
    c.wait_for(lambda: str(leader) in c.zk.get_children("/brokers/ids"), 30, "the broker to re-register")
    acked.update(produce_acked(c, "expiry", [f"f{i}".encode() for i in range(200)]))
    c.wait_for(lambda: leader in c.state("expiry", 0)["isr"], 60, "the expired broker back in the ISR")
    assert read_all(c, "expiry") == acked


@pytest.mark.parametrize("which", ["a follower", "the controller, a follower"])
def test_acks_all_survives_a_leader_epoch_bump_on_an_unchanged_leader(
    cluster_factory: Callable[..., Cluster], which: str
) -> None:
    """Issue 9, defect 4: when a follower dies, the controller removes it from the ISR with a new
    leader epoch while the leader stays the same; an acks=all request waiting for that follower must
    then succeed (the rest of the ISR has the records), not fail with NOT_LEADER_FOR_PARTITION.
    When the follower that dies is the controller, its successor must take it out of the ISR."""
    import asyncio

    from headwater.client.admin import Admin, NewTopic

    # The leader's own lag check must not shrink the ISR first (it does so without a new epoch).
    c = cluster_factory(3, zookeeper_session_timeout_ms=4000, replica_lag_time_max_ms=120000)
    controller = c.controller()
    assert controller is not None
    leader, other = (b for b in (1, 2, 3) if b != controller)
    follower = other if which == "a follower" else controller

    async def create() -> None:
        async with Admin(c.bootstrap) as admin:
            result = await admin.create_topics(
                [
                    NewTopic(
                        "epoch-bump", assignments={0: [leader, controller, other]}, configs={"min.insync.replicas": "2"}
                    )
                ]
            )
            assert result["epoch-bump"] is None, result

    asyncio.run(create())
    c.wait_for(lambda: c.leader_isr_size(leader, "epoch-bump", 0) == 3, 30, "the leader with its full ISR")
    epoch = int(c.state("epoch-bump", 0)["leader_epoch"])
    c.kill9(follower)
    w = Wire(c.brokers[leader].bootstrap, timeout=90)
    batch = encode_batch([RecordInput(None, b"waits-for-the-isr", int(time.time() * 1000))])
    resp = w.request(
        PRODUCE,
        7,
        {
            "acks": -1,
            "timeout_ms": 60000,
            "topics": [{"name": "epoch-bump", "partitions": [{"partition_index": 0, "records": batch}]}],
        },
    )
    state = c.state("epoch-bump", 0)
    assert state["leader"] == leader and state["leader_epoch"] > epoch and follower not in state["isr"]
    assert resp["responses"][0]["partitions"][0]["error_code"] == ErrorCode.NONE
    c.restart(follower)


def test_controlled_shutdown_demotes_the_old_leader_at_once(cluster_factory: Callable[..., Cluster]) -> None:
    """Issue 9, defect 3: once the controller moved a partition's leadership off a broker in
    controlled shutdown, that broker must stop leading it at once, even while its shutdown still
    waits for other partitions: it refuses writes (NOT_LEADER_FOR_PARTITION) instead of taking
    acks=1 writes at the old epoch that the new leader's log would later truncate."""
    import asyncio
    import threading

    from headwater.client.admin import Admin, NewTopic

    # Controlled shutdown keeps retrying (for "stuck") for up to 5 x 3 s while we look at "moved".
    c = cluster_factory(3, controlled_shutdown_max_retries=5, controlled_shutdown_retry_backoff_ms=3000)

    # L shuts down; F takes "moved" over; P (never the controller: it gets paused) holds "stuck".
    controller = c.controller()
    assert controller is not None
    P = next(b for b in (1, 2, 3) if b != controller)
    L, F = (b for b in (1, 2, 3) if b != P)

    async def create() -> None:
        async with Admin(c.bootstrap) as admin:
            result = await admin.create_topics(
                [
                    NewTopic("moved", assignments={0: [L, F]}, configs={"min.insync.replicas": "1"}),
                    NewTopic("stuck", assignments={0: [L, P]}, configs={"min.insync.replicas": "1"}),
                ]
            )
            assert all(e is None for e in result.values()), result

    asyncio.run(create())
    c.wait_for(lambda: c.leader_isr_size(L, "moved", 0) == 2 and c.leader_isr_size(L, "stuck", 0) == 2, 30, "ISRs")
    c.pause(P)  # "stuck" can then not move: L's controlled shutdown keeps retrying
    c.wait_for(lambda: c.leader_isr_size(L, "stuck", 0) == 1, 30, "P out of stuck's ISR")
    stopping = threading.Thread(target=c.stop, args=(L,))
    stopping.start()
    try:
        c.wait_for(lambda: int(c.state("moved", 0)["leader"]) == F, 30, "the controller to move moved to F")
        # L's own view: it no longer leads "moved" while it is still up, retrying for "stuck".
        c.wait_for(lambda: c.leader_isr_size(L, "moved", 0) is None, 10, "L to stop leading moved")
        assert c.leader_isr_size(L, "stuck", 0) == 1  # still up, still shutting down
        w = Wire(c.brokers[L].bootstrap)
        resp = w.request(
            PRODUCE,
            7,
            {
                "acks": 1,
                "timeout_ms": 5000,
                "topics": [
                    {
                        "name": "moved",
                        "partitions": [{"partition_index": 0, "records": encode_batch([RecordInput(None, b"x", 0)])}],
                    }
                ],
            },
        )
        assert resp["responses"][0]["partitions"][0]["error_code"] == ErrorCode.NOT_LEADER_FOR_PARTITION
    finally:
        c.resume(P)
        stopping.join(120)
