"""ACLs against a real broker with confluent-kafka: least privilege over SASL/PLAIN principals.

``alice`` may write and read ``orders`` and use group ``orders-app``; ``bob`` has nothing until an
ACL is added while the broker runs. PLAINTEXT (the test harness's listener, and the
inter-broker one) is User:ANONYMOUS, a super user here, as Kafka deployments make their
inter-broker principal.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from headwater.cli.main import main as cli_main
from headwater.client.connection import BrokerConnection
from headwater.client.security import ClientSecurity
from headwater.protocol.apis import FETCH, METADATA, PRODUCE
from headwater.protocol.errors import ErrorCode
from headwater.protocol.records.record import encode_batch
from headwater.testing.cluster import LocalBroker
from headwater.testing.zookeeper import ZooKeeperServer, free_port

JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'user_admin="admin-pw" user_alice="alice-pw" user_bob="bob-pw";'
)


def acls(zk: str, *args: str) -> None:
    assert cli_main(["acls", "--zookeeper", zk, *args]) == 0


def conf(port: int, user: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": f"127.0.0.1:{port}",
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": user,
        "sasl.password": f"{user}-pw",
    }


def producer(c: dict[str, Any], timeout: float = 10) -> Producer:
    """One per principal for the whole test: librdkafka's handle teardown in the middle of the
    test (a Producer per call) left a stray Python exception set."""
    return Producer(
        {**c, "linger.ms": 5, "message.timeout.ms": int(timeout * 1000), "topic.metadata.refresh.interval.ms": 1000}
    )


def produce(p: Producer, topic: str, count: int, timeout: float = 30) -> list[Any]:
    results: list[Any] = []
    for i in range(count):
        try:
            p.produce(topic, value=f"{i}".encode(), on_delivery=lambda err, msg: results.append(err))
        except KafkaException as e:  # librdkafka remembers a refused topic until its next metadata refresh
            results.append(e.args[0])
    p.flush(timeout + 30)
    return results


def as_bob(port: int, api: Any, version: int, body: dict[str, Any], user: str = "bob") -> dict[str, Any]:
    """One request on bob's (or ``user``'s) own authenticated connection (Headwater's client): the raw answer."""

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


def topics_visible_to(port: int, user: str) -> set[str]:
    """The topics a raw Metadata request lists to ``user``: the broker's own view of its ACLs."""
    answer = as_bob(port, METADATA, 7, {"topics": None, "allow_auto_topic_creation": False}, user=user)
    return {t["name"] for t in answer["topics"] if t["error_code"] == ErrorCode.NONE}


#: A stock producer refused by the broker, in a process of its own: librdkafka's refusal path has
#: left a stray Python exception set in confluent-kafka (surfacing later as a SystemError in an
#: unrelated call), so its codes are reported from a child process that then exits.
_REFUSED_PRODUCER = """
import json, sys
from confluent_kafka import KafkaException, Producer
conf, topic, count = json.loads(sys.argv[1])
p = Producer({**conf, "linger.ms": 5, "message.timeout.ms": 10000})
codes = []
for i in range(count):
    try:
        p.produce(topic, value=str(i).encode(), on_delivery=lambda err, msg: codes.append(err.code() if err else 0))
    except KafkaException as e:
        codes.append(e.args[0].code())
p.flush(40)
print(json.dumps(codes))
"""


def stock_produce_codes(c: dict[str, Any], topic: str, count: int) -> list[int]:
    out = subprocess.run(
        [sys.executable, "-c", _REFUSED_PRODUCER, json.dumps([c, topic, count])],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return [int(x) for x in json.loads(out.stdout.strip().splitlines()[-1])]


def bob_fetch_error(port: int) -> int:
    partition = {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}
    body = {
        "replica_id": -1,
        "max_wait_ms": 0,
        "min_bytes": 0,
        "topics": [{"topic": "orders", "partitions": [partition]}],
    }
    [topic] = as_bob(port, FETCH, 10, body)["responses"]
    assert topic["partitions"][0]["records"] is None
    return int(topic["partitions"][0]["error_code"])


def bob_produce_error(port: int) -> int:
    batch = encode_batch([(None, b"from-bob", int(time.time() * 1000), ())])
    body = {
        "acks": 1,
        "timeout_ms": 10000,
        "topics": [{"name": "orders", "partitions": [{"partition_index": 0, "records": batch}]}],
    }
    [topic] = as_bob(port, PRODUCE, 7, body)["responses"]
    return int(topic["partitions"][0]["error_code"])


def start_acl_broker(
    zookeeper: ZooKeeperServer, tmp_path: Path, chroot: str, **extra: object
) -> tuple[LocalBroker, str, int]:
    """One broker under a fresh chroot with SimpleAclAuthorizer, PLAINTEXT (ANONYMOUS, a super user) and
    SASL_PLAINTEXT (JAAS's PLAIN users) listeners: (broker, its ZooKeeper connect string, the SASL port)."""
    zk = f"{zookeeper.connect}/{chroot}-{int(time.time() * 1000)}"
    broker = LocalBroker(tmp_path, 0, zk)
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
            **extra,
        }
    )
    broker.start(timeout=90)
    return broker, zk, sasl


