"""deploy/ansible applied to containers as hosts (systemd + sshd), checked through the clusters it makes.

Four hosts: dc1-a (ZooKeeper 1, broker 1 of dc1), dc1-b (ZooKeeper 2, broker 2 of dc1), dc1-c
(ZooKeeper 3 of dc1 only), agg-a (a single ZooKeeper, broker 1 of agg, the mirror, the audit
service, the loader's timer, the schema registry): dc1's ZooKeeper is an ensemble of three whose servers log in to
each other (quorum SASL), agg's a single server, the two sizes an inventory names. The tests run in order on one
deployment: site.yml makes working clusters; a second run changes nothing; a record written in dc1
reaches agg through the mirror and the audit service answers; a changed broker setting restarts
dc1's brokers one at a time, the second only after the first is back in every ISR, while a
producer with acks=all keeps writing and loses nothing; with it comes a new build for dc1 (a new
install label): each broker's new venv is installed in its own turn, its unit moves to it, and the
old venv stays for rollback. The deployment has TLS and SCRAM on (a CA and per-broker keys from the
inventory, users created in each datacenter's ZooKeeper): brokers talk to each other, and the mirror,
the audit and the loader to them, on SASL_SSL with SCRAM-SHA-512. ACLs are on
(allow.everyone.if.no.acl.found=false): each service holds only the inventory's least-privilege
ACLs, which DescribeAcls shows, and a user without ACLs is refused. Secure by default (review H4,
M6): the only super user is the brokers' own (the test's clients log in as it, on SECURE, as the
playbooks' own checks do); PLAINTEXT binds loopback only; ZooKeeper takes SASL logins and the
brokers create every znode with Kafka's ACLs, so a client that does not log in reads metadata but
changes nothing and cannot read SCRAM credentials. The registry role's Apicurio Registry on agg-a
serves the loader (its default schema.registry.url): Avro records registered and produced through it
land as typed columns, and its schemas keep their ids across a restart. Last, rebalance.yml runs over SSH on dc1's first broker and
spreads a topic held by broker 1 alone over both of dc1's brokers, losing no record.
"""

from __future__ import annotations

import base64
import io
import json
import re
import socket
import subprocess
import sys
import tarfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker
import pyarrow.dataset as ds
import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from headwater.client.admin import NewTopic as HwNewTopic
from headwater.client.sync import SyncAdmin
from headwater.testing.registry import CCOMPAT
from headwater.testing.tls import TestCA
from tests.compat.test_acls import stock_produce_codes
from tests.integration import kafka_io
from tests.integration.ansible_hosts import ANSIBLE_DIR, Fleet, PlaybookRun, build_wheelhouse, host_image, run_playbook
from tests.integration.kafka_io import (
    QUIET,
    consume,
    create_topic,
    end_offsets,
    leaders,
    metadata,
    produce,
    wait_for,
)

# The first test to use the deployment also builds the host image (a minute or two on a fresh machine)
# and runs site.yml the first time (four hosts, ZooKeeper one server at a time: 15 min and more on a
# machine at load 40).
pytestmark = pytest.mark.timeout(3000)

BROKER_PORT = 9093  # SECURE: the test's own clients log in as the admin principal (PLAINTEXT is loopback only)
PLAINTEXT_PORT = 9092
ROLLING_TOPIC = "rolling"


SCRAM_USERS = {
    "broker": "broker-it-secret",
    "mirror": "mirror-it-secret",
    "audit": "audit-it-secret",
    "loader": "loader-it-secret",
}
AUDIT_HTTP_PASSWORD = "audit-http-it-secret"
NOBODY = ("nobody", "nobody-it-secret")  # a SCRAM user the test makes in dc1, with no ACL
ZK_QUORUM_PASSWORD = "zk-quorum-it-secret"  # dc1's ensemble: its servers' logins to each other
DC1_ZOOKEEPERS = ("dc1-a", "dc1-b", "dc1-c")
# The registry role on agg-a, beside the audit service's 8080; the loader also loads TYPED_TOPIC.
REGISTRY_PORT = 8081
TYPED_TOPIC = "typed-orders"
ORDER = {
    "type": "record",
    "name": "Order",
    "namespace": "it",
    "fields": [{"name": "id", "type": "long"}, {"name": "item", "type": "string"}, {"name": "price", "type": "double"}],
}


