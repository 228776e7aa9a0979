"""The Java AdminClient (kafka-clients 2.3.1 and 4.x) against a 3-broker Headwater cluster: every call
the broker serves, and the answer a client gets for each it does not (a 2.4+ API: the client's own
UnsupportedVersionException, as against an Apache Kafka 2.3 broker)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.cluster.harness import Cluster
from tests.java.conftest import Driver


def ok(out: dict[str, Any]) -> Any:
    assert "error" not in out, out
    return out["result"]


def described_until(
    driver: Driver, cluster: Cluster, topic: str, names: list[str], done: Callable[[dict[str, Any]], bool]
) -> dict[str, Any]:
    """The topic's configs once ``done`` holds for them. Headwater answers DescribeConfigs from the
    answering broker's metadata, which learns an alteration made through another broker from
    ZooKeeper's change notification a moment later; Kafka 2.3 reads ZooKeeper on every DescribeConfigs
    (docs/protocol.md, "DescribeConfigs right after an alteration")."""
    seen: dict[str, Any] = {}

    def check() -> bool:
        seen.clear()
        seen.update(ok(driver.admin(cluster.bootstrap, "describeConfigs", "topic", topic, *names)))
        return done(seen)

    cluster.wait_for(check, 30, f"the alteration of {topic} in DescribeConfigs")
    return seen


def test_cluster_topics_configs_partitions_records(driver: Driver, cluster: Cluster) -> None:
    b, v = cluster.bootstrap, driver.version
    described = ok(driver.admin(b, "describeCluster"))
    assert described["nodes"] == [1, 2, 3] and described["controller"] == cluster.controller()
    assert described["clusterId"]

    topic = f"adm-{v}"
    assert ok(driver.admin(b, "createTopic", topic, "2", "3", "retention.ms:86400000")) == "created"
    assert topic in ok(driver.admin(b, "listTopics"))
    t = ok(driver.admin(b, "describeTopic", topic))
    assert [len(p["replicas"]) for p in t["partitions"]] == [3, 3] and not t["internal"]
    configs = ok(driver.admin(b, "describeConfigs", "topic", topic, "retention.ms", "cleanup.policy"))
    assert configs["retention.ms"]["value"] == "86400000"
    assert configs["retention.ms"]["source"] == "DYNAMIC_TOPIC_CONFIG"
    assert configs["cleanup.policy"] == {
        "value": "delete",
        "source": "DEFAULT_CONFIG",
        "sensitive": False,
        "readOnly": False,
    }

    ok(driver.admin(b, "incrementalAlterConfigs", "topic", topic, "SET:cleanup.policy:compact", "DELETE:retention.ms"))
    configs = described_until(
        driver,
        cluster,
        topic,
        ["retention.ms", "cleanup.policy"],
        lambda c: c["cleanup.policy"]["value"] == "compact" and c["retention.ms"]["source"] == "DEFAULT_CONFIG",
    )
    if v == "2.3.1":  # the whole-set AlterConfigs (gone from the 4.x client)
        ok(driver.admin(b, "alterConfigs", "topic", topic, "segment.ms:3600000"))
        described_until(
            driver,
            cluster,
            topic,
            ["segment.ms", "cleanup.policy"],
            lambda c: c["segment.ms"]["value"] == "3600000" and c["cleanup.policy"]["value"] == "delete",
        )
    broker_configs = ok(driver.admin(b, "describeConfigs", "broker", "1", "broker.id", "log.retention.hours"))
    assert broker_configs["broker.id"]["value"] == "1"

    assert ok(driver.admin(b, "createPartitions", topic, "4")) == "created"
    assert len(ok(driver.admin(b, "describeTopic", topic))["partitions"]) == 4

    one = f"adm-records-{v}"
    ok(driver.admin(b, "createTopic", one, "1", "3"))
    assert len(driver.run("produce", b, one, "10", "10", "acks=all")["acked"]) == 10
    assert ok(driver.admin(b, "deleteRecords", one, "0", "4")) == {"lowWatermark": 4}
    assert [r["o"] for r in driver.run("consume", b, one, "6")["records"]] == list(range(4, 10))
    if v == "4.x":  # ListOffsets through the admin (2.5+ client), ListOffsets v1+ on the wire
        assert ok(driver.admin(b, "listOffsets", one, "0", "latest")) == 10
        assert ok(driver.admin(b, "listOffsets", one, "0", "earliest")) == 4

    elected = driver.admin(b, "electPreferredLeaders", one, "0")
    if v == "2.3.1":  # ElectPreferredLeaders v0: NONE for a partition its preferred replica leads
        assert ok(elected) == "elected"
    else:  # ElectLeaders v1 (electLeaders): ELECTION_NOT_NEEDED for it, as Kafka 2.4+
        assert elected["error"] == "ElectionNotNeededException", elected
    leader = ok(driver.admin(b, "describeTopic", one))["partitions"][0]["leader"]
    dirs = ok(driver.admin(b, "describeLogDirs", str(leader)))
    assert [f"{one}-0" in replicas for replicas in dirs.values()] == [True]

    assert ok(driver.admin(b, "deleteTopic", topic)) == "deleted"
    cluster.wait_for(lambda: topic not in ok(driver.admin(b, "listTopics")), 60, "the topic to go")


def test_groups(driver: Driver, cluster: Cluster) -> None:
    b, v = cluster.bootstrap, driver.version
    topic, group = f"adm-groups-{v}", f"adm-group-{v}"
    ok(driver.admin(b, "createTopic", topic, "1", "3"))
    driver.run("produce", b, topic, "5", "10", "acks=all")
    member = driver.member(b, topic, group)
    try:
        assert member.assignment() == [0]
        described = ok(driver.admin(b, "describeGroup", group))
        assert described["state"].lower() == "stable" and [m["partitions"] for m in described["members"]] == [[0]]
        while not any(e["event"] == "polled" for e in member.history):
            member.wait(lambda e: e["event"] == "polled")
        member.send("seek 0 5")
        member.send("commit")
    finally:
        member.close()
    assert group in ok(driver.admin(b, "listGroups"))
    assert ok(driver.admin(b, "describeGroup", group))["state"].lower() == "empty"
    assert ok(driver.admin(b, "groupOffsets", group)) == {f"{topic}-0": 5}
    if v == "4.x":
        assert ok(driver.admin(b, "alterGroupOffsets", group, topic, "0", "2")) == "altered"
        assert ok(driver.admin(b, "groupOffsets", group)) == {f"{topic}-0": 2}
        # OffsetDelete (API 47) is Kafka 2.4's: refused by the client itself, as against Kafka 2.3
        refused = driver.admin(b, "deleteGroupOffsets", group, topic, "0")
        assert refused["error"] == "UnsupportedVersionException", refused
    assert ok(driver.admin(b, "deleteGroup", group)) == "deleted"
    assert group not in ok(driver.admin(b, "listGroups"))


def test_acls_need_an_authorizer(driver: Driver, cluster: Cluster) -> None:
    """No authorizer configured: Kafka answers SECURITY_DISABLED to each ACL call."""
    for op, args in (("createAcl", ("User:alice", "t", "READ")), ("describeAcls", ("t",)), ("deleteAcls", ("t",))):
        out = driver.admin(cluster.bootstrap, op, *args)
        assert out.get("error") == "SecurityDisabledException", out


def test_apis_the_broker_does_not_serve(driver: Driver, cluster: Cluster) -> None:
    """Kafka 2.4+ APIs (KIP-455 reassignment) and delegation tokens: the client's clear refusal."""
    b = cluster.bootstrap
    ok(driver.admin(b, "createTopic", f"adm-r-{driver.version}", "1", "3"))
    calls = [("createDelegationToken", ())]
    if driver.version == "4.x":
        calls += [
            ("alterPartitionReassignments", (f"adm-r-{driver.version}", "0", "1", "2", "3")),
            ("listPartitionReassignments", ()),
        ]
    for op, args in calls:
        out = driver.admin(b, op, *args)
        assert out.get("error") == "UnsupportedVersionException", out
