"""MM2's cycle detection (``MirrorSourceConnector.isCycle``) and its topic-ACL mapping (``syncTopicAcls``)."""

from __future__ import annotations

from headwater.acls import Acl, Resource
from headwater.mirror.acl_sync import target_bindings
from headwater.mirror.config import parse

BOTH_WAYS = {
    "clusters": "dc1, dc2",
    "dc1.zookeeper.connect": "zk1:2181",
    "dc2.zookeeper.connect": "zk2:2181",
    "dc1->dc2.enabled": "true",
}


def test_default_policy_never_mirrors_back_what_came_from_the_target() -> None:
    flow = parse({**BOTH_WAYS, "replication.policy.class": "DefaultReplicationPolicy"}).flows[0]
    assert flow.matches("orders")
    assert not flow.matches("dc2.orders")  # dc2's orders, mirrored into dc1: never back to dc2
    assert not flow.matches("dc3.dc2.orders")  # came from dc2 two hops up
    assert flow.matches("dc3.orders")
    assert flow.matches("heartbeats") and flow.matches("dc3.heartbeats")  # upstream heartbeats go on (replicationHops)
    assert not flow.matches("dc2.heartbeats")


def test_separator_and_identity_policy() -> None:
    flow = parse(
        {**BOTH_WAYS, "replication.policy.class": "DefaultReplicationPolicy", "replication.policy.separator": "_"}
    ).flows[0]
    assert not flow.matches("dc2_orders") and flow.matches("dc2.orders")
    identity = parse(BOTH_WAYS).flows[0]
    assert identity.matches("dc2.orders")  # the name says nothing under IdentityReplicationPolicy


def test_acls_mapped_as_mm2_maps_them() -> None:
    orders, prefixed = Resource("Topic", "orders"), Resource("Topic", "ord", "PREFIXED")
    source = [
        (orders, Acl("User:alice", "Allow", "All")),  # -> Read
        (orders, Acl("User:bob", "Allow", "Write")),  # skipped
        (orders, Acl("User:carol", "Deny", "Write", "10.0.0.1")),  # copied as is
        (orders, Acl("User:dave", "Allow", "Describe")),
        (prefixed, Acl("User:erin", "Allow", "Read")),  # PREFIXED: not copied (MM2: LITERAL only)
        (Resource("Topic", "*"), Acl("User:frank", "Allow", "Read")),  # the wildcard: not copied
        (Resource("Topic", "other"), Acl("User:gina", "Allow", "Read")),  # not mirrored
        (Resource("Group", "orders"), Acl("User:hal", "Allow", "Read")),
    ]
    got = target_bindings(source, lambda t: t in ("orders", "*", "ord"), lambda t: f"dc1.{t}")
    target = Resource("Topic", "dc1.orders")
    assert got == {
        (target, Acl("User:alice", "Allow", "Read")),
        (target, Acl("User:carol", "Deny", "Write", "10.0.0.1")),
        (target, Acl("User:dave", "Allow", "Describe")),
    }
