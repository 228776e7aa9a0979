"""ACL evaluation as SimpleAclAuthorizer does it, and Kafka 2.3's ZooKeeper formats."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from headwater.acls import Acl, AclCache, AclError, Resource, decode_acls, encode_acls, operation


def cache(**kw: object) -> AclCache:
    c = AclCache(frozenset({"User:admin"}), **kw)  # type: ignore[arg-type]
    c.acls = {
        Resource("Topic", "orders"): [Acl("User:alice", "Allow", "Write"), Acl("User:alice", "Allow", "Read")],
        Resource("Topic", "dc1.", "PREFIXED"): [Acl("User:mirror", "Allow", "All")],
        Resource("Topic", "*"): [Acl("User:bob", "Deny", "Write", "10.0.0.9")],
        Resource("Group", "orders-app"): [Acl("User:*", "Allow", "Read")],
    }
    return c


def test_allow_deny_implied_prefixed_wildcard_and_super_users() -> None:
    c = cache()
    assert c.authorize("User:alice", "1.2.3.4", "Write", "Topic", "orders")
    assert c.authorize("User:alice", "1.2.3.4", "Describe", "Topic", "orders")  # implied by Read/Write
    assert not c.authorize("User:alice", "1.2.3.4", "Delete", "Topic", "orders")
    assert not c.authorize("User:alice", "1.2.3.4", "Write", "Topic", "payments")  # only bob's deny matches
    assert c.authorize("User:mirror", "h", "Create", "Topic", "dc1.orders")  # All, prefixed
    assert not c.authorize("User:mirror", "h", "Create", "Topic", "dc2.orders")
    assert c.authorize("User:anyone", "h", "Read", "Group", "orders-app")  # User:*
    assert not c.authorize("User:bob", "10.0.0.9", "Write", "Topic", "orders")  # deny on * wins
    assert c.authorize("User:admin", "h", "Alter", "Cluster", "kafka-cluster")
    assert not c.authorize("User:alice", "h", "Read", "Group", "no-acls")
    assert cache(allow_if_no_acl=True).authorize("User:alice", "h", "Read", "Group", "no-acls")


def test_zookeeper_formats() -> None:
    acls = [Acl("User:alice", "Allow", "Read", "*")]
    doc = json.loads(encode_acls(acls))
    assert doc == {
        "version": 1,
        "acls": [{"principal": "User:alice", "permissionType": "Allow", "operation": "Read", "host": "*"}],
    }
    assert decode_acls(encode_acls(acls)) == acls
    assert Resource("Topic", "orders").zk_path() == "/kafka-acl/Topic/orders"
    assert Resource("Group", "g", "PREFIXED").zk_path() == "/kafka-acl-extended/prefixed/Group/g"
    assert Resource("Topic", "orders").change_notification() == ("/kafka-acl-changes", b"Topic:orders")
    parent, value = Resource("Topic", "dc1.", "PREFIXED").change_notification()
    assert parent == "/kafka-acl-extended-changes" and json.loads(value)["patternType"] == "PREFIXED"
    assert operation("cluster_action") == "ClusterAction" and operation("READ") == "Read"
    with pytest.raises(AclError):
        operation("Fly")
    with pytest.raises(AclError):
        decode_acls(b'{"version":1,"acls":[{"principal":"User:a","permissionType":"Maybe","operation":"Read"}]}')


def test_wire_codes_and_filters() -> None:
    from headwater.acls import ANY, MATCH, AclFilter, binding_from_wire

    res, acl = binding_from_wire(2, "orders", 4, "User:alice", "*", 3, 3)  # Topic, PREFIXED, READ, ALLOW
    assert (res, acl) == (Resource("Topic", "orders", "PREFIXED"), Acl("User:alice", "Allow", "Read"))
    for bad in ((1, "x", 3, "User:a", "*", 3, 3), (2, "x", 3, "alice", "*", 3, 3), (4, "c", 3, "User:a", "*", 9, 3)):
        with pytest.raises(AclError):
            binding_from_wire(*bad)  # ANY type, principal without a type, cluster not named kafka-cluster
    everything = AclFilter(ANY, None, ANY, None, None, ANY, ANY)
    assert everything.matches(res, acl)
    match = AclFilter(2, "orders-eu", MATCH, None, None, ANY, ANY)  # which ACLs apply to topic orders-eu
    assert match.matches(res, acl) and not match.matches(Resource("Topic", "orders"), acl)
    assert not AclFilter(ANY, None, ANY, "User:bob", None, ANY, ANY).matches(res, acl)


_NAMES = st.text(alphabet="ab.*", min_size=1, max_size=4)


@given(
    resources=st.lists(
        st.tuples(st.sampled_from(["Topic", "Group"]), _NAMES, st.sampled_from(["LITERAL", "PREFIXED"])), max_size=12
    ),
    type_=st.sampled_from(["Topic", "Group"]),
    name=_NAMES,
)
def test_matching_by_lookup_finds_what_a_scan_of_every_resource_finds(
    resources: list[tuple[str, str, str]], type_: str, name: str
) -> None:
    """``matching`` looks the literal name, the wildcard and each prefix up; a scan of every
    resource with ACLs (what it did before) must find the same ACLs."""
    c = AclCache()
    c.acls = {Resource(t, n, p): [Acl(f"User:{t}{n}{p}", "Allow", "Read")] for t, n, p in resources}
    scanned = [
        a
        for res, acls in c.acls.items()
        if res.type == type_ and (name.startswith(res.name) if res.pattern == "PREFIXED" else res.name in (name, "*"))
        for a in acls
    ]
    assert sorted(map(repr, c.matching(type_, name))) == sorted(map(repr, scanned))
