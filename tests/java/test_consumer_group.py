"""The Java consumer in a group (kafka-clients 2.3.1 and 4.x) against a 3-broker Headwater cluster: the
eager protocol and KIP-429's cooperative-sticky assignor (client-side, 2.4+ clients), static membership
(KIP-345), commit/seek/pause, and a kill -9 of a member and of the group's coordinator."""

from __future__ import annotations

import itertools

import pytest

from tests.cluster.harness import Cluster
from tests.java.conftest import Driver, Member

COOPERATIVE = "partition.assignment.strategy=org.apache.kafka.clients.consumer.CooperativeStickyAssignor"
FAST = ("session.timeout.ms=6000", "heartbeat.interval.ms=500", "max.poll.interval.ms=30000")
_n = itertools.count()


def make_topic(driver: Driver, cluster: Cluster, partitions: int) -> str:
    name = f"grp{next(_n)}-{driver.version}"
    out = driver.admin(cluster.bootstrap, "createTopic", name, str(partitions), "3")
    assert out.get("result") == "created", out
    return name


@pytest.mark.parametrize("protocol", ["eager", "cooperative"])
def test_two_members_split_the_partitions(driver: Driver, cluster: Cluster, protocol: str) -> None:
    if protocol == "cooperative" and driver.version == "2.3.1":
        pytest.skip("the cooperative-sticky assignor is a 2.4+ client feature (KIP-429)")
    conf = (*FAST, COOPERATIVE) if protocol == "cooperative" else FAST
    topic = make_topic(driver, cluster, 4)
    group = f"split-{protocol}-{driver.version}"
    a = driver.member(cluster.bootstrap, topic, group, *conf, "client.id=a")
    b: Member | None = None
    try:
        assert a.assignment() == [0, 1, 2, 3]
        b = driver.member(cluster.bootstrap, topic, group, *conf, "client.id=b")
        # cooperative: b's first round gives it nothing (a still owns all), the second round its share
        owned_b = b.wait(lambda e: e["event"] == "assigned" and e["partitions"] != [], 90, "b's share")["partitions"]
        assert len(owned_b) == 2, owned_b
        if protocol == "eager":  # everything revoked, then the new share assigned
            assert a.wait(lambda e: e["event"] == "revoked")["partitions"] == [0, 1, 2, 3]
            owned_a = a.assignment()
        else:  # only what moves is revoked; the rest stays owned throughout
            revoked = a.wait(lambda e: e["event"] == "revoked" and e["partitions"] != [])["partitions"]
            assert sorted(revoked) == owned_b
            owned_a = sorted(set(range(4)) - set(revoked))
        assert sorted(owned_a + owned_b) == [0, 1, 2, 3]
        described = driver.admin(cluster.bootstrap, "describeGroup", group)["result"]
        assert described["state"].lower() == "stable"
        assert described["assignor"] == ("cooperative-sticky" if protocol == "cooperative" else "range")
        assert sorted(p for m in described["members"] for p in m["partitions"]) == [0, 1, 2, 3]
        # kill -9 of a member: after its session times out, the other one owns everything
        b.kill9()
        # (cooperative: onPartitionsAssigned names only the partitions added)
        gained = [0, 1, 2, 3] if protocol == "eager" else owned_b
        a.wait(lambda e: e["event"] == "assigned" and e["partitions"] == gained, 60, "b's partitions")
    finally:
        a.close()
        if b is not None:
            b.kill9()


def test_static_member_restart_keeps_its_partitions(driver: Driver, cluster: Cluster) -> None:
    topic = make_topic(driver, cluster, 2)
    group = f"static-{driver.version}"
    conf = ("session.timeout.ms=30000", "heartbeat.interval.ms=500")
    a = driver.member(cluster.bootstrap, topic, group, *conf, "group.instance.id=a")
    b = driver.member(cluster.bootstrap, topic, group, *conf, "group.instance.id=b")
    try:
        while True:  # until both hold one partition each
            pa = a.wait(lambda e: e["event"] == "assigned")["partitions"]
            if len(pa) == 1:
                break
        pb = b.wait(lambda e: e["event"] == "assigned" and len(e["partitions"]) == 1)["partitions"]
        settled = len(b.history)
        before = driver.admin(cluster.bootstrap, "describeGroup", group)["result"]
        # a static member that restarts within its session gets its partitions back without a rebalance
        a.kill9()
        a = driver.member(cluster.bootstrap, topic, group, *conf, "group.instance.id=a")
        assert a.assignment() == pa
        assert pb == sorted({0, 1} - set(pa))
        b.send("position")  # b stayed: no revocation, no new assignment
        assert not [e for e in b.history[settled:] if e["event"] in ("revoked", "assigned")]
        after = driver.admin(cluster.bootstrap, "describeGroup", group)["result"]
        assert after["state"].lower() == "stable" and len(after["members"]) == len(before["members"]) == 2
    finally:
        a.close()
        b.close()


def test_commit_seek_pause_and_coordinator_kill(driver: Driver, cluster: Cluster) -> None:
    topic = make_topic(driver, cluster, 1)
    group = f"csp-{driver.version}"
    assert len(driver.run("produce", cluster.bootstrap, topic, "20", "10", "acks=all")["acked"]) == 20
    m = driver.member(cluster.bootstrap, topic, group, *FAST)
    try:
        assert m.assignment() == [0]
        seen: set[int] = set()
        while len(seen) < 20:
            seen |= {o for _, o in m.wait(lambda e: e["event"] == "polled")["records"]}
        m.send("commit")
        assert driver.admin(cluster.bootstrap, "groupOffsets", group)["result"] == {f"{topic}-0": 20}
        m.send("seek 0 5")
        assert m.wait(lambda e: e["event"] == "polled")["records"][0] == [0, 5]
        m.send("pause")
        assert driver.run("produce", cluster.bootstrap, topic, "5", "10", "acks=all")["acked"][-1] == [0, 24]
        position = m.send("position")
        assert position["paused"] == [0] and position["positions"] == {"0": 20}
        assert not any(e["event"] == "polled" for e in m.history[m.history.index(position) - 1 :])
        m.send("resume")
        assert m.wait(lambda e: e["event"] == "polled")["records"][0] == [0, 20]
        # kill -9 of the group's coordinator: the member finds the new one and commits there
        coordinator = driver.admin(cluster.bootstrap, "describeGroup", group)["result"]["coordinator"]
        cluster.kill9(coordinator)
        try:
            deadline_commit = m.send("commit", timeout=120)
            assert deadline_commit["command"] == "commit"
            bootstrap = ",".join(b.bootstrap for i, b in cluster.brokers.items() if i != coordinator)
            cluster.wait_for(
                lambda: driver.admin(bootstrap, "groupOffsets", group).get("result") == {f"{topic}-0": 25},
                120,
                "the commit after the coordinator's kill -9",
            )
        finally:
            cluster.restart(coordinator)
    finally:
        m.close()
