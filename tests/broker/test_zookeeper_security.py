"""ZooKeeper secured as Kafka 2.3 secures it (issue 37 item 6, review M6).

A real SASL-enabled ZooKeeper (Debian's, DIGEST-MD5, ``requireClientAuthScheme=sasl``) with one
user, ``broker``; a broker logging in with a JAAS ``Client`` section and ``zookeeper.set.acl=true``;
the CLI logging in as the same user through ``KAFKA_OPTS``, as Kafka's tools do. What is checked
is ZooKeeper's own view: each znode's ACL, and what a client that did not log in may do.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import ACL, Id, Permissions

from headwater.broker.config import ConfigError, config_from_props
from headwater.testing.cluster import LocalBroker
from headwater.testing.zookeeper import ZooKeeperServer, free_port
from headwater.zk.client import kazoo_client
from headwater.zk.security import ZkSecurity, zk_security

pytestmark = [pytest.mark.timeout(300)]

CHROOT = "/secured"
BROKER_ZK_PASSWORD = "broker-zk-secret"
CREATOR = ACL(Permissions.ALL, Id("sasl", "broker"))
WORLD_READ = ACL(Permissions.READ, Id("world", "anyone"))
WORLD_ALL = ACL(Permissions.ALL, Id("world", "anyone"))


@dataclass
class Secured:
    zookeeper: ZooKeeperServer
    broker: LocalBroker
    jaas: Path
    sasl_bootstrap: str
    tmp: Path

    @property
    def zk(self) -> str:
        return self.zookeeper.connect + CHROOT

    def anonymous(self) -> KazooClient:
        """A client that does not log in (no JAAS, whatever this process's KAFKA_OPTS say)."""
        client = kazoo_client(self.zk, security=ZkSecurity())
        client.start(timeout=30)
        return client

    def as_broker(self) -> KazooClient:
        sec = zk_security({"java.security.auth.login.config": str(self.jaas)}, environ={})
        client = kazoo_client(self.zk, security=sec)
        client.start(timeout=30)
        return client


def cli(*args: str, kafka_opts: str | None, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "KAFKA_OPTS"}
    if kafka_opts is not None:
        env["KAFKA_OPTS"] = kafka_opts
    return subprocess.run(
        [sys.executable, "-m", "headwater.cli.main", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def ok(*args: str, kafka_opts: str | None, stdin: str | None = None) -> str:
    p = cli(*args, kafka_opts=kafka_opts, stdin=stdin)
    assert p.returncode == 0, f"{args}: exit {p.returncode}\nstdout: {p.stdout}\nstderr: {p.stderr}"
    return p.stdout


def wait_for(what: str, check: object, timeout: float = 60.0) -> None:
    assert callable(check)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    raise AssertionError(f"not within {timeout:g}s: {what}")


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    tmp = tmp_path_factory.mktemp("zk-sasl")
    server = ZooKeeperServer(tmp / "zookeeper", sasl_users={"broker": BROKER_ZK_PASSWORD})
    server.start()
    try:
        jaas = server.client_jaas("broker")
        kafka_opts = f"-Djava.security.auth.login.config={jaas}"
        broker = LocalBroker(tmp, 0, server.connect + CHROOT)
        sasl_port = free_port()
        broker.properties.update(
            {
                # PLAINTEXT on loopback: the harness's readiness probe and the inter-broker listener
                "listeners": f"PLAINTEXT://127.0.0.1:{broker.port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
                "sasl.enabled.mechanisms": "SCRAM-SHA-512",
                "java.security.auth.login.config": str(jaas),
                "zookeeper.set.acl": "true",
                "offsets.topic.replication.factor": 1,
                "offsets.topic.num.partitions": 1,
                "group.initial.rebalance.delay.ms": 0,
            }
        )
        broker.start(timeout=120)
        try:
            # the CLI writes as Kafka's tools do: --zookeeper, the login from KAFKA_OPTS
            argv = ["configs", "--zookeeper", server.connect + CHROOT, "--alter", "--entity-type", "users"]
            add = "SCRAM-SHA-512=[iterations=4096,password=alice-pw]"
            ok(*argv, "--entity-name", "alice", "--add-config", add, kafka_opts=kafka_opts)
            ok(
                "acls",
                "--zookeeper",
                server.connect + CHROOT,
                "--add",
                "--allow-principal",
                "User:alice",
                "--operation",
                "Write",
                "--topic",
                "zk-secured",
                kafka_opts=kafka_opts,
            )
            ok(
                "topics",
                "--bootstrap-server",
                broker.bootstrap,
                "create",
                "--topic",
                "zk-secured",
                "--partitions",
                "2",
                "--replication-factor",
                "1",
                kafka_opts=None,
            )
            yield Secured(server, broker, jaas, f"127.0.0.1:{sasl_port}", tmp)
        finally:
            broker.stop()
    finally:
        server.stop()


def test_broker_registers_and_its_znodes_carry_kafka_default_acls(secured: Secured) -> None:
    zk = secured.as_broker()
    try:
        wait_for("broker 0 registered", lambda: zk.exists("/brokers/ids/0") is not None)
        wait_for("partition states written", lambda: zk.exists("/brokers/topics/zk-secured/partitions/1/state"))
        creator_and_world_read = [
            "",  # the chroot itself
            "/brokers",
            "/brokers/ids",
            "/brokers/ids/0",
            "/brokers/topics/zk-secured",
            "/brokers/topics/zk-secured/partitions/1/state",
            "/config",
            "/config/topics/zk-secured",
            "/controller",
            "/controller_epoch",
            "/kafka-acl/Topic/zk-secured",
        ]
        for path in creator_and_world_read:
            full = CHROOT + path if path else CHROOT
            acls, _ = zk.get_acls(path or "/")
            assert sorted(acls, key=str) == sorted([CREATOR, WORLD_READ], key=str), (full, acls)
        # sensitive: the SCRAM credentials, creator only (Kafka 2.3's ZkData.SensitiveRootPaths)
        for path in ("/config/users", "/config/users/alice"):
            acls, _ = zk.get_acls(path)
            assert acls == [CREATOR], (path, acls)
        # /consumers stays open, as Kafka's: ZooKeeper-based consumers of any principal register there
        acls, _ = zk.get_acls("/consumers")
        assert acls == [WORLD_ALL]
    finally:
        zk.stop()
        zk.close()


def test_unauthenticated_client_reads_but_cannot_write_or_read_credentials(secured: Secured) -> None:
    anon = secured.anonymous()
    try:
        # world read, as in Kafka: metadata stays readable
        assert b'"partitions"' in anon.get("/brokers/topics/zk-secured")[0]
        assert "0" in anon.get_children("/brokers/ids")
        assert anon.exists("/kafka-acl-changes") is not None  # parents exist: a refusal is NoAuth, not NoNode
        writes = [
            lambda: anon.create("/brokers/ids/666", b"{}", ephemeral=True),
            lambda: anon.set("/brokers/topics/zk-secured", b'{"version":1,"partitions":{"0":[666]}}'),
            lambda: anon.delete("/brokers/topics/zk-secured/partitions/1/state"),
            lambda: anon.create("/brokers/topics/evil", b"{}"),
            lambda: anon.set("/config/topics/zk-secured", b'{"version":1,"config":{"retention.ms":"1"}}'),
            lambda: anon.create("/config/changes/config_change_9999999999", b"{}"),
            lambda: anon.create("/config/users/mallory", b"{}"),
            lambda: anon.set("/config/users/alice", b"{}"),
            lambda: anon.set("/kafka-acl/Topic/zk-secured", b'{"version":1,"acls":[]}'),
            lambda: anon.create("/kafka-acl/Topic/evil", b'{"version":1,"acls":[]}'),
            lambda: anon.create("/kafka-acl-changes/acl_changes_9999999999", b"Topic:evil"),
            lambda: anon.create("/admin/delete_topics/zk-secured", b""),
            lambda: anon.delete("/controller"),
        ]
        for i, write in enumerate(writes):
            with pytest.raises(NoAuthError):
                write()
                pytest.fail(f"write #{i} was allowed")
        # the SCRAM credentials (salt, stored and server keys) are not world-readable
        with pytest.raises(NoAuthError):
            anon.get("/config/users/alice")
        with pytest.raises(NoAuthError):
            anon.get_children("/config/users")
        # nothing changed: the broker's view
        data, _ = anon.get("/config/topics/zk-secured")
        assert b"retention.ms" not in data
    finally:
        anon.stop()
        anon.close()


def test_scram_login_uses_credentials_only_the_broker_principal_can_read(secured: Secured) -> None:
    props = secured.tmp / "alice.properties"
    props.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\nsasl.username=alice\nsasl.password=alice-pw\n"
    )
    bs = ["--bootstrap-server", secured.sasl_bootstrap, "--command-config", str(props)]
    ok("produce", *bs, "--topic", "zk-secured", kafka_opts=None, stdin="one\ntwo\n")


def test_cli_with_a_wrong_zookeeper_password_is_a_readable_error(secured: Secured) -> None:
    bad = secured.zookeeper.client_jaas("broker", "not-the-password", name="wrong.jaas")
    p = cli(
        "configs",
        "--zookeeper",
        secured.zk,
        "--describe",
        "--entity-type",
        "users",
        kafka_opts=f"-Djava.security.auth.login.config={bad}",
    )
    assert p.returncode != 0
    assert "Traceback" not in p.stderr, p.stderr
    assert "AuthFailed" in p.stderr and "not-the-password" not in p.stderr, p.stderr


def test_broker_with_a_wrong_zookeeper_password_does_not_start(secured: Secured) -> None:
    bad = secured.zookeeper.client_jaas("broker", "not-the-password", name="wrong-broker.jaas")
    broker = LocalBroker(secured.tmp / "wrong", 1, secured.zk)
    broker.properties.update({"java.security.auth.login.config": str(bad), "zookeeper.set.acl": "true"})
    with pytest.raises(RuntimeError) as e:
        broker.start(timeout=60)
    broker.stop()
    assert "AuthFailed" in str(e.value) and "not-the-password" not in str(e.value)


def test_set_acl_without_a_login_is_refused_at_start(tmp_path: Path) -> None:
    props = {"zookeeper.connect": "127.0.0.1:2181", "zookeeper.set.acl": "true"}
    with pytest.raises(ConfigError, match=r"zookeeper\.set\.acl is true, but no ZooKeeper SASL login"):
        config_from_props(props)
    no_client = tmp_path / "server-only.jaas"
    no_client.write_text('Server {\n  org.apache.zookeeper.server.auth.DigestLoginModule required user_a="b";\n};\n')
    with pytest.raises(ConfigError, match="has no Client section"):
        config_from_props({**props, "java.security.auth.login.config": str(no_client)})
