"""Topic ACLs kept in step (MM2's ``sync.topic.acls.enabled``): ACLs created at dc1 with librdkafka's
admin client appear on the target topic in agg as MM2 copies them (ALLOW WRITE skipped, ALLOW ALL
downgraded to READ, LITERAL topics only), seen by librdkafka's DescribeAcls in agg; one added later
follows within the interval. Both clusters run Kafka's SimpleAclAuthorizer; the mirror connects
as User:ANONYMOUS, a super user (what a real principal needs: docs/security.md)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from tests.cluster.harness import Cluster
from tests.cluster.util import create_topic
from tests.mirror.util import MirrorProcess, wait_for, zk_connect

SECURED = {
    "authorizer_class_name": "kafka.security.auth.SimpleAclAuthorizer",
    "super_users": "User:ANONYMOUS",
}
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
LITERAL, PREFIXED = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED


def _binding(topic: str, principal: str, op: AclOperation, perm: AclPermissionType, pattern=LITERAL) -> AclBinding:  # type: ignore[no-untyped-def]
    return AclBinding(ResourceType.TOPIC, topic, pattern, principal, "*", op, perm)


def _create(admin: AdminClient, bindings: list[AclBinding]) -> None:
    for f in admin.create_acls(bindings).values():
        f.result(30)


def _topic_acls(admin: AdminClient) -> set[tuple[str, str, str, str, str]]:
    f = AclBindingFilter(
        ResourceType.TOPIC, None, ResourcePatternType.ANY, None, None, AclOperation.ANY, AclPermissionType.ANY
    )
    return {
        (b.name, b.resource_pattern_type.name, b.principal, b.operation.name, b.permission_type.name)
        for b in admin.describe_acls(f).result(30)
    }


def test_topic_acls_copied_to_the_target_as_mm2_copies_them(
    cluster_factory: Callable[..., Cluster], tmp_path: Path
) -> None:
    src = cluster_factory(1, **SECURED)
    dst = cluster_factory(1, **SECURED)
    create_topic(src, "orders", partitions=1, rf=1, min_isr=1)
    dc1 = AdminClient({"bootstrap.servers": src.bootstrap})
    agg = AdminClient({"bootstrap.servers": dst.bootstrap})
    _create(
        dc1,
        [
            _binding("orders", "User:alice", AclOperation.ALL, ALLOW),  # -> READ
            _binding("orders", "User:bob", AclOperation.WRITE, ALLOW),  # not copied
            _binding("orders", "User:carol", AclOperation.READ, DENY),  # copied as it is
            _binding("orders", "User:dave", AclOperation.DESCRIBE, ALLOW),
            _binding("ord", "User:erin", AclOperation.READ, ALLOW, PREFIXED),  # LITERAL only, as MM2
            _binding("payroll", "User:frank", AclOperation.READ, ALLOW),  # a topic the flow does not mirror
        ],
    )
    props = {
        "clusters": "dc1, agg",
        "dc1.zookeeper.connect": zk_connect(src),
        "dc1.bootstrap.servers": src.bootstrap,
        "agg.bootstrap.servers": dst.bootstrap,
        "dc1->agg.enabled": "true",
        "dc1->agg.topics": "orders, ord.*",
        "replication.policy.class": "DefaultReplicationPolicy",
        "sync.topic.acls.enabled": "true",
        "sync.topic.acls.interval.seconds": 1,
        "emit.checkpoints.enabled": "false",
        "emit.heartbeats.enabled": "false",
    }
    expected = {
        ("dc1.orders", "LITERAL", "User:alice", "READ", "ALLOW"),
        ("dc1.orders", "LITERAL", "User:carol", "READ", "DENY"),
        ("dc1.orders", "LITERAL", "User:dave", "DESCRIBE", "ALLOW"),
    }
    m = MirrorProcess(tmp_path, "mirror", props).start()
    try:
        wait_for(lambda: _topic_acls(agg) == expected, 60, "dc1's topic ACLs on dc1.orders in agg", m)
        # in step: an ACL added at the source later follows within the interval
        _create(dc1, [_binding("orders", "User:gina", AclOperation.READ, ALLOW)])
        expected.add(("dc1.orders", "LITERAL", "User:gina", "READ", "ALLOW"))
        wait_for(lambda: _topic_acls(agg) == expected, 60, "the new ACL in agg", m)
    finally:
        assert m.stop() == 0, m.log()[-3000:]
    assert "topic ACL copied to the target: User:gina Allow Read on dc1.orders" in m.log()
