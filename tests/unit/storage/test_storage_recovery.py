"""Recovery: torn and corrupt data is truncated at the first invalid byte, later segments dropped,
indexes rebuilt when missing or bad, and failed writes leave the log as it was."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from headwater.broker.storage.clock import ManualClock
from headwater.broker.storage.index import InvalidOffsetError
from headwater.broker.storage.log import Log, LogConfig
from headwater.broker.storage.segment import BatchEntry
from headwater.protocol.errors import ErrorCode, KafkaError
from tests.unit.storage.storage_helpers import T0, FaultyFileSystem, batch, open_log, read_all, segment_files

SMALL = LogConfig(segment_bytes=4096, index_interval_bytes=256)


def filled_log(tmp_path: Path, batches: int = 60, config: LogConfig = SMALL) -> Log:
    log = open_log(tmp_path, config)
    for i in range(batches):
        log.append(batch(3, tag=i, ts=T0 + 10 * i, ts_step=1), 0)
    log.flush()
    log.close()
    return log


def test_garbage_after_the_last_batch_is_truncated(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    log = filled_log(tmp_path)
    expected = read_all(open_log(tmp_path, SMALL))
    active = os.path.join(log.dir, segment_files(log.dir)[-1])
    good_size = os.path.getsize(active)
    with open(active, "ab") as f:
        f.write(b"\x00\x00\x00\x00\x00\x00\x00\x07garbage that is not a batch" * 3)
    with caplog.at_level(logging.WARNING):
        again = open_log(tmp_path, SMALL)  # the active segment is always recovered, clean or not
    assert os.path.getsize(active) == good_size
    assert read_all(again) == expected
    assert again.log_end_offset == 180
    assert any("truncat" in r.getMessage() and "bytes" in r.getMessage() for r in caplog.records)
    assert again.append(batch(1), 0).first_offset == 180


def test_a_torn_last_batch_is_truncated(tmp_path: Path) -> None:
    log = filled_log(tmp_path)
    active = os.path.join(log.dir, segment_files(log.dir)[-1])
    good_size = os.path.getsize(active)
    with open(active, "ab") as f:
        f.write(batch(5, tag=999)[:-7])  # the inode grew, the last block never made it
    again = open_log(tmp_path, SMALL, needs_recovery=True, recovery_point=180)
    assert os.path.getsize(active) == good_size
    assert again.log_end_offset == 180


def test_a_flipped_byte_in_a_middle_segment_drops_the_rest(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    log = filled_log(tmp_path)
    files = segment_files(log.dir)
    assert len(files) >= 4
    middle = os.path.join(log.dir, files[2])
    middle_base = int(files[2][:20])
    with open(middle, "r+b") as f:
        f.seek(700)
        byte = f.read(1)
        f.seek(700)
        f.write(bytes([byte[0] ^ 0x01]))
    with caplog.at_level(logging.WARNING):
        again = open_log(tmp_path, SMALL, needs_recovery=True, recovery_point=0)
    remaining = segment_files(again.dir)
    assert remaining == files[:3]  # later segments deleted
    assert segment_files(again.dir, ".index") == [f[:20] + ".index" for f in files[:3]]
    assert middle_base < again.log_end_offset < int(files[3][:20])
    assert os.path.getsize(middle) < 700  # truncated at the start of the damaged batch
    records = read_all(again)
    assert [r.offset for r in records] == list(range(again.log_end_offset))
    messages = " ".join(r.getMessage() for r in caplog.records)
    assert "CRC" in messages and "deleting segment" in messages
    assert again.append(batch(1), 0).first_offset == again.log_end_offset - 1


def test_segments_below_the_recovery_point_are_trusted(tmp_path: Path) -> None:
    log = filled_log(tmp_path)
    files = segment_files(log.dir)
    with open(os.path.join(log.dir, files[1]), "r+b") as f:
        f.seek(300)
        f.write(b"\xff")
    # Segment 1 lies below the recovery point: not re-checked (its CRC error is not noticed).
    again = open_log(tmp_path, SMALL, needs_recovery=True, recovery_point=int(files[2][:20]))
    assert again.log_end_offset == 180
    again.close()
    # From 0, it is.
    again = open_log(tmp_path, SMALL, needs_recovery=True, recovery_point=0)
    assert again.log_end_offset < int(files[2][:20])
    assert segment_files(again.dir) == files[:2]


@pytest.mark.parametrize("damage", ["delete", "garbage", "truncate_mid_entry", "stale", "delete_timeindex"])
def test_bad_indexes_are_rebuilt(tmp_path: Path, damage: str) -> None:
    log = filled_log(tmp_path)
    reference = open_log(tmp_path, SMALL)
    indexes = {s.base_offset: (s.index.entries(), s.time_index.entries()) for s in reference.segments}
    records = read_all(reference)
    reference.close()
    files = segment_files(log.dir, ".index")
    victim = os.path.join(log.dir, files[1])
    if damage == "delete":
        os.unlink(victim)
    elif damage == "garbage":
        with open(victim, "r+b") as f:
            f.seek(8)
            f.write(os.urandom(8) + b"\x7f\xff\xff\xff\x00\x00\x00\x00")
    elif damage == "truncate_mid_entry":
        os.truncate(victim, os.path.getsize(victim) - 3)
    elif damage == "stale":  # entries pointing into the middle of batches
        data = bytearray(Path(victim).read_bytes())
        data[-1] = (data[-1] + 1) % 256
        Path(victim).write_bytes(bytes(data))
    else:
        os.unlink(victim[: -len(".index")] + ".timeindex")
    again = open_log(tmp_path, SMALL)
    assert {s.base_offset: (s.index.entries(), s.time_index.entries()) for s in again.segments} == indexes
    assert read_all(again) == records
    assert os.path.getsize(victim) == 8 * len(indexes[int(files[1][:20])][0])  # rewritten on disk


def test_an_index_without_its_log_is_removed(tmp_path: Path) -> None:
    log = filled_log(tmp_path, batches=5)
    stray = os.path.join(log.dir, f"{12345:020d}.index")
    Path(stray).write_bytes(b"\x00" * 8)
    open_log(tmp_path, SMALL)
    assert not os.path.exists(stray)


@pytest.mark.parametrize("partial", [0, 1, 30, 200])
def test_a_failed_write_leaves_the_log_consistent(tmp_path: Path, partial: int) -> None:
    fs = FaultyFileSystem()
    log = open_log(tmp_path, SMALL, fs=fs)
    for i in range(10):
        log.append(batch(3, tag=i), 0)
    before = read_all(log)
    size, end = log.size_bytes, log.log_end_offset
    fs.fail_nth_write(1, partial=partial)  # the write dies part way through
    with pytest.raises(KafkaError) as e:
        log.append(batch(4, tag=77), 0)
    assert e.value.code == ErrorCode.KAFKA_STORAGE_ERROR
    assert (log.size_bytes, log.log_end_offset) == (size, end)
    assert sum(os.path.getsize(os.path.join(log.dir, f)) for f in segment_files(log.dir)) == size
    assert read_all(log) == before
    assert not log.is_offline
    info = log.append(batch(2, tag=78), 0)  # the log goes on where it was
    assert info.first_offset == end
    log.close()
    again = open_log(tmp_path, SMALL, needs_recovery=True)
    assert read_all(again) == read_all(log)
    assert again.log_end_offset == end + 2


def test_a_crash_in_the_middle_of_a_write_is_recovered(tmp_path: Path) -> None:
    fs = FaultyFileSystem()
    log = open_log(tmp_path, fs=fs)
    for i in range(10):
        log.append(batch(3, tag=i), 0)
    before = read_all(log)
    fs.fail_nth_write(1, partial=100)
    fs.fail_truncate = True  # the process cannot even undo it: it goes offline, as after a crash
    with pytest.raises(KafkaError) as e:
        log.append(batch(4, tag=77), 0)
    assert e.value.code == ErrorCode.KAFKA_STORAGE_ERROR
    assert log.is_offline
    with pytest.raises(KafkaError):
        log.append(batch(1), 0)
    assert read_all(log) == before  # reads still serve what was acknowledged
    del log  # crash: nothing closed, nothing flushed
    again = open_log(tmp_path, needs_recovery=True)
    assert read_all(again) == before
    assert again.append(batch(1), 0).first_offset == 30


def test_a_failed_write_into_a_fresh_segment(tmp_path: Path) -> None:
    fs = FaultyFileSystem()
    log = open_log(tmp_path, LogConfig(segment_bytes=1000), fs=fs)
    while len(log.segments) == 1 and log.active_segment.size + 500 <= 1000:
        log.append(batch(2, value_size=150), 0)
    end = log.log_end_offset
    fs.fail_nth_write(1, partial=10)
    with pytest.raises(KafkaError):
        log.append(batch(2, value_size=150), 0)  # rolls, then the write fails
    assert log.log_end_offset == end
    assert log.append(batch(2, value_size=150), 0).first_offset == end
    assert [s.size > 0 for s in log.segments] == [True, True]
    assert [r.offset for r in read_all(log)] == list(range(end + 2))


def test_short_writes_are_completed(tmp_path: Path) -> None:
    fs = FaultyFileSystem()
    fs.short_writes = 7
    log = open_log(tmp_path, SMALL, fs=fs)
    for i in range(5):
        log.append(batch(3, tag=i), 0)
    fs.short_writes = None
    assert [r.offset for r in read_all(log)] == list(range(15))
    log.close()
    assert open_log(tmp_path, SMALL, needs_recovery=True).log_end_offset == 15


def test_a_failed_fsync_takes_the_log_offline(tmp_path: Path) -> None:
    fs = FaultyFileSystem()
    log = open_log(tmp_path, LogConfig(flush_interval_messages=1), fs=fs)
    fs.fail_fsync = True
    with pytest.raises(KafkaError) as e:
        log.append(batch(1), 0)
    assert e.value.code == ErrorCode.KAFKA_STORAGE_ERROR
    assert log.is_offline and log.recovery_point == 0


def test_a_segment_refuses_offsets_that_do_not_increase(tmp_path: Path) -> None:
    log = open_log(tmp_path, clock=ManualClock())
    log.append(batch(3), 0)
    seg = log.active_segment
    data = batch(1)
    with pytest.raises(InvalidOffsetError):
        seg.append(data, [BatchEntry(0, 2, 2, T0, len(data))], T0)
    assert seg.size == log.size_bytes


def test_an_overlapping_segment_is_dropped(tmp_path: Path) -> None:
    log = filled_log(tmp_path)
    files = segment_files(log.dir)
    second, third = int(files[1][:20]), int(files[2][:20])
    for suffix in (".log", ".index", ".timeindex"):
        os.rename(os.path.join(log.dir, f"{third:020d}{suffix}"), os.path.join(log.dir, f"{second + 1:020d}{suffix}"))
    again = open_log(tmp_path, SMALL)
    assert [s.base_offset for s in again.segments] == [0, second]
    assert again.log_end_offset == third
    assert [r.offset for r in read_all(again)] == list(range(third))


def test_a_failed_roll_leaves_no_segment_that_deletes_later_data_at_the_next_start(tmp_path: Path) -> None:
    """Issue 9, defect 1: an index that cannot be created while rolling (EMFILE) must not leave an
    empty .log behind; at the next start it would overlap the previous segment, and open() would
    delete it and every later segment: flushed, acknowledged data."""
    fs = FaultyFileSystem()
    log = open_log(tmp_path, LogConfig(segment_bytes=1000), fs=fs)
    log.append(batch(2, value_size=300), 0)  # ~700 bytes: the next big batch needs a new segment
    failed_at = log.log_end_offset
    fs.fail_open = ".index"
    with pytest.raises(KafkaError):
        log.append(batch(2, value_size=300), 0)  # the roll fails
    fs.fail_open = None
    assert segment_files(log.dir) == [f"{0:020d}.log"]  # no empty segment left behind
    log.append(batch(1, value_size=50), 0)  # fits the old segment: offsets past the failed roll's base
    while len(log.segments) < 3:
        log.append(batch(2, value_size=300), 0)  # later rolls succeed
    end = log.log_end_offset
    log.flush()
    log.close()
    again = open_log(tmp_path, LogConfig(segment_bytes=1000), needs_recovery=True)
    assert again.log_end_offset == end
    assert [r.offset for r in read_all(again)] == list(range(end))
    assert failed_at in [r.offset for r in read_all(again)]


def test_an_empty_overlapping_segment_is_dropped_alone(tmp_path: Path) -> None:
    """A stray empty .log (left by an older version's failed roll) overlapping its predecessor is
    deleted by itself; the segments after it are kept."""
    log = filled_log(tmp_path)
    files = segment_files(log.dir)
    second, third = int(files[1][:20]), int(files[2][:20])
    end = log.log_end_offset
    open(os.path.join(log.dir, f"{second + 1:020d}.log"), "wb").close()
    again = open_log(tmp_path, SMALL)
    assert again.log_end_offset == end
    assert [r.offset for r in read_all(again)] == list(range(end))
    assert third in [s.base_offset for s in again.segments]
    assert not os.path.exists(os.path.join(log.dir, f"{second + 1:020d}.log"))


def test_an_empty_segment_that_overlaps_nothing_is_kept(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Kafka 2.3's cleaner leaves an empty segment where it removed every record of a group of
    segments (issue 45: seen on a compacted topic Kafka wrote): it is a segment like any other, the
    log start offset stays at its base and a read from there answers the next segment's records."""
    log = filled_log(tmp_path)
    first = int(segment_files(log.dir)[1][:20])
    end = log.log_end_offset
    log.close()
    for name in os.listdir(log.dir):
        if name[:20].isdigit() and int(name[:20]) < first:
            os.unlink(os.path.join(log.dir, name))
    for suffix in (".log", ".index", ".timeindex"):  # the cleaned group's empty segment, as Kafka leaves it
        open(os.path.join(log.dir, f"{0:020d}{suffix}"), "wb").close()
    with caplog.at_level(logging.WARNING):
        again = open_log(tmp_path, SMALL)
    assert [s.base_offset for s in again.segments][:2] == [0, first]
    assert again.log_start_offset == 0 and again.log_end_offset == end
    assert [r.offset for r in read_all(again)] == list(range(first, end))
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
