"""IncrementalAlterConfigs operations (config_admin.incremental) and kafka-configs' --add-config syntax."""

from __future__ import annotations

import pytest

from headwater.broker.config_admin import APPEND, DELETE, SET, SUBTRACT, incremental
from headwater.cli.configs import parse_add_config
from headwater.cli.topics import CliError
from headwater.protocol.errors import ErrorCode, KafkaError


def test_set_delete_append_subtract() -> None:
    current = {"retention.ms": "1000", "segment.bytes": "2048", "cleanup.policy": "delete"}
    out = incremental(
        current,
        [
            ("retention.ms", SET, "5000"),
            ("segment.bytes", DELETE, None),
            ("cleanup.policy", APPEND, "compact,delete"),
            ("min.insync.replicas", SET, "2"),
        ],
    )
    assert out == {"retention.ms": "5000", "cleanup.policy": "delete,compact", "min.insync.replicas": "2"}
    assert current["segment.bytes"] == "2048"  # the input is not modified
    assert incremental(out, [("cleanup.policy", SUBTRACT, "delete,compact")]) == {
        "retention.ms": "5000",
        "min.insync.replicas": "2",
    }


@pytest.mark.parametrize(
    ("ops", "code"),
    [
        ([("retention.ms", SET, "1"), ("retention.ms", DELETE, None)], ErrorCode.INVALID_REQUEST),
        ([("retention.ms", SET, None)], ErrorCode.INVALID_REQUEST),
        ([("retention.ms", APPEND, "1")], ErrorCode.INVALID_CONFIG),
        ([("retention.ms", 7, "1")], ErrorCode.INVALID_REQUEST),
    ],
)
def test_bad_operations_are_refused(ops: list[tuple[str, int, str | None]], code: ErrorCode) -> None:
    with pytest.raises(KafkaError) as e:
        incremental({}, ops)
    assert e.value.code is code


def test_add_config_syntax() -> None:
    assert parse_add_config("retention.ms=1000,cleanup.policy=[compact,delete],x=") == {
        "retention.ms": "1000",
        "cleanup.policy": "compact,delete",
        "x": "",
    }
    for bad in ("retention.ms", "a=[b,c", "a=[b]c", "=1"):
        with pytest.raises(CliError):
            parse_add_config(bad)


def test_throttled_replicas_are_list_configs_checked_by_the_topic_registry() -> None:
    from headwater.broker.config import validate_topic_config

    key = "follower.replication.throttled.replicas"
    out = incremental({key: "0:1"}, [(key, APPEND, "0:4,1:4")])
    assert out == {key: "0:1,0:4,1:4"}
    assert validate_topic_config(out) is None
    assert validate_topic_config({key: "*"}) is None
    assert validate_topic_config({key: "0-4"}) is not None
