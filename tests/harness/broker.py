"""Broker processes for tests: :class:`headwater.testing.cluster.LocalBroker` with test defaults.

Overrides are keyword arguments with underscores for dots (``log_segment_bytes=1024``).
"""

from __future__ import annotations

from pathlib import Path

from headwater.testing.cluster import LocalBroker

TEST_DEFAULTS: dict[str, object] = {"log.retention.check.interval.ms": 1000}


class BrokerProcess(LocalBroker):
    def __init__(self, workdir: Path, broker_id: int, zk_connect: str, **overrides: object) -> None:
        props = dict(TEST_DEFAULTS)
        props.update({k.replace("_", "."): v for k, v in overrides.items()})
        super().__init__(workdir, broker_id, zk_connect, props)
