"""SCRAM credentials cached per broker and refreshed by Kafka's config change notifications
(security review L3): a real broker process, its own ZooKeeper, the CLI as an operator uses it.

- A login reads nothing from ZooKeeper: with ZooKeeper paused (SIGSTOP, shorter than the session
  timeout) a known user still logs in at once.
- A new user, a changed password and a deleted credential take effect through the
  ``/config/changes`` notification the CLI writes; a node changed without a notification is not
  seen until one names the user (Kafka's behaviour).
- User names are Sanitizer-encoded in znode names: ``alice@X`` is ``/config/users/alice%40X``.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from headwater.cli.main import main as cli_main
from headwater.scram import make_credential, user_config_json
from headwater.testing.cluster import LocalBroker
from headwater.testing.zookeeper import ZooKeeperServer, free_port


@pytest.fixture
def own_zookeeper(tmp_path: Path) -> Iterator[ZooKeeperServer]:
    server = ZooKeeperServer(tmp_path / "zookeeper")
    server.start()
    try:
        yield server
    finally:
        if server.proc is not None:
            os.killpg(server.proc.pid, signal.SIGCONT)
        server.stop()


def users(zk_connect: str, *args: str) -> int:
    return cli_main(["configs", "--zookeeper", zk_connect, *args])


def add_user(zk_connect: str, user: str, password: str) -> None:
    add = f"SCRAM-SHA-512=[iterations=4096,password={password}]"
    code = users(zk_connect, "--alter", "--entity-type", "users", "--entity-name", user, "--add-config", add)
    assert code == 0


def login(port: int, user: str, password: str, timeout: float = 10.0) -> bool:
    """One SCRAM-SHA-512 login with Headwater's client; False when the broker refused it."""
    from headwater.client.connection import BrokerConnection
    from headwater.client.security import ClientSecurity

    security = ClientSecurity.from_properties(
        {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": user,
            "sasl.password": password,
        }
    )

    async def go() -> bool:
        conn = BrokerConnection("127.0.0.1", port, security=security, connect_timeout=timeout)
        try:
            await asyncio.wait_for(conn.connect(), timeout)
        except Exception:
            return False
        finally:
            await conn.close()
        return True

    return asyncio.run(go())


def eventually(check: object, what: str, timeout: float = 60.0) -> None:
    assert callable(check)
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def test_credentials_come_from_memory_and_change_by_notification(
    own_zookeeper: ZooKeeperServer, tmp_path: Path
) -> None:
    zk_connect = own_zookeeper.connect
    add_user(zk_connect, "alice@X", "first-pw")  # before the broker starts: loaded at start
    broker = LocalBroker(tmp_path, 0, zk_connect)
    port = free_port()
    broker.properties.update(
        {
            "listeners": f"PLAINTEXT://127.0.0.1:{broker.port},SASL_PLAINTEXT://127.0.0.1:{port}",
            "sasl.enabled.mechanisms": "SCRAM-SHA-512",
            "zookeeper.session.timeout.ms": 20000,
        }
    )
    zk = KazooClient(hosts=zk_connect)
    zk.start(30)
    broker.start(timeout=90)
    try:
        # Sanitizer-encoded, as Kafka stores it; the CLI shows the user's own name
        assert "alice%40X" in zk.get_children("/config/users")
        notifications = [json.loads(zk.get(f"/config/changes/{n}")[0]) for n in zk.get_children("/config/changes")]
        assert {"version": 2, "entity_path": "users/alice%40X"} in notifications
        assert login(port, "alice@X", "first-pw")

        # no ZooKeeper read at login: ZooKeeper paused, the login is still served
        assert own_zookeeper.proc is not None
        os.killpg(own_zookeeper.proc.pid, signal.SIGSTOP)
        try:
            started = time.monotonic()
            assert login(port, "alice@X", "first-pw", timeout=3.0)
            assert not login(port, "alice@X", "wrong", timeout=3.0)
            assert time.monotonic() - started < 8.0
        finally:
            os.killpg(own_zookeeper.proc.pid, signal.SIGCONT)

        # a new user, through the notification
        add_user(zk_connect, "bob", "bob-pw")
        eventually(lambda: login(port, "bob", "bob-pw"), "the new user to log in")
        # a changed password
        add_user(zk_connect, "alice@X", "second-pw")
        eventually(lambda: login(port, "alice@X", "second-pw"), "the new password to work")
        assert not login(port, "alice@X", "first-pw")
        # a deleted credential
        assert (
            users(
                zk_connect,
                "--alter",
                "--entity-type",
                "users",
                "--entity-name",
                "bob",
                "--delete-config",
                "SCRAM-SHA-512",
            )
            == 0
        )
        eventually(lambda: not login(port, "bob", "bob-pw"), "the deleted user to be refused")

        # a node written without a notification is not seen ... until a notification names the user
        cred = make_credential("SCRAM-SHA-512", "carol-pw")
        zk.create("/config/users/carol", user_config_json({"SCRAM-SHA-512": cred.to_kafka()}))
        add_user(zk_connect, "dave", "dave-pw")  # a later notification for someone else
        eventually(lambda: login(port, "dave", "dave-pw"), "dave to log in")
        assert not login(port, "carol", "carol-pw")
        zk.create("/config/changes/config_change_", b'{"version":2,"entity_path":"users/carol"}', sequence=True)
        eventually(lambda: login(port, "carol", "carol-pw"), "carol to log in after her notification")

        # a user node removed entirely (and announced) is gone too
        zk.delete("/config/users/carol")
        zk.create("/config/changes/config_change_", b'{"version":2,"entity_path":"users/carol"}', sequence=True)
        eventually(lambda: not login(port, "carol", "carol-pw"), "carol to be refused once removed")
        assert "Traceback" not in broker.tail(1_000_000)
    finally:
        broker.stop()
        zk.stop()
        zk.close()
