"""Files Apache Kafka 2.3 leaves in a log dir that Headwater must take as Kafka does (issue 45):
empty checkpoints (Kafka creates them before it has anything to write), segments renamed
``.deleted`` and partition directories renamed ``-delete`` that were waiting for
file.delete.delay.ms, and the index ``.swap`` files of an interrupted cleaning."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from headwater.broker.storage.clock import ManualClock
from headwater.broker.storage.fs import OsFileSystem
from headwater.broker.storage.log import LogConfig
from headwater.broker.storage.log_manager import LogManager, parse_checkpoint
from tests.unit.storage.storage_helpers import T0, batch, open_log, read_all


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_an_empty_checkpoint_has_no_entries() -> None:
    assert parse_checkpoint(b"") == {}


def test_an_empty_leader_epoch_checkpoint_of_an_empty_log_is_no_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    open_log(tmp_path).close()
    (tmp_path / "t-0" / "leader-epoch-checkpoint").write_bytes(b"")  # as Kafka creates it
    with caplog.at_level(logging.WARNING):
        again = open_log(tmp_path)
    assert again.leader_epoch_cache.latest_epoch < 0
    assert warnings(caplog) == []


def test_kafka_s_deleted_segments_and_index_swaps_are_removed_at_open(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log = open_log(tmp_path, LogConfig(segment_bytes=1024))
    for i in range(20):
        log.append(batch(1, value_size=100, tag=i), 0)
    end = log.log_end_offset
    log.close()
    d = tmp_path / "t-0"
    leftovers = [f"{90:020d}.log.deleted", f"{90:020d}.index.deleted", f"{90:020d}.timeindex.deleted"]
    leftovers += [f"{91:020d}.index.swap", f"{91:020d}.timeindex.swap"]
    for name in leftovers:
        (d / name).write_bytes(b"x" * 10)
    with caplog.at_level(logging.WARNING):
        again = open_log(tmp_path, LogConfig(segment_bytes=1024))
    assert not [n for n in os.listdir(d) if n in leftovers]
    assert [r.offset for r in read_all(again)] == list(range(end))
    assert warnings(caplog) == []


def test_a_deleted_partition_s_directory_is_removed_at_start(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    logs = tmp_path / "logs"
    gone = logs / "gone-0.6f1c5e0f3e1b4d5c9f8a7b6c5d4e3f2a-delete"
    gone.mkdir(parents=True)
    for name in (f"{0:020d}.log", f"{0:020d}.index", "leader-epoch-checkpoint"):
        (gone / name).write_bytes(b"")
    with caplog.at_level(logging.WARNING):
        manager = LogManager([str(logs)], LogConfig(), OsFileSystem(), ManualClock(T0))
    try:
        assert not gone.exists()
        assert list(manager.all_logs()) == []
        assert warnings(caplog) == []
    finally:
        manager.shutdown()
