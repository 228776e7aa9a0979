"""SCRAM users carry over between Apache Kafka 2.3.1 and Headwater (issue 45, item 3).

One Kafka 2.3.1 broker (1) and one Headwater broker (2) in one ZooKeeper chroot, each with a
PLAINTEXT listener (between the brokers) and a SASL_PLAINTEXT listener offering SCRAM-SHA-256 and
SCRAM-SHA-512. Both ways:

- users Kafka's own ``kafka-configs --zookeeper ... --add-config 'SCRAM-SHA-512=[password=...]'``
  writes to ``/config/users/<name>`` log in to the Headwater broker (librdkafka, each mechanism,
  produce and consume on a partition only Headwater holds); a wrong password is refused with
  Kafka's message;
- a user ``headwater configs --add-config 'SCRAM-SHA-...'`` writes logs in to the Kafka broker
  (produce and consume on a partition only Kafka holds); a wrong password is refused by Kafka.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from headwater.cli.main import main as cli_main
from headwater.testing import java
from headwater.testing.zookeeper import ZooKeeperServer, free_port
from tests.harness.scram import wait_until_brokers_know
from tests.mixed.cluster import MixedCluster

KAFKA, HEADWATER = 1, 2
MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
#: Kafka 2.3's answer to a failed SCRAM login (SaslAuthenticate's error_message), which librdkafka reports
REFUSED = "Authentication failed during authentication due to invalid credentials with SASL mechanism"


class Scrammed(MixedCluster):
    sasl_ports: dict[int, int]


@pytest.fixture(scope="module")
def scrammed(tmp_path_factory: pytest.TempPathFactory, zookeeper: ZooKeeperServer) -> Iterator[Scrammed]:
    if java.unavailable() is not None and not java.UNREACHABLE.exists():
        java.fetch()
    reason = java.unavailable()
    if reason is not None:
        pytest.skip(reason)
    cluster = Scrammed(
        tmp_path_factory.mktemp("mixed-scram"),
        zookeeper.connect,
        kafka_ids=(KAFKA,),
        headwater_ids=(HEADWATER,),
        overrides={"offsets.topic.replication.factor": 1, "default.replication.factor": 1},
    )
    cluster.sasl_ports = {}
    for b in (cluster.kafka[KAFKA], cluster.headwater[HEADWATER]):
        port = cluster.sasl_ports[b.broker_id] = free_port()
        b.properties.update(
            {
                "listeners": f"PLAINTEXT://127.0.0.1:{b.port},SASL_PLAINTEXT://127.0.0.1:{port}",
                "security.inter.broker.protocol": "PLAINTEXT",
                "sasl.enabled.mechanisms": ",".join(MECHANISMS),
            }
        )
    for (
        m
    ) in MECHANISMS:  # Kafka's broker needs a login module per mechanism (no credentials: SCRAM's come from ZooKeeper)
        cluster.kafka[KAFKA].properties[f"listener.name.sasl_plaintext.{m.lower()}.sasl.jaas.config"] = SCRAM_MODULE
    with cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        # one partition on each broker alone: a client of that topic logs in to that broker
        topics = [NewTopic(f"on-{i}", num_partitions=1, replica_assignment=[[i]]) for i in (KAFKA, HEADWATER)]
        for f in admin.create_topics(topics, operation_timeout=60).values():
            f.result(60)
        yield cluster


def _conf(c: Scrammed, broker_id: int, mechanism: str, user: str, password: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": f"127.0.0.1:{c.sasl_ports[broker_id]}",
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password,
    }


def _round_trip(conf: dict[str, Any], topic: str, count: int = 20) -> list[bytes]:
    """Produce ``count`` records (acks=all) and read them back, logged in as ``conf`` says."""
    errors: list[KafkaError] = []
    p = Producer({**conf, "acks": "all", "linger.ms": 5, "error_cb": errors.append})
    tag = f"{conf['sasl.username']}-{conf['sasl.mechanism']}-{time.monotonic_ns()}"
    for i in range(count):
        p.produce(topic, value=f"{tag}-{i}".encode())
    assert p.flush(60) == 0, [e.str() for e in errors]
    c = Consumer({**conf, "group.id": f"g-{tag}", "enable.auto.commit": False, "error_cb": errors.append})
    c.assign([TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline and len([v for v in got if v.startswith(tag.encode())]) < count:
            msg = c.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
    finally:
        c.close()
    return [v for v in got if v.startswith(tag.encode())]


def _refusal(conf: dict[str, Any]) -> list[str]:
    """What librdkafka reports when logging in as ``conf`` (a wrong password): its errors, once one is an
    authentication failure (or after 30 s)."""
    errors: list[KafkaError] = []
    p = Producer({**conf, "error_cb": errors.append})
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not any(e.code() == KafkaError._AUTHENTICATION for e in errors):
        p.poll(0.2)
    with pytest.raises(KafkaException):  # and nothing is served to it
        p.list_topics(timeout=1)
    return [e.str() for e in errors]


def _stored(c: Scrammed, user: str) -> dict[str, Any]:
    """``/config/users/<user>`` as Kafka's format has it: ``{"version": 1, "config": {mechanism: "salt=<b64>,
    stored_key=<b64>,server_key=<b64>,iterations=<n>"}}``; each credential as its fields, in order."""
    doc = json.loads(c.zk.get(f"/config/users/{user}")[0])
    assert set(doc) == {"version", "config"} and doc["version"] == 1, doc
    out: dict[str, Any] = {}
    for m, text in doc["config"].items():
        fields = [part.split("=", 1)[0] for part in text.split(",")]
        assert fields == ["salt", "stored_key", "server_key", "iterations"], text
        out[m] = dict(part.split("=", 1) for part in text.split(","))
    return out


