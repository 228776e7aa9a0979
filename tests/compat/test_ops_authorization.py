"""The operator APIs under an authorizer (issue 27): ElectLeaders needs Alter on the Cluster,
DescribeLogDirs Describe on the Cluster, a broker's dynamic configs AlterConfigs on the Cluster,
as Kafka's KafkaApis checks them. One broker with a SASL/PLAIN listener; ``admin`` is a super user,
``bob`` has no ACL."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

from headwater.client.connection import BrokerConnection
from headwater.client.security import ClientSecurity
from headwater.protocol.apis import DESCRIBE_LOG_DIRS, ELECT_LEADERS, INCREMENTAL_ALTER_CONFIGS
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


def test_operator_apis_need_cluster_permissions(zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    zk = f"{zookeeper.connect}/ops-acls-{int(time.time() * 1000)}"
    broker = LocalBroker(tmp_path, 0, zk)
    sasl = free_port()
    broker.properties.update(
        {
            "listeners": f"PLAINTEXT://127.0.0.1:{broker.port},SASL_PLAINTEXT://127.0.0.1:{sasl}",
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
            "authorizer.class.name": "kafka.security.auth.SimpleAclAuthorizer",
            "super.users": "User:admin;User:ANONYMOUS",
        }
    )
    broker.start(timeout=90)
    try:
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
    finally:
        broker.stop()
