"""One connection policy for every kazoo client (issue 38 item 1)."""

from __future__ import annotations

import re
from pathlib import Path

from headwater.zk.client import RECONNECT_MAX_DELAY_S, kazoo_client, split_chroot

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("lib", "broker", "mirror", "audit", "spark-loader", "bench")


def test_reconnects_forever_a_few_seconds_apart() -> None:
    client = kazoo_client("127.0.0.1:1", session_timeout_s=6.0)
    retry = client._conn_retry  # kazoo's reconnect policy for this client
    assert retry.max_tries == -1
    assert retry.max_delay == RECONNECT_MAX_DELAY_S <= 5
    assert retry.max_delay * (1 + retry.max_jitter) <= 5  # Kafka's client retries about every second
    assert client._session_timeout == 6000


def test_the_broker_uses_the_policy() -> None:
    from headwater.broker.zk import ZooKeeper

    zk = ZooKeeper("127.0.0.1:1/kafka", session_timeout_ms=6000, connection_timeout_ms=1000)
    assert zk.client._conn_retry.max_tries == -1
    assert zk.chroot == "/kafka"


def test_split_chroot() -> None:
    assert split_chroot("h1:2181,h2:2181/kafka/dc1/") == ("h1:2181,h2:2181", "/kafka/dc1")
    assert split_chroot("h1:2181") == ("h1:2181", "")
    assert split_chroot("h1:2181/") == ("h1:2181", "")


def test_no_kazoo_client_is_built_outside_headwater_zk() -> None:
    """Every process reaches ZooKeeper with the same policy: nothing else calls KazooClient(...)."""
    offenders = []
    for top in SOURCES:
        for path in (ROOT / top).rglob("*.py"):
            if "headwater/zk/" in path.as_posix():
                continue
            for n, line in enumerate(path.read_text().splitlines(), 1):
                if re.search(r"\bKazooClient\(", line):
                    offenders.append(f"{path.relative_to(ROOT)}:{n}")
    assert offenders == []
