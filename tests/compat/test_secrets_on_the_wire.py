"""No secret leaves the broker, and hosts are named as Kafka names them, seen through the wire.

One broker (module scope) with ACLs on, listening on PLAINTEXT (the brokers' own, 127.0.0.1),
SASL_PLAINTEXT/PLAIN on all interfaces (a dual-stack socket: IPv4 clients arrive as
``::ffff:127.0.0.1``) and SSL with an encrypted key. Review security-2026-11-26 findings H1
(DescribeConfigs returned the JAAS configs in clear), L6 (JAAS secrets from ``file:``), M1 (a
``--deny-host`` ACL never matched an IPv4 client of a dual-stack listener), M2 (a certificate whose
CN holds ``,OU=...`` was taken for another principal) and L4 (a Produce to a made-up topic name made
a Prometheus series).
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from headwater.cli.main import main as cli_main
from headwater.protocol.apis import PRODUCE
from headwater.protocol.errors import ErrorCode
from headwater.protocol.records.record import RecordInput, encode_batch
from headwater.testing.cluster import LocalBroker
from headwater.testing.tls import TestCA
from headwater.testing.zookeeper import ZooKeeperServer, free_port
from tests.broker.wire import Wire

ADMIN_PW = "admin-Wire-Secret-1"
CAROL_PW = "carol-Wire-Secret-2"
KEY_PW = "key-Wire-Secret-3"
SECRETS = (ADMIN_PW, CAROL_PW, KEY_PW)


@dataclass
class Broker:
    broker: LocalBroker
    sasl_port: int
    ssl_port: int
    zk_connect: str
    tmp: Path
    ca: TestCA

    def admin_conf(self) -> dict[str, Any]:
        return self.client_conf("admin", ADMIN_PW)

    def client_conf(self, user: str, password: str) -> dict[str, Any]:
        return {
            "bootstrap.servers": f"127.0.0.1:{self.sasl_port}",
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": user,
            "sasl.password": password,
        }


@pytest.fixture(scope="module")
def secured(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    tmp = tmp_path_factory.mktemp("secrets-wire")
    ca = TestCA(tmp / "ca")
    cert = ca.issue("broker", password=KEY_PW)
    (tmp / "admin.password").write_text(ADMIN_PW + "\n")
    zk_connect = f"{zookeeper.connect}/secrets-wire-{int(time.time() * 1000)}"
    broker = LocalBroker(tmp, 0, zk_connect)
    sasl, tls = free_port(), free_port()
    jaas = (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'user_admin="file:{tmp / "admin.password"}" user_carol="{CAROL_PW}";'
    )
    broker.properties.update(
        {
            "listeners": f"PLAINTEXT://127.0.0.1:{broker.port},SASL_PLAINTEXT://:{sasl},SSL://127.0.0.1:{tls}",
            "advertised.listeners": (
                f"PLAINTEXT://127.0.0.1:{broker.port},SASL_PLAINTEXT://127.0.0.1:{sasl},SSL://127.0.0.1:{tls}"
            ),
            "inter.broker.listener.name": "PLAINTEXT",
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": jaas,
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": cert.keystore,
            "ssl.key.password": KEY_PW,
            "ssl.truststore.location": ca.ca_file,
            "listener.name.ssl.ssl.client.auth": "required",
            "authorizer.class.name": "kafka.security.auth.SimpleAclAuthorizer",
            "super.users": "User:ANONYMOUS;User:admin",
            "allow.everyone.if.no.acl.found": "false",
            "auto.create.topics.enable": "false",
            "offsets.topic.replication.factor": 1,
            "offsets.topic.num.partitions": 1,
            "prometheus.port": free_port(),
            "prometheus.host": "127.0.0.1",
        }
    )
    broker.start(timeout=90)
    try:
        yield Broker(broker, sasl, tls, zk_connect, tmp, ca)
    finally:
        broker.stop()


def _create(s: Broker, *topics: str) -> None:
    admin = AdminClient(s.admin_conf())
    for f in admin.create_topics([NewTopic(t, 1, 1) for t in topics], operation_timeout=30).values():
        f.result(60)


def test_describe_broker_configs_returns_no_secret_over_the_wire(
    secured: Broker, capsys: pytest.CaptureFixture[str]
) -> None:
    """confluent-kafka's AdminClient (DescribeConfigs v1 with synonyms) and ``headwater configs
    --describe --entity-type brokers --all``: the JAAS config and the key password are sensitive,
    null, and no value carries a password."""
    admin = AdminClient(secured.admin_conf())
    resource = ConfigResource(ConfigResource.Type.BROKER, "0")
    entries = admin.describe_configs([resource])[resource].result(60)
    assert "broker.id" in entries and entries["broker.id"].value == "0"
    shown = []
    for e in entries.values():
        shown.append(str(e.value))
        shown.extend(str(s.value) for s in e.synonyms.values())
    text = "\n".join(shown)
    for needle in ("password=", "user_", *SECRETS):
        assert needle not in text, needle
    for name in ("listener.name.sasl_plaintext.plain.sasl.jaas.config", "ssl.key.password"):
        assert entries[name].value is None and entries[name].is_sensitive, name

    command = secured.tmp / "admin.properties"
    command.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.username=admin\n"
        f"sasl.password=file:{secured.tmp / 'admin.password'}\n"
    )
    bootstrap = f"127.0.0.1:{secured.sasl_port}"
    args = ["--bootstrap-server", bootstrap, "--command-config", str(command)]
    code = cli_main(["configs", *args, "--describe", "--entity-type", "brokers", "--entity-name", "0", "--all"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "listener.name.sasl_plaintext.plain.sasl.jaas.config=null sensitive=true" in out
    assert "ssl.key.password=null sensitive=true" in out
    for needle in ('password="', "user_admin=", "user_carol=", *SECRETS):
        assert needle not in out, needle


def _wait_describable(conf: dict[str, Any], topic: str, timeout: float = 60.0) -> None:
    """Until the broker's ACL cache lets this principal see the topic (the ACLs applied)."""
    deadline = time.monotonic() + timeout
    admin = AdminClient(conf)
    while time.monotonic() < deadline:
        if topic in admin.list_topics(timeout=10).topics:
            return
        time.sleep(0.2)
    raise AssertionError(f"{topic} never became visible to {conf.get('sasl.username', conf)}")


