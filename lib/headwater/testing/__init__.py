"""Helpers to run real ZooKeeper and brokers locally (tests, the dev cluster, benchmarks)."""
