"""One load of a warehouse at a time across hosts: the ZooKeeper lock (real ZooKeeper, kazoo)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from kazoo.client import KazooClient

from headwater.loader.lock import LockGuard, LockLostError, LockTimeoutError, warehouse_lock
from headwater.testing.zookeeper import ZooKeeperServer

WAREHOUSE = "hdfs://nameservice1/warehouse"


def test_loads_on_two_hosts_take_turns_and_a_lost_session_stops_publishing(zk_connect: str) -> None:
    order: list[str] = []
    with warehouse_lock(WAREHOUSE, zk_connect) as first:
        first.check()
        # A second "host" (its own ZooKeeper session) gives up after loader.lock.timeout.ms, naming it.
        with (
            pytest.raises(LockTimeoutError, match=r"held /t\d+/headwater-loader/locks/\w+ for longer than"),
            warehouse_lock(WAREHOUSE, zk_connect, timeout_ms=1000),
        ):
            pass
        # A third waits its turn.
        waiting = threading.Thread(target=_take, args=(zk_connect, order))
        waiting.start()
        waiting.join(1.0)
        assert waiting.is_alive() and order == []
        # Another warehouse is another lock.
        with warehouse_lock(WAREHOUSE + "-other", zk_connect, timeout_ms=30_000) as other:
            other.check()
        order.append("first")
    waiting.join(60)
    assert order == ["first", "second"]

    # The session holding the lock expires: the load must not publish.
    with warehouse_lock(WAREHOUSE, zk_connect) as guard:
        _expire(guard, zk_connect)
        deadline = time.monotonic() + 60
        while True:
            try:
                guard.check()
            except LockLostError as e:
                assert "not publishing" in str(e)
                break
            assert time.monotonic() < deadline, "the lost session was never noticed"
            time.sleep(0.1)


def _take(zk_connect: str, order: list[str]) -> None:
    with warehouse_lock(WAREHOUSE, zk_connect, timeout_ms=60_000):
        order.append("second")


def _expire(guard: LockGuard, zk_connect: str) -> None:
    """Expire the guard's session as ZooKeeper would: another client with its id connects and leaves."""
    client: Any = guard.session
    hosts = zk_connect.split("/", 1)[0]
    twin = KazooClient(hosts=hosts, client_id=client.client_id)
    twin.start(timeout=30)
    twin.stop()
    twin.close()


def test_without_zookeeper_the_lock_is_a_host_local_file(zookeeper: ZooKeeperServer) -> None:
    with warehouse_lock("/data/warehouse") as guard:
        assert "file lock" in guard.what
        guard.check()