def _produce(conf: dict[str, Any], topic: str) -> KafkaError | None:
    results: list[KafkaError | None] = []
    p = Producer({**conf, "linger.ms": 0, "message.send.max.retries": 0})
    p.produce(topic, b"v", on_delivery=lambda err, _msg: results.append(err))
    assert p.flush(60) == 0
    return results[0]


def test_deny_host_acl_matches_an_ipv4_client_of_a_dual_stack_listener(secured: Broker) -> None:
    """``--deny-host 127.0.0.1`` refuses carol's Write when she connects from 127.0.0.1 to the
    listener bound on all interfaces (dual-stack); she may still write another topic."""
    _create(secured, "denied-from-loopback", "open-to-carol")
    acl = ["acls", "--zookeeper", secured.zk_connect, "--add"]
    deny = ["--deny-principal", "User:carol", "--deny-host", "127.0.0.1", "--operation", "Write"]
    assert cli_main([*acl, *deny, "--topic", "denied-from-loopback"]) == 0
    for topic in ("denied-from-loopback", "open-to-carol"):
        assert cli_main([*acl, "--allow-principal", "User:carol", "--operation", "All", "--topic", topic]) == 0
    carol = secured.client_conf("carol", CAROL_PW)
    for topic in ("denied-from-loopback", "open-to-carol"):
        _wait_describable(carol, topic)
    assert _produce(carol, "open-to-carol") is None
    err = _produce(carol, "denied-from-loopback")
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, err


def _series(s: Broker, topic: str) -> list[str]:
    port = s.broker.properties["prometheus.port"]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    return [line for line in text.splitlines() if f'topic="{topic}"' in line]


def test_produce_to_a_made_up_topic_makes_no_metrics_series(secured: Broker) -> None:
    """Kafka counts no failed produce for UnknownTopicOrPartition: a client inventing topic names
    cannot grow /metrics. A refused produce to an existing topic is still counted."""
    _create(secured, "counted-failures")
    wire = Wire(secured.broker.bootstrap)  # PLAINTEXT: the brokers' super user, no ACL in the way
    try:
        batch = encode_batch([RecordInput(b"k", b"v", 0)])

        def produce(topic: str, acks: int) -> int:
            body = {
                "transactional_id": None,
                "acks": acks,
                "timeout_ms": 5000,
                "topics": [{"name": topic, "partitions": [{"partition_index": 0, "records": batch}]}],
            }
            return int(wire.request(PRODUCE, 7, body)["responses"][0]["partitions"][0]["error_code"])

        made_up = [f"made-up-{i}-{'x' * 200}" for i in range(20)]
        for name in made_up:
            assert produce(name, 1) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert produce("counted-failures", 5) == ErrorCode.INVALID_REQUIRED_ACKS
    finally:
        wire.close()
    for name in made_up:
        assert _series(secured, name) == []
    failed = [
        line for line in _series(secured, "counted-failures") if "failedproducerequests" in line and "_total" in line
    ]
    assert failed and float(failed[0].rsplit(" ", 1)[1]) >= 1, failed


def test_a_certificate_cannot_pass_for_another_principal_by_its_cn(secured: Broker) -> None:
    """``User:CN=carol,OU=ops`` may write; a certificate whose whole CN is ``carol,OU=ops`` (which
    any CA signing attacker-chosen CNs issues) is ``User:CN=carol\\,OU\\=ops``, a different
    principal, and is refused."""
    _create(secured, "certified")
    legit = secured.ca.issue("carol", organizational_unit="ops")
    forged = secured.ca.issue("carol,OU=ops")
    acl = ["acls", "--zookeeper", secured.zk_connect, "--add", "--allow-principal", "User:CN=carol,OU=ops"]
    assert cli_main([*acl, "--operation", "Write", "--topic", "certified"]) == 0

    def conf(cert: Any) -> dict[str, Any]:
        return {
            "bootstrap.servers": f"127.0.0.1:{secured.ssl_port}",
            "security.protocol": "SSL",
            "ssl.ca.location": str(secured.ca.ca_file),
            "ssl.certificate.location": str(cert.certificate),
            "ssl.key.location": str(cert.key),
        }

    _wait_describable(conf(legit), "certified")
    assert _produce(conf(legit), "certified") is None
    err = _produce(conf(forged), "certified")
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, err