@dataclass
class Deployment:
    fleet: Fleet
    workdir: Path
    runs: list[PlaybookRun] = field(default_factory=list)
    tls: dict[str, str] = field(default_factory=dict)  # "ca" and, per broker host, "<host>.crt" / "<host>.key" (PEM)

    def make_tls(self) -> None:
        """The inventory's CA and broker keys (what an operator keeps in group_vars and vault)."""
        ca = TestCA(self.workdir / "ca")
        self.tls["ca"] = ca.ca_file.read_text()
        for name, host in self.fleet.hosts.items():
            cert = ca.issue(name, hosts=(host.address,))
            self.tls[f"{name}.crt"] = cert.certificate.read_text()
            self.tls[f"{name}.key"] = cert.key.read_text()

    def secure(self, host: str, user: str, password: str | None = None) -> dict[str, Any]:
        """librdkafka's settings for the SECURE listener of ``host`` (SASL_SSL, SCRAM-SHA-512 as ``user``)."""
        ca_file = self.workdir / "ca" / "ca-inventory.pem"
        if not ca_file.exists():
            ca_file.write_text(self.tls["ca"])
        return {
            "bootstrap.servers": f"{self.fleet.hosts[host].address}:9093",
            "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(ca_file),
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": user,
            "sasl.password": password or SCRAM_USERS.get(user) or dict([NOBODY])[user],
            **QUIET,
        }

    def admin_conf(self) -> dict[str, Any]:
        """librdkafka's login as the admin principal (the brokers' user, the only super user) on SECURE."""
        conf = self.secure("dc1-a", "broker")
        del conf["bootstrap.servers"]
        return conf

    def admin_properties(self) -> Path:
        """The same as a client.properties file (Kafka's names), as the roles write admin.properties."""
        path = self.workdir / "admin.properties"
        conf = self.admin_conf()
        path.write_text("".join(f"{k}={conf[k]}\n" for k in ("security.protocol", "ssl.ca.location", "sasl.mechanism")))
        with path.open("a") as f:
            f.write(f"sasl.username=broker\nsasl.password={SCRAM_USERS['broker']}\n")
        return path

    def admin_security(self) -> dict[str, str]:
        """Headwater's client (SyncAdmin) with the same login."""
        conf = self.admin_conf()
        return {k: str(v) for k, v in conf.items() if k != "log_level"}

    def bootstrap(self, *hosts: str) -> str:
        return ",".join(f"{self.fleet.hosts[h].address}:{BROKER_PORT}" for h in hosts)

    @property
    def dc1(self) -> str:
        return self.bootstrap("dc1-a", "dc1-b")

    @property
    def agg(self) -> str:
        return self.bootstrap("agg-a")

    def inventory(
        self,
        dc1_broker_properties: dict[str, str] | None = None,
        dc1_vars: dict[str, str] | None = None,
        name: str | None = None,
        all_vars: dict[str, object] | None = None,
    ) -> Path:
        """The test's inventory (YAML; written as JSON, which YAML reads): the example's layout."""
        h = self.fleet.hosts

        def host(name: str, **hostvars: object) -> dict[str, object]:
            return {
                "ansible_host": h[name].address,
                "headwater_tls_certificate": self.tls[f"{name}.crt"],
                "headwater_tls_key": self.tls[f"{name}.key"],
                **hostvars,
            }

        inventory = {
            "all": {
                "vars": {
                    "ansible_user": "root",
                    "ansible_ssh_private_key_file": str(self.fleet.key),
                    "ansible_ssh_common_args": "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null",
                    "headwater_datacenters": ["dc1", "agg"],
                    "headwater_aggregate_datacenters": ["agg"],
                    "headwater_apt_update_cache": False,  # the hosts reach no package mirror
                    "headwater_wheelhouse": str(Path(__file__).resolve().parents[2] / "build" / "wheelhouse"),
                    "broker_properties": {"min.insync.replicas": "1", "default.replication.factor": "1"},
                    "mirror_properties": {"offset.commit.interval.ms": "1000"},
                    "audit_topics": ["mirrored"],
                    "audit_window_ms": 10000,
                    "audit_grace_ms": 10000,
                    "audit_http_password": AUDIT_HTTP_PASSWORD,  # the dashboard's basic auth (roles/audit)
                    "loader_topics": ["mirrored", TYPED_TOPIC],
                    # roles/registry on agg-a (loader_schema_registry_url's default points at it)
                    "registry_port": REGISTRY_PORT,
                    "registry_heap_opts": "-Xmx256m",
                    "registry_java_opts": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",  # a quicker start
                    "headwater_tls_enabled": True,
                    "headwater_tls_ca": self.tls["ca"],
                    "headwater_scram_enabled": True,
                    "headwater_scram_users": SCRAM_USERS,
                    "headwater_acls_enabled": True,
                    "headwater_zookeeper_quorum_password": ZK_QUORUM_PASSWORD,
                    "zookeeper_heap_opts": "-Xms16m -Xmx96m",
                    **(all_vars or {}),
                },
                "children": {
                    "dc1": {
                        "vars": {
                            "headwater_datacenter": "dc1",
                            "broker_rack": "dc1",
                            "broker_properties_datacenter": dc1_broker_properties or {},
                            **(dc1_vars or {}),
                        },
                        "hosts": {
                            "dc1-a": host("dc1-a", broker_id=1, zookeeper_myid=1),
                            "dc1-b": host("dc1-b", broker_id=2, zookeeper_myid=2),
                            "dc1-c": host("dc1-c", zookeeper_myid=3),
                        },
                    },
                    "agg": {
                        "vars": {"headwater_datacenter": "agg", "broker_rack": "agg"},
                        "hosts": {"agg-a": host("agg-a", broker_id=1, zookeeper_myid=1)},
                    },
                    "zookeeper": {"hosts": {"dc1-a": None, "dc1-b": None, "dc1-c": None, "agg-a": None}},
                    "brokers": {"hosts": {"dc1-a": None, "dc1-b": None, "agg-a": None}},
                    "mirror": {"hosts": {"agg-a": None}},
                    "audit": {"hosts": {"agg-a": None}},
                    "loader": {"hosts": {"agg-a": None}},
                    "registry": {"hosts": {"agg-a": None}},
                },
            }
        }
        path = self.workdir / (name or f"inventory-{len(self.runs) + 1}.yml")
        path.write_text(json.dumps(inventory, indent=2))
        return path

    def apply(self, inventory: Path) -> PlaybookRun:  # site.yml
        n = len(self.runs) + 1
        run = run_playbook(self.fleet, inventory, self.workdir / f"site-{n}.log")
        self.runs.append(run)
        print(f"site.yml run {n}: {run.seconds:.0f} s, recap {run.recap()}")
        assert run.returncode == 0, f"ansible-playbook failed (run {n}):\n{run.output[-6000:]}"
        assert all(r.get("failed", 0) == 0 and r.get("unreachable", 0) == 0 for r in run.recap().values())
        return run


