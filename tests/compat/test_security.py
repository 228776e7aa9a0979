"""Security listeners against stock clients: SSL, SASL_SSL with SCRAM, SASL_PLAINTEXT with PLAIN.

One broker (module-scoped) listens on PLAINTEXT, SSL, SASL_PLAINTEXT and SASL_SSL at once, with
certificates from a throwaway CA made at test time. SCRAM users are written to ZooKeeper in
Kafka's format after the broker started (the broker's credential cache reloads a user on its change
notification).
Bad input -- wrong password, unknown user, a plaintext client on a TLS port, an untrusted CA --
must get Kafka's error or a closed connection, and the broker must keep serving everyone else.
"""

from __future__ import annotations

import socket
import ssl
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from headwater.cli.main import main as cli_main
from headwater.protocol.apis import API_VERSIONS, SASL_AUTHENTICATE, SASL_HANDSHAKE
from headwater.protocol.errors import ErrorCode
from headwater.protocol.frames import decode_response, encode_request
from headwater.testing.cluster import LocalBroker
from headwater.testing.tls import TestCA
from headwater.testing.zookeeper import ZooKeeperServer, free_port
from tests.harness.scram import wait_until_brokers_know

PLAIN_JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="admin" password="admin-secret" user_admin="admin-secret" user_carol="carol-pw";'
)


