"""The log of one partition: append and read across segments, fetch limits, timestamps,
retention, flush policy, truncation and file lifetimes."""

from __future__ import annotations

import itertools
import os
import struct
from pathlib import Path

import pytest

from headwater.broker.storage.clock import ManualClock
from headwater.broker.storage.log import LogConfig
from headwater.protocol.errors import ErrorCode, KafkaError
from headwater.protocol.records.compression import Codec
from headwater.protocol.records.header import read_header
from headwater.protocol.records.record import encode_batch
from tests.unit.storage.storage_helpers import (
    T0,
    FaultyFileSystem,
    batch,
    batch_offsets,
    decode_all,
    open_log,
    read_all,
    region_bytes,
    segment_files,
)

SMALL = LogConfig(segment_bytes=4096, index_interval_bytes=256)


def test_append_assigns_offsets_and_keeps_the_bytes(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    b1, b2 = batch(3, ts=T0, ts_step=10), batch(2, ts=T0 + 100)
    info = log.append(b1 + b2, leader_epoch=7)
    assert info.first_offset == 0 and info.last_offset == 4 and info.records_count == 5
    assert info.max_timestamp == T0 + 100 and info.offset_of_max_timestamp == 4
    assert info.log_start_offset == 0
    assert log.log_end_offset == 5 and log.size_bytes == len(b1) + len(b2)
    info2 = log.append(batch(4), leader_epoch=8)
    assert (info2.first_offset, info2.last_offset) == (5, 8)

    data = region_bytes(log.read(0, 1 << 20).region)
    h = read_header(data)
    assert (h.base_offset, h.partition_leader_epoch) == (0, 7)
    # Byte for byte what the producer sent, but for base offset and leader epoch (outside the CRC).
    assert data[12:16] == struct.pack(">i", 7)
    assert data[16 : len(b1)] == b1[16:]
    assert data[len(b1) + 16 : len(b1) + len(b2)] == b2[16:]
    assert [r.offset for r in decode_all(data)] == list(range(9))
    assert batch_offsets(data) == [(0, 2), (3, 4), (5, 8)]


def test_a_rejected_record_set_writes_nothing(tmp_path: Path) -> None:
    log = open_log(tmp_path, LogConfig(max_message_bytes=2000))
    good = batch(2)
    bad = bytearray(batch(2))
    bad[-1] ^= 0xFF  # CRC mismatch
    with pytest.raises(KafkaError) as e:
        log.append(good + bytes(bad), 0)
    assert e.value.code == ErrorCode.CORRUPT_MESSAGE
    with pytest.raises(KafkaError) as e:
        log.append(good + batch(30, value_size=100), 0)
    assert e.value.code == ErrorCode.MESSAGE_TOO_LARGE
    with pytest.raises(KafkaError) as e:
        log.append(b"", 0)
    assert e.value.code == ErrorCode.CORRUPT_MESSAGE
    assert log.log_end_offset == 0 and log.size_bytes == 0
    assert os.path.getsize(os.path.join(log.dir, segment_files(log.dir)[0])) == 0


def test_round_trip_across_segment_rolls(tmp_path: Path) -> None:
    log = open_log(tmp_path, SMALL)
    sent = []
    for i in range(60):
        n = 1 + i % 4
        log.append(batch(n, value_size=80, tag=i), 0)
        sent += [(i, j) for j in range(n)]
    files = segment_files(log.dir)
    assert len(files) >= 4
    assert all(os.path.getsize(os.path.join(log.dir, f)) <= 4096 for f in files)
    assert [int(f[:20]) for f in files] == [s.base_offset for s in log.segments]
    records = read_all(log)
    assert [r.offset for r in records] == list(range(len(sent)))
    assert [r.value[: r.value.index(b":")] for r in records] == [b"%d-%d" % s for s in sent]  # type: ignore[union-attr]
    # Every offset can be the start of a fetch, and the answer starts at the batch holding it.
    for offset in range(log.log_end_offset):
        got = log.read(offset, 1)
        first = read_header(region_bytes(got.region))
        assert first.base_offset == got.first_batch_offset <= offset <= first.last_offset
    # A read stays within one segment.
    seg = log.segments[1]
    got = log.read(seg.base_offset, 1 << 20)
    assert got.region is not None and got.region.size == seg.size


def test_reopen_serves_the_same_log(tmp_path: Path) -> None:
    log = open_log(tmp_path, SMALL)
    for i in range(40):
        log.append(batch(3, tag=i, ts=T0 + i), 0)
    before = read_all(log)
    entries = [(s.base_offset, s.index.entries(), s.time_index.entries()) for s in log.segments]
    log.flush()
    log.close()
    again = open_log(tmp_path, SMALL)
    assert again.log_end_offset == log.log_end_offset == 120
    assert again.size_bytes == log.size_bytes
    assert read_all(again) == before
    assert [(s.base_offset, s.index.entries(), s.time_index.entries()) for s in again.segments][:-1] == [
        (b, i, t) for b, i, t in entries
    ][:-1]
    info = again.append(batch(1), 0)
    assert info.first_offset == 120


def test_index_entries_are_sparse_and_point_at_batch_starts_by_their_last_offset(tmp_path: Path) -> None:
    log = open_log(tmp_path, LogConfig(index_interval_bytes=1000))
    for i in range(50):
        log.append(batch(2, value_size=150, tag=i), 0)
    seg = log.active_segment
    entries = seg.index.entries()
    assert 5 <= len(entries) < 50
    for offset, position in entries:  # Kafka's entries: a batch's last offset → the batch's start
        got = read_header(seg.read_bytes(position, 61))
        assert got.base_offset + got.last_offset_delta == offset
    gaps = [b[1] - a[1] for a, b in itertools.pairwise(entries)]
    assert all(g > 1000 for g in gaps)


def test_offset_out_of_range(tmp_path: Path) -> None:
    log = open_log(tmp_path, SMALL)
    for i in range(30):
        log.append(batch(2, tag=i, value_size=200), 0)
    log.truncate_to(60)  # no-op
    with pytest.raises(KafkaError) as e:
        log.read(61, 100)
    assert e.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert log.read(60, 100).region is None  # the log end offset: nothing yet, not an error
    clock = ManualClock()
    log2 = open_log(tmp_path / "b", LogConfig(segment_bytes=2000, retention_bytes=0), clock=clock)
    for i in range(30):
        log2.append(batch(2, tag=i, value_size=200), 0)
    assert log2.delete_retention_segments() > 0
    assert log2.log_start_offset > 0
    with pytest.raises(KafkaError) as e:
        log2.read(log2.log_start_offset - 1, 100)
    assert e.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert log2.read(log2.log_start_offset, 100).first_batch_offset == log2.log_start_offset


def test_read_respects_max_offset(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    for i in range(10):
        log.append(batch(3, tag=i), 0)  # batches at 0, 3, 6, ... 27
    got = log.read(4, 1 << 20, max_offset=12)
    assert batch_offsets(region_bytes(got.region)) == [(3, 5), (6, 8), (9, 11)]
    assert got.first_batch_offset == 3
    assert log.read(12, 1 << 20, max_offset=12).region is None
    assert log.read(13, 1 << 20, max_offset=12).region is None  # above the high watermark: nothing
    got = log.read(0, 1 << 20, max_offset=log.log_end_offset)
    assert got.region is not None and got.region.size == log.size_bytes


def test_read_respects_max_bytes_and_min_one_batch(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    big = batch(10, value_size=500)
    log.append(big, 0)
    log.append(batch(1), 0)
    got = log.read(0, 100)  # KIP-74: the first batch comes whole even above max_bytes
    assert got.region is not None and got.region.size == len(big)
    got = log.read(0, 100, min_one_batch=False)
    assert got.region is not None and got.region.size == 100  # a partial batch, as Kafka's slice
    got = log.read(0, len(big) + 10)
    assert got.region is not None and got.region.size == len(big) + 10  # partial trailing batch allowed
    assert batch_offsets(region_bytes(got.region)) == [(0, 9)]


def test_file_regions_outlive_deleted_segments(tmp_path: Path) -> None:
    clock = ManualClock()
    log = open_log(tmp_path, LogConfig(segment_bytes=2000, retention_ms=1000), clock=clock)
    for i in range(20):
        log.append(batch(2, tag=i, value_size=200, ts=clock.time_ms()), 0)
    got = log.read(0, 1 << 20)
    expected = region_bytes(got.region)
    clock.advance(5000)
    assert log.delete_retention_segments() > 0
    assert not os.path.exists(os.path.join(log.dir, f"{0:020d}.log"))
    assert region_bytes(got.region) == expected  # the descriptor stays open while referenced
    log.close()
    assert region_bytes(got.region) == expected  # closing the log does not pull it away either
    assert got.region is not None
    fd = got.region.file.fileno()
    os.fstat(fd)
    del got
    with pytest.raises(OSError):
        os.fstat(fd)  # ... and closes with the last reference


def test_offset_for_timestamp(tmp_path: Path) -> None:
    log = open_log(tmp_path, LogConfig(segment_bytes=3000, index_interval_bytes=300))
    # 40 batches of 5 records, timestamps T0 + 10*offset (record i of batch b at offset 5b+i).
    for b in range(40):
        log.append(batch(5, value_size=60, ts=T0 + 50 * b, ts_step=10), 0)
    assert len(log.segments) > 3
    for offset in (0, 1, 7, 23, 99, 120, 199):
        assert log.offset_for_timestamp(T0 + 10 * offset) == (offset, T0 + 10 * offset)
        assert log.offset_for_timestamp(T0 + 10 * offset - 3) == (offset, T0 + 10 * offset)
    assert log.offset_for_timestamp(0) == (0, T0)
    assert log.offset_for_timestamp(T0 + 10 * 199 + 1) is None
    assert log.offset_for_timestamp(-1) == (200, -1)
    assert log.offset_for_timestamp(-2) == (0, -1)


def test_offset_for_timestamp_with_timestamps_out_of_order(tmp_path: Path) -> None:
    log = open_log(tmp_path, LogConfig(index_interval_bytes=0))
    log.append(batch(1, ts=T0 + 500), 0)  # offset 0
    log.append(batch(1, ts=T0 + 100), 0)  # offset 1
    log.append(batch(1, ts=T0 + 900), 0)  # offset 2
    log.append(batch(1, ts=T0 + 300), 0)  # offset 3
    assert log.offset_for_timestamp(T0 + 200) == (0, T0 + 500)  # the first whose timestamp is >= target
    assert log.offset_for_timestamp(T0 + 600) == (2, T0 + 900)
    assert log.offset_for_timestamp(T0 + 901) is None


def test_legacy_offsets_before(tmp_path: Path) -> None:
    clock = ManualClock()
    log = open_log(tmp_path, LogConfig(segment_bytes=1000), clock=clock)
    modified = []
    for i in range(12):
        log.append(batch(2, value_size=150, tag=i), 0)
        modified.append(clock.time_ms())
        clock.advance(1000)
    bases = [s.base_offset for s in log.segments]
    assert len(bases) >= 4
    assert log.legacy_offsets_before(-1, 1) == [24]
    assert log.legacy_offsets_before(-2, 1) == [0]
    assert log.legacy_offsets_before(-1, 100) == sorted([*bases, 24], reverse=True)
    # Segments last modified at or before the time, newest first.
    last_mod = [s.last_modified_ms for s in log.segments]
    t = last_mod[1]
    assert log.legacy_offsets_before(t, 100) == sorted(bases[:2], reverse=True)
    assert log.legacy_offsets_before(t, 1) == [bases[1]]
    assert log.legacy_offsets_before(last_mod[0] - 1, 10) == []


def test_retention_by_time_rolls_and_deletes_the_active_segment_once_every_record_is_past(tmp_path: Path) -> None:
    """As Kafka 2.3: when every segment, the active one included, is past retention.ms and below the
    high watermark, the log rolls and the old active segment goes too (issue 40: how operators purge)."""
    clock = ManualClock()
    log = open_log(tmp_path, LogConfig(segment_bytes=1000, retention_ms=10_000), clock=clock)
    for i in range(10):
        log.append(batch(2, value_size=150, tag=i, ts=clock.time_ms()), 0)
        clock.advance(1000)
    n = len(log.segments)
    assert n >= 3
    assert log.delete_retention_segments() == 0
    # Records older than retention.ms go a whole segment at a time, by each segment's largest timestamp.
    clock.set_time_ms(log.segments[1].max_timestamp + 10_001)
    assert log.delete_retention_segments() == 2
    assert log.log_start_offset == log.segments[0].base_offset > 0
    clock.advance(10**9)
    # the active segment holds records above the high watermark: it stays
    assert log.delete_retention_segments(high_watermark=19) == n - 3
    assert len(log.segments) == 1 and log.active_segment.size > 0
    assert log.log_start_offset == log.active_segment.base_offset
    assert read_all(log)[-1].offset == 19
    # every record committed: rolled, and the old active segment deleted
    assert log.delete_retention_segments(high_watermark=20) == 1
    assert len(log.segments) == 1 and log.active_segment.size == 0
    assert log.log_start_offset == log.active_segment.base_offset == 20
    assert segment_files(log.dir) == [f"{20:020d}.log"]
    assert read_all(log) == []
    log.append(batch(1, ts=clock.time_ms()), 0)  # the log goes on from 20
    assert read_all(log)[-1].offset == 20


def test_retention_by_size(tmp_path: Path) -> None:
    log = open_log(tmp_path, LogConfig(segment_bytes=1000, retention_bytes=2500, retention_ms=-1))
    for i in range(20):
        log.append(batch(2, value_size=150, tag=i), 0)
    sizes = [s.size for s in log.segments]
    assert log.delete_retention_segments() > 0
    assert log.size_bytes >= 2500 - max(sizes) and log.size_bytes - log.segments[0].size < 2500
    assert log.size_bytes == sum(s.size for s in log.segments)
    assert log.delete_retention_segments() == 0
    keep_all = open_log(tmp_path / "x", LogConfig(segment_bytes=1000, retention_bytes=0, cleanup_policy="compact"))
    for i in range(20):
        keep_all.append(batch(2, value_size=150, tag=i), 0)
    assert keep_all.delete_retention_segments() == 0


def test_retention_stops_at_the_high_watermark(tmp_path: Path) -> None:
    log = open_log(tmp_path, LogConfig(segment_bytes=1000, retention_bytes=0))
    for i in range(20):
        log.append(batch(2, value_size=150, tag=i), 0)
    hw = log.segments[2].base_offset
    assert log.delete_retention_segments(high_watermark=hw) == 2
    assert log.log_start_offset == hw


def test_flush_by_messages(tmp_path: Path) -> None:
    fs = FaultyFileSystem()
    log = open_log(tmp_path, LogConfig(flush_interval_messages=10), fs=fs)
    base = fs.log_fsyncs()
    for _ in range(4):
        log.append(batch(3), 0)  # 3, 6, 9, 12 records: the fourth append reaches 10
    assert fs.log_fsyncs() == base + 1
    assert log.recovery_point == 12 and log.unflushed_messages == 0
    log.append(batch(9), 0)
    assert fs.log_fsyncs() == base + 1 and log.recovery_point == 12
    log.append(batch(1), 0)
    assert fs.log_fsyncs() == base + 2 and log.recovery_point == 22


def test_flush_by_time(tmp_path: Path) -> None:
    fs = FaultyFileSystem()
    clock = ManualClock()
    log = open_log(tmp_path, LogConfig(flush_interval_ms=1000), fs=fs, clock=clock)
    base = fs.log_fsyncs()
    log.append(batch(3), 0)
    log.maybe_flush()
    assert fs.log_fsyncs() == base and log.recovery_point == 0
    clock.advance(999)
    log.maybe_flush()
    assert fs.log_fsyncs() == base
    clock.advance(1)
    log.maybe_flush()
    assert fs.log_fsyncs() == base + 1 and log.recovery_point == 3
    log.maybe_flush()  # nothing new: no fsync
    assert fs.log_fsyncs() == base + 1
    clock.advance(5000)
    log.append(batch(1), 0)  # the append itself notices the interval passed
    assert fs.log_fsyncs() == base + 2 and log.recovery_point == 4


def test_no_flush_by_default_but_rolled_segments_are_flushed_on_request(tmp_path: Path) -> None:
    fs = FaultyFileSystem()
    log = open_log(tmp_path, LogConfig(segment_bytes=1000), fs=fs)
    for i in range(10):
        log.append(batch(2, value_size=150, tag=i), 0)
    assert fs.log_fsyncs() == 0 and log.recovery_point == 0
    log.flush_rolled_segments()
    assert fs.log_fsyncs() == len(log.segments) - 1
    assert log.recovery_point == log.active_segment.base_offset
    assert fs.dir_fsyncs == [log.dir]  # new segment files are made durable too


def test_roll_by_segment_ms(tmp_path: Path) -> None:
    clock = ManualClock()
    log = open_log(tmp_path, LogConfig(segment_ms=60_000), clock=clock)
    log.append(batch(1), 0)
    clock.advance(60_000)
    log.append(batch(1), 0)
    assert len(log.segments) == 1
    clock.advance(1)
    log.append(batch(1), 0)
    assert [s.base_offset for s in log.segments] == [0, 2]
    clock.advance(10**6)
    assert len(log.segments) == 2  # no empty segment is ever rolled


def test_truncate_to(tmp_path: Path) -> None:
    log = open_log(tmp_path, SMALL)
    for i in range(40):
        log.append(batch(3, tag=i, ts=T0 + i), 0)
    log.flush()
    assert log.truncate_to(70)  # offset 70 is in the batch 69..71: the batch goes whole
    assert log.log_end_offset == 69
    assert log.recovery_point == 69
    assert [r.offset for r in read_all(log)] == list(range(69))
    assert all(s.base_offset < 69 for s in log.segments)
    assert log.active_segment.max_timestamp == T0 + 22
    info = log.append(batch(2, tag=99), 0)
    assert info.first_offset == 69
    log.close()
    again = open_log(tmp_path, SMALL)
    assert [r.offset for r in read_all(again)] == list(range(71))
    assert again.truncate_to(0)
    assert again.log_end_offset == 0 and again.size_bytes == 0


def test_truncate_fully_and_start_at(tmp_path: Path) -> None:
    log = open_log(tmp_path, SMALL)
    for i in range(30):
        log.append(batch(3, tag=i), 0)
    log.truncate_fully_and_start_at(500)
    assert (log.log_start_offset, log.log_end_offset, log.size_bytes) == (500, 500, 0)
    assert segment_files(log.dir) == [f"{500:020d}.log"]
    assert log.append(batch(2), 0).first_offset == 500
    with pytest.raises(KafkaError):
        log.read(499, 100)
    log.close()
    again = open_log(tmp_path, SMALL)
    assert (again.log_start_offset, again.log_end_offset) == (500, 502)


def test_delete_removes_the_directory(tmp_path: Path) -> None:
    log = open_log(tmp_path, SMALL)
    for i in range(10):
        log.append(batch(3, tag=i), 0)
    log.delete()
    assert not os.path.exists(log.dir)


def test_compressed_batches_stay_compressed_and_are_searchable(tmp_path: Path) -> None:
    log = open_log(tmp_path, LogConfig(index_interval_bytes=0))
    sent = []
    for b in range(5):
        records = [(None, b"payload %d " % i * 20, T0 + 100 * b + i, ()) for i in range(10)]
        data = encode_batch(records, compression=Codec.GZIP)
        sent.append(data)
        log.append(data, 3)
    stored = region_bytes(log.read(0, 1 << 20).region)
    pos = 0
    for data in sent:
        assert stored[pos + 16 : pos + len(data)] == data[16:]  # still gzip, byte for byte
        pos += len(data)
    assert log.offset_for_timestamp(T0 + 203) == (23, T0 + 203)
    assert log.offset_for_timestamp(T0 + 250) == (30, T0 + 300)


def test_a_record_set_above_segment_bytes_is_refused(tmp_path: Path) -> None:
    log = open_log(tmp_path, LogConfig(segment_bytes=1000))
    with pytest.raises(KafkaError) as e:
        log.append(batch(3, value_size=200) + batch(3, value_size=200), 0)
    assert e.value.code == ErrorCode.RECORD_LIST_TOO_LARGE
    assert log.log_end_offset == 0
