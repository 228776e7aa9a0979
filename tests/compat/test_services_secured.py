"""The mirror, the audit and the loader's reading layer against secured clusters: SASL_SSL with
SCRAM-SHA-512, ACLs on (``allow.everyone.if.no.acl.found=false``), each service logging in as its
own principal that holds only the ACLs docs/security.md lists for it.

Two single-broker clusters (``dc1``, the source, and ``agg``, the aggregate) on the session's
ZooKeeper, shared by the module. Each broker also has a PLAINTEXT listener for inter-broker
traffic whose principal (``User:ANONYMOUS``) is the super user, as deployments make their
inter-broker principal; the services are given only the SASL_SSL listener. The mirror's source
has no ``bootstrap.servers``: it finds the brokers in ZooKeeper, and must pick their SASL_SSL
listener (a SASL_SSL client cannot talk on the PLAINTEXT one).
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from headwater.cli.main import main as cli_main
from headwater.client.admin import Admin, NewTopic
from headwater.client.audit import SyncAuditingProducer
from headwater.client.errors import KafkaError
from headwater.loader.source import HeadwaterReader
from headwater.testing.cluster import LocalBroker
from headwater.testing.tls import TestCA
from headwater.testing.zookeeper import ZooKeeperServer, free_port
from tests.harness.scram import wait_until_brokers_know
from tests.mirror.util import MirrorProcess, wait_for

TOPIC = "orders"
RECORDS = 300
WINDOW_MS = 2000
PASSWORDS = {
    "admin": "admin-Secret-1",
    "mirror": "mirror-Secret-2",
    "audit": "audit-Secret-3",
    "loader": "loader-Secret-4",
}


@dataclass
class SecuredCluster:
    alias: str
    broker: LocalBroker
    zk_connect: str
    sasl_port: int

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.sasl_port}"


@dataclass
class Secured:
    dc1: SecuredCluster
    agg: SecuredCluster
    ca: TestCA
    tmp: Path
    password_files: dict[str, Path]

    def client(self, user: str) -> dict[str, str]:
        return {
            "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(self.ca.ca_file),
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": user,
            "sasl.password": f"file:{self.password_files[user]}",
        }


def _cli(*args: str) -> None:
    assert cli_main(list(args)) == 0, args


def _acl(zk: str, user: str, *args: str) -> None:
    _cli("acls", "--zookeeper", zk, "--add", "--allow-principal", f"User:{user}", *args)


def _start(tmp: Path, alias: str, zookeeper: ZooKeeperServer, ca: TestCA) -> SecuredCluster:
    cert = ca.issue(f"broker-{alias}")
    zk = f"{zookeeper.connect}/secured-{alias}-{int(time.time() * 1000)}"
    broker = LocalBroker(tmp / alias, 0, zk)
    sasl = free_port()
    broker.properties.update(
        {
            "listeners": f"PLAINTEXT://127.0.0.1:{broker.port},SASL_SSL://127.0.0.1:{sasl}",
            "inter.broker.listener.name": "PLAINTEXT",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": cert.keystore,
            "ssl.truststore.location": ca.ca_file,
            "sasl.enabled.mechanisms": "SCRAM-SHA-512",
            "authorizer.class.name": "kafka.security.auth.SimpleAclAuthorizer",
            "super.users": "User:ANONYMOUS;User:admin",
            "allow.everyone.if.no.acl.found": "false",
            "auto.create.topics.enable": "false",
            "offsets.topic.replication.factor": 1,
            "offsets.topic.num.partitions": 1,
        }
    )
    (tmp / alias).mkdir(parents=True, exist_ok=True)
    broker.start(timeout=120)
    for user, password in PASSWORDS.items():
        _cli(
            "configs",
            "--zookeeper",
            zk,
            "--alter",
            "--entity-type",
            "users",
            "--entity-name",
            user,
            "--add-config",
            f"SCRAM-SHA-512=[iterations=4096,password={password}]",
        )
    for user in PASSWORDS:
        wait_until_brokers_know([broker], user)
    return SecuredCluster(alias, broker, zk, sasl)


@pytest.fixture(scope="module")
def secured(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    tmp = tmp_path_factory.mktemp("services-secured")
    ca = TestCA(tmp / "ca")
    files = {}
    for user, password in PASSWORDS.items():
        files[user] = tmp / f"{user}.password"
        files[user].write_text(password + "\n")
    started: list[SecuredCluster] = []
    try:
        for alias in ("dc1", "agg"):
            started.append(_start(tmp, alias, zookeeper, ca))
        dc1, agg = started
        # The least-privilege ACLs of docs/security.md ("What each service needs").
        # mirror: reads the mirrored topics in the source, writes its heartbeats and gap events
        # there; creates, writes and reads (resume scans, heartbeats) the copies in the target.
        # (the heartbeats topic is mirrored too, so the mirror reads it in the source as well)
        # (DescribeConfigs: the copies are created with the source topic's configs, as MM2)
        for topic in (TOPIC, "heartbeats"):
            _acl(dc1.zk_connect, "mirror", "--operation", "Read", "--operation", "DescribeConfigs", "--topic", topic)
        for topic in ("heartbeats", "__audit"):
            _acl(dc1.zk_connect, "mirror", "--operation", "Create", "--operation", "Write", "--topic", topic)
        # MM2's offset syncs: written into the source, read back for the checkpoints (docs/mirror.md)
        for op in ("Create", "Write", "Read"):
            _acl(dc1.zk_connect, "mirror", "--operation", op, "--topic", "mm2-offset-syncs.agg.internal")
        _acl(
            agg.zk_connect,
            "mirror",
            "--operation",
            "Create",
            "--operation",
            "Write",
            "--topic",
            "dc1.checkpoints.internal",
        )
        for topic in (TOPIC, "heartbeats"):
            _acl(
                agg.zk_connect,
                "mirror",
                "--operation",
                "Create",
                "--operation",
                "Write",
                "--operation",
                "Read",
                "--topic",
                topic,
            )
        # audit: reads the audited topics, __audit and the heartbeats on every tier
        for c in (dc1, agg):
            for topic in (TOPIC, "__audit", "heartbeats"):
                _acl(c.zk_connect, "audit", "--operation", "Read", "--topic", topic)
        # loader: reads the loaded topics in the aggregate cluster (and writes its warehouse events)
        _acl(agg.zk_connect, "loader", "--operation", "Read", "--topic", TOPIC)
        _acl(agg.zk_connect, "loader", "--operation", "Write", "--topic", "__audit")
        yield Secured(dc1, agg, ca, tmp, files)
    finally:
        for c in reversed(started):
            c.broker.stop()


def _create(s: Secured, c: SecuredCluster, topic: str, partitions: int) -> None:
    async def go() -> None:
        async with Admin(c.bootstrap, security=s.client("admin")) as admin:
            result = await admin.create_topics([NewTopic(topic, partitions, 1, {})], timeout_ms=30000)
            assert result.get(topic) is None, result
            await admin.wait_for_topic(topic, timeout=60)

    import asyncio

    asyncio.run(go())


def _metric(port: int, name: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        lines = r.read().decode().splitlines()
    return sum(float(line.rsplit(" ", 1)[1]) for line in lines if line.startswith(name))


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def test_mirror_and_audit_over_sasl_ssl_scram_with_least_privilege_acls(secured: Secured) -> None:
    """The mirror copies dc1 -> agg as User:mirror; the audit counts both tiers as User:audit; the
    totals are exact; neither service logs a password."""
    s = secured
    _create(s, s.dc1, TOPIC, 2)
    _create(s, s.dc1, "__audit", 1)  # topics are not created automatically here
    with SyncAuditingProducer(
        s.dc1.bootstrap,
        datacenter="dc1",
        host="web-1",
        application="frontend",
        window_ms=WINDOW_MS,
        acks="all",
        linger_ms=5,
        security=s.client("admin"),
    ) as producer:
        for f in [producer.send(TOPIC, f"v{i}".encode(), key=f"k{i % 7}".encode()) for i in range(RECORDS)]:
            f.result(60)
        producer.flush()

    mirror_http = free_port()
    mirror_props = {
        "clusters": "dc1, agg",
        "dc1.zookeeper.connect": s.dc1.zk_connect,  # brokers from ZooKeeper: their SASL_SSL listener
        "agg.bootstrap.servers": s.agg.bootstrap,
        # every cluster: Kafka's client names, unprefixed; the password per alias, from a file
        "security.protocol": "SASL_SSL",
        "ssl.truststore.location": str(s.ca.ca_file),
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "mirror",
        "dc1.sasl.password": f"file:{s.password_files['mirror']}",
        "agg.sasl.jaas.config": (
            'org.apache.kafka.common.security.scram.ScramLoginModule required username="mirror" '
            f'password="{PASSWORDS["mirror"]}";'
        ),
        "dc1->agg.enabled": "true",
        "topics": TOPIC,
        "group.id": "secured-mirror",
        "fetch.max.wait.ms": 100,
        "offset.commit.interval.ms": 500,
        "metrics.host": "127.0.0.1",
        "metrics.port": mirror_http,
    }
    http = free_port()
    audit_props = {
        "clusters": "dc1, agg",
        "aggregate.clusters": "agg",
        **{f"{c.alias}.bootstrap.servers": c.bootstrap for c in (s.dc1, s.agg)},
        **{f"{c.alias}.{k}": v for c in (s.dc1, s.agg) for k, v in s.client("audit").items()},
        "audit.topics": TOPIC,
        "window.ms": WINDOW_MS,
        "grace.ms": 8000,
        "store": f"sqlite:///{s.tmp / 'audit.db'}",
        "http.host": "127.0.0.1",
        "http.port": http,
        "fetch.max.wait.ms": 100,
    }
    mirror = MirrorProcess(s.tmp, "mirror", mirror_props).start()
    audit = MirrorProcess(s.tmp, "audit", audit_props, command=("audit", "serve")).start()
    try:

        def settled() -> list[dict[str, Any]]:
            rows: list[dict[str, Any]] = _get(f"http://127.0.0.1:{http}/api/v1/completeness?topic={TOPIC}")["rows"]
            done = rows and all(r["status"] != "open" for r in rows)
            tiers = {r["tier"] for r in rows}
            return rows if done and {"producer", "dc1", "agg"} <= tiers else []

        wait_for(settled, 180, "the audit to close every window of the mirrored topic on both tiers", audit)
        rows = settled()
        for tier in ("producer", "dc1", "agg"):
            assert sum(r["count"] for r in rows if r["tier"] == tier) == RECORDS, (tier, rows)
        assert all(r["completeness"] == 1.0 for r in rows), rows
        assert "cluster dc1: SASL_SSL (SCRAM-SHA-512 as mirror)" in mirror.log()
        assert "cluster agg: SASL_SSL (SCRAM-SHA-512 as audit)" in audit.log()
        # the heartbeats crossed too (the mirror reads them in dc1, writes them in agg; the audit
        # reads them there): every ACL the services need is among the ones granted above
        wait_for(
            lambda: _metric(mirror_http, 'headwater_mirror_records_total{flow="dc1->agg",topic="heartbeats"}') > 0,
            60,
            "the mirror to copy heartbeats",
            mirror,
        )
    finally:
        assert mirror.stop() == 0, mirror.log()[-4000:]
        assert audit.stop() == 0, audit.log()[-4000:]
    for proc in (mirror, audit):
        log = proc.log()
        assert "AUTHORIZATION_FAILED" not in log, log[-4000:]
        for password in PASSWORDS.values():
            assert password not in log, f"{proc.name} logged a password"


def test_loader_reads_the_secured_aggregate_cluster_as_its_principal(secured: Secured) -> None:
    """The loader's data source (what Spark calls; no Spark session needed to drive it) with
    Kafka's names under Spark's ``kafka.`` prefix: plans and reads every record as User:loader,
    and a principal without Read on the topic is refused."""
    s = secured
    wait_for(lambda: _agg_has(s, RECORDS), 180, "the mirrored records in agg (previous test)")
    options = {"kafka.bootstrap.servers": s.agg.bootstrap, "subscribe": TOPIC, "endingOffsets": "latest"}
    reader = HeadwaterReader({**options, **{f"kafka.{k}": v for k, v in s.client("loader").items()}})
    assert sum(r.size for r in reader.ranges) == RECORDS
    values = sorted(v.as_py() for p in reader.partitions() for batch in reader.read(p) for v in batch.column("value"))
    assert values == sorted(f"v{i}".encode() for i in range(RECORDS))
    # the mirror's principal may not Describe __audit in agg: refused, with Kafka's error
    with pytest.raises((KafkaError, ValueError, RuntimeError)) as refused:
        HeadwaterReader({**options, "subscribe": "__audit", **{f"kafka.{k}": v for k, v in s.client("mirror").items()}})
    assert "TOPIC_AUTHORIZATION_FAILED" in str(refused.value)


def _agg_has(s: Secured, n: int) -> bool:
    reader = HeadwaterReader(
        {
            "kafka.bootstrap.servers": s.agg.bootstrap,
            "subscribe": TOPIC,
            **{f"kafka.{k}": v for k, v in s.client("admin").items()},
        }
    )
    return sum(r.size for r in reader.ranges) >= n