@dataclass
class Secured:
    broker: LocalBroker
    ports: dict[str, int]
    ca: TestCA
    rogue_ca: TestCA
    zk_connect: str

    def bootstrap(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"


def add_scram_user(zk_connect: str, user: str, password: str, mechanism: str = "SCRAM-SHA-512") -> None:
    """With the CLI, as an operator would (kafka-configs' form)."""
    code = cli_main(
        [
            "configs",
            "--zookeeper",
            zk_connect,
            "--alter",
            "--entity-type",
            "users",
            "--entity-name",
            user,
            "--add-config",
            f"{mechanism}=[iterations=4096,password={password}]",
        ]
    )
    assert code == 0


@pytest.fixture(scope="module")
def secured(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    tmp = tmp_path_factory.mktemp("security")
    ca = TestCA(tmp / "ca")
    rogue = TestCA(tmp / "rogue", "Rogue CA")
    cert = ca.issue("broker", password="key-pw")
    zk_connect = f"{zookeeper.connect}/security-{int(time.time() * 1000)}"
    broker = LocalBroker(tmp, 0, zk_connect)
    ports = {"PLAINTEXT": broker.port, "SSL": free_port(), "SASL_PLAINTEXT": free_port(), "SASL_SSL": free_port()}
    broker.properties.update(
        {
            "listeners": ",".join(f"{name}://127.0.0.1:{port}" for name, port in ports.items()),
            "ssl.keystore.location": cert.keystore,
            "ssl.keystore.type": "PEM",
            "ssl.key.password": "key-pw",
            "ssl.truststore.location": ca.ca_file,
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
            "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
            "offsets.topic.replication.factor": 1,
            "offsets.topic.num.partitions": 1,
            "group.initial.rebalance.delay.ms": 0,
            "prometheus.port": "auto",
        }
    )
    if broker.properties["prometheus.port"] == "auto":
        broker.properties["prometheus.port"] = free_port()
        broker.properties["prometheus.host"] = "127.0.0.1"
    broker.start(timeout=90)
    try:
        add_scram_user(zk_connect, "alice", "alice-pw", "SCRAM-SHA-512")
        add_scram_user(zk_connect, "bob", "bob-pw", "SCRAM-SHA-256")
        wait_until_brokers_know([broker], "alice")
        wait_until_brokers_know([broker], "bob")
        yield Secured(broker, ports, ca, rogue, zk_connect)
    finally:
        broker.stop()


def client_conf(s: Secured, listener: str, **extra: Any) -> dict[str, Any]:
    conf: dict[str, Any] = {"bootstrap.servers": s.bootstrap(listener), "security.protocol": listener}
    if listener in ("SSL", "SASL_SSL"):
        conf["ssl.ca.location"] = str(s.ca.ca_file)
    conf.update(extra)
    return conf


def produce_and_consume(conf: dict[str, Any], topic: str, count: int = 200) -> list[bytes]:
    errors: list[Any] = []
    p = Producer({**conf, "linger.ms": 5, "error_cb": errors.append})
    for i in range(count):
        p.produce(topic, value=f"{topic}-{i}".encode(), key=str(i).encode())
    assert p.flush(90) == 0, errors
    c = Consumer({**conf, "group.id": f"g-{topic}", "enable.auto.commit": False, "enable.partition.eof": False})
    c.assign([TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + 90
    try:
        while len(got) < count and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            got.append(msg.value())
    finally:
        c.close()
    return got


def test_confluent_kafka_over_ssl_sasl_ssl_scram_and_sasl_plaintext_plain(secured: Secured) -> None:
    cases = {
        "tls-only": client_conf(secured, "SSL"),
        "scram-512-tls": client_conf(
            secured,
            "SASL_SSL",
            **{"sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice", "sasl.password": "alice-pw"},
        ),
        "scram-256-plain": client_conf(
            secured,
            "SASL_PLAINTEXT",
            **{"sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "bob", "sasl.password": "bob-pw"},
        ),
        "plain-plaintext": client_conf(
            secured,
            "SASL_PLAINTEXT",
            **{"sasl.mechanism": "PLAIN", "sasl.username": "carol", "sasl.password": "carol-pw"},
        ),
    }
    for topic, conf in cases.items():
        got = produce_and_consume(conf, topic)
        assert got == [f"{topic}-{i}".encode() for i in range(200)], topic
        # the client was told the address of the listener it came in on
        md = Producer(conf).list_topics(timeout=30)
        assert [(b.host, b.port) for b in md.brokers.values()] == [
            ("127.0.0.1", int(conf["bootstrap.servers"].split(":")[1]))
        ]
    assert secured.broker.metric("kafka_server_socket_server_authentications_total") >= 6


def _frame(sock: socket.socket) -> bytes:
    head = _exactly(sock, 4)
    return _exactly(sock, struct.unpack(">i", head)[0])


def _exactly(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed by the broker")
        buf += chunk
    return buf


def _closed(sock: socket.socket, timeout: float = 30.0) -> bool:
    """True once the broker closed the connection (EOF or reset) within ``timeout``."""
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except (ConnectionResetError, ssl.SSLError):
        return True
    except TimeoutError:
        return False


def _sasl_attempt(sock: socket.socket, mechanism: str, token: bytes) -> dict[str, Any]:
    sock.sendall(encode_request(SASL_HANDSHAKE, 1, 1, "bad-input", {"mechanism": mechanism}))
    _, hs = decode_response(SASL_HANDSHAKE, 1, memoryview(_frame(sock)))
    assert hs["error_code"] == ErrorCode.NONE and mechanism in hs["mechanisms"]
    sock.sendall(encode_request(SASL_AUTHENTICATE, 1, 2, "bad-input", {"auth_bytes": token}))
    _, resp = decode_response(SASL_AUTHENTICATE, 1, memoryview(_frame(sock)))
    return resp


def test_bad_credentials_and_handshakes_get_kafkas_errors_and_the_broker_keeps_serving(secured: Secured) -> None:
    sasl_port = secured.ports["SASL_PLAINTEXT"]
    # wrong PLAIN password: SASL_AUTHENTICATION_FAILED, then the connection is closed
    with socket.create_connection(("127.0.0.1", sasl_port), timeout=30) as sock:
        resp = _sasl_attempt(sock, "PLAIN", b"\0carol\0guess")
        assert resp["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert "invalid credentials" in resp["error_message"]
        assert _closed(sock)
    # unknown SCRAM user: failed on the first token
    with socket.create_connection(("127.0.0.1", sasl_port), timeout=30) as sock:
        resp = _sasl_attempt(sock, "SCRAM-SHA-512", b"n,,n=mallory,r=abcdefgh")
        assert resp["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert _closed(sock)
    # a request other than ApiVersions / SASL before authentication: closed without an answer
    with socket.create_connection(("127.0.0.1", sasl_port), timeout=30) as sock:
        sock.sendall(encode_request(API_VERSIONS, 0, 1, "bad-input", {}))
        _, versions = decode_response(API_VERSIONS, 0, memoryview(_frame(sock)))
        keys = {k["api_key"]: (k["min_version"], k["max_version"]) for k in versions["api_keys"]}
        assert keys[SASL_HANDSHAKE.key] == (0, 1) and keys[SASL_AUTHENTICATE.key] == (0, 1)
        from headwater.protocol.apis import METADATA

        sock.sendall(encode_request(METADATA, 1, 2, "bad-input", {"topics": []}))
        assert _closed(sock)
    # a plaintext client on the TLS port: the handshake fails and the connection is closed
    with socket.create_connection(("127.0.0.1", secured.ports["SSL"]), timeout=30) as sock:
        sock.sendall(encode_request(API_VERSIONS, 0, 1, "plaintext-on-tls", {}))
        assert _closed(sock)

    # stock client, wrong SCRAM password and unknown user: librdkafka reports Kafka's message
    for user, password in (("alice", "wrong"), ("nobody", "x")):
        errors: list[Any] = []
        conf = client_conf(
            secured,
            "SASL_SSL",
            **{"sasl.mechanism": "SCRAM-SHA-512", "sasl.username": user, "sasl.password": password},
        )
        p = Producer({**conf, "error_cb": errors.append})
        with pytest.raises(KafkaException):
            p.list_topics(timeout=10)
        p.poll(1)
        assert any("Authentication failed" in e.str() for e in errors), (user, [e.str() for e in errors])
    # a TLS client that trusts another CA: certificate verify failure, no connection
    errors = []
    p = Producer(
        {**client_conf(secured, "SSL", **{"ssl.ca.location": str(secured.rogue_ca.ca_file)}), "error_cb": errors.append}
    )
    with pytest.raises(KafkaException):
        p.list_topics(timeout=10)
    p.poll(1)
    assert any("certificate verify failed" in e.str() for e in errors), [e.str() for e in errors]
    # Python's own TLS client with the rogue CA fails the same way
    rogue_ctx = ssl.create_default_context(cafile=str(secured.rogue_ca.ca_file))
    with (
        pytest.raises(ssl.SSLCertVerificationError),
        socket.create_connection(("127.0.0.1", secured.ports["SSL"]), timeout=30) as raw,
    ):
        rogue_ctx.wrap_socket(raw, server_hostname="localhost")

    assert secured.broker.metric("kafka_server_socket_server_authentications_total") > 0
    # ... and everyone else is still served, on every listener
    good = client_conf(
        secured,
        "SASL_SSL",
        **{"sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice", "sasl.password": "alice-pw"},
    )
    assert produce_and_consume(good, "after-bad-input", 10) == [f"after-bad-input-{i}".encode() for i in range(10)]
    assert secured.broker.proc is not None and secured.broker.proc.poll() is None


def test_credential_change_applies_without_restart(secured: Secured) -> None:
    add_scram_user(secured.zk_connect, "dave", "first-pw")
    wait_until_brokers_know([secured.broker], "dave")
    conf = client_conf(secured, "SASL_SSL", **{"sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "dave"})
    assert Producer({**conf, "sasl.password": "first-pw"}).list_topics(timeout=30).brokers
    add_scram_user(secured.zk_connect, "dave", "second-pw")
    # the broker reloads dave when the change notification arrives (its credential cache)
    deadline = time.monotonic() + 60
    while True:
        try:
            Producer({**conf, "sasl.password": "second-pw"}).list_topics(timeout=5)
            break
        except KafkaException:
            assert time.monotonic() < deadline, "the new password never worked"
    with pytest.raises(KafkaException):
        Producer({**conf, "sasl.password": "first-pw"}).list_topics(timeout=10)


def test_kafka_python_over_ssl_and_sasl_ssl_scram(secured: Secured) -> None:
    kafka = pytest.importorskip("kafka")
    common = {"security_protocol": "SASL_SSL", "ssl_cafile": str(secured.ca.ca_file), "request_timeout_ms": 60000}
    scram = {"sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": "alice", "sasl_plain_password": "alice-pw"}
    for name, port, conf in (
        ("kp-ssl", secured.ports["SSL"], {"security_protocol": "SSL", "ssl_cafile": str(secured.ca.ca_file)}),
        ("kp-scram", secured.ports["SASL_SSL"], {**common, **scram}),
    ):
        producer = kafka.KafkaProducer(bootstrap_servers=f"127.0.0.1:{port}", **conf)
        try:
            for i in range(20):
                producer.send(name, f"{name}-{i}".encode())
            producer.flush(60)
        finally:
            producer.close(10)
        consumer = kafka.KafkaConsumer(
            bootstrap_servers=f"127.0.0.1:{port}", auto_offset_reset="earliest", consumer_timeout_ms=30000, **conf
        )
        try:
            consumer.assign([kafka.TopicPartition(name, 0)])
            got = []
            deadline = time.monotonic() + 60
            while len(got) < 20 and time.monotonic() < deadline:
                for records in consumer.poll(1000).values():
                    got.extend(r.value for r in records)
        finally:
            consumer.close()
        assert got == [f"{name}-{i}".encode() for i in range(20)], name


def test_inter_broker_traffic_over_sasl_ssl_with_client_certificates(
    zookeeper: ZooKeeperServer, tmp_path: Path
) -> None:
    """Two brokers whose controller requests and replica fetches go over an INTERNAL listener that
    is SASL_SSL (PLAIN) and requires client certificates: a topic with RF=2 and
    min.insync.replicas=2 takes acks=all writes only if both paths work."""
    ca = TestCA(tmp_path / "ca")
    zk_connect = f"{zookeeper.connect}/inter-broker-{int(time.time() * 1000)}"
    brokers = []
    for broker_id in (0, 1):
        cert = ca.issue(f"broker-{broker_id}")
        b = LocalBroker(tmp_path, broker_id, zk_connect)
        internal = free_port()
        b.properties.update(
            {
                "listeners": f"PLAINTEXT://127.0.0.1:{b.port},INTERNAL://127.0.0.1:{internal}",
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_SSL",
                "inter.broker.listener.name": "INTERNAL",
                "sasl.mechanism.inter.broker.protocol": "PLAIN",
                "listener.name.internal.sasl.enabled.mechanisms": "PLAIN",
                "listener.name.internal.plain.sasl.jaas.config": PLAIN_JAAS,
                "listener.name.internal.ssl.keystore.location": cert.keystore,
                "listener.name.internal.ssl.truststore.location": ca.ca_file,
                "listener.name.internal.ssl.client.auth": "required",
                "offsets.topic.replication.factor": 1,
            }
        )
        brokers.append(b)
    try:
        for b in brokers:
            b.start(timeout=90, wait=False)
        for b in brokers:
            b.wait_ready(timeout=90)
        from confluent_kafka.admin import AdminClient, NewTopic

        bootstrap = ",".join(b.bootstrap for b in brokers)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        topic = NewTopic("replicated-over-tls", 1, 2, config={"min.insync.replicas": "2"})
        admin.create_topics([topic], operation_timeout=60)["replicated-over-tls"].result(90)
        p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
        delivered: list[Any] = []
        for i in range(100):
            p.produce("replicated-over-tls", value=str(i).encode(), on_delivery=lambda err, msg: delivered.append(err))
        assert p.flush(120) == 0
        assert delivered == [None] * 100
        md = admin.list_topics("replicated-over-tls", timeout=30).topics["replicated-over-tls"].partitions[0]
        assert sorted(md.isrs) == [0, 1]
    finally:
        for b in reversed(brokers):
            b.stop()


def test_headwater_client_with_kafka_client_properties(secured: Secured) -> None:
    """Headwater's own client: TLS fetches (no sendfile on that path) and SASL logins, from Kafka's
    client property names; a wrong password is KafkaAuthenticationError with Kafka's message."""
    import asyncio

    from headwater.client import Admin, Consumer, Producer
    from headwater.client.errors import KafkaAuthenticationError

    scram = {
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(secured.ca.ca_file),
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "alice",
        "sasl.password": "alice-pw",
    }
    plain = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": "carol"}

    async def go() -> None:
        for name, listener, props in (
            ("hw-scram", "SASL_SSL", scram),
            ("hw-ssl", "SSL", {"security.protocol": "SSL", "ssl.ca.location": str(secured.ca.ca_file)}),
            ("hw-plain", "SASL_PLAINTEXT", {**plain, "sasl.password": "carol-pw"}),
        ):
            bootstrap = secured.bootstrap(listener)
            async with Admin(bootstrap, security=props) as admin:
                await admin.create_topic(name, 1, 1, {})
                await admin.wait_for_topic(name, timeout=60)
            async with Producer(bootstrap, security=props, linger_ms=2) as producer:
                for i in range(300):
                    await producer.send(name, b"x" * 200 + str(i).encode())
                await producer.flush()
            got: list[bytes] = []
            async with Consumer(bootstrap, security=props) as consumer:
                offset = 0
                while len(got) < 300:
                    records, _ = await consumer.fetch(name, 0, offset, max_wait_ms=200)
                    got.extend(bytes(r.value) for r in records)
                    if records:
                        offset = records[-1].offset + 1
            assert got == [b"x" * 200 + str(i).encode() for i in range(300)], name
        with pytest.raises(KafkaAuthenticationError, match="invalid credentials"):
            async with Admin(secured.bootstrap("SASL_PLAINTEXT"), security={**plain, "sasl.password": "no"}) as admin:
                await admin.wait_for_topic("hw-plain", timeout=10)

    asyncio.run(asyncio.wait_for(go(), 240))
