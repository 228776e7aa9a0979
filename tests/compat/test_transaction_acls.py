"""Transactions under ACLs, as Kafka 2.3 checks them, with confluent-kafka over SASL/PLAIN:
``alice`` may write topic ``orders`` but has no ACL on TransactionalId ``orders-app`` until it is
added: her ``init_transactions`` fails with TRANSACTIONAL_ID_AUTHORIZATION_FAILED, then works; the
transaction APIs answer a principal without Write on the TransactionalId with code 53, and
WriteTxnMarkers from anyone but a ClusterAction holder with CLUSTER_AUTHORIZATION_FAILED."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from headwater.protocol.apis import ADD_PARTITIONS_TO_TXN, END_TXN, FIND_COORDINATOR, WRITE_TXN_MARKERS
from headwater.protocol.errors import ErrorCode
from headwater.testing.zookeeper import ZooKeeperServer
from tests.compat.test_acls import acls, as_bob, conf, start_acl_broker


def test_transactional_ids_need_write_and_markers_need_cluster_action(
    zookeeper: ZooKeeperServer, tmp_path: Path
) -> None:
    broker, zk, sasl = start_acl_broker(zookeeper, tmp_path, "txn-acls", **{"transaction.state.log.num.partitions": 1})
    try:
        admin = AdminClient(conf(sasl, "admin"))
        admin.create_topics([NewTopic("orders", 1, 1)])["orders"].result(60)
        acls(zk, "--add", "--allow-principal", "User:alice", "--operation", "Write", "--topic", "orders")

        def alice_init() -> None:
            p = Producer({**conf(sasl, "alice"), "transactional.id": "orders-app"})
            p.init_transactions(30)
            p.begin_transaction()
            p.produce("orders", value=b"ok", partition=0)
            p.commit_transaction(30)

        with pytest.raises(KafkaException) as e:
            alice_init()
        assert e.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED

        # the requests themselves: FindCoordinator needs Describe, the others Write on the id
        body = {"key": "orders-app", "key_type": 1}
        assert (
            as_bob(sasl, FIND_COORDINATOR, 2, body, user="alice")["error_code"]
            == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        )
        end = {"transactional_id": "orders-app", "producer_id": 1, "producer_epoch": 0, "committed": True}
        assert (
            as_bob(sasl, END_TXN, 1, end, user="alice")["error_code"] == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        )
        add = {
            "transactional_id": "orders-app",
            "producer_id": 1,
            "producer_epoch": 0,
            "topics": [{"name": "orders", "partitions": [0]}],
        }
        resp = as_bob(sasl, ADD_PARTITIONS_TO_TXN, 1, add, user="alice")
        assert (
            resp["results"][0]["results_by_partition"][0]["partition_error_code"]
            == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        )
        markers = {
            "markers": [
                {
                    "producer_id": 1,
                    "producer_epoch": 0,
                    "transaction_result": False,
                    "topics": [{"name": "orders", "partition_indexes": [0]}],
                    "coordinator_epoch": 0,
                }
            ]
        }
        resp = as_bob(sasl, WRITE_TXN_MARKERS, 0, markers, user="alice")
        assert resp["markers"][0]["topics"][0]["partitions"][0]["error_code"] == ErrorCode.CLUSTER_AUTHORIZATION_FAILED

        acls(
            zk,
            "--add",
            "--allow-principal",
            "User:alice",
            "--operation",
            "Write",
            "--operation",
            "Describe",
            "--transactional-id",
            "orders-app",
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                alice_init()
                break
            except KafkaException as err:
                code = err.args[0].code()
                assert code == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED and time.monotonic() < deadline, err
                time.sleep(0.5)
        # with Write on the id but not on the topic, the partition is refused and nothing added
        add["topics"] = [{"name": "orders", "partitions": [0]}, {"name": "__consumer_offsets", "partitions": [0]}]
        resp = as_bob(sasl, ADD_PARTITIONS_TO_TXN, 1, add, user="alice")
        codes = {r["name"]: r["results_by_partition"][0]["partition_error_code"] for r in resp["results"]}
        assert codes == {
            "orders": ErrorCode.OPERATION_NOT_ATTEMPTED,
            "__consumer_offsets": ErrorCode.TOPIC_AUTHORIZATION_FAILED,
        }
        # Kafka 2.3's KafkaApis: a refused topic (or an internal one) TOPIC_AUTHORIZATION_FAILED, a
        # partition the cluster does not have UNKNOWN_TOPIC_OR_PARTITION (after the topic check: an
        # unknown topic she may not write is refused), the others OPERATION_NOT_ATTEMPTED
        add["topics"] = [
            {"name": "orders", "partitions": [0, 7]},
            {"name": "secret", "partitions": [0]},
            {"name": "__consumer_offsets", "partitions": [0]},
        ]
        resp = as_bob(sasl, ADD_PARTITIONS_TO_TXN, 1, add, user="alice")
        codes = {
            (r["name"], p["partition_index"]): p["partition_error_code"]
            for r in resp["results"]
            for p in r["results_by_partition"]
        }
        assert codes == {
            ("orders", 0): ErrorCode.OPERATION_NOT_ATTEMPTED,
            ("orders", 7): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            ("secret", 0): ErrorCode.TOPIC_AUTHORIZATION_FAILED,
            ("__consumer_offsets", 0): ErrorCode.TOPIC_AUTHORIZATION_FAILED,
        }
    finally:
        broker.stop()
