"""Dynamic broker configs: what may be set, precedence of the layers, live application."""

from __future__ import annotations

import json
from typing import Any

from headwater.broker.config import config_from_props
from headwater.broker.dynamic_config import (
    DEFAULT_CONFIG,
    DYNAMIC_BROKER_CONFIG,
    DYNAMIC_DEFAULT_BROKER_CONFIG,
    FOLLOWER_THROTTLED_RATE,
    MAX_LONG,
    STATIC_BROKER_CONFIG,
    DynamicBrokerConfig,
    describe,
    validate,
)


class _Stat:
    version = 0


def _dyn(**props: str) -> tuple[DynamicBrokerConfig, list[Any]]:
    cfg = config_from_props({"zookeeper.connect": "zk:2181", "broker.id": "1", **props})
    applied: list[Any] = []
    return DynamicBrokerConfig(cfg, zk=None, on_log_defaults=applied.append), applied  # type: ignore[arg-type]


def _znode(config: dict[str, str]) -> bytes:
    return json.dumps({"version": 1, "config": config}).encode()


def test_only_dynamic_configs_with_valid_values_are_accepted() -> None:
    assert validate({"message.max.bytes": "2000", FOLLOWER_THROTTLED_RATE: "1048576"}, {}) is None
    assert "broker.id" in (validate({"broker.id": "3"}, {}) or "")
    assert "log.dirs" in (validate({"log.dirs": "/x"}, {}) or "")
    assert "no.such.config" in (validate({"no.such.config": "1"}, {}) or "")
    assert validate({"message.max.bytes": "big"}, {}) is not None
    assert validate({FOLLOWER_THROTTLED_RATE: "-1"}, {}) is not None
    assert validate({"log.cleanup.policy": "shred"}, {}) is not None
    assert validate({"log.cleaner.min.cleanable.ratio": "1.5"}, {}) is not None
    assert validate({"log.segment.bytes": "10"}, {}) is not None  # below LogConfig's minimum


def test_per_broker_beats_cluster_default_beats_static_beats_default() -> None:
    dyn, applied = _dyn(**{"log.retention.ms": "1000"})
    assert dyn.value_and_source("log.retention.ms") == ("1000", STATIC_BROKER_CONFIG)
    assert dyn.value_and_source("message.max.bytes") == ("1000012", DEFAULT_CONFIG)
    assert dyn.rate(FOLLOWER_THROTTLED_RATE) == MAX_LONG
    dyn._on_default(_znode({"log.retention.ms": "2000", FOLLOWER_THROTTLED_RATE: "500"}), _Stat())
    assert dyn.value_and_source("log.retention.ms") == ("2000", DYNAMIC_DEFAULT_BROKER_CONFIG)
    assert dyn.rate(FOLLOWER_THROTTLED_RATE) == 500
    assert dyn.config.log_defaults.retention_ms == 2000
    dyn._on_broker(_znode({"log.retention.ms": "3000", "message.max.bytes": "4096"}), _Stat())
    assert dyn.value_and_source("log.retention.ms") == ("3000", DYNAMIC_BROKER_CONFIG)
    assert dyn.config.log_defaults.retention_ms == 3000
    assert dyn.config.message_max_bytes == 4096 and dyn.config.log_defaults.max_message_bytes == 4096
    assert [s for _, s in dyn.synonyms("log.retention.ms")] == [
        DYNAMIC_BROKER_CONFIG,
        DYNAMIC_DEFAULT_BROKER_CONFIG,
        STATIC_BROKER_CONFIG,
        DEFAULT_CONFIG,
    ]
    assert [d.retention_ms for d in applied] == [2000, 3000]
    # the per-broker znode deleted: back to the cluster default, then the static value
    dyn._on_broker(None, None)
    assert dyn.config.log_defaults.retention_ms == 2000 and dyn.config.message_max_bytes == 1000012
    dyn._on_default(None, None)
    assert dyn.config.log_defaults.retention_ms == 1000


def test_an_invalid_stored_value_is_ignored_not_applied() -> None:
    dyn, applied = _dyn()
    dyn._on_broker(_znode({"message.max.bytes": "lots"}), _Stat())
    assert dyn.config.message_max_bytes == 1000012 and applied == []


def test_describe_lists_static_and_dynamic_configs_with_sources() -> None:
    dyn, _ = _dyn(**{"ssl.key.password": "secret"})
    dyn._on_default(_znode({"message.max.bytes": "3000"}), _Stat())
    entries = {e["name"]: e for e in describe(dyn, "1", None, True)}
    assert entries["broker.id"]["read_only"] and entries["broker.id"]["config_source"] == STATIC_BROKER_CONFIG
    assert entries["message.max.bytes"]["value"] == "3000"
    assert entries["message.max.bytes"]["config_source"] == DYNAMIC_DEFAULT_BROKER_CONFIG
    assert not entries["message.max.bytes"]["read_only"]
    assert entries["ssl.key.password"]["value"] is None and entries["ssl.key.password"]["is_sensitive"]
    default_entity = describe(dyn, "", None, False)
    assert [(e["name"], e["value"]) for e in default_entity] == [("message.max.bytes", "3000")]