def test_least_privilege_principals(zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    broker, zk, sasl = start_acl_broker(zookeeper, tmp_path, "acls", **{"group.initial.rebalance.delay.ms": 0})
    try:
        admin = AdminClient(conf(sasl, "admin"))
        for t in ("orders", "secret"):
            admin.create_topics([NewTopic(t, 1, 1)])[t].result(60)
        acls(
            zk,
            "--add",
            "--allow-principal",
            "User:alice",
            "--operation",
            "Write",
            "--operation",
            "Read",
            "--topic",
            "orders",
        )
        acls(zk, "--add", "--allow-principal", "User:alice", "--operation", "Read", "--group", "orders-app")

        def wait_for(check: Any, what: str, timeout: float = 60) -> None:
            deadline = time.monotonic() + timeout
            while not check():
                assert time.monotonic() < deadline, what
                time.sleep(0.5)

        # the broker reloads ACLs from the change notification (its own view: what it lists to alice)
        alice = conf(sasl, "alice")
        wait_for(lambda: "orders" in topics_visible_to(sasl, "alice"), "alice's ACLs never applied")
        alice_producer = producer(alice)
        assert produce(alice_producer, "orders", 1) == [None]
        assert produce(alice_producer, "orders", 49) == [None] * 49

        # Metadata lists only what alice may describe
        topics = Producer(alice).list_topics(timeout=30).topics
        assert "orders" in topics and "secret" not in topics

        # a group consumer with exactly the ACLs it needs
        c = Consumer(
            {**alice, "group.id": "orders-app", "auto.offset.reset": "earliest", "enable.partition.eof": False}
        )
        c.subscribe(["orders"])
        got: list[bytes] = []
        deadline = time.monotonic() + 90
        try:
            while len(got) < 50 and time.monotonic() < deadline:
                msg = c.poll(0.5)
                if msg is not None and msg.error() is None:
                    got.append(msg.value())
            c.commit(asynchronous=False)
        finally:
            c.close()
        assert sorted(int(v) for v in got) == [0, *range(49)]

        # alice may not join another group
        errors: list[Any] = []
        c = Consumer({**alice, "group.id": "not-hers", "error_cb": errors.append, "enable.partition.eof": False})
        c.subscribe(["orders"])
        deadline = time.monotonic() + 60
        seen: list[Any] = []
        try:
            while time.monotonic() < deadline and not any(
                e.code() == KafkaError.GROUP_AUTHORIZATION_FAILED for e in seen + errors
            ):
                msg = c.poll(0.5)
                if msg is not None and msg.error() is not None:
                    seen.append(msg.error())
        finally:
            c.close()
        assert any(e.code() == KafkaError.GROUP_AUTHORIZATION_FAILED for e in seen + errors), seen + errors

        # bob: no Write (nothing written), no Read
        bob = conf(sasl, "bob")
        failed = stock_produce_codes(bob, "orders", 5)
        assert failed and all(code == KafkaError.TOPIC_AUTHORIZATION_FAILED for code in failed), failed
        cb = Consumer({**bob, "group.id": "bob", "enable.partition.eof": False})
        cb.assign([TopicPartition("orders", 0, 0)])
        denied_codes = {KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED}
        fetch_errors: list[Any] = []
        deadline = time.monotonic() + 60
        try:  # librdkafka reports the first refusal it meets (its group lookup or the topic)
            while not fetch_errors and time.monotonic() < deadline:
                msg = cb.poll(0.5)
                if msg is not None:
                    assert msg.error() is not None, "bob read a record"
                    fetch_errors.append(msg.error())
        finally:
            cb.close()
        assert fetch_errors and fetch_errors[0].code() in denied_codes, fetch_errors
        watermarks = Consumer({**alice, "group.id": "orders-app"})
        try:
            _, high = watermarks.get_watermark_offsets(TopicPartition("orders", 0), timeout=30)
        finally:
            watermarks.close()
        assert high == 50  # bob wrote nothing

        assert bob_fetch_error(sasl) == ErrorCode.TOPIC_AUTHORIZATION_FAILED  # the Fetch itself, on the wire

        # granted while running: bob may now write (raw Produce on his own connection)
        assert bob_produce_error(sasl) == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        acls(zk, "--add", "--allow-principal", "User:bob", "--operation", "Write", "--topic", "orders")
        wait_for(lambda: bob_produce_error(sasl) == ErrorCode.NONE, "bob's new ACL never applied")
        # ... and it is listed
        acls(zk, "--list", "--topic", "orders")

        # the ACL APIs through a stock AdminClient: the super user may, bob may not
        read_for_bob = AclBinding(
            ResourceType.TOPIC,
            "orders",
            ResourcePatternType.LITERAL,
            "User:bob",
            "*",
            AclOperation.READ,
            AclPermissionType.ALLOW,
        )
        admin.create_acls([read_for_bob])[read_for_bob].result(30)
        everything_on_orders = AclBindingFilter(
            ResourceType.TOPIC,
            "orders",
            ResourcePatternType.LITERAL,
            None,
            None,
            AclOperation.ANY,
            AclPermissionType.ANY,
        )
        wait_for(lambda: read_for_bob in admin.describe_acls(everything_on_orders).result(30), "CreateAcls not visible")
        described = admin.describe_acls(everything_on_orders).result(30)
        assert {(b.principal, b.operation) for b in described} == {
            ("User:alice", AclOperation.WRITE),
            ("User:alice", AclOperation.READ),
            ("User:bob", AclOperation.WRITE),
            ("User:bob", AclOperation.READ),
        }
        bob_admin = AdminClient(bob)
        refused = AclBinding(
            ResourceType.TOPIC,
            "secret",
            ResourcePatternType.LITERAL,
            "User:bob",
            "*",
            AclOperation.ALL,
            AclPermissionType.ALLOW,
        )
        with pytest.raises(KafkaException) as e:
            bob_admin.create_acls([refused])[refused].result(30)
        assert e.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
        bobs = AclBindingFilter(
            ResourceType.ANY, None, ResourcePatternType.ANY, "User:bob", None, AclOperation.ANY, AclPermissionType.ANY
        )
        assert {b.name for b in admin.describe_acls(bobs).result(30)} == {"orders"}  # nothing on secret
        deleted = admin.delete_acls([bobs])[bobs].result(30)
        assert {(b.name, b.operation) for b in deleted} == {
            ("orders", AclOperation.READ),
            ("orders", AclOperation.WRITE),
        }
        wait_for(lambda: bob_produce_error(sasl) == ErrorCode.TOPIC_AUTHORIZATION_FAILED, "DeleteAcls never applied")
    finally:
        broker.stop()


def test_acls_from_file_adds_only_what_is_missing(
    zookeeper: ZooKeeperServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``headwater acls --add --from-file``: many bindings in one call (deploy/ansible's ACLs); a second
    run writes and prints nothing (what an idempotent play counts as unchanged); bad input is refused."""
    from kazoo.client import KazooClient

    zk = f"{zookeeper.connect}/acls-file-{int(time.time() * 1000)}"
    bindings = [
        {"principal": "User:mirror", "operations": ["Read", "DescribeConfigs"], "resource_type": "Topic", "name": "*"},
        {
            "principal": "User:audit",
            "operations": ["Read"],
            "resource_type": "topic",
            "names": ["clicks", "__audit"],
            "pattern_type": "literal",
            "permission": "Allow",
            "host": "*",
        },
        {
            "principal": "User:loader",
            "operations": ["Write"],
            "resource_type": "Topic",
            "name": "wh.",
            "pattern_type": "prefixed",
        },
    ]
    path = tmp_path / "acls.json"
    path.write_text(json.dumps(bindings))
    acls(zk, "--add", "--from-file", str(path))
    first = capsys.readouterr().out
    assert first.count("Adding ACLs for resource") == 4, first
    assert "(principal=User:mirror, host=*, operation=DESCRIBECONFIGS, permissionType=ALLOW)" in first
    acls(zk, "--add", "--from-file", str(path))
    assert capsys.readouterr().out == ""  # nothing missing: nothing written, nothing printed
    client = KazooClient(hosts=zk)
    client.start()
    try:
        stored = {p: json.loads(client.get(p)[0]) for p in ("/kafka-acl/Topic/*", "/kafka-acl/Topic/__audit")}
        assert [a["operation"] for a in stored["/kafka-acl/Topic/*"]["acls"]] == ["Read", "DescribeConfigs"]
        assert stored["/kafka-acl/Topic/__audit"]["acls"] == [
            {"principal": "User:audit", "permissionType": "Allow", "operation": "Read", "host": "*"}
        ]
        assert client.exists("/kafka-acl-extended/prefixed/Topic/wh.")
        changes = client.get_children("/kafka-acl-changes")
        assert len(changes) == 3, changes  # one per literal resource written, none for the second run
    finally:
        client.stop()
        client.close()
    # One more binding on an existing resource: only it is added (and printed).
    path.write_text(
        json.dumps(
            [
                *bindings,
                {"principal": "User:audit", "operations": ["Describe"], "resource_type": "Topic", "name": "clicks"},
            ]
        )
    )
    acls(zk, "--add", "--from-file", str(path))
    out = capsys.readouterr().out
    assert out.splitlines() == [
        "Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name=clicks, patternType=LITERAL)`:",
        "\t(principal=User:audit, host=*, operation=DESCRIBE, permissionType=ALLOW)",
    ], out
    for bad, said in (
        ({"principal": "mirror", "operations": ["Read"], "resource_type": "Topic", "name": "x"}, "TYPE:NAME"),
        ({"principal": "User:a", "operations": ["Reed"], "resource_type": "Topic", "name": "x"}, "unknown operation"),
        ({"principal": "User:a", "operations": ["Read"], "resource_type": "Topic"}, "name (a string) or names"),
        (
            {"principal": "User:a", "operations": ["Read"], "resource_type": "Topic", "name": "x", "topic": "y"},
            "unknown keys",
        ),
    ):
        path.write_text(json.dumps([bad]))
        assert cli_main(["acls", "--zookeeper", zk, "--add", "--from-file", str(path)]) != 0
        assert said in capsys.readouterr().err, bad


def test_authorizer_properties_is_kafka_acls_spelling_of_zookeeper(
    zookeeper: ZooKeeperServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 37 item 7: ``--authorizer-properties zookeeper.connect=HOST:PORT`` (kafka-acls' own
    spelling in Kafka 2.3 operators' scripts, with or without ``--authorizer``) writes and lists
    exactly what ``--zookeeper`` does; a malformed or incomplete one is refused with its reason."""
    zk = f"{zookeeper.connect}/acls-props-{int(time.time() * 1000)}"
    binding = ["--allow-principal", "User:alice", "--operation", "Read", "--topic", "orders"]
    spelled = [
        "--authorizer",
        "kafka.security.auth.SimpleAclAuthorizer",
        "--authorizer-properties",
        f"zookeeper.connect={zk}",
    ]
    assert cli_main(["acls", *spelled, "--add", *binding]) == 0
    added = capsys.readouterr().out
    assert "(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)" in added
    acls(zk, "--list", "--topic", "orders")
    via_zookeeper = capsys.readouterr().out
    assert cli_main(["acls", "--authorizer-properties", f"zookeeper.connect={zk}", "--list", "--topic", "orders"]) == 0
    assert capsys.readouterr().out == via_zookeeper != ""
    # removed through the same spelling; --zookeeper sees it gone
    assert cli_main(["acls", *spelled, "--remove", *binding]) == 0
    capsys.readouterr()
    acls(zk, "--list", "--topic", "orders")
    assert "User:alice" not in capsys.readouterr().out
    for bad, reason in (
        (["--authorizer-properties", "zookeeper.connect"], "key=value"),
        (["--authorizer-properties", "zookeeper.session.timeout.ms=6000"], "zookeeper.connect"),
        (
            ["--authorizer", "com.example.MyAuthorizer", "--authorizer-properties", f"zookeeper.connect={zk}"],
            "authorizer",
        ),
        (["--zookeeper", zk, "--authorizer-properties", f"zookeeper.connect={zk}"], "not both"),
    ):
        assert cli_main(["acls", *bad, "--list"]) != 0, bad
        assert reason in capsys.readouterr().err, bad
