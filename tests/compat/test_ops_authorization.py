"""The operator APIs under an authorizer (issues 27, 23): ElectLeaders needs Alter on the Cluster,
DescribeLogDirs Describe on the Cluster, a broker's dynamic configs AlterConfigs on the Cluster;
the read APIs DescribeGroups, ListGroups and DescribeConfigs need Describe on the Group /
DescribeConfigs on the Topic or Cluster, as Kafka 2.3's KafkaApis checks them. One broker for the
module with a SASL/PLAIN listener; ``admin`` is a super user, ``bob`` has no ACL but those a test
gives him (each test uses its own resources)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from headwater.cli.main import main as cli_main
from headwater.client.connection import BrokerConnection
from headwater.client.security import ClientSecurity
from headwater.protocol.apis import (
    DESCRIBE_CONFIGS,
    DESCRIBE_GROUPS,
    DESCRIBE_LOG_DIRS,
    ELECT_LEADERS,
    INCREMENTAL_ALTER_CONFIGS,
    LIST_GROUPS,
)
from headwater.protocol.errors import ErrorCode
from headwater.testing.cluster import LocalBroker
from headwater.testing.zookeeper import ZooKeeperServer, free_port

JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_admin="admin-pw" user_bob="bob-pw";'


def request(port: int, user: str, api: Any, version: int, body: dict[str, Any]) -> dict[str, Any]:
    async def go() -> dict[str, Any]:
        sec = ClientSecurity.from_properties(
            {
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN",
                "sasl.username": user,
                "sasl.password": f"{user}-pw",
            }
        )
        conn = BrokerConnection("127.0.0.1", port, security=sec)
        await conn.connect()
        try:
            return await conn.request(api, body, version)
        finally:
            await conn.close()

    return asyncio.run(go())


@dataclass
class SecuredBroker:
    zk: str
    sasl: int  # the SASL_PLAINTEXT port


@pytest.fixture(scope="module")
def secured(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredBroker]:
    zk = f"{zookeeper.connect}/ops-acls-{int(time.time() * 1000)}"
    broker = LocalBroker(tmp_path_factory.mktemp("ops-acls"), 0, zk)
    sasl = free_port()
    broker.properties.update(
        {
            "listeners": f"PLAINTEXT://127.0.0.1:{broker.port},SASL_PLAINTEXT://127.0.0.1:{sasl}",
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
            "authorizer.class.name": "kafka.security.auth.SimpleAclAuthorizer",
            "super.users": "User:admin;User:ANONYMOUS",
            "offsets.topic.replication.factor": 1,
            "offsets.topic.num.partitions": 1,
            "group.initial.rebalance.delay.ms": 0,
        }
    )
    broker.start(timeout=90)
    try:
        yield SecuredBroker(zk, sasl)
    finally:
        broker.stop()


def test_operator_apis_need_cluster_permissions(secured: SecuredBroker) -> None:
    zk, sasl = secured.zk, secured.sasl
    elect = {"election_type": 0, "topic_partitions": [{"topic": "t", "partitions": [0]}], "timeout_ms": 5000}
    denied = request(sasl, "bob", ELECT_LEADERS, 1, elect)
    assert denied["error_code"] == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert denied["replica_election_results"][0]["partition_result"][0]["error_code"] == (
        ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    )
    allowed = request(sasl, "admin", ELECT_LEADERS, 1, elect)  # no such topic, but asked
    assert allowed["error_code"] == ErrorCode.NONE
    assert allowed["replica_election_results"][0]["partition_result"][0]["error_code"] == (
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    )

    assert request(sasl, "bob", DESCRIBE_LOG_DIRS, 1, {"topics": None})["results"] == []
    [log_dir] = request(sasl, "admin", DESCRIBE_LOG_DIRS, 1, {"topics": None})["results"]
    assert log_dir["error_code"] == ErrorCode.NONE and Path(log_dir["log_dir"]).is_absolute()

    alter = {
        "resources": [
            {
                "resource_type": 4,
                "resource_name": "0",
                "configs": [{"name": "message.max.bytes", "config_operation": 0, "value": "2000"}],
            }
        ],
        "validate_only": False,
    }
    [refused] = request(sasl, "bob", INCREMENTAL_ALTER_CONFIGS, 0, alter)["responses"]
    assert refused["error_code"] == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    from kazoo.client import KazooClient

    client = KazooClient(hosts=zk, timeout=10)
    client.start(timeout=15)
    try:
        assert not client.exists("/config/brokers/0")  # nothing stored
        [done] = request(sasl, "admin", INCREMENTAL_ALTER_CONFIGS, 0, alter)["responses"]
        assert done["error_code"] == ErrorCode.NONE
        assert json.loads(client.get("/config/brokers/0")[0])["config"] == {"message.max.bytes": "2000"}
    finally:
        client.stop()
        client.close()


def conf(port: int, user: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": f"127.0.0.1:{port}",
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": user,
        "sasl.password": f"{user}-pw",
    }


def wait_for(check: Any, what: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def _listed_groups(sasl: int, user: str) -> set[str]:
    body = request(sasl, user, LIST_GROUPS, 1, {})
    assert body["error_code"] == ErrorCode.NONE
    return {g["group_id"] for g in body["groups"]}


def _config_errors(sasl: int, user: str, resources: list[tuple[int, str]]) -> dict[str, int]:
    body = {
        "resources": [{"resource_type": t, "resource_name": n, "configuration_keys": None} for t, n in resources],
        "include_synonyms": False,
    }
    return {r["resource_name"]: r["error_code"] for r in request(sasl, user, DESCRIBE_CONFIGS, 1, body)["results"]}


def test_read_apis_need_describe_permissions(secured: SecuredBroker) -> None:
    """DescribeGroups: Describe on each Group, else GROUP_AUTHORIZATION_FAILED for that group;
    ListGroups: every group with Describe on the Cluster, else only the groups it may Describe;
    DescribeConfigs: DescribeConfigs on the Topic / the Cluster, else TOPIC_ / CLUSTER_AUTHORIZATION_FAILED
    for that resource (a topic that does not exist included). Seen through confluent-kafka's
    AdminClient as bob, and on the wire."""
    zk, sasl = secured.zk, secured.sasl
    admin = AdminClient(conf(sasl, "admin"))
    for fut in admin.create_topics([NewTopic(t, 1, 1) for t in ("rd-open", "rd-closed")]).values():
        fut.result(60)
    # two groups with committed offsets (Empty groups, as after their consumers left)
    for group in ("rd-open-app", "rd-closed-app"):
        c = Consumer({**conf(sasl, "admin"), "group.id": group, "enable.auto.commit": False})
        try:
            c.commit(offsets=[TopicPartition("rd-open", 0, 0)], asynchronous=False)
        finally:
            c.close()
    wait_for(lambda: {"rd-open-app", "rd-closed-app"} <= _listed_groups(sasl, "admin"), "admin to list both groups")

    # what bob may read: one group, one topic's configs
    for args in (
        ["--operation", "Describe", "--group", "rd-open-app"],
        ["--operation", "DescribeConfigs", "--topic", "rd-open"],
    ):
        assert cli_main(["acls", "--zookeeper", zk, "--add", "--allow-principal", "User:bob", *args]) == 0
    wait_for(lambda: _config_errors(sasl, "bob", [(2, "rd-open")])["rd-open"] == ErrorCode.NONE, "bob's ACLs")
    wait_for(lambda: _listed_groups(sasl, "bob") == {"rd-open-app"}, "bob's group ACL")

    # DescribeGroups, on the wire: the group he may not describe is refused, the other described
    groups = request(sasl, "bob", DESCRIBE_GROUPS, 1, {"groups": ["rd-open-app", "rd-closed-app", "rd-none"]})
    by_id = {g["group_id"]: g for g in groups["groups"]}
    assert by_id["rd-open-app"]["error_code"] == ErrorCode.NONE
    assert by_id["rd-open-app"]["group_state"] == "Empty"
    for denied in ("rd-closed-app", "rd-none"):  # an unknown group too: nothing to learn from the answer
        assert by_id[denied]["error_code"] == ErrorCode.GROUP_AUTHORIZATION_FAILED
        assert (by_id[denied]["group_state"], by_id[denied]["members"]) == ("", [])
    # ... and through the AdminClient
    bob = AdminClient(conf(sasl, "bob"))
    listed = bob.list_consumer_groups().result(60)
    assert {g.group_id for g in listed.valid} == {"rd-open-app"}
    assert {g.group_id for g in admin.list_consumer_groups().result(60).valid} >= {"rd-open-app", "rd-closed-app"}
    described = bob.describe_consumer_groups(["rd-open-app", "rd-closed-app"])
    assert described["rd-open-app"].result(60).group_id == "rd-open-app"
    with pytest.raises(KafkaException) as refused:
        described["rd-closed-app"].result(60)
    assert refused.value.args[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED

    # DescribeConfigs: per resource, through the AdminClient
    resources = [
        ConfigResource(ConfigResource.Type.TOPIC, "rd-open"),
        ConfigResource(ConfigResource.Type.TOPIC, "rd-closed"),
        ConfigResource(ConfigResource.Type.TOPIC, "rd-none"),
        ConfigResource(ConfigResource.Type.BROKER, "0"),
    ]
    answers = bob.describe_configs(resources)
    futures = {(r.restype, r.name): f for r, f in answers.items()}
    assert futures[(ConfigResource.Type.TOPIC, "rd-open")].result(60)["retention.ms"].value == "604800000"
    for key, code in (
        ((ConfigResource.Type.TOPIC, "rd-closed"), KafkaError.TOPIC_AUTHORIZATION_FAILED),
        ((ConfigResource.Type.TOPIC, "rd-none"), KafkaError.TOPIC_AUTHORIZATION_FAILED),
        ((ConfigResource.Type.BROKER, "0"), KafkaError.CLUSTER_AUTHORIZATION_FAILED),
    ):
        with pytest.raises(KafkaException) as refused:
            futures[key].result(60)
        assert refused.value.args[0].code() == code, key
    # the super user reads them all; a topic that does not exist is then just that
    assert _config_errors(sasl, "admin", [(2, "rd-closed"), (2, "rd-none"), (4, "0")]) == {
        "rd-closed": ErrorCode.NONE,
        "rd-none": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        "0": ErrorCode.NONE,
    }

    # Describe on the Cluster: every group, as Kafka keeps for compatibility; DescribeConfigs
    # on the Cluster: the broker's configs
    for args in (["--operation", "Describe", "--cluster"], ["--operation", "DescribeConfigs", "--cluster"]):
        assert cli_main(["acls", "--zookeeper", zk, "--add", "--allow-principal", "User:bob", *args]) == 0
    wait_for(lambda: {"rd-open-app", "rd-closed-app"} <= _listed_groups(sasl, "bob"), "bob's Describe on the Cluster")
    wait_for(lambda: _config_errors(sasl, "bob", [(4, "0")])["0"] == ErrorCode.NONE, "bob's DescribeConfigs ACL")
