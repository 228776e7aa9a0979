"""Connection limits' bookkeeping and config (Kafka 2.3's names); the wire behaviour is
tests/broker/test_preauth_limits.py."""

from __future__ import annotations

import asyncio

import pytest

from headwater.broker.config import ConfigError, config_from_props
from headwater.broker.network import ConnectionLimits, ConnectionQuotas, quota_address


def test_addresses_are_counted_as_java_sees_them() -> None:
    assert quota_address("::ffff:10.0.0.66") == "10.0.0.66"
    assert quota_address("10.0.0.66") == "10.0.0.66"
    assert quota_address("::1") == "::1"


def test_per_ip_counts_and_overrides() -> None:
    async def go() -> None:
        q = ConnectionQuotas(
            ConnectionLimits(max_connections_per_ip=2, max_connections_per_ip_overrides={"::ffff:127.0.0.9": 0})
        )
        assert q.acquire("10.0.0.1") and q.acquire("10.0.0.1") and not q.acquire("10.0.0.1")
        assert not q.acquire("127.0.0.9")  # an override of 0: never
        q.release("10.0.0.1")
        assert q.acquire("10.0.0.1") and q.total == 2

    asyncio.run(go())


def test_max_connections_blocks_accepting_until_one_closes_except_on_the_inter_broker_listener() -> None:
    async def go() -> None:
        q = ConnectionQuotas(ConnectionLimits(max_connections=2, inter_broker_listener="INTERNAL"))
        assert q.acquire("a") and q.acquire("b")
        waiting = asyncio.ensure_future(q.wait_for_slot("EXTERNAL"))
        await asyncio.sleep(0.05)
        assert not waiting.done()
        await asyncio.wait_for(q.wait_for_slot("INTERNAL"), 1)  # never waits
        q.release("a")
        await asyncio.wait_for(waiting, 1)

    asyncio.run(go())


def test_connection_limit_configs() -> None:
    base = {"zookeeper.connect": "zk:2181"}
    cfg = config_from_props(base)
    assert (cfg.connections_max_idle_ms, cfg.max_connections_per_ip, cfg.max_connections) == (
        600000,
        2**31 - 1,
        2**31 - 1,
    )
    cfg = config_from_props(
        {**base, "max.connections.per.ip": "0", "max.connections.per.ip.overrides": "hostName:100,127.0.0.1:200"}
    )
    assert cfg.max_connections_per_ip_overrides == {"hostName": 100, "127.0.0.1": 200}
    with pytest.raises(ConfigError, match="can be set to zero only if"):
        config_from_props({**base, "max.connections.per.ip": "0"})
    with pytest.raises(ConfigError, match=r"max\.connections\.per\.ip\.overrides"):
        config_from_props({**base, "max.connections.per.ip.overrides": "nohost"})
    assert "connections.max.idle.ms" not in config_from_props({**base, "connections.max.idle.ms": "1000"}).unknown


def test_connections_max_reauth_ms() -> None:
    base = {"zookeeper.connect": "zk:2181"}
    assert config_from_props(base).connections_max_reauth_ms == 0  # Kafka's default: sessions never expire
    assert config_from_props({**base, "connections.max.reauth.ms": "3600000"}).connections_max_reauth_ms == 3600000
    with pytest.raises(ConfigError, match="at least 0"):
        config_from_props({**base, "connections.max.reauth.ms": "-1"})
