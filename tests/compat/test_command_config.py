"""``headwater <command> --command-config client.properties`` against a real SASL_SSL broker.

One broker (module-scoped) with a PLAINTEXT listener (the harness's, and the test's own view of
what was written) and a SASL_SSL listener with SCRAM-SHA-512 users in ZooKeeper; ACLs are on,
``User:admin`` (and the PLAINTEXT/inter-broker ``User:ANONYMOUS``) are super users. The commands run
as subprocesses, as an operator runs them: exit code, stdout and stderr are what is checked.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from headwater.cli.main import main as cli_main
from headwater.testing.cluster import LocalBroker
from headwater.testing.tls import TestCA
from headwater.testing.zookeeper import ZooKeeperServer, free_port
from tests.harness.scram import wait_until_brokers_know

pytestmark = [pytest.mark.timeout(600)]


@dataclass
class SecuredBroker:
    broker: LocalBroker
    sasl_ssl: str  # bootstrap of the SASL_SSL listener
    plaintext: str
    ca_file: Path
    tmp: Path
    zk: str

    def properties(self, name: str, user: str, password: str) -> Path:
        """A client.properties as kafka-topics takes it, the password in a file: secret."""
        secret = self.tmp / f"{name}.secret"
        secret.write_text(password + "\n")
        path = self.tmp / f"{name}.properties"
        path.write_text(
            "security.protocol=SASL_SSL\n"
            f"ssl.ca.location={self.ca_file}\n"
            "sasl.mechanism=SCRAM-SHA-512\n"
            f"sasl.username={user}\n"
            f"sasl.password=file:{secret}\n"
        )
        return path


def add_user(zk: str, user: str, password: str) -> None:
    argv = ["configs", "--zookeeper", zk, "--alter", "--entity-type", "users", "--entity-name", user]
    assert cli_main([*argv, "--add-config", f"SCRAM-SHA-512=[iterations=4096,password={password}]"]) == 0


@pytest.fixture(scope="module")
def secured(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredBroker]:
    tmp = tmp_path_factory.mktemp("command-config")
    ca = TestCA(tmp / "ca")
    cert = ca.issue("broker")
    zk = f"{zookeeper.connect}/command-config-{int(time.time() * 1000)}"
    broker = LocalBroker(tmp, 0, zk)
    port = free_port()
    broker.properties.update(
        {
            "listeners": f"PLAINTEXT://127.0.0.1:{broker.port},SASL_SSL://127.0.0.1:{port}",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": cert.keystore,
            "sasl.enabled.mechanisms": "SCRAM-SHA-512",
            "authorizer.class.name": "kafka.security.auth.SimpleAclAuthorizer",
            "super.users": "User:admin;User:ANONYMOUS",
            "offsets.topic.replication.factor": 1,
            "offsets.topic.num.partitions": 1,
            "group.initial.rebalance.delay.ms": 0,
        }
    )
    broker.start(timeout=120)
    try:
        add_user(zk, "admin", "admin-pw")
        add_user(zk, "alice", "alice-pw")
        wait_until_brokers_know([broker], "admin")
        wait_until_brokers_know([broker], "alice")
        yield SecuredBroker(broker, f"127.0.0.1:{port}", broker.bootstrap, ca.ca_file, tmp, zk)
    finally:
        broker.stop()


def cli(*args: str, stdin: str | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "headwater.cli.main", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def ok(*args: str, stdin: str | None = None) -> str:
    p = cli(*args, stdin=stdin)
    assert p.returncode == 0, f"{args}: exit {p.returncode}\nstdout: {p.stdout}\nstderr: {p.stderr}"
    assert "Traceback" not in p.stderr and "error" not in p.stderr, p.stderr
    return p.stdout


def refused(*args: str, stdin: str | None = None) -> str:
    """A command that must fail: exit code != 0, one readable line, no traceback."""
    p = cli(*args, stdin=stdin)
    assert p.returncode != 0, f"{args}: exit 0\nstdout: {p.stdout}\nstderr: {p.stderr}"
    assert "Traceback" not in p.stderr, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    return lines[0]


def test_admin_commands_over_sasl_ssl_with_command_config(secured: SecuredBroker) -> None:
    admin = str(secured.properties("admin", "admin", "admin-pw"))
    bs = ["--bootstrap-server", secured.sasl_ssl, "--command-config", admin]
    ok("topics", *bs, "create", "--topic", "cc-orders", "--partitions", "1", "--replication-factor", "1")
    assert "cc-orders" in ok("topics", *bs, "list").split()
    assert "Leader: 0" in ok("topics", "describe", "--topic", "cc-orders", *bs)  # options after the action too
    ok(
        "configs",
        *bs,
        "--alter",
        "--entity-type",
        "topics",
        "--entity-name",
        "cc-orders",
        "--add-config",
        "retention.ms=3600000",
    )
    described = ok("configs", *bs, "--describe", "--entity-type", "topics", "--entity-name", "cc-orders")
    assert "retention.ms=3600000" in described
    ok("produce", *bs, "--topic", "cc-orders", stdin="one\ntwo\nthree\n")
    got = ok("consume", *bs, "--topic", "cc-orders", "--from-beginning", "--max-messages", "3", "--timeout-ms", "60000")
    assert got.splitlines() == ["one", "two", "three"]
    offsets = secured.tmp / "offsets.json"
    offsets.write_text('{"partitions": [{"topic": "cc-orders", "partition": 0, "offset": 1}], "version": 1}')
    assert "low_watermark: 1" in ok("delete-records", *bs, "--offset-json-file", str(offsets))
    ok("groups", *bs, "list")
    # the same port without the file: a plaintext client on a TLS listener gets no answer it can use
    refused("topics", "--bootstrap-server", secured.sasl_ssl, "list")
    # what the secured commands did, seen over PLAINTEXT by a super user
    plain = ["--bootstrap-server", secured.plaintext]
    assert (
        ok(
            "consume",
            *plain,
            "--topic",
            "cc-orders",
            "--offset",
            "earliest",
            "--max-messages",
            "2",
            "--timeout-ms",
            "60000",
        )
        == "two\nthree\n"
    )


def test_wrong_password_and_unknown_user_are_refused_and_nothing_is_written(secured: SecuredBroker) -> None:
    plain = ["--bootstrap-server", secured.plaintext]
    ok("topics", *plain, "create", "--topic", "cc-guarded", "--partitions", "1", "--replication-factor", "1")
    ok("produce", *plain, "--topic", "cc-guarded", stdin="kept\n")
    for name, user, password in (("wrong", "admin", "not-the-password"), ("nobody", "mallory", "mallory-pw")):
        bs = ["--bootstrap-server", secured.sasl_ssl, "--command-config", str(secured.properties(name, user, password))]
        for argv, stdin in (
            (
                [
                    "topics",
                    *bs,
                    "create",
                    "--topic",
                    f"cc-never-{name}",
                    "--partitions",
                    "1",
                    "--replication-factor",
                    "1",
                ],
                None,
            ),
            (["produce", *bs, "--topic", "cc-guarded"], "must-not-land\n"),
            (
                [
                    "configs",
                    *bs,
                    "--alter",
                    "--entity-type",
                    "topics",
                    "--entity-name",
                    "cc-guarded",
                    "--add-config",
                    "retention.ms=1000",
                ],
                None,
            ),
        ):
            line = refused(*argv, stdin=stdin)
            assert "SASL authentication" in line and "credentials" in line and "failed" in line, line
            assert password not in line
    # nothing was written: no topic, one record, no config override
    assert not any(t.startswith("cc-never") for t in ok("topics", *plain, "list").split())
    got = ok("consume", *plain, "--topic", "cc-guarded", "--from-beginning", "--timeout-ms", "3000")
    assert got.splitlines() == ["kept"]
    described = ok("configs", *plain, "--describe", "--entity-type", "topics", "--entity-name", "cc-guarded")
    assert "retention.ms" not in described


def test_acls_through_the_brokers_with_command_config(secured: SecuredBroker) -> None:
    """kafka-acls --bootstrap-server: the admin (a super user) adds and removes alice's ACLs over
    SASL_SSL; alice's own commands then work exactly as far as those ACLs allow; alice may not
    change ACLs (Alter on the Cluster) and her attempt writes nothing."""
    admin = [
        "--bootstrap-server",
        secured.sasl_ssl,
        "--command-config",
        str(secured.properties("admin", "admin", "admin-pw")),
    ]
    alice = [
        "--bootstrap-server",
        secured.sasl_ssl,
        "--command-config",
        str(secured.properties("alice", "alice", "alice-pw")),
    ]
    plain = ["--bootstrap-server", secured.plaintext]
    ok("topics", *plain, "create", "--topic", "cc-acl", "--partitions", "1", "--replication-factor", "1")
    ok("produce", *plain, "--topic", "cc-acl", stdin="r1\nr2\n")
    consume = [
        "consume",
        *alice,
        "--topic",
        "cc-acl",
        "--from-beginning",
        "--max-messages",
        "2",
        "--timeout-ms",
        "60000",
    ]
    line = refused(*consume)  # no ACL yet: Describe/Read on the topic are refused
    assert "cc-acl" in line or "TOPIC_AUTHORIZATION_FAILED" in line or "authoriz" in line.lower(), line

    out = ok("acls", *admin, "--add", "--allow-principal", "User:alice", "--operation", "Read", "--topic", "cc-acl")
    assert "Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name=cc-acl, patternType=LITERAL)`:" in out
    listed = ok("acls", *admin, "--list", "--topic", "cc-acl")
    assert "(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)" in listed, listed
    # the broker's view is ZooKeeper's: the same ACL read back with --zookeeper
    zk_listed = ok("acls", "--zookeeper", secured.zk, "--list", "--topic", "cc-acl")
    assert "principal=User:alice, host=*, operation=READ" in zk_listed, zk_listed
    got = ""
    deadline = time.monotonic() + 60  # brokers apply an ACL change when its notification arrives
    while got.splitlines() != ["r1", "r2"]:
        assert time.monotonic() < deadline, got
        p = cli(*consume)
        got = p.stdout if p.returncode == 0 else ""

    # --from-file - through the brokers (CreateAcls): a JSON list of bindings on stdin
    bindings = '[{"principal": "User:alice", "operations": ["Describe"], "resource_type": "Group", "name": "cc-"}]'
    assert "resourceType=GROUP, name=cc-" in ok("acls", *admin, "--add", "--from-file", "-", stdin=bindings)
    listed = ok("acls", *admin, "--list", "--group", "cc-")
    assert "(principal=User:alice, host=*, operation=DESCRIBE, permissionType=ALLOW)" in listed, listed

    # alice may not change ACLs: refused with Kafka's error, and nothing is written
    grab = ["--add", "--allow-principal", "User:alice", "--operation", "All", "--cluster"]
    assert "CLUSTER_AUTHORIZATION_FAILED" in refused("acls", *alice, *grab)
    assert "CLUSTER_AUTHORIZATION_FAILED" in refused(
        "acls", *alice, "--add", "--from-file", "-", stdin=bindings.replace("Describe", "Read")
    )
    assert "operation=READ" not in ok("acls", *admin, "--list", "--group", "cc-")
    assert "ACLs for resource" not in ok("acls", *admin, "--list", "--cluster")

    ok("acls", *admin, "--remove", "--allow-principal", "User:alice", "--operation", "Read", "--topic", "cc-acl")
    assert "User:alice" not in ok("acls", *admin, "--list", "--topic", "cc-acl")


def test_broker_commands_over_sasl_ssl_with_command_config(secured: SecuredBroker) -> None:
    """kafka-log-dirs, kafka-leader-election and kafka-configs --entity-type brokers take
    --command-config too: they work over SASL_SSL as the admin, and alice (no ACLs) is refused
    with Kafka's error and changes nothing."""
    admin = [
        "--bootstrap-server",
        secured.sasl_ssl,
        "--command-config",
        str(secured.properties("admin", "admin", "admin-pw")),
    ]
    alice = [
        "--bootstrap-server",
        secured.sasl_ssl,
        "--command-config",
        str(secured.properties("alice", "alice", "alice-pw")),
    ]
    plain = ["--bootstrap-server", secured.plaintext]
    ok("topics", *plain, "create", "--topic", "cc-ops", "--partitions", "1", "--replication-factor", "1")
    out = ok("log-dirs", *admin, "--describe", "--topic-list", "cc-ops")
    assert '"partition":"cc-ops-0"' in out, out
    out = ok("leader-election", *admin, "--election-type", "preferred", "--topic", "cc-ops", "--partition", "0")
    assert "Valid replica already elected for partitions cc-ops-0" in out, out
    brokers = ["--entity-type", "brokers", "--entity-name", "0"]
    try:
        out = ok("configs", *admin, "--alter", *brokers, "--add-config", "log.cleaner.backoff.ms=20000")
        assert "Completed updating config for broker 0." in out
        assert "  log.cleaner.backoff.ms=20000 sensitive=false" in ok("configs", *admin, "--describe", *brokers)
        line = refused("configs", *alice, "--alter", *brokers, "--add-config", "log.cleaner.backoff.ms=1")
        assert "CLUSTER_AUTHORIZATION_FAILED" in line, line
        line = refused("leader-election", *alice, "--election-type", "preferred", "--all-topic-partitions")
        assert "CLUSTER_AUTHORIZATION_FAILED" in line, line
        assert "  log.cleaner.backoff.ms=20000 sensitive=false" in ok("configs", *plain, "--describe", *brokers)
    finally:
        cli("configs", *plain, "--alter", *brokers, "--delete-config", "log.cleaner.backoff.ms")
    # the same SASL_SSL port without the file: no answer a plaintext client can use
    refused("log-dirs", "--bootstrap-server", secured.sasl_ssl, "--describe")
