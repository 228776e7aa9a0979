"""Topic ACLs kept in step (MM2's ``sync.topic.acls.enabled``): ACLs at dc1 appear on the target
topic in agg as MM2 copies them (ALLOW WRITE skipped, ALLOW ALL downgraded to READ, LITERAL topics
only), seen by librdkafka's DescribeAcls in agg; one added later follows within the interval. Both
clusters run Kafka's SimpleAclAuthorizer. The mirror connects as User:ANONYMOUS: in dc1 it first
lacks Describe on the Cluster, and DescribeAcls is refused (CLUSTER_AUTHORIZATION_FAILED, the task
retried) until it is granted, as docs/security.md says; in agg it is a super user (CreateAcls
needs Alter on the Cluster)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from confluent_kafka.admin import (
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from tests.cluster.harness import Cluster
from tests.cluster.util import create_topic
from tests.mirror.util import MirrorProcess, flow_props, wait_for, zk_connect

AUTHORIZER = {"authorizer_class_name": "kafka.security.auth.SimpleAclAuthorizer"}
_CLI = (sys.executable, "-m", "headwater.cli.main")


def _acls(zk: str, *args: str) -> None:
    """``headwater acls --zookeeper`` (kafka-acls' way, straight into ZooKeeper)."""
    r = subprocess.run([*_CLI, "acls", "--zookeeper", zk, "--add", *args], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


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
    # dc1: ACLs only where there are some (the Cluster's are admin's: not the mirror's)
    src = cluster_factory(1, **AUTHORIZER, allow_everyone_if_no_acl_found="true")
    dst = cluster_factory(1, **AUTHORIZER, super_users="User:ANONYMOUS")
    create_topic(src, "orders", partitions=1, rf=1, min_isr=1)
    agg = AdminClient({"bootstrap.servers": dst.bootstrap})
    zk = zk_connect(src)
    initial = [
        {"principal": "User:admin", "operations": ["All"], "resource_type": "Cluster", "name": "kafka-cluster"},
        {"principal": "User:alice", "operations": ["All"], "resource_type": "Topic", "name": "orders"},  # -> Read
        {"principal": "User:bob", "operations": ["Write"], "resource_type": "Topic", "name": "orders"},  # skipped
        {"principal": "User:dave", "operations": ["Describe"], "resource_type": "Topic", "name": "orders"},
        {
            "principal": "User:ANONYMOUS",
            "operations": ["Read"],
            "resource_type": "Topic",
            "name": "orders",
        },  # the mirror
        # copied as it is
        {
            "principal": "User:carol",
            "operations": ["Read"],
            "resource_type": "Topic",
            "name": "orders",
            "permission": "Deny",
        },
        # LITERAL only, as MM2
        {
            "principal": "User:erin",
            "operations": ["Read"],
            "resource_type": "Topic",
            "name": "ord",
            "pattern_type": "prefixed",
        },
        {
            "principal": "User:frank",
            "operations": ["Read"],
            "resource_type": "Topic",
            "name": "payroll",
        },  # not mirrored
    ]
    (tmp_path / "acls.json").write_text(json.dumps(initial))
    _acls(zk, "--from-file", str(tmp_path / "acls.json"))
    props = {
        **flow_props(src, dst, "orders, ord.*"),
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
        ("dc1.orders", "LITERAL", "User:ANONYMOUS", "READ", "ALLOW"),
    }
    m = MirrorProcess(tmp_path, "mirror", props).start()
    try:
        # without Describe on dc1's Cluster: DescribeAcls refused, the task retried, nothing copied
        wait_for(lambda: "CLUSTER_AUTHORIZATION_FAILED" in m.log(), 60, "DescribeAcls refused in dc1", m)
        assert _topic_acls(agg) == set()
        _acls(zk, "--allow-principal", "User:ANONYMOUS", "--operation", "Describe", "--cluster")
        wait_for(lambda: _topic_acls(agg) == expected, 90, "dc1's topic ACLs on dc1.orders in agg", m)
        # in step: an ACL added at the source later follows within the interval
        _acls(zk, "--allow-principal", "User:gina", "--operation", "Read", "--topic", "orders")
        expected.add(("dc1.orders", "LITERAL", "User:gina", "READ", "ALLOW"))
        wait_for(lambda: _topic_acls(agg) == expected, 60, "the new ACL in agg", m)
    finally:
        assert m.stop() == 0, m.log()[-3000:]
    assert "topic ACL copied to the target: User:gina Allow Read on dc1.orders" in m.log()
