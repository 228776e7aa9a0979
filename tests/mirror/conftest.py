"""Mirror tests: real ZooKeeper, real broker clusters (tests/cluster's fixture), real mirror processes."""

from __future__ import annotations

from tests.cluster.conftest import cluster_factory

__all__ = ["cluster_factory"]
