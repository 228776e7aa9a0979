"""The topic config table (topic_configs.py): every Kafka 2.3 topic config is known, each invalid
value is refused with Kafka's ConfigDef message, and broker-level defaults reach the LogConfig."""

from __future__ import annotations

import pytest

from headwater.broker.config import ConfigError, config_from_props, topic_log_config, validate_topic_config
from headwater.broker.storage.log import LogConfig
from headwater.broker.topic_configs import TOPIC_CONFIG_DEFS

KAFKA_23_TOPIC_CONFIGS = {
    "cleanup.policy", "compression.type", "delete.retention.ms", "file.delete.delay.ms", "flush.messages",
    "flush.ms", "follower.replication.throttled.replicas", "index.interval.bytes",
    "leader.replication.throttled.replicas", "max.compaction.lag.ms", "max.message.bytes",
    "message.downconversion.enable", "message.format.version", "message.timestamp.difference.max.ms",
    "message.timestamp.type", "min.cleanable.dirty.ratio", "min.compaction.lag.ms", "min.insync.replicas",
    "preallocate", "retention.bytes", "retention.ms", "segment.bytes", "segment.index.bytes",
    "segment.jitter.ms", "segment.ms", "unclean.leader.election.enable",
}  # fmt: skip


def test_every_kafka_2_3_topic_config_is_in_the_table_and_its_default_is_valid() -> None:
    assert set(TOPIC_CONFIG_DEFS) == KAFKA_23_TOPIC_CONFIGS
    for name, d in TOPIC_CONFIG_DEFS.items():
        assert validate_topic_config({name: d.default}) is None, name
    # Kafka's defaults are LogConfig's: a topic that sets every default gets the default LogConfig.
    assert topic_log_config(LogConfig(), {n: d.default for n, d in TOPIC_CONFIG_DEFS.items()}) == LogConfig(
        flush_interval_ms=2**63 - 1
    )


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("segment.bytes", "abc", "Not a number of type INT"),
        ("segment.bytes", "3000000000", "Not a number of type INT"),
        ("segment.bytes", "10", "Value must be at least 14"),
        ("segment.ms", "0", "Value must be at least 1"),
        ("retention.ms", "x", "Not a number of type LONG"),
        ("min.cleanable.dirty.ratio", "1.5", "Value must be no more than 1.0"),
        ("min.cleanable.dirty.ratio", "half", "Not a number of type DOUBLE"),
        ("cleanup.policy", "compact,shred", "String must be one of: compact, delete"),
        ("compression.type", "brotli", "String must be one of: uncompressed, zstd, lz4, snappy, gzip, producer"),
        ("message.timestamp.type", "WallClock", "String must be one of: CreateTime, LogAppendTime"),
        ("message.timestamp.difference.max.ms", "-1", "Value must be at least 0"),
        ("max.compaction.lag.ms", "0", "Value must be at least 1"),
        ("min.insync.replicas", "0", "Value must be at least 1"),
        ("preallocate", "yes", "Expected value to be either true or false"),
        ("message.downconversion.enable", "1", "Expected value to be either true or false"),
        ("message.format.version", "3.7", "Version `3.7` is not a valid version"),
        ("leader.replication.throttled.replicas", "0-101", "must be the literal '*' or a list of replicas"),
        ("follower.replication.throttled.replicas", "0:101,x", "must be the literal '*' or a list of replicas"),
        ("segment.index.bytes", "-1", "Value must be at least 0"),
        ("segment.jitter.ms", "-5", "Value must be at least 0"),
    ],
)
def test_an_invalid_value_gets_kafkas_message(name: str, value: str, message: str) -> None:
    problem = validate_topic_config({name: value})
    assert problem is not None and problem.startswith(f"Invalid value {value} for configuration {name}: ")
    assert message in problem, problem


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("message.format.version", "2.3-IV1"),
        ("message.format.version", "0.10.2.1"),
        ("message.format.version", "2.1.0"),
        ("leader.replication.throttled.replicas", "*"),
        ("follower.replication.throttled.replicas", "0:101, 1:102"),
        ("cleanup.policy", "compact,delete"),
        ("flush.messages", "0"),  # Kafka: flush after every message
    ],
)
def test_valid_values_kafka_accepts(name: str, value: str) -> None:
    assert validate_topic_config({name: value}) is None


def test_an_unknown_name_and_a_min_lag_above_the_max_lag() -> None:
    assert validate_topic_config({"retention.hours": "1"}) == "Unknown topic config name: retention.hours"
    problem = validate_topic_config({"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"})
    assert problem is not None and "min.compaction.lag.ms" in problem and "max.compaction.lag.ms" in problem


def test_broker_level_defaults_reach_the_log_config_and_are_not_unknown() -> None:
    cfg = config_from_props(
        {
            "zookeeper.connect": "localhost:2181",
            "log.message.timestamp.type": "LogAppendTime",
            "log.message.timestamp.difference.max.ms": "60000",
            "log.cleaner.max.compaction.lag.ms": "3600000",
            "compression.type": "zstd",
            "log.roll.jitter.hours": "1",
            "log.index.size.max.bytes": "4096",
            "log.preallocate": "true",
            "log.message.format.version": "2.3",
        }
    )
    d = cfg.log_defaults
    assert (d.message_timestamp_type, d.message_timestamp_difference_max_ms) == ("LogAppendTime", 60000)
    assert (d.max_compaction_lag_ms, d.compression_type) == (3600000, "zstd")
    assert (d.segment_jitter_ms, d.segment_index_bytes) == (3600000, 4096)
    assert cfg.unknown == []


@pytest.mark.parametrize(
    ("prop", "value", "message"),
    [
        ("log.message.timestamp.type", "WallClock", "String must be one of: CreateTime, LogAppendTime"),
        ("compression.type", "brotli", "String must be one of:"),
        ("log.cleaner.max.compaction.lag.ms", "0", "Value must be at least 1"),
        ("log.preallocate", "sometimes", "Expected value to be either true or false"),
    ],
)
def test_an_invalid_broker_default_stops_start_up_with_kafkas_message(prop: str, value: str, message: str) -> None:
    with pytest.raises(ConfigError) as e:
        config_from_props({"zookeeper.connect": "localhost:2181", prop: value})
    assert str(e.value).startswith(f"Invalid value {value} for configuration {prop}: ") and message in str(e.value)