@pytest.fixture(scope="module")
def deployment(
    docker_client: docker.DockerClient, run_id: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Deployment]:
    image = host_image(docker_client)
    build_wheelhouse()
    workdir = tmp_path_factory.mktemp("ansible")
    fleet = Fleet(docker_client, run_id, image, workdir)
    try:
        fleet.start(["dc1-a", "dc1-b", "dc1-c", "agg-a"])
        d = Deployment(fleet, workdir)
        d.make_tls()
        kafka_io.CLIENT_CONF.update(d.admin_conf())
        d.apply(d.inventory())
        yield d
    finally:
        kafka_io.CLIENT_CONF.clear()
        fleet.close_ssh()
        for host in list(fleet.hosts.values()):
            try:
                host.container.remove(force=True, v=True)
            except docker.errors.APIError:
                pass
        if fleet.network is not None:
            fleet.network.remove()
        leftovers = fleet.stop()
    assert not leftovers, f"the ansible test left {leftovers}"


def test_ansible_lint_and_example_inventory() -> None:
    """ansible-lint (production profile) is clean, and site.yml parses against the example inventory."""
    bin_dir = Path(sys.executable).parent
    lint = subprocess.run(
        [str(bin_dir / "ansible-lint"), "--profile", "production", "--nocolor"],
        cwd=ANSIBLE_DIR,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert lint.returncode == 0, f"ansible-lint:\n{lint.stdout[-4000:]}\n{lint.stderr[-4000:]}"
    check = subprocess.run(
        [str(bin_dir / "ansible-playbook"), "-i", "inventories/example", "site.yml", "--syntax-check"],
        cwd=ANSIBLE_DIR,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert check.returncode == 0, check.stdout + check.stderr
    inventory = subprocess.run(
        [str(bin_dir / "ansible-inventory"), "-i", "inventories/example", "--list"],
        cwd=ANSIBLE_DIR,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    hostvars = json.loads(inventory.stdout)["_meta"]["hostvars"]
    for dc in ("dc1", "dc2", "agg"):
        ids = sorted(
            v["broker_id"] for k, v in hostvars.items() if k.startswith("kafka") and k.endswith(f".{dc}.example.com")
        )
        myids = sorted(
            v["zookeeper_myid"] for k, v in hostvars.items() if k.startswith("zk") and k.endswith(f".{dc}.example.com")
        )
        assert ids == [1, 2, 3] and myids == [1, 2, 3], (dc, ids, myids)


def test_site_makes_a_cluster_per_datacenter(deployment: Deployment) -> None:
    hosts = deployment.fleet.hosts
    for name in (*DC1_ZOOKEEPERS, "agg-a"):
        assert hosts[name].unit("zookeeper.service", "ActiveState")["ActiveState"] == "active"
    # Item 38.3: dc1's ZooKeeper is an ensemble of three (their own srvr: one leader, two followers;
    # the leader's mntr: two synced followers), whose servers logged in to each other with the
    # inventory's quorum password; agg's is a single server.
    modes = {name: zookeeper_word(hosts[name].address, b"srvr").get("Mode") for name in (*DC1_ZOOKEEPERS, "agg-a")}
    assert sorted(modes[n] or "" for n in DC1_ZOOKEEPERS) == ["follower", "follower", "leader"], modes
    assert modes["agg-a"] == "standalone", modes
    leader = next(n for n in DC1_ZOOKEEPERS if modes[n] == "leader")
    mntr = zookeeper_word(hosts[leader].address, b"mntr")
    assert (mntr.get("zk_server_state"), mntr.get("zk_synced_followers")) == ("leader", "2"), mntr
    zoo_cfg = hosts["dc1-c"].run("cat", "/etc/zookeeper/conf/zoo.cfg").splitlines()
    for i, name in enumerate(DC1_ZOOKEEPERS, 1):
        assert f"server.{i}={hosts[name].address}:2888:3888" in zoo_cfg, zoo_cfg
    assert "quorum.auth.enableSasl=true" in zoo_cfg and "quorum.auth.serverRequireSasl=true" in zoo_cfg, zoo_cfg
    assert hosts["dc1-c"].run("cat", "/var/lib/zookeeper/myid").strip() == "3"
    journal = hosts[leader].run("journalctl", "-u", "zookeeper.service", "--no-pager", check=False)
    assert "Successfully authenticated learner: authenticationID=zkquorum" in journal, journal[-3000:]
    assert ZK_QUORUM_PASSWORD not in journal
    for name in ("dc1-a", "dc1-b", "agg-a"):
        assert hosts[name].unit("headwater-broker.service", "ActiveState")["ActiveState"] == "active"
    # Each datacenter's brokers registered in their own ZooKeeper: one cluster per datacenter.
    wait_for(lambda: set(metadata(deployment.dc1).brokers) == {1, 2}, 60, "dc1's brokers 1 and 2")
    wait_for(lambda: set(metadata(deployment.agg).brokers) == {1}, 60, "agg's broker 1")
    props = hosts["dc1-b"].run("cat", "/etc/headwater/server.properties")
    for line in (
        "broker.id=2",
        "broker.rack=dc1",
        "zookeeper.connect=" + ",".join(f"{hosts[n].address}:2181" for n in DC1_ZOOKEEPERS),
        "inter.broker.listener.name=SECURE",
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SECURE:SASL_SSL",
        "listeners=PLAINTEXT://127.0.0.1:9092,SECURE://:9093",
        "zookeeper.set.acl=true",
        "java.security.auth.login.config=/etc/headwater/zookeeper-client.jaas",
        "authorizer.class.name=kafka.security.auth.SimpleAclAuthorizer",
        "super.users=User:broker",
        "allow.everyone.if.no.acl.found=false",
    ):
        assert line in props.splitlines(), props
    # The SECURE listener: TLS from the inventory's CA, SCRAM users in dc1's ZooKeeper; a wrong
    # password is refused.
    assert set(AdminClient(deployment.secure("dc1-b", "mirror")).list_topics(timeout=30).brokers) == {1, 2}
    refused = AdminClient({**deployment.secure("dc1-b", "mirror", "wrong"), "log_level": 0})  # its retries are expected
    with pytest.raises(KafkaException):
        refused.list_topics(timeout=10)
    del refused
    # Replicated across both brokers of dc1: written through one, read back in full.
    create_topic(deployment.dc1, ROLLING_TOPIC, 2, replication_factor=2, config={"min.insync.replicas": "1"})
    records = [(b"k%d" % i, b"%d" % i) for i in range(200)]
    produce(deployment.dc1, ROLLING_TOPIC, records)
    got = consume(deployment.dc1, ROLLING_TOPIC, [0, 1], len(records))
    assert sorted(r.value or b"" for r in got) == sorted(v for _, v in records)
    md = metadata(deployment.dc1, ROLLING_TOPIC).topics[ROLLING_TOPIC]
    assert {p.id: sorted(p.replicas) for p in md.partitions.values()} == {0: [1, 2], 1: [1, 2]}


def test_secure_by_default_plaintext_loopback_and_zookeeper_acls(deployment: Deployment) -> None:
    """Review H4 and M6: PLAINTEXT answers on the host's loopback only; ZooKeeper's znodes carry
    Kafka's ACLs, so a client that does not log in reads metadata but changes nothing, and cannot
    read the SCRAM credentials; no password appears in the playbook's output."""
    from kazoo.exceptions import NoAuthError

    from headwater.zk.client import kazoo_client
    from headwater.zk.security import ZkSecurity

    hosts = deployment.fleet.hosts
    for name in ("dc1-a", "dc1-b", "agg-a"):
        with pytest.raises(OSError):  # refused: nothing listens on the host's address
            socket.create_connection((hosts[name].address, PLAINTEXT_PORT), timeout=5).close()
    # ... while tools on the broker's own host still reach it there
    hosts["dc1-b"].run("python3", "-c", f"import socket; socket.create_connection(('127.0.0.1', {PLAINTEXT_PORT}), 5)")
    anon = kazoo_client(f"{hosts['dc1-a'].address}:2181", security=ZkSecurity())
    anon.start(timeout=30)
    try:
        assert set(anon.get_children("/brokers/ids")) == {"1", "2"}  # world read, as in Kafka
        for write in (
            lambda: anon.create("/brokers/ids/99", b"{}", ephemeral=True),
            lambda: anon.set("/brokers/topics/" + ROLLING_TOPIC, b"{}"),
            lambda: anon.create("/kafka-acl/Topic/evil", b"{}"),
            lambda: anon.set("/config/users/mirror", b"{}"),
            lambda: anon.create("/config/users/mallory", b"{}"),
        ):
            with pytest.raises(NoAuthError):
                write()
        with pytest.raises(NoAuthError):
            anon.get("/config/users/mirror")
    finally:
        anon.stop()
        anon.close()
    for run in deployment.runs:
        for password in (*SCRAM_USERS.values(), ZK_QUORUM_PASSWORD):
            assert password not in run.output


def test_second_run_changes_nothing(deployment: Deployment) -> None:
    run = deployment.apply(deployment.inventory())
    changed = {host: r.get("changed", 0) for host, r in run.recap().items()}
    assert set(changed) == {"dc1-a", "dc1-b", "dc1-c", "agg-a"}
    assert all(n == 0 for n in changed.values()), f"changed on the second run: {run.changed_tasks()}"


def test_mirror_audit_and_loader(deployment: Deployment) -> None:
    agg = deployment.fleet.hosts["agg-a"]
    marker = uuid.uuid4().hex.encode()
    create_topic(deployment.dc1, "mirrored", 2, replication_factor=2)
    produce(deployment.dc1, "mirrored", [(b"k%d" % i, marker + b"-%d" % i) for i in range(20)])

    def arrived() -> bool:
        md = metadata(deployment.agg, "mirrored").topics.get("mirrored")
        if md is None or md.error is not None:
            return False
        got = consume(deployment.agg, "mirrored", sorted(md.partitions), 20, timeout=5)
        return sorted(r.value or b"" for r in got) == sorted(marker + b"-%d" % i for i in range(20))

    wait_for(arrived, 180, "dc1's records in agg through the mirror", interval=2)
    journal = agg.run("journalctl", "-u", "headwater-mirror.service", "--no-pager", check=False)
    assert "cluster dc1: SASL_SSL (SCRAM-SHA-512 as mirror)" in journal, journal[-3000:]
    assert SCRAM_USERS["mirror"] not in journal
    # The audit service answers over HTTP and knows the audited topic's tiers.
    base = f"http://{agg.address}:8080"
    with urllib.request.urlopen(f"{base}/healthz", timeout=10) as resp:
        assert resp.status == 200

    def audited() -> Any:
        request = urllib.request.Request(f"{base}/api/v1/completeness?topic=mirrored")
        login = base64.b64encode(f"headwater:{AUDIT_HTTP_PASSWORD}".encode()).decode()
        request.add_header("Authorization", f"Basic {login}")  # the audit role's default: basic auth
        with urllib.request.urlopen(request, timeout=10) as resp:
            rows = json.load(resp)["rows"]
        return {row["tier"] for row in rows} >= {"dc1", "agg"} and rows

    wait_for(audited, 120, "the audit service's counts of 'mirrored' in dc1 and agg", interval=2)
    # The nightly load is a timer with a next run; started now, it loads the mirrored topic.
    timer = agg.unit("headwater-loader.timer", "ActiveState", "UnitFileState", "NextElapseUSecRealtime")
    assert timer["ActiveState"] == "active" and timer["UnitFileState"] == "enabled", timer
    assert timer["NextElapseUSecRealtime"], timer
    started = time.monotonic()
    code, out = agg.container.exec_run(["systemctl", "start", "headwater-loader.service"])  # a oneshot: waits
    journal = agg.run("journalctl", "-u", "headwater-loader.service", "--no-pager", "-n", "40", check=False)
    assert code == 0, f"the load failed: {out.decode(errors='replace')}\n{journal}"
    listing = agg.run("sh", "-c", "ls /var/lib/headwater/warehouse/_headwater/manifests/*.json")
    manifest = json.loads(agg.run("cat", listing.split()[0]))
    print(f"load: {time.monotonic() - started:.0f} s, {manifest['records']}")
    assert manifest["records"] == {"mirrored": 20}, manifest
    # ACLs: the mirror, the audit and the loader did all that with only the inventory's ACLs, which
    # each cluster's brokers show (DescribeAcls, asked as the admin principal) ...
    assert acls_of(deployment.dc1) == {
        *(("User:mirror", t, op) for t in ("*", "heartbeats") for op in ("READ", "DESCRIBE_CONFIGS")),
        *(("User:mirror", t, op) for t in ("heartbeats", "__audit") for op in ("CREATE", "WRITE")),
        # the checkpoint task: MM2's offset syncs in the source, and the source's groups listed and read
        *(("User:mirror", "mm2-offset-syncs.agg.internal", op) for op in ("CREATE", "WRITE", "READ")),
        ("User:mirror", "group:*", "DESCRIBE"),
        *(("User:audit", t, "READ") for t in ("mirrored", "__audit", "heartbeats")),
    }
    assert acls_of(deployment.agg) == {
        *(("User:mirror", t, op) for t in ("*", "heartbeats") for op in ("CREATE", "WRITE", "READ", "ALTER_CONFIGS")),
        *(("User:audit", t, "READ") for t in ("mirrored", "__audit", "heartbeats")),
        ("User:loader", "mirrored", "READ"),
        ("User:loader", TYPED_TOPIC, "READ"),
        ("User:loader", "__audit", "CREATE"),
        ("User:loader", "__audit", "WRITE"),
    }
    # ... and nothing more: a user without ACLs, and the mirror on a topic of its source (it only
    # reads there), are refused writing to it; nothing is written.
    dc1_a = deployment.fleet.hosts["dc1-a"]
    dc1_a.run(
        "env",
        "KAFKA_OPTS=-Djava.security.auth.login.config=/etc/headwater/zookeeper-client.jaas",  # as the role's tasks
        f"{_unit_venv(dc1_a)}/bin/headwater",
        *("configs", "--zookeeper", "localhost:2181", "--alter", "--entity-type", "users", "--entity-name"),
        *(NOBODY[0], "--add-config", f"SCRAM-SHA-512=[iterations=4096,password={NOBODY[1]}]"),
    )
    nobody = AdminClient({**deployment.secure("dc1-a", "nobody"), "log_level": 0})  # refused until the brokers see it
    wait_for(lambda: nobody.list_topics(timeout=10).brokers, 60, "nobody's first login")
    assert "mirrored" not in nobody.list_topics(timeout=10).topics  # Metadata: only what it may describe
    for user in ("nobody", "mirror"):
        codes = stock_produce_codes(deployment.secure("dc1-a", user), "mirrored", 3)
        assert codes and all(c == KafkaError.TOPIC_AUTHORIZATION_FAILED for c in codes), (user, codes)
    ends = end_offsets(deployment.dc1, "mirrored")
    assert sum(ends.values()) == 20, ends


def test_registry_role_serves_typed_loads_and_keeps_ids_across_a_restart(
    deployment: Deployment, tmp_path: Path
) -> None:
    """roles/registry (Apicurio Registry on agg-a, the registry group): ready, the loader's default
    schema.registry.url; a schema registered and Avro records produced through it with confluent-kafka
    load as typed columns (``<topic>@v1``) holding the values sent; restarted, it keeps the schema's id."""
    agg = deployment.fleet.hosts["agg-a"]
    root = f"http://{agg.address}:{REGISTRY_PORT}"

    def ready() -> bool:
        with urllib.request.urlopen(f"{root}/health/ready", timeout=10) as resp:
            return bool(resp.status == 200 and json.load(resp)["status"] == "UP")

    assert ready()
    unit = agg.unit("headwater-registry.service", "ActiveState", "UnitFileState", "User")
    assert unit == {"ActiveState": "active", "UnitFileState": "enabled", "User": "headwater-registry"}, unit
    assert f"schema.registry.url = {root}{CCOMPAT}\n" in agg.run("cat", "/etc/headwater/loader.properties")
    subject = f"{TYPED_TOPIC}-value"
    client = SchemaRegistryClient({"url": root + CCOMPAT})
    serialize = AvroSerializer(client, json.dumps(ORDER))
    ctx = SerializationContext(TYPED_TOPIC, MessageField.VALUE)
    sent = [{"id": 100 + i, "item": f"item-{i}", "price": i * 1.25} for i in range(6)]
    create_topic(deployment.agg, TYPED_TOPIC, 1)
    produce(deployment.agg, TYPED_TOPIC, [(b"o%d" % i, serialize(v, ctx)) for i, v in enumerate(sent)])
    schema_id = client.get_latest_version(subject).schema_id
    # The nightly load's service (a oneshot: systemctl waits for the run) decodes them with the registry.
    started = time.monotonic()
    code, out = agg.container.exec_run(["systemctl", "start", "headwater-loader.service"])
    journal = agg.run("journalctl", "-u", "headwater-loader.service", "--no-pager", "-n", "40", check=False)
    assert code == 0, f"the load failed: {out.decode(errors='replace')}\n{journal}"
    print(f"typed load: {time.monotonic() - started:.0f} s")
    bits, _ = agg.container.get_archive(f"/var/lib/headwater/warehouse/{TYPED_TOPIC}@v1")
    with tarfile.open(fileobj=io.BytesIO(b"".join(bits))) as tar:
        tar.extractall(tmp_path, filter="data")
    rows = ds.dataset(tmp_path / f"{TYPED_TOPIC}@v1", format="parquet", partitioning="hive").to_table().to_pylist()
    assert sorted((r["value"] for r in rows), key=lambda v: v["id"]) == sent, rows
    assert {r["schema_id"] for r in rows} == {schema_id}
    # Restarted, the registry reads its H2 file: the same id for the same schema, to a new client.
    pid = agg.unit("headwater-registry.service", "MainPID")["MainPID"]
    started = time.monotonic()
    agg.run("systemctl", "restart", "headwater-registry.service")
    wait_for(ready, 300, "the restarted registry's /health/ready", interval=2)
    assert agg.unit("headwater-registry.service", "MainPID")["MainPID"] not in (pid, "0")
    print(f"registry restart: {time.monotonic() - started:.0f} s")
    again = SchemaRegistryClient({"url": root + CCOMPAT})
    assert again.get_latest_version(subject).schema_id == schema_id
    assert again.register_schema(subject, Schema(json.dumps(ORDER), "AVRO")) == schema_id
    assert json.loads(again.get_schema(schema_id).schema_str) == ORDER


def zookeeper_word(address: str, command: bytes) -> dict[str, str]:
    """A ZooKeeper four-letter word's answer (``srvr``, ``mntr``) from ``address``:2181, as key -> value."""
    with socket.create_connection((address, 2181), timeout=10) as s:
        s.sendall(command)
        answer = b"".join(iter(lambda: s.recv(4096), b"")).decode(errors="replace")
    pairs = (re.split(r":\s*|\t", line, maxsplit=1) for line in answer.splitlines())
    return {kv[0].strip(): kv[1].strip() for kv in pairs if len(kv) == 2}


def acls_of(bootstrap: str) -> set[tuple[str, str, str]]:
    """Every ACL of a cluster (DescribeAcls) as (principal, resource, operation), a topic by its name and a
    group as ``group:<name>``; any other kind (prefixed, deny, a host) fails."""
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET, **kafka_io.CLIENT_CONF})
    everything = AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY, AclPermissionType.ANY
    )
    out: set[tuple[str, str, str]] = set()
    for b in admin.describe_acls(everything).result(30):
        kind = (b.resource_pattern_type, b.permission_type, b.host)
        assert kind == (ResourcePatternType.LITERAL, AclPermissionType.ALLOW, "*"), b
        assert b.restype in (ResourceType.TOPIC, ResourceType.GROUP), b
        name = b.name if b.restype == ResourceType.TOPIC else f"group:{b.name}"
        out.add((b.principal, name, b.operation.name))
    return out


