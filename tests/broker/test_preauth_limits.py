"""Nothing costly before login (security review H3): real sockets against a real broker process.

- A size prefix alone costs the broker nothing: 20 connections each announcing 100 MiB on the
  PLAINTEXT listener and 20 on the SASL listener leave its resident memory (``/proc/<pid>/status``
  VmRSS) within a few MiB, and an authenticated SCRAM client is served meanwhile.
- Before SASL authentication a frame is at most 512 KiB (Kafka's SaslServerAuthenticator
  MAX_RECEIVE_SIZE): a larger size prefix closes the connection at once; after login
  ``socket.request.max.bytes`` applies again.
- ``connections.max.idle.ms`` closes idle connections, logged in or not, and never an active one.
- ``max.connections.per.ip`` and its overrides close the connection beyond the count at accept.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from headwater.cli.main import main as cli_main
from headwater.protocol.apis import API_VERSIONS
from headwater.protocol.frames import decode_response, encode_request
from headwater.testing.cluster import LocalBroker
from headwater.testing.zookeeper import free_port
from tests.harness.scram import wait_until_brokers_know

MIB = 1 << 20
PLAIN_JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="admin" password="admin-secret" user_admin="admin-secret";'
)


@dataclass
class SaslBroker:
    broker: LocalBroker
    sasl_port: int
    zk_connect: str

    def scram(self, **extra: Any) -> dict[str, Any]:
        return {
            "bootstrap.servers": f"127.0.0.1:{self.sasl_port}",
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "alice",
            "sasl.password": "alice-pw",
            **extra,
        }


def start_sasl_broker(tmp: Path, zk_connect: str, **props: object) -> SaslBroker:
    broker = LocalBroker(tmp, 0, zk_connect)
    sasl_port = free_port()
    broker.properties.update(
        {
            "listeners": f"PLAINTEXT://127.0.0.1:{broker.port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
            "offsets.topic.replication.factor": 1,
            "offsets.topic.num.partitions": 1,
            "group.initial.rebalance.delay.ms": 0,
            **props,
        }
    )
    broker.start(timeout=90)
    code = cli_main(
        [
            "configs", "--zookeeper", zk_connect, "--alter", "--entity-type", "users", "--entity-name", "alice",
            "--add-config", "SCRAM-SHA-512=[iterations=4096,password=alice-pw]",
        ]
    )  # fmt: skip
    assert code == 0
    wait_until_brokers_know([broker], "alice")  # loaded from its change notification
    return SaslBroker(broker, sasl_port, zk_connect)


@pytest.fixture
def sasl_broker(tmp_path: Path, zk_connect: str) -> Iterator[SaslBroker]:
    sb = start_sasl_broker(tmp_path, zk_connect)
    try:
        yield sb
    finally:
        sb.broker.stop()


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def closed_by_broker(sock: socket.socket, timeout: float) -> bool:
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


def api_versions(sock: socket.socket) -> dict[str, Any]:
    sock.sendall(encode_request(API_VERSIONS, 0, 1, "preauth-test", {}))
    head = recv_exactly(sock, 4)
    _, body = decode_response(API_VERSIONS, 0, memoryview(recv_exactly(sock, struct.unpack(">i", head)[0])))
    return body


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed by the broker")
        buf += chunk
    return buf


def produce_and_read_back(conf: dict[str, Any], topic: str, count: int, size: int = 100) -> None:
    errors: list[Any] = []
    p = Producer({**conf, "linger.ms": 5, "error_cb": errors.append, "message.max.bytes": 2 * MIB})
    for i in range(count):
        p.produce(topic, value=str(i).encode().ljust(size, b"."))
    assert p.flush(90) == 0, [e.str() for e in errors]
    c = Consumer({**conf, "group.id": f"g-{topic}", "enable.auto.commit": False, "fetch.max.bytes": 4 * MIB})
    c.assign([TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + 90
    try:
        while len(got) < count and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is not None:
                assert msg.error() is None, msg.error()
                got.append(msg.value())
    finally:
        c.close()
    assert [g[: len(str(i))] for i, g in enumerate(got)] == [str(i).encode() for i in range(count)]


def test_announced_100_mib_frames_cost_the_broker_nothing(sasl_broker: SaslBroker) -> None:
    sb = sasl_broker
    pid = sb.broker.pid
    produce_and_read_back(sb.scram(), "warm-up", 50)  # the broker's steady state before the attack
    before = rss_bytes(pid)
    announce = struct.pack(">i", 100 * MIB)
    attackers: list[socket.socket] = []
    try:
        for port in (sb.broker.port, sb.sasl_port):
            for _ in range(20):
                s = socket.create_connection(("127.0.0.1", port), timeout=30)
                s.sendall(announce + b"\0" * 1000)
                attackers.append(s)
        # the authenticated client is served beside them (its requests come after the attackers' bytes)
        produce_and_read_back(sb.scram(), "beside-the-attack", 200)
        grown = [rss_bytes(pid) - before]
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:  # no later growth either
            time.sleep(0.2)
            grown.append(rss_bytes(pid) - before)
        assert max(grown) < 24 * MIB, [g // MIB for g in grown]
        # on the SASL listener a frame of more than 512 KiB before login closes the connection
        assert all(closed_by_broker(s, 30) for s in attackers[20:])
        assert not any(closed_by_broker(s, 0.01) for s in attackers[:20])  # PLAINTEXT: waits for the bytes
    finally:
        for s in attackers:
            s.close()
    assert sb.broker.proc is not None and sb.broker.proc.poll() is None


def test_sasl_listener_caps_frames_before_login_only(sasl_broker: SaslBroker) -> None:
    sb = sasl_broker
    with socket.create_connection(("127.0.0.1", sb.sasl_port), timeout=30) as s:
        assert api_versions(s)["error_code"] == 0  # small requests before login are answered
        s.sendall(struct.pack(">i", 512 * 1024 + 1))  # no body sent: the size alone closes it
        assert closed_by_broker(s, 30)
    with socket.create_connection(("127.0.0.1", sb.broker.port), timeout=30) as s:
        s.sendall(struct.pack(">i", 512 * 1024 + 1))  # PLAINTEXT: socket.request.max.bytes applies
        assert not closed_by_broker(s, 0.5)
    # after login a request of more than 512 KiB is fine (socket.request.max.bytes, 100 MiB)
    produce_and_read_back(sb.scram(), "large-after-login", 3, size=900_000)
    assert "before SASL authentication (at most 524288)" in sb.broker.tail(100_000)


def test_idle_connections_are_closed_after_connections_max_idle_ms(tmp_path: Path, zk_connect: str) -> None:
    sb = start_sasl_broker(tmp_path, zk_connect, **{"connections.max.idle.ms": 2000})
    try:
        unauthenticated = socket.create_connection(("127.0.0.1", sb.sasl_port), timeout=30)
        plaintext = socket.create_connection(("127.0.0.1", sb.broker.port), timeout=30)
        active = socket.create_connection(("127.0.0.1", sb.broker.port), timeout=30)
        opened = time.monotonic()
        assert api_versions(plaintext)["error_code"] == 0
        # an active connection stays: a request every 0.5 s for 5 s
        while time.monotonic() - opened < 5:
            assert api_versions(active)["error_code"] == 0
            time.sleep(0.5)
        for s in (unauthenticated, plaintext):
            assert closed_by_broker(s, 60)
            assert time.monotonic() - opened >= 2.0
        assert api_versions(active)["error_code"] == 0
        # a logged-in client that goes quiet is closed too, and reconnects when it needs to
        conf = sb.scram()
        produce_and_read_back(conf, "before-idle", 10)
        for s in (unauthenticated, plaintext, active):
            s.close()
    finally:
        sb.broker.stop()


def connect_from(source: str, port: int) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(30)
    s.bind((source, 0))
    s.connect(("127.0.0.1", port))
    return s


def open_answered(source: str, port: int, n: int) -> list[socket.socket]:
    """``n`` connections from ``source`` that each got an answer; tried again while the broker has
    not yet seen earlier connections from it close (it counts an address's connections until then)."""
    deadline = time.monotonic() + 60
    while True:
        conns: list[socket.socket] = []
        try:
            for _ in range(n):
                conns.append(connect_from(source, port))
                assert api_versions(conns[-1])["error_code"] == 0
            return conns
        except (ConnectionError, OSError):
            for s in conns:
                s.close()
            assert time.monotonic() < deadline, f"{n} connections from {source} were never accepted"
            time.sleep(0.2)


def test_max_connections_per_ip_and_overrides_refuse_at_accept(tmp_path: Path, zk_connect: str) -> None:
    # 127.0.0.1 (the broker's own controller connection, the test harness) keeps a high limit
    overrides = "127.0.0.1:1000,127.0.0.3:5"
    sb = start_sasl_broker(
        tmp_path, zk_connect, **{"max.connections.per.ip": 3, "max.connections.per.ip.overrides": overrides}
    )
    try:
        for source, allowed in (("127.0.0.2", 3), ("127.0.0.3", 5)):
            for port in (sb.broker.port, sb.sasl_port):
                mine = open_answered(source, port, allowed)
                refused = connect_from(source, port)
                assert closed_by_broker(refused, 30), (source, port)  # closed at accept, nothing read
                refused.close()
                mine.pop().close()  # a slot freed: a new connection is accepted again
                mine += open_answered(source, port, 1)
                for s in mine:
                    s.close()
        assert "address already has the configured maximum of 3 connections" in sb.broker.tail(100_000)
        assert "address already has the configured maximum of 5 connections" in sb.broker.tail(100_000)
    finally:
        sb.broker.stop()


def test_malformed_scram_final_is_a_failed_login_not_a_traceback(sasl_broker: SaslBroker) -> None:
    from headwater.protocol.apis import SASL_AUTHENTICATE, SASL_HANDSHAKE

    sb = sasl_broker

    def request(s: socket.socket, api: Any, cid: int, body: dict[str, Any]) -> dict[str, Any]:
        s.sendall(encode_request(api, 1, cid, "preauth-test", body))
        head = recv_exactly(s, 4)
        return decode_response(api, 1, memoryview(recv_exactly(s, struct.unpack(">i", head)[0])))[1]

    failed_before = sb.broker.tail(1_000_000).count("Failed authentication")
    with socket.create_connection(("127.0.0.1", sb.sasl_port), timeout=30) as s:
        assert request(s, SASL_HANDSHAKE, 1, {"mechanism": "SCRAM-SHA-512"})["error_code"] == 0
        first = request(s, SASL_AUTHENTICATE, 2, {"auth_bytes": b"n,,n=alice,r=abcdefgh"})
        nonce = bytes(first["auth_bytes"]).decode().split(",")[0]  # r=<nonce>
        resp = request(s, SASL_AUTHENTICATE, 3, {"auth_bytes": f"p=AAAA,c=biws,{nonce}".encode()})
        assert resp["error_code"] == 58  # SASL_AUTHENTICATION_FAILED
        assert closed_by_broker(s, 30)
    log = sb.broker.tail(1_000_000)
    assert log.count("Failed authentication") == failed_before + 1
    assert "Traceback" not in log and "never retrieved" not in log
    produce_and_read_back(sb.scram(), "after-malformed", 5)


def test_reauthentication_keeps_librdkafka_connected_and_cuts_off_a_changed_password(
    tmp_path: Path, zk_connect: str
) -> None:
    """librdkafka (2.2+) re-authenticates before ``session_lifetime_ms`` ends (KIP-368): with
    ``connections.max.reauth.ms=2000`` a producer keeps producing on its connection for well past
    it, the broker counting each re-authentication; once the password changed, the next
    re-authentication fails and the connection ends."""
    props = {"connections.max.reauth.ms": 2000, "prometheus.port": free_port(), "prometheus.host": "127.0.0.1"}
    sb = start_sasl_broker(tmp_path, zk_connect, **props)
    try:
        logins_before = sb.broker.metric("kafka_server_socket_server_authentications_total")
        errors: list[str] = []
        p = Producer({**sb.scram(), "linger.ms": 0, "error_cb": lambda e: errors.append(e.str())})
        started = time.monotonic()
        sent = 0
        while time.monotonic() - started < 7:
            p.produce("reauth", value=str(sent).encode())
            sent += 1
            assert p.flush(30) == 0, errors
            time.sleep(0.05)
        logins = sb.broker.metric("kafka_server_socket_server_authentications_total") - logins_before
        assert logins >= 3, logins  # the first login and re-authentications every ~1.7 s
        assert "session of User:alice expired" not in sb.broker.tail(1_000_000)
        code = cli_main(
            [
                "configs", "--zookeeper", sb.zk_connect, "--alter", "--entity-type", "users", "--entity-name", "alice",
                "--add-config", "SCRAM-SHA-512=[iterations=4096,password=changed]",
            ]
        )  # fmt: skip
        assert code == 0
        deadline = time.monotonic() + 60
        while "Failed authentication" not in sb.broker.tail(1_000_000):
            assert time.monotonic() < deadline, "the re-authentication with the old password never failed"
            p.poll(0.2)
        assert "Traceback" not in sb.broker.tail(1_000_000)
    finally:
        sb.broker.stop()
