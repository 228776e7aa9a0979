"""headwater.zk's documents against what Apache Kafka 2.3.1's own code writes into each znode.

``kafka-2.3.1-golden.tsv`` is the output of ``tests/java/zk/ZkGolden.java`` run against the
``kafka_2.12:2.3.1`` jar (each line ``<name>\\t<znode data>``). Kafka writes JSON through Scala maps,
so key order is not part of the format: documents are compared parsed. The broker registration's
timestamp is the time of the run.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from headwater.zk import admin, brokers, cluster, config, consumers, controller, notifications, topics
from headwater.zk.json import ZnodeFormatError

GOLDEN = dict(
    line.split("\t", 1) for line in (Path(__file__).parent / "kafka-2.3.1-golden.tsv").read_text().splitlines() if line
)


def _same(ours: bytes, name: str, ignore: tuple[str, ...] = ()) -> None:
    theirs = json.loads(GOLDEN[name])
    mine = json.loads(ours)
    for key in ignore:
        theirs.pop(key, None)
        mine.pop(key, None)
    assert mine == theirs


def test_the_golden_file_has_every_document() -> None:
    assert len(GOLDEN) == 13


def test_broker_registration() -> None:
    reg = brokers.BrokerRegistration(
        1,
        (brokers.Endpoint("PLAINTEXT", "h1", 9092), brokers.Endpoint("INTERNAL", "h1", 9093)),
        {"PLAINTEXT": "PLAINTEXT", "INTERNAL": "SASL_SSL"},
        rack="r1",
    )
    _same(reg.encode(), "broker_registration_rack", ignore=("timestamp",))
    back = brokers.decode(1, GOLDEN["broker_registration_rack"].encode())
    assert back.endpoints == reg.endpoints and back.protocols == reg.protocols and back.rack == "r1"
    assert back.endpoint_for_protocol("SASL_SSL") == brokers.Endpoint("INTERNAL", "h1", 9093)
    assert back.timestamp_ms > 0

    no_plain = brokers.BrokerRegistration(2, (brokers.Endpoint("SSL", "h2", 9094),), {"SSL": "SSL"})
    _same(no_plain.encode(), "broker_registration_no_plaintext", ignore=("timestamp",))


def test_old_broker_registrations_are_read() -> None:
    v1 = brokers.decode(3, b'{"version":1,"host":"old","port":9092,"jmx_port":-1}')
    assert v1.endpoints == (brokers.Endpoint("PLAINTEXT", "old", 9092),)
    v6 = brokers.decode(4, b'{"version":2,"endpoints":["PLAINTEXT://[::1]:9092"]}')
    assert v6.endpoint("plaintext") == brokers.Endpoint("PLAINTEXT", "::1", 9092)
    assert v6.endpoint("PLAINTEXT").url() == "PLAINTEXT://[::1]:9092"  # type: ignore[union-attr]
    with pytest.raises(ZnodeFormatError):
        brokers.decode(5, b"not json")


def test_topic_assignment_and_partition_state() -> None:
    _same(topics.TopicAssignment({1: [2, 3, 1], 0: [1, 2, 3]}).encode(), "topic_assignment")
    assert topics.decode_assignment("orders", GOLDEN["topic_assignment"].encode()).partitions == {
        0: [1, 2, 3],
        1: [2, 3, 1],
    }
    state = topics.PartitionState(leader=1, leader_epoch=7, isr=(1, 2, 3), controller_epoch=3)
    _same(state.encode(), "partition_state")
    assert topics.decode_partition_state("orders", 0, GOLDEN["partition_state"].encode()) == state
    with pytest.raises(ZnodeFormatError):
        topics.decode_partition_state("orders", 0, b'{"leader":1}')


def test_controller_and_epoch() -> None:
    _same(controller.encode_controller(1, 1574000000000), "controller")
    assert controller.decode_controller(GOLDEN["controller"].encode()) == 1
    assert controller.decode_controller(b"2") == 2  # Kafka 0.8
    assert controller.encode_epoch(3) == GOLDEN["controller_epoch"].encode()
    assert controller.decode_epoch(b"3") == 3


def test_entity_configs_and_change_notifications() -> None:
    _same(config.encode_entity_config({"retention.ms": "60000"}), "entity_config")
    assert config.decode_entity_config("/config/topics/orders", GOLDEN["entity_config"].encode()) == {
        "retention.ms": "60000"
    }
    assert config.decode_entity_config("/config/topics/orders", b"") == {}
    # AdminZkClient.changeEntityConfig writes {"version":2,"entity_path":...} (KafkaZkClient needs a
    # server to run, so this one is not in the golden file)
    assert json.loads(config.encode_change("users", "alice%40X")) == {"version": 2, "entity_path": "users/alice%40X"}
    assert config.decode_change(config.encode_change("topics", "orders")) == ("topics", "orders")
    assert config.decode_change(b'{"version":1,"entity_type":"topics","entity_name":"t"}') == ("topics", "t")


def test_sanitizer_matches_kafka() -> None:
    # Kafka's SanitizerTest: "user1@domain" and a name with every special character
    assert config.sanitize("alice@X") == "alice%40X"
    assert config.sanitize("a b*c~d.e-f_g") == "a%20b%2Ac%7Ed.e-f_g"
    assert config.sanitize("<default>") == "<default>"
    assert config.desanitize(config.sanitize("ü/@:*~ x")) == "ü/@:*~ x"


def test_admin_documents() -> None:
    _same(admin.encode_reassignment({("orders", 0): [3, 1, 2]}), "reassign_partitions")
    assert admin.decode_reassignment(GOLDEN["reassign_partitions"].encode()) == {("orders", 0): [3, 1, 2]}
    _same(admin.encode_preferred_election([("orders", 0)]), "preferred_replica_election")
    assert admin.decode_partition_list("p", GOLDEN["preferred_replica_election"].encode()) == [("orders", 0)]


def test_notifications() -> None:
    _same(notifications.encode_isr_change([("orders", 0)]), "isr_change")
    assert notifications.decode_isr_change(GOLDEN["isr_change"].encode()) == [("orders", 0)]
    _same(notifications.encode_log_dir_event(1), "log_dir_event")
    assert notifications.decode_log_dir_event(GOLDEN["log_dir_event"].encode()) == 1


def test_cluster_documents() -> None:
    _same(cluster.encode_cluster_id("Ex2d7dF1QzS2a9w1fxE3yA"), "cluster_id")
    assert cluster.decode_cluster_id(GOLDEN["cluster_id"].encode()) == "Ex2d7dF1QzS2a9w1fxE3yA"
    block = cluster.ProducerIdBlock(1, 0, 999)
    _same(block.encode(), "producer_id_block")
    assert cluster.decode_producer_id_block(GOLDEN["producer_id_block"].encode()) == block


def test_consumer_registration_round_trip() -> None:
    reg = consumers.ConsumerRegistration({"orders": 2}, "static", 1574000000000)
    assert consumers.decode_registration("/consumers/g/ids/c", reg.encode()) == reg
    assert consumers.decode_offset("/x", consumers.encode_offset(42)) == 42
    with pytest.raises(ZnodeFormatError):
        consumers.decode_registration("/x", b'{"pattern":"nope"}')


def test_topic_name_rule() -> None:
    assert topics.topic_name_error("orders.v1_x-y") is None
    assert topics.topic_name_error("x" * 250) is not None
    assert topics.topic_name_error("a/b") is not None
    assert topics.topic_name_error("..") is not None
    assert topics.topic_name_error("") is not None


@given(st.dictionaries(st.integers(0, 10_000), st.lists(st.integers(0, 1000), min_size=1, max_size=5), max_size=20))
def test_assignment_round_trip(parts: dict[int, list[int]]) -> None:
    assert topics.decode_assignment("t", topics.TopicAssignment(parts).encode()).partitions == parts


@given(st.text(max_size=30))
def test_sanitize_round_trip(name: str) -> None:
    s = config.sanitize(name)
    assert "/" not in s
    assert config.desanitize(s) == name
