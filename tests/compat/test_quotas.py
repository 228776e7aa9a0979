"""Client quotas (issue 42; KIP-13, KIP-55, KIP-124) against real broker processes, real ZooKeeper
and stock clients (confluent-kafka/librdkafka, kafka-python).

- ``headwater configs --zookeeper`` writes quota entities as Kafka 2.3's kafka-configs does (the
  znode JSON and the change notification), shows them, refuses bad values;
- a broker applies a quota written while it runs (the change notification), and a deleted one;
- a producer and a consumer offered 5x their quota are held at it (from the clients' own counts),
  and see ``throttle_time_ms`` (librdkafka's statistics, kafka-python's metrics).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable

import pytest
from kazoo.client import KazooClient

from headwater.zk.paths import CONFIG_CHANGES

pytestmark = [pytest.mark.compat, pytest.mark.timeout(300)]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "headwater.cli.main", "configs", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def ok(*args: str) -> str:
    p = cli(*args)
    assert p.returncode == 0, f"{args}: exit {p.returncode}\nstdout: {p.stdout}\nstderr: {p.stderr}"
    return p.stdout


def fails(*args: str) -> str:
    p = cli(*args)
    assert p.returncode == 1, f"{args}: exit {p.returncode}\nstdout: {p.stdout}\nstderr: {p.stderr}"
    assert "Traceback" not in p.stderr
    return p.stderr.strip()


def _wait(cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def _zk(connect: str) -> KazooClient:
    zk = KazooClient(hosts=connect)
    zk.start(timeout=15)
    return zk


def test_configs_cli_writes_quota_entities_as_kafka_configs(zk_connect: str) -> None:
    z = ("--zookeeper", zk_connect)
    out = ok(
        *z, "--alter", "--entity-type", "clients", "--entity-name", "app", "--add-config", "producer_byte_rate=1024"
    )
    assert out.strip() == "Completed Updating config for entity: client-id 'app'."
    ok(
        *z,
        "--alter",
        "--entity-type",
        "users",
        "--entity-name",
        "alice@X",
        "--entity-type",
        "clients",
        "--entity-default",
        "--add-config",
        "consumer_byte_rate=2048,request_percentage=12.5",
    )
    ok(*z, "--alter", "--entity-type", "users", "--entity-default", "--add-config", "producer_byte_rate=4096")
    zk = _zk(zk_connect)
    try:
        data, _ = zk.get("/config/clients/app")
        assert json.loads(data) == {"version": 1, "config": {"producer_byte_rate": "1024"}}
        data, _ = zk.get("/config/users/alice%40X/clients/<default>")
        assert json.loads(data) == {
            "version": 1,
            "config": {"consumer_byte_rate": "2048", "request_percentage": "12.5"},
        }
        data, _ = zk.get("/config/users/<default>")
        assert json.loads(data)["config"] == {"producer_byte_rate": "4096"}
        changes = [json.loads(zk.get(f"{CONFIG_CHANGES}/{c}")[0]) for c in sorted(zk.get_children(CONFIG_CHANGES))]
        assert changes == [
            {"version": 2, "entity_path": "clients/app"},
            {"version": 2, "entity_path": "users/alice%40X/clients/<default>"},
            {"version": 2, "entity_path": "users/<default>"},
        ]
    finally:
        zk.stop()
        zk.close()
    out = ok(*z, "--describe", "--entity-type", "users", "--entity-type", "clients")
    assert (
        "Configs for user-principal 'alice@X', default client-id are consumer_byte_rate=2048,request_percentage=12.5"
        in out
    )
    out = ok(*z, "--describe", "--entity-type", "clients")
    assert out.strip() == "Configs for client-id 'app' are producer_byte_rate=1024"
    ok(*z, "--alter", "--entity-type", "clients", "--entity-name", "app", "--delete-config", "producer_byte_rate")
    assert ok(*z, "--describe", "--entity-type", "clients", "--entity-name", "app") == (
        "Configs for client-id 'app' are \n"
    )
    assert "must be a positive integer" in fails(
        *z, "--alter", "--entity-type", "clients", "--entity-name", "app", "--add-config", "producer_byte_rate=-5"
    )
    assert "Unknown quota config" in fails(
        *z, "--alter", "--entity-type", "clients", "--entity-default", "--add-config", "producer_rate=5"
    )
