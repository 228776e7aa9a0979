"""Cluster fixture: N real brokers behind a fault proxy on the session's real ZooKeeper."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from headwater.testing.zookeeper import ZooKeeperServer
from tests.cluster.harness import Cluster

_ids = itertools.count()


@pytest.fixture
def cluster_factory(tmp_path: Path, zookeeper: ZooKeeperServer) -> Iterator[Callable[..., Cluster]]:
    made: list[Cluster] = []

    def make(size: int = 3, **overrides: object) -> Cluster:
        c = Cluster(
            tmp_path / f"cluster{len(made)}", "127.0.0.1", zookeeper.port, f"/cluster{next(_ids)}", size, **overrides
        )
        made.append(c)
        return c.start()

    yield make
    for c in made:
        c.close()