class Writer(threading.Thread):
    """A librdkafka producer with acks=all writing numbered records until stopped."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.topic = bootstrap, topic
        self.acked: list[tuple[float, bytes]] = []
        self.errors: list[str] = []
        self.sent = 0
        self.stop = threading.Event()
        self.unflushed = -1

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.errors.append(str(err))
        else:
            self.acked.append((time.monotonic(), msg.value()))

    def run(self) -> None:
        # retries are librdkafka's (until message.timeout.ms): a leader moving is not a failure.
        p = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "acks": "all",
                "linger.ms": 5,
                "message.timeout.ms": 300000,
                **QUIET,
                **kafka_io.CLIENT_CONF,
            }
        )
        while not self.stop.is_set():
            for _ in range(50):
                p.produce(self.topic, key=b"%d" % self.sent, value=b"w-%d" % self.sent, on_delivery=self._delivered)
                self.sent += 1
            p.poll(0)
            self.stop.wait(0.05)  # pacing: at most 1,000 records/s
        self.unflushed = p.flush(300)


class IsrMonitor(threading.Thread):
    """Polls dc1's metadata: (monotonic time, broker ids missing from the topic's ISRs or None on error)."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET, **kafka_io.CLIENT_CONF})
        self.topic = topic
        self.samples: list[tuple[float, frozenset[int] | None]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            # Stamped when asked: the answer reflects the cluster at that time or later.
            asked = time.monotonic()
            try:
                t = self.admin.list_topics(topic=self.topic, timeout=2).topics[self.topic]
                missing = frozenset(b for p in t.partitions.values() for b in p.replicas if b not in p.isrs)
                self.samples.append((asked, missing))
            except Exception:
                self.samples.append((asked, None))
            self.stop.wait(0.1)


def monotonic_us(value: str) -> float:
    return int(value) / 1e6


def test_rolling_restart_loses_nothing(deployment: Deployment) -> None:
    hosts = deployment.fleet.hosts
    writer = Writer(deployment.dc1, ROLLING_TOPIC)
    monitor = IsrMonitor(deployment.dc1, ROLLING_TOPIC)
    monitor.start()
    writer.start()
    try:
        wait_for(lambda: len(writer.acked) > 100, 60, "the writer's first acknowledgements")
        old_venv = {h: _unit_venv(hosts[h]) for h in ("dc1-a", "dc1-b")}
        started = time.monotonic()
        run = deployment.apply(
            deployment.inventory(
                dc1_broker_properties={"num.partitions": "2"}, dc1_vars={"headwater_install_label": "rebuild-2"}
            )
        )
        finished = time.monotonic()
        wait_for(lambda: any(t > finished for t, _ in writer.acked[-50:]), 60, "acknowledgements after the run")
    finally:
        writer.stop.set()
        monitor.stop.set()
        writer.join(330)
        monitor.join(30)
    # Only dc1's brokers changed (their server.properties), each restarted once.
    recap = run.recap()
    assert recap["agg-a"]["changed"] == 0, run.changed_tasks()
    restarts = [t for t in run.changed_tasks() if t.startswith("RUNNING HANDLER [broker : Restart broker]")]
    assert sorted(restarts) == sorted(f"RUNNING HANDLER [broker : Restart broker] {h}" for h in ("dc1-a", "dc1-b")), (
        restarts
    )
    # One at a time: the second broker went down only after the first was up and back in every ISR.
    units = {
        h: hosts[h].unit("headwater-broker.service", "ActiveEnterTimestampMonotonic", "ActiveExitTimestampMonotonic")
        for h in ("dc1-a", "dc1-b")
    }
    times = {
        h: (monotonic_us(u["ActiveExitTimestampMonotonic"]), monotonic_us(u["ActiveEnterTimestampMonotonic"]))
        for h, u in units.items()
    }
    for h, (down, up) in times.items():
        assert started < down < up < finished, (
            f"{h} was not restarted during the run: {times}, run {started}..{finished}"
        )
    (first, (_, first_up)), (second, (second_down, _)) = sorted(times.items(), key=lambda kv: kv[1][0])
    assert second_down > first_up, f"{second} went down before {first} was back: {times}"
    between = [missing for t, missing in monitor.samples if first_up < t < second_down]
    assert frozenset() in between, (
        f"no metadata between {first} coming back and {second} going down showed every replica in the ISR: {between}"
    )
    assert any(t > started and missing for t, missing in monitor.samples), (
        "the monitor never saw a broker out of the ISR"
    )
    # The upgrade: each broker runs from a new venv, installed in its own turn (the second's after
    # the first was back), and the old venv is still there to roll back to.
    new_venv = {h: _unit_venv(hosts[h]) for h in ("dc1-a", "dc1-b")}
    for h in ("dc1-a", "dc1-b"):
        assert new_venv[h] != old_venv[h], (h, old_venv[h], new_venv[h])
        hosts[h].run("test", "-x", f"{old_venv[h]}/bin/headwater")
        hosts[h].run("test", "-x", f"{new_venv[h]}/bin/headwater")
    created = float(hosts[second].run("stat", "-c", "%Y", f"{new_venv[second]}/pyvenv.cfg"))
    first_up_wall = time.time() - (time.monotonic() - first_up)
    assert created >= first_up_wall - 1, f"{second}'s new venv was made before {first} was back"
    second_up = times[second][1]
    while_second_down = [m for t, m in monitor.samples if second_down < t < second_up and m is not None]
    first_id = {"dc1-a": 1, "dc1-b": 2}[first]
    assert all(first_id not in m for m in while_second_down), (
        f"{first} was out of an ISR while {second} was down: {while_second_down}"
    )
    # acks=all kept being answered during the restarts, and every acknowledged record is there.
    assert writer.unflushed == 0 and not writer.errors, (writer.unflushed, writer.errors[:5])
    during = [v for t, v in writer.acked if times[first][0] < t < times[second][1]]
    assert during, "no record was acknowledged while the brokers restarted"
    ends = end_offsets(deployment.dc1, ROLLING_TOPIC)
    stored = consume(deployment.dc1, ROLLING_TOPIC, [0, 1], sum(ends.values()), timeout=120)
    values = {r.value for r in stored}
    lost = [v for _, v in writer.acked if v not in values]
    seen: list[str] = []  # the monitor's view, repeats folded: [] -> [1] -> [] -> [2] -> []
    for t, m in monitor.samples:
        label = "?" if m is None else str(sorted(m))
        if t > started and (not seen or seen[-1] != label):
            seen.append(label)
    print(f"ISR gaps seen: {' -> '.join(seen)}; restarts: {first} then {second}, {second_down - first_up:.1f} s apart")
    print(f"rolling restart: {len(writer.acked)} records acknowledged ({len(during)} while the brokers restarted), "
          f"{len(stored)} stored, run {finished - started:.0f} s")  # fmt: skip
    assert not lost, f"{len(lost)} acknowledged records lost, e.g. {lost[:5]}"


def _unit_venv(host: Any) -> str:
    """The venv the broker's unit runs from, e.g. /opt/headwater/venv-3f2a..."""
    unit = host.run("cat", "/etc/systemd/system/headwater-broker.service")
    (venv,) = set(re.findall(r"/opt/headwater/venv-[0-9a-f]+", unit))
    return venv


def test_ready_gate_waits_for_a_missing_replica(deployment: Deployment) -> None:
    """The rolling restart's gate (roles/broker/files/broker_ready.py) against the real dc1 cluster:
    with broker 2 stopped, broker 1 is not ready (under-replicated partitions); started, it is."""
    gate = ANSIBLE_DIR / "roles" / "broker" / "files" / "broker_ready.py"
    a, b = deployment.bootstrap("dc1-a"), deployment.bootstrap("dc1-b")
    login = ["--command-config", str(deployment.admin_properties())]  # SECURE, as the role runs it
    dc1_b = deployment.fleet.hosts["dc1-b"]
    dc1_b.run("systemctl", "stop", "headwater-broker.service")
    try:
        waited = subprocess.run(
            [sys.executable, str(gate), "--broker-id", "1", "--self", a, "--bootstrap", b, "--timeout", "5", *login],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert waited.returncode == 1, waited.stdout + waited.stderr
        assert "under-replicated" in waited.stdout + waited.stderr, waited.stdout + waited.stderr
    finally:
        dc1_b.run("systemctl", "start", "headwater-broker.service")
    ready = subprocess.run(
        [sys.executable, str(gate), "--broker-id", "2", "--self", b, "--bootstrap", a, "--timeout", "300", *login],
        capture_output=True,
        text=True,
        timeout=330,
    )
    assert ready.returncode == 0, ready.stdout + ready.stderr
    assert "none under-replicated" in ready.stdout


def test_rebalance_over_ssh_spreads_a_topic_over_dc1(deployment: Deployment) -> None:
    """rebalance.yml over SSH (issue 27): a topic whose partitions all live on broker 1 is spread
    over dc1's brokers 1 and 2 (--generate, --execute with a throttle, --verify until done), as
    the brokers then report it (Metadata, DescribeLogDirs), with every record still there."""
    topic = "rebalanced"
    with SyncAdmin(deployment.dc1, security=deployment.admin_security()) as hw:
        assert hw.create_topics([HwNewTopic(topic, assignments={0: [1], 1: [1]})]) == {topic: None}
    wait_for(lambda: leaders(deployment.dc1, topic, 2) == {0: 1, 1: 1}, 60, f"{topic}'s leaders on broker 1")
    records = [(b"k%d" % i, b"r-%d" % i) for i in range(400)]
    produce(deployment.dc1, topic, records)
    inventory = deployment.inventory(name="inventory-rebalance.yml")
    run = run_playbook(
        deployment.fleet,
        inventory,
        deployment.workdir / "rebalance.log",
        timeout=300,
        playbook="rebalance.yml",
        extra_vars={"rebalance_datacenter": "dc1", "rebalance_topics": [topic], "rebalance_poll_interval": 2},
    )
    print(f"rebalance.yml: {run.seconds:.0f} s, recap {run.recap()}")
    assert run.returncode == 0, run.output[-6000:]
    assert "changed: [dc1-a]" in run.output, run.output[-3000:]  # once, on dc1's first broker
    assert all(r.get("failed", 0) == 0 and r.get("unreachable", 0) == 0 for r in run.recap().values()), run.recap()
    assert "Throttle was removed." in run.output, run.output[-3000:]

    # The brokers' view (every broker's metadata cache, once the controller's update reached it): one
    # partition on each broker, each led by its only replica ...
    def placement(bootstrap: str) -> dict[int, tuple[list[int], int]]:
        md = metadata(bootstrap, topic).topics[topic]
        return {p.id: (p.replicas, p.leader) for p in md.partitions.values()}

    def spread() -> bool:
        views = [placement(deployment.bootstrap(h)) for h in ("dc1-a", "dc1-b")]
        return all(sorted(v.values()) == [([1], 1), ([2], 2)] for v in views)

    wait_for(spread, 60, f"{topic} spread over brokers 1 and 2 in both brokers' metadata")
    placed = placement(deployment.dc1)
    moved = [p for p, (replicas, _) in placed.items() if replicas == [2]]
    # ... and broker 2's log dir holds the moved partition's data (DescribeLogDirs).
    with SyncAdmin(deployment.dc1, security=deployment.admin_security()) as hw:
        dirs = hw.describe_log_dirs([2], [(topic, p) for p in moved])[2]
    assert not isinstance(dirs, Exception), dirs
    sizes = {key: info.size for d in dirs for key, info in d.replicas.items()}
    assert set(sizes) == {(topic, p) for p in moved} and all(size > 0 for size in sizes.values()), sizes
    got = consume(deployment.dc1, topic, [0, 1], len(records))
    assert sorted(r.value or b"" for r in got) == sorted(v for _, v in records)


def _warehouse_records(agg: Any, topic: str) -> int:
    """The records of ``topic`` in the warehouse's committed manifests (one per published run)."""
    listing = agg.run("sh", "-c", "cat /var/lib/headwater/warehouse/_headwater/manifests/*.json", check=False)
    decoder = json.JSONDecoder()
    total, at = 0, 0
    while (at := listing.find("{", at)) >= 0:
        manifest, at = decoder.raw_decode(listing, at)
        total += int(manifest.get("records", {}).get(topic, 0))
    return total


def test_continuous_load_mode_loads_each_record_once_across_a_kill(deployment: Deployment) -> None:
    """``loader_mode: continuous`` (issue 44): the role stops the nightly timer and runs ``headwater
    load --continuous`` as a service; what the mirror brings into the aggregate cluster is published
    by its runs, each record once (the manifests' counts equal the topic's records); killed with
    SIGKILL, systemd starts it again and it goes on from its checkpoint and the manifests."""
    agg = deployment.fleet.hosts["agg-a"]
    run = deployment.apply(
        deployment.inventory(
            all_vars={"loader_mode": "continuous", "loader_trigger": "5 seconds"}, name="inventory-continuous.yml"
        )
    )
    assert "RUNNING HANDLER [loader : Restart the continuous load]" in run.output, run.changed_tasks()
    timer = agg.unit("headwater-loader.timer", "ActiveState", "UnitFileState")
    assert timer == {"ActiveState": "inactive", "UnitFileState": "disabled"}, timer
    service = "headwater-loader-continuous.service"
    unit = agg.unit(service, "ActiveState", "UnitFileState")
    assert unit == {"ActiveState": "active", "UnitFileState": "enabled"}, unit
    assert "stream.trigger.interval = 5 seconds" in agg.run("cat", "/etc/headwater/loader.properties")

    def loaded_all(marker: bytes, n: int) -> bool:
        md = metadata(deployment.agg, "mirrored").topics["mirrored"]
        got = consume(deployment.agg, "mirrored", sorted(md.partitions), 10**6, timeout=5)
        if sum((r.value or b"").startswith(marker) for r in got) < n:
            return False  # the mirror has not brought them yet
        # every record of the topic (its end offsets: nothing is deleted, no transactions) once
        return _warehouse_records(agg, "mirrored") == sum(end_offsets(deployment.agg, "mirrored").values())

    def journal() -> str:
        return agg.run("journalctl", "-u", service, "--no-pager", "-n", "60", check=False)

    first = uuid.uuid4().hex.encode()
    produce(deployment.dc1, "mirrored", [(b"c%d" % i, first + b"-%d" % i) for i in range(10)])
    wait_for(lambda: loaded_all(first, 10), 300, "the continuous load's runs of the new records", interval=3)
    pid = agg.unit(service, "MainPID")["MainPID"]
    assert pid and pid != "0", journal()
    agg.run("kill", "-9", pid)
    wait_for(
        lambda: (
            agg.unit(service, "NRestarts", "ActiveState")
            in ({"NRestarts": n, "ActiveState": "active"} for n in ("1", "2", "3"))
        ),
        180,
        "systemd's restart of the killed load",
        interval=2,
    )
    second = uuid.uuid4().hex.encode()
    produce(deployment.dc1, "mirrored", [(b"d%d" % i, second + b"-%d" % i) for i in range(5)])
    wait_for(lambda: loaded_all(second, 5), 300, "the restarted load's runs", interval=3)
    assert "Traceback" not in journal(), journal()
