"""The leader epoch cache: its checkpoint file, Kafka's assignment and OffsetsForLeaderEpoch rules,
and how the log keeps it (leader and follower appends, truncation, retention, open and recovery)."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path

import pytest

from headwater.broker.storage.clock import ManualClock
from headwater.broker.storage.fs import OsFileSystem
from headwater.broker.storage.leader_epoch import (
    CHECKPOINT_FILE,
    CheckpointError,
    EpochEntry,
    LeaderEpochCache,
    parse_checkpoint,
    read_checkpoint,
)
from headwater.broker.storage.log import Log, LogConfig, UnexpectedAppendOffsetError
from headwater.protocol.errors import ErrorCode, KafkaError
from headwater.protocol.records.header import read_header, rewrite_offset_and_epoch
from tests.unit.storage.storage_helpers import (
    T0,
    FaultyFileSystem,
    batch,
    batch_offsets,
    open_log,
    read_all,
    region_bytes,
    segment_files,
)

SMALL = LogConfig(segment_bytes=4096, index_interval_bytes=256)


def cache_in(tmp_path: Path, entries: Sequence[tuple[int, int]] = ()) -> LeaderEpochCache:
    return LeaderEpochCache(OsFileSystem(), str(tmp_path), [EpochEntry(*e) for e in entries])


def checkpoint_text(directory: str) -> str:
    with open(os.path.join(directory, CHECKPOINT_FILE)) as f:
        return f.read()


def stamped(base_offset: int, n: int, epoch: int, *, tag: int = 0) -> bytes:
    """A batch of ``n`` records as a leader stored it: base offset and partition leader epoch set."""
    buf = bytearray(batch(n, tag=tag, value_size=40))
    rewrite_offset_and_epoch(buf, 0, base_offset, epoch)
    return bytes(buf)


def log_bytes(log: Log) -> bytes:
    return b"".join(region_bytes(log.read(s.base_offset, 1 << 30).region) for s in log.segments if s.size)


# --- the checkpoint file ---------------------------------------------------------------------


def test_checkpoint_is_kafkas_text_format(tmp_path: Path) -> None:
    cache = cache_in(tmp_path)
    assert not os.path.exists(cache.path)  # the constructor writes nothing
    cache.assign(0, 0)
    cache.assign(2, 10)
    cache.assign(5, 4821)
    assert checkpoint_text(str(tmp_path)) == "0\n3\n0 0\n2 10\n5 4821\n"
    assert sorted(os.listdir(tmp_path)) == [CHECKPOINT_FILE]  # the .tmp was renamed over it
    assert read_checkpoint(OsFileSystem(), str(tmp_path)) == [(0, 0), (2, 10), (5, 4821)]
    cache.clear()
    assert checkpoint_text(str(tmp_path)) == "0\n0\n"


def test_checkpoint_is_written_atomically_and_durably(tmp_path: Path) -> None:
    fs = FaultyFileSystem()
    cache = LeaderEpochCache(fs, str(tmp_path))
    cache.assign(1, 0)
    tmp = os.path.join(tmp_path, CHECKPOINT_FILE + ".tmp")
    assert fs.fsyncs == [tmp]  # the new content is fsynced before the rename
    assert fs.dir_fsyncs == [str(tmp_path)]  # and the rename made durable
    fs.fail_fsync = True
    with pytest.raises(OSError):
        cache.assign(2, 5)
    assert cache.entries() == [(1, 0)]  # unchanged in memory ...
    assert checkpoint_text(str(tmp_path)) == "0\n1\n1 0\n"  # ... and on disk


def test_directory_fsync_can_be_deferred(tmp_path: Path) -> None:
    fs = FaultyFileSystem()
    calls: list[int] = []
    cache = LeaderEpochCache(fs, str(tmp_path), defer_sync=lambda path: calls.append(1))
    cache.assign(1, 0)
    assert fs.dir_fsyncs == [] and calls == [1]


@pytest.mark.parametrize(
    "text",
    [
        "",  # Kafka reads an empty file as no entries; we rebuild instead
        "1\n0\n",  # unknown version
        "0\n2\n1 0\n",  # fewer entries than announced
        "0\n1\n1 0\n2 5\n",  # more
        "0\n1\n1\n",  # one field
        "0\n1\n1 x\n",
        "0\n2\n3 0\n2 5\n",  # epochs decrease
        "0\n2\n1 5\n2 5\n",  # start offsets do not increase
        "0\n1\n-1 0\n",
        "0\n1\n0 -3\n",
        "\xff\xfe",
    ],
)
def test_invalid_checkpoints_are_refused(text: str) -> None:
    with pytest.raises(CheckpointError):
        parse_checkpoint(text.encode("latin-1"))


def test_constructor_checks_the_invariants(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        cache_in(tmp_path, [(2, 0), (1, 5)])


# --- assignment rules ------------------------------------------------------------------------


def test_assign_only_takes_a_newer_epoch(tmp_path: Path) -> None:
    cache = cache_in(tmp_path)
    assert cache.latest_epoch == -1 and cache.entries() == []
    assert not cache.assign(-1, 0)  # no epoch: nothing to record
    assert cache.assign(0, 0)
    assert not cache.assign(0, 5)  # the same epoch: it started earlier
    assert cache.assign(3, 7)
    assert not cache.assign(2, 9)  # an older epoch never comes back
    assert not cache.assign(3, 1)
    assert cache.entries() == [(0, 0), (3, 7)] and cache.latest_epoch == 3
    with pytest.raises(ValueError):
        cache.assign(4, -1)


def test_an_epoch_starting_where_the_latest_started_replaces_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """KAFKA-7415: a leader records its epoch at the log end offset; when it wrote nothing the next one replaces it."""
    cache = cache_in(tmp_path, [(1, 0), (2, 10)])
    with caplog.at_level(logging.WARNING):
        assert cache.assign(3, 10)
    assert cache.entries() == [(1, 0), (3, 10)]
    assert not caplog.records  # the expected case: epoch 2 wrote nothing
    with caplog.at_level(logging.WARNING):
        assert cache.assign(4, 5)  # below the latest start: every entry from there goes
    assert cache.entries() == [(1, 0), (4, 5)]
    assert any("conflicting" in r.getMessage() for r in caplog.records)
    assert read_checkpoint(OsFileSystem(), str(tmp_path)) == [(1, 0), (4, 5)]


def test_assign_all_writes_once(tmp_path: Path) -> None:
    fs = FaultyFileSystem()
    cache = LeaderEpochCache(fs, str(tmp_path))
    assert cache.assign_all([(1, 0), (1, 5), (2, 9), (4, 12), (3, 20)])
    assert cache.entries() == [(1, 0), (2, 9), (4, 12)]
    assert len(fs.fsyncs) == 1
    assert not cache.assign_all([(4, 30), (0, 40)])
    assert len(fs.fsyncs) == 1  # nothing changed, nothing written


def test_epoch_for_offset(tmp_path: Path) -> None:
    cache = cache_in(tmp_path, [(2, 10), (5, 20)])
    assert [cache.epoch_for_offset(o) for o in (0, 9, 10, 19, 20, 1000)] == [-1, -1, 2, 2, 5, 5]
    assert cache_in(tmp_path).epoch_for_offset(0) == -1


# --- OffsetsForLeaderEpoch (KIP-101, KIP-279) -------------------------------------------------


def test_end_offset_for_the_latest_epoch_is_the_log_end_offset(tmp_path: Path) -> None:
    cache = cache_in(tmp_path, [(0, 0), (2, 10), (5, 20)])
    assert cache.end_offset_for(5, 30) == (5, 30)


def test_end_offset_for_an_older_epoch_is_the_next_epochs_start(tmp_path: Path) -> None:
    cache = cache_in(tmp_path, [(0, 0), (2, 10), (5, 20)])
    assert cache.end_offset_for(0, 30) == (0, 10)
    assert cache.end_offset_for(2, 30) == (2, 20)


def test_end_offset_for_an_epoch_between_known_ones(tmp_path: Path) -> None:
    """KIP-279: the largest epoch at or below the requested one, ending where the next one above starts."""
    cache = cache_in(tmp_path, [(0, 0), (2, 10), (5, 20)])
    assert cache.end_offset_for(1, 30) == (0, 10)
    assert cache.end_offset_for(3, 30) == (2, 20)
    assert cache.end_offset_for(4, 30) == (2, 20)


def test_end_offset_for_an_epoch_below_the_earliest(tmp_path: Path) -> None:
    """Kafka 2.1+ (KAFKA-7415): the requested epoch, ending where the earliest known one starts."""
    cache = cache_in(tmp_path, [(2, 10), (5, 20)])
    assert cache.end_offset_for(1, 30) == (1, 10)
    assert cache.end_offset_for(0, 30) == (0, 10)


def test_end_offset_for_unknown_epochs_is_undefined(tmp_path: Path) -> None:
    cache = cache_in(tmp_path, [(2, 10), (5, 20)])
    assert cache.end_offset_for(-1, 30) == (-1, -1)  # UNDEFINED_EPOCH asked
    assert cache.end_offset_for(6, 30) == (-1, -1)  # above the latest
    assert cache_in(tmp_path).end_offset_for(0, 30) == (-1, -1)  # empty cache
    assert cache_in(tmp_path).end_offset_for(-1, 0) == (-1, -1)


# --- truncation ------------------------------------------------------------------------------


def test_truncate_from_end(tmp_path: Path) -> None:
    cache = cache_in(tmp_path, [(0, 0), (2, 10), (5, 20)])
    assert not cache.truncate_from_end(21)
    assert cache.truncate_from_end(20)  # an entry starting at the new end goes
    assert cache.entries() == [(0, 0), (2, 10)]
    assert cache.truncate_from_end(5)
    assert cache.entries() == [(0, 0)]
    assert not cache.truncate_from_end(-1)
    assert cache.truncate_from_end(0) and cache.entries() == []
    assert read_checkpoint(OsFileSystem(), str(tmp_path)) == []


def test_truncate_from_start(tmp_path: Path) -> None:
    cache = cache_in(tmp_path, [(0, 0), (2, 10), (5, 20)])
    assert cache.truncate_from_start(15)  # epoch 2 covers 15: it now starts there, epoch 0 goes
    assert cache.entries() == [(2, 15), (5, 20)]
    assert not cache.truncate_from_start(15)
    assert not cache.truncate_from_start(3)  # below the earliest: nothing to move
    assert cache.truncate_from_start(20)  # exactly an entry's start: it stays, earlier ones go
    assert cache.entries() == [(5, 20)]
    assert cache.truncate_from_start(100)
    assert cache.entries() == [(5, 100)]
    assert read_checkpoint(OsFileSystem(), str(tmp_path)) == [(5, 100)]


# --- the log: leader appends -----------------------------------------------------------------


def test_leader_append_assigns_a_new_epoch_at_its_first_offset(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(batch(3), leader_epoch=0)
    log.append(batch(2), leader_epoch=0)
    log.append(batch(4), leader_epoch=3)
    log.append(batch(1) + batch(1), leader_epoch=7)
    assert log.leader_epoch_cache.entries() == [(0, 0), (3, 5), (7, 9)]
    assert checkpoint_text(log.dir) == "0\n3\n0 0\n3 5\n7 9\n"
    assert log.leader_epoch_cache.end_offset_for(3, log.log_end_offset) == (3, 9)
    assert log.leader_epoch_cache.end_offset_for(7, log.log_end_offset) == (7, 11)


def test_the_checkpoint_is_written_only_for_a_new_epoch(tmp_path: Path) -> None:
    fs = FaultyFileSystem()
    log = open_log(tmp_path, fs=fs)
    written = fs.renames.count(os.path.join(log.dir, CHECKPOINT_FILE))
    for _ in range(5):
        log.append(batch(1), leader_epoch=2)
    assert fs.renames.count(os.path.join(log.dir, CHECKPOINT_FILE)) == written + 1


def test_the_checkpoint_rename_is_made_durable_by_the_next_flush(tmp_path: Path) -> None:
    fs = FaultyFileSystem()
    log = open_log(tmp_path, fs=fs)
    log.append(batch(1), leader_epoch=4)
    assert fs.dir_fsyncs == []
    log.flush()
    assert fs.dir_fsyncs == [log.dir]
    log.flush()
    assert fs.dir_fsyncs == [log.dir]


def test_a_new_leaders_epoch_is_written_by_the_next_flush_not_at_once(tmp_path: Path) -> None:
    """No file I/O per partition on the LeaderAndIsr path (issue 26): the entry lives in memory
    (OffsetsForLeaderEpoch answers from it) and the flush writes the file; so does any other change."""
    fs = FaultyFileSystem()
    log = open_log(tmp_path, fs=fs)
    log.append(batch(2), leader_epoch=0)
    log.flush()
    checkpoint = os.path.join(log.dir, CHECKPOINT_FILE)
    renames = fs.renames.count(checkpoint)
    assert log.maybe_assign_epoch_start_offset(4, log.log_end_offset)
    assert fs.renames.count(checkpoint) == renames and log.leader_epoch_cache.unwritten
    assert log.leader_epoch_cache.end_offset_for(0, log.log_end_offset) == (0, 2)
    log.flush()
    assert read_checkpoint(OsFileSystem(), log.dir) == [(0, 0), (4, 2)] and not log.leader_epoch_cache.unwritten
    log.maybe_assign_epoch_start_offset(5, log.log_end_offset)
    log.append(batch(1), leader_epoch=6)  # a change written at once carries the deferred entry along
    assert read_checkpoint(OsFileSystem(), log.dir) == [(0, 0), (6, 2)] == log.leader_epoch_cache.entries()
    assert not log.leader_epoch_cache.unwritten


def test_a_new_leaders_epoch_costs_no_fsync_until_the_next_flush(tmp_path: Path) -> None:
    """Taking leadership of thousands of partitions must not fsync thousands of files on the
    LeaderAndIsr path (issue 26): the checkpoint is fsynced, then its directory, at the flush
    that moves the recovery point past what the new entry describes."""
    fs = FaultyFileSystem()
    log = open_log(tmp_path, fs=fs)
    log.append(batch(2), leader_epoch=0)
    log.flush()
    fs.fsyncs.clear()
    fs.dir_fsyncs.clear()
    log.maybe_assign_epoch_start_offset(3, log.log_end_offset)
    log.append(batch(1), leader_epoch=3)
    checkpoint = os.path.join(log.dir, CHECKPOINT_FILE)
    assert checkpoint_text(log.dir) == "0\n1\n0 0\n"  # not written yet: a new leader's entry waits ...
    assert fs.fsyncs == [] and fs.dir_fsyncs == []
    log.flush()
    assert checkpoint_text(log.dir) == "0\n2\n0 0\n3 2\n"  # ... for the flush, which writes and fsyncs it
    assert fs.fsyncs.count(checkpoint) == 1 and fs.dir_fsyncs == [log.dir]
    fs.fsyncs.clear()
    log.flush()
    assert checkpoint not in fs.fsyncs  # once


def test_a_new_leader_records_its_epoch_at_the_log_end_offset(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(batch(5), leader_epoch=1)
    assert log.maybe_assign_epoch_start_offset(2, log.log_end_offset)
    assert not log.maybe_assign_epoch_start_offset(2, log.log_end_offset)
    # a follower that had epoch-1 data only learns where epoch 1 ended
    assert log.leader_epoch_cache.end_offset_for(1, log.log_end_offset) == (1, 5)
    log.append(batch(2), leader_epoch=2)
    assert log.leader_epoch_cache.entries() == [(1, 0), (2, 5)]


def test_a_checkpoint_that_cannot_be_written_takes_the_log_offline(tmp_path: Path) -> None:
    fs = FaultyFileSystem()
    log = open_log(tmp_path, fs=fs)
    log.append(batch(2), leader_epoch=1)
    size = log.size_bytes
    fs.fail_nth_write(1, suffix=CHECKPOINT_FILE + ".tmp")
    with pytest.raises(KafkaError) as e:
        log.append(batch(2), leader_epoch=2)
    assert e.value.code == ErrorCode.KAFKA_STORAGE_ERROR
    assert log.is_offline
    assert (log.log_end_offset, log.size_bytes) == (2, size)  # nothing written
    assert log.leader_epoch_cache.entries() == [(1, 0)]
    assert checkpoint_text(log.dir) == "0\n1\n1 0\n"


def test_a_checkpoint_that_cannot_be_fsynced_at_the_flush_takes_the_log_offline(tmp_path: Path) -> None:
    fs = FaultyFileSystem()
    log = open_log(tmp_path, fs=fs)
    log.append(batch(2), leader_epoch=1)
    fs.fail_fsync = True
    with pytest.raises(KafkaError) as e:
        log.flush()
    assert e.value.code == ErrorCode.KAFKA_STORAGE_ERROR
    assert log.is_offline


def test_a_failed_batch_write_takes_its_new_epoch_back(tmp_path: Path) -> None:
    fs = FaultyFileSystem()
    log = open_log(tmp_path, fs=fs)
    log.append(batch(2), leader_epoch=1)
    fs.fail_nth_write(1, partial=10)
    with pytest.raises(KafkaError) as e:
        log.append(batch(2), leader_epoch=2)
    assert e.value.code == ErrorCode.KAFKA_STORAGE_ERROR
    assert not log.is_offline  # the write was rolled back
    assert log.leader_epoch_cache.entries() == [(1, 0)]
    assert checkpoint_text(log.dir) == "0\n1\n1 0\n"
    log.append(batch(1), leader_epoch=2)
    assert log.leader_epoch_cache.entries() == [(1, 0), (2, 2)]


# --- the log: follower appends ---------------------------------------------------------------


def test_follower_append_keeps_offsets_and_epochs_byte_for_byte(tmp_path: Path) -> None:
    leader = open_log(tmp_path, SMALL, topic="leader")
    for i, epoch in enumerate([0, 0, 2, 2, 2, 5, 5, 8]):
        leader.append(batch(1 + i % 3, tag=i, ts=T0 + i), leader_epoch=epoch)
    leader_data = log_bytes(leader)
    follower = open_log(tmp_path, SMALL, topic="follower")
    offset = 0
    while offset < leader.log_end_offset:  # fetch as a replica does, in pieces
        data = region_bytes(leader.read(offset, 300, min_one_batch=True).region)
        whole = b""
        pos = 0
        while pos + 61 <= len(data) and pos + read_header(data, pos).size <= len(data):
            whole += data[pos : pos + read_header(data, pos).size]
            pos += read_header(data, pos).size
        info = follower.append_as_follower(whole)
        assert info.first_offset == offset
        offset = info.last_offset + 1
    assert log_bytes(follower) == leader_data
    assert follower.log_end_offset == leader.log_end_offset
    assert (
        follower.leader_epoch_cache.entries()
        == leader.leader_epoch_cache.entries()
        == [(0, 0), (2, 3), (5, 9), (8, 13)]
    )
    assert read_all(follower) == read_all(leader)


def test_follower_append_info_and_epochs_of_one_record_set(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    data = stamped(0, 3, 4, tag=1) + stamped(3, 2, 4, tag=2) + stamped(5, 1, 6, tag=3)
    info = log.append_as_follower(data)
    assert (info.first_offset, info.last_offset, info.records_count, info.log_start_offset) == (0, 5, 6, 0)
    assert info.max_timestamp == T0 and info.offset_of_max_timestamp == 2
    assert log.leader_epoch_cache.entries() == [(4, 0), (6, 5)]
    assert region_bytes(log.read(0, 1 << 20).region) == data
    assert log.append_as_follower(stamped(6, 1, 6)).first_offset == 6  # the same epoch: nothing new
    assert log.leader_epoch_cache.entries() == [(4, 0), (6, 5)]
    log.append(batch(1), leader_epoch=9)  # and the log can become the leader
    assert log.leader_epoch_cache.entries() == [(4, 0), (6, 5), (9, 7)]


@pytest.mark.parametrize("first_offset", [0, 2, 4, 100])
def test_follower_append_at_a_wrong_offset_writes_nothing(tmp_path: Path, first_offset: int) -> None:
    log = open_log(tmp_path)
    log.append_as_follower(stamped(0, 3, 1))
    size = log.size_bytes
    with pytest.raises(UnexpectedAppendOffsetError) as e:
        log.append_as_follower(stamped(first_offset, 2, 2))
    assert e.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert (e.value.first_offset, e.value.last_offset, e.value.expected_offset) == (first_offset, first_offset + 1, 3)
    assert (log.log_end_offset, log.size_bytes) == (3, size)
    assert os.path.getsize(os.path.join(log.dir, segment_files(log.dir)[0])) == size
    assert log.leader_epoch_cache.entries() == [(1, 0)]
    assert checkpoint_text(log.dir) == "0\n1\n1 0\n"


def test_follower_append_refuses_offsets_that_do_not_increase(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    with pytest.raises(KafkaError) as e:
        log.append_as_follower(stamped(0, 3, 1) + stamped(2, 2, 2))
    assert e.value.code == ErrorCode.CORRUPT_MESSAGE
    assert (log.log_end_offset, log.size_bytes) == (0, 0)
    assert log.leader_epoch_cache.entries() == []
    # gaps between batches are allowed (a compacted leader's log has them)
    info = log.append_as_follower(stamped(0, 3, 1) + stamped(10, 2, 1))
    assert (info.last_offset, info.records_count, log.log_end_offset) == (11, 5, 12)
    assert batch_offsets(region_bytes(log.read(0, 1 << 20).region)) == [(0, 2), (10, 11)]


def test_follower_append_validates_like_a_leader_append(tmp_path: Path) -> None:
    log = open_log(tmp_path, LogConfig(max_message_bytes=2000))
    bad = bytearray(stamped(0, 2, 1))
    bad[-1] ^= 0xFF
    with pytest.raises(KafkaError) as e:
        log.append_as_follower(bytes(bad))
    assert e.value.code == ErrorCode.CORRUPT_MESSAGE
    with pytest.raises(KafkaError) as e:
        log.append_as_follower(stamped(0, 60, 1))
    assert e.value.code == ErrorCode.MESSAGE_TOO_LARGE
    with pytest.raises(KafkaError) as e:
        log.append_as_follower(stamped(0, 2, 1)[:-3])
    assert e.value.code == ErrorCode.CORRUPT_MESSAGE
    assert (log.log_end_offset, log.size_bytes, log.leader_epoch_cache.entries()) == (0, 0, [])


def test_follower_append_rolls_segments(tmp_path: Path) -> None:
    log = open_log(tmp_path, SMALL)
    offset = 0
    for i in range(40):
        log.append_as_follower(stamped(offset, 3, i // 10, tag=i))
        offset += 3
    assert len(log.segments) >= 3
    assert [r.offset for r in read_all(log)] == list(range(120))
    assert log.leader_epoch_cache.entries() == [(0, 0), (1, 30), (2, 60), (3, 90)]


# --- the log: truncation and retention -------------------------------------------------------


def test_truncate_to_drops_the_epochs_above_the_new_end(tmp_path: Path) -> None:
    log = open_log(tmp_path, SMALL)
    for i in range(30):
        log.append(batch(3, tag=i), leader_epoch=i // 10)  # epochs 0, 1, 2 start at 0, 30, 60
    assert log.truncate_to(61)  # the batch 60..62 goes whole: epoch 2 wrote nothing left
    assert log.log_end_offset == 60
    assert log.leader_epoch_cache.entries() == [(0, 0), (1, 30)]
    assert log.truncate_to(45)
    assert log.leader_epoch_cache.entries() == [(0, 0), (1, 30)]
    assert log.truncate_to(30)
    assert log.leader_epoch_cache.entries() == [(0, 0)]
    assert read_checkpoint(OsFileSystem(), log.dir) == [(0, 0)]
    assert not log.truncate_to(500)
    log.append(batch(1), leader_epoch=3)
    assert log.leader_epoch_cache.entries() == [(0, 0), (3, 30)]


def test_truncate_fully_clears_the_cache(tmp_path: Path) -> None:
    log = open_log(tmp_path, SMALL)
    for i in range(10):
        log.append(batch(3, tag=i), leader_epoch=i)
    log.truncate_fully_and_start_at(500)
    assert log.leader_epoch_cache.entries() == []
    assert checkpoint_text(log.dir) == "0\n0\n"
    log.append_as_follower(stamped(500, 2, 12))
    assert log.leader_epoch_cache.entries() == [(12, 500)]
    log.close()
    assert open_log(tmp_path, SMALL).leader_epoch_cache.entries() == [(12, 500)]


def test_retention_moves_the_earliest_epoch_up_to_the_log_start(tmp_path: Path) -> None:
    clock = ManualClock()
    log = open_log(tmp_path, LogConfig(segment_bytes=1000, retention_bytes=0), clock=clock)
    for i in range(20):
        log.append(batch(2, value_size=150, tag=i), leader_epoch=i // 5)  # epochs 0..3 every 10 offsets
    assert log.leader_epoch_cache.entries() == [(0, 0), (1, 10), (2, 20), (3, 30)]
    hw = next(s.base_offset for s in log.segments if 10 < s.base_offset < 20)
    assert log.delete_retention_segments(high_watermark=hw) > 0
    start = log.log_start_offset
    assert start == hw
    assert log.leader_epoch_cache.entries() == [(1, start), (2, 20), (3, 30)]
    assert read_checkpoint(OsFileSystem(), log.dir) == [(1, start), (2, 20), (3, 30)]
    assert log.leader_epoch_cache.end_offset_for(0, log.log_end_offset) == (0, start)


# --- the log: open, rebuild and recovery -----------------------------------------------------


def epoch_log(tmp_path: Path, config: LogConfig = SMALL) -> Log:
    log = open_log(tmp_path, config)
    for i in range(60):
        log.append(batch(3, tag=i), leader_epoch=[0, 1, 1, 4, 4, 4][i // 10])
    return log


EPOCHS = [(0, 0), (1, 30), (4, 90)]


def test_the_cache_persists_across_close_and_open(tmp_path: Path) -> None:
    log = epoch_log(tmp_path)
    assert log.leader_epoch_cache.entries() == EPOCHS
    log.flush()
    log.close()
    again = open_log(tmp_path, SMALL)
    assert again.leader_epoch_cache.entries() == EPOCHS
    assert again.leader_epoch_cache.end_offset_for(1, again.log_end_offset) == (1, 90)


def test_an_empty_log_gets_an_empty_checkpoint(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    assert checkpoint_text(log.dir) == "0\n0\n"
    assert log.leader_epoch_cache.latest_epoch == -1


@pytest.mark.parametrize("damage", ["delete", "garbage", "empty", "decreasing"])
def test_a_missing_or_invalid_checkpoint_is_rebuilt_from_the_log(
    tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    log = epoch_log(tmp_path)
    log.flush()
    log.close()
    path = os.path.join(log.dir, CHECKPOINT_FILE)
    if damage == "delete":
        os.unlink(path)
    else:
        content = {"garbage": b"\x00garbage\n", "empty": b"", "decreasing": b"0\n2\n4 0\n1 30\n"}[damage]
        with open(path, "wb") as f:
            f.write(content)
    with caplog.at_level(logging.WARNING):
        again = open_log(tmp_path, SMALL)
    assert again.leader_epoch_cache.entries() == EPOCHS
    assert read_checkpoint(OsFileSystem(), again.dir) == EPOCHS  # written back
    assert any("leader-epoch-checkpoint" in r.getMessage() for r in caplog.records)


def test_a_rebuild_starts_at_the_log_start(tmp_path: Path) -> None:
    log = open_log(tmp_path, LogConfig(segment_bytes=1000, retention_bytes=0))
    for i in range(20):
        log.append(batch(2, value_size=150, tag=i), leader_epoch=i // 5)
    log.delete_retention_segments()
    expected = log.leader_epoch_cache.entries()
    log.close()
    os.unlink(os.path.join(log.dir, CHECKPOINT_FILE))
    again = open_log(tmp_path, LogConfig(segment_bytes=1000, retention_bytes=0))
    assert again.leader_epoch_cache.entries() == expected
    assert again.leader_epoch_cache.entries()[0].start_offset == again.log_start_offset


def test_recovery_truncation_drops_epochs_past_the_log_end(tmp_path: Path) -> None:
    log = epoch_log(tmp_path)
    log.flush()
    log.maybe_assign_epoch_start_offset(6, log.log_end_offset)  # a leader elected, nothing written yet
    active = os.path.join(log.dir, segment_files(log.dir)[-1])
    with open(active, "ab") as f:
        f.write(batch(5, tag=999)[:-7])  # and a torn batch after it
    del log  # crash
    again = open_log(tmp_path, SMALL, needs_recovery=True, recovery_point=180)
    assert again.log_end_offset == 180
    assert again.leader_epoch_cache.entries() == EPOCHS
    assert read_checkpoint(OsFileSystem(), again.dir) == EPOCHS


def test_recovery_reassigns_epochs_the_checkpoint_missed(tmp_path: Path) -> None:
    """A crash can lose a checkpoint rename that was not yet fsynced; recovered batches carry their epochs."""
    log = open_log(tmp_path, SMALL)
    for i in range(20):
        log.append(batch(3, tag=i), leader_epoch=0)
    log.flush()
    stale = checkpoint_text(log.dir)
    for i in range(20):
        log.append(batch(3, tag=100 + i), leader_epoch=1 + i // 10)  # epochs 1 and 2, never flushed
    with open(os.path.join(log.dir, CHECKPOINT_FILE), "w") as f:
        f.write(stale)  # the rename did not survive the crash; the data did
    del log
    again = open_log(tmp_path, SMALL, needs_recovery=True, recovery_point=60)
    assert again.log_end_offset == 120
    assert again.leader_epoch_cache.entries() == [(0, 0), (1, 60), (2, 90)]
    assert read_checkpoint(OsFileSystem(), again.dir) == [(0, 0), (1, 60), (2, 90)]


def test_a_clean_open_writes_nothing(tmp_path: Path) -> None:
    log = epoch_log(tmp_path)
    log.flush()
    log.close()
    fs = FaultyFileSystem()
    again = open_log(tmp_path, SMALL, fs=fs)
    assert again.leader_epoch_cache.entries() == EPOCHS
    assert not any(CHECKPOINT_FILE in p for p in fs.fsyncs)
