"""Shared fixtures: one real ZooKeeper per session, a chroot per test, broker processes."""

from __future__ import annotations

import itertools
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from headwater.testing.zookeeper import ZK_SERVER, ZooKeeperServer
from tests.harness.broker import BrokerProcess

_chroots = itertools.count()


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    if not Path(ZK_SERVER).exists() or shutil.which("java") is None:
        pytest.fail("ZooKeeper is not installed: run `make system-deps` (Debian's zookeeper package)")
    server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper"))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def zk_connect(zookeeper: ZooKeeperServer) -> str:
    """A fresh chroot on the session's ZooKeeper, e.g. ``127.0.0.1:2181/t7``."""
    return f"{zookeeper.connect}/t{next(_chroots)}"


@pytest.fixture
def broker_factory(tmp_path: Path, zk_connect: str) -> Iterator[object]:
    started: list[BrokerProcess] = []

    def make(broker_id: int = 0, start: bool = True, **overrides: object) -> BrokerProcess:
        b = BrokerProcess(tmp_path, broker_id, zk_connect, **overrides)
        started.append(b)
        if start:
            b.start()
        return b

    yield make
    for b in started:
        # Teardown: a clean stop if it is quick, else SIGKILL. The last broker of a cluster cannot move
        # its leaderships anywhere, so its controlled shutdown retries (3 x 5 s, as Kafka's) for nothing.
        b.stop(timeout=5)


@pytest.fixture
def broker(broker_factory: object) -> BrokerProcess:
    assert callable(broker_factory)
    b = broker_factory(0)
    assert isinstance(b, BrokerProcess)
    return b
