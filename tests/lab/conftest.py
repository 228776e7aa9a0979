"""Lab tool tests: real ZooKeeper, real broker clusters, real mirror and audit processes."""

from __future__ import annotations

from tests.cluster.conftest import cluster_factory

__all__ = ["cluster_factory"]
