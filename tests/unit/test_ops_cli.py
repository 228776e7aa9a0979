"""The operator CLIs' parsing and output formats: leader-election's JSON file, log-dirs' document."""

from __future__ import annotations

import pytest

from headwater.cli.leader_election import parse_partitions_json
from headwater.cli.log_dirs import log_dirs_json
from headwater.cli.main import main
from headwater.cli.topics import CliError
from headwater.client.admin import LogDirInfo, ReplicaInfo
from headwater.protocol.errors import ErrorCode, KafkaError


def test_leader_election_json_file() -> None:
    text = '{"partitions": [{"topic": "t", "partition": 1}, {"topic": "u", "partition": 0}]}'
    assert parse_partitions_json(text) == [("t", 1), ("u", 0)]
    for bad in ("[]", '{"partitions": []}', '{"partitions": [{"topic": "t"}]}', "{",
                '{"partitions": [{"topic": "t", "partition": 0}, {"topic": "t", "partition": 0}]}'):  # fmt: skip
        with pytest.raises(CliError):
            parse_partitions_json(bad)


def test_log_dirs_document_is_kafkas() -> None:
    described = {
        2: [LogDirInfo("/d2", None, {("t", 1): ReplicaInfo(10, 0, False), ("u", 0): ReplicaInfo(5, 2, False)})],
        1: [LogDirInfo("/d1", KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, "x"), {})],
    }
    assert log_dirs_json(described, {"t"}) == {
        "version": 1,
        "brokers": [
            {"broker": 1, "logDirs": [{"logDir": "/d1", "error": "KAFKA_STORAGE_ERROR", "partitions": []}]},
            {
                "broker": 2,
                "logDirs": [
                    {
                        "logDir": "/d2",
                        "error": None,
                        "partitions": [{"partition": "t-1", "size": 10, "offsetLag": 0, "isFuture": False}],
                    }
                ],
            },
        ],
    }


def test_flags_are_checked_before_connecting(capsys: pytest.CaptureFixture[str]) -> None:
    bootstrap = ["--bootstrap-server", "127.0.0.1:1"]
    assert main(["leader-election", *bootstrap, "--election-type", "preferred", "--topic", "t"]) == 1
    assert "--topic needs --partition" in capsys.readouterr().err
    assert main(["configs", *bootstrap, "--describe", "--entity-type", "brokers"]) == 1
    assert "exactly one of --entity-name ID and --entity-default" in capsys.readouterr().err
    assert main(["configs", *bootstrap, "--describe", "--entity-type", "topics", "--entity-default"]) == 1
    assert "--entity-default goes with --entity-type brokers" in capsys.readouterr().err
    assert main(["log-dirs", "--describe", *bootstrap, "--broker-list", "a,b"]) == 1
    assert "--broker-list expects comma-separated broker ids" in capsys.readouterr().err