def _logs_in(conf: dict[str, Any]) -> bool:
    try:
        Producer(conf).list_topics(timeout=5)
    except KafkaException:
        return False
    return True


def test_kafka_made_scram_users_log_in_to_headwater(scrammed: Scrammed) -> None:
    users = {m: (f"kafka-{m.lower()}", f"{m}-pw-from-kafka") for m in MECHANISMS}
    for m, (user, password) in users.items():
        scrammed.kafka_tool(
            "kafka.admin.ConfigCommand",
            *("--zookeeper", scrammed.zk_connect, "--alter", "--entity-type", "users", "--entity-name", user),
            *("--add-config", f"{m}=[password={password}]"),
        )
    for m, (user, _) in users.items():
        cred = _stored(scrammed, user)[m]
        assert cred["iterations"] == "4096" and len(base64.b64decode(cred["salt"])) > 0, cred
        wait_until_brokers_know([scrammed.headwater[HEADWATER]], user)
    topic = f"on-{HEADWATER}"
    for m, (user, password) in users.items():
        got = _round_trip(_conf(scrammed, HEADWATER, m, user, password), topic)
        assert len(got) == 20, (m, got)
        errors = _refusal(_conf(scrammed, HEADWATER, m, user, "not-" + password))
        assert any(f"{REFUSED} {m}" in e for e in errors), (m, errors)


def test_headwater_made_scram_users_log_in_to_kafka(scrammed: Scrammed) -> None:
    users = {m: (f"headwater-{m.lower()}", f"{m}-pw-from-headwater") for m in MECHANISMS}
    for m, (user, password) in users.items():
        code = cli_main(
            [
                *("configs", "--zookeeper", scrammed.zk_connect, "--alter"),
                *("--entity-type", "users", "--entity-name", user, "--add-config", f"{m}=[password={password}]"),
            ]
        )
        assert code == 0
        # the same form as Kafka's tool writes (Kafka's default 4096 iterations, standard base64)
        cred = _stored(scrammed, user)[m]
        assert cred["iterations"] == "4096", cred
        assert len(base64.b64decode(cred["stored_key"], validate=True)) == {"SCRAM-SHA-256": 32}.get(m, 64), cred
    topic = f"on-{KAFKA}"
    for m, (user, password) in users.items():
        conf = _conf(scrammed, KAFKA, m, user, password)
        # Kafka loads the user on its /config/changes notification: log in until it has
        scrammed.wait_for(lambda conf=conf: _logs_in(conf), 60, f"Kafka to accept {user} ({m})")
        got = _round_trip(conf, topic)
        assert len(got) == 20, (m, got)
        errors = _refusal(_conf(scrammed, KAFKA, m, user, "not-" + password))
        assert any(f"{REFUSED} {m}" in e for e in errors), (m, errors)
    assert (
        scrammed.kafka_problems(
            {r"Failed authentication with /127\.0\.0\.1": "the test's wrong passwords (Kafka logs each refusal)"}
        )
        == []
    )
