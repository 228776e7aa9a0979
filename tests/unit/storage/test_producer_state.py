"""The idempotent producer's per-partition state: the leader's checks, the follower's and the
rebuild's bookkeeping, snapshots (write, read, corrupt) and rebuilds after restart and truncation."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from headwater.broker.storage.clock import ManualClock
from headwater.broker.storage.log import Log, LogConfig
from headwater.broker.storage.log_manager import LogManager
from headwater.broker.storage.producer_state import (
    INT32_MAX,
    BatchMetadata,
    ProducerEntry,
    SnapshotError,
    decode_snapshot,
    encode_snapshot,
    last_sequence,
    list_snapshots,
    snapshot_file_name,
)
from headwater.protocol.errors import ErrorCode, KafkaError
from headwater.protocol.records.header import read_header
from headwater.protocol.records.record import encode_batch
from tests.unit.storage.storage_helpers import T0, open_log, read_all

PID = 4000


def pbatch(seq: int, n: int = 1, *, pid: int = PID, epoch: int = 0, tag: str = "v") -> bytes:
    """A batch of ``n`` records from producer ``pid`` starting at sequence ``seq``."""
    return encode_batch(
        [(None, f"{tag}-{pid}-{epoch}-{seq + i}".encode(), T0 + seq + i, ()) for i in range(n)],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
    )


def code_of(log: Log, data: bytes) -> ErrorCode:
    with pytest.raises(KafkaError) as e:
        log.append(data, leader_epoch=0)
    return e.value.code


def test_in_sequence_batches_are_appended(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    assert log.append(pbatch(0, 3), 0).first_offset == 0
    assert log.append(pbatch(3, 2), 0).first_offset == 3
    entry = log.producer_state.producers[PID]
    assert entry.epoch == 0 and entry.last_seq == 4 and entry.last_offset == 4


@pytest.mark.parametrize("which", range(5))
def test_a_retry_of_each_of_the_last_five_batches_is_answered_with_its_original_offsets(
    tmp_path: Path, which: int
) -> None:
    log = open_log(tmp_path)
    log.append(pbatch(0, 2, pid=PID + 1), 0)  # another producer, so offsets and sequences differ
    sent = []
    seq = 0
    for i in range(7):
        data = pbatch(seq, i + 1)
        info = log.append(data, 0)
        sent.append((data, info))
        seq += i + 1
    end = log.log_end_offset
    data, original = sent[2 + which]  # batches 2..6 are the last five
    again = log.append(data, 0)
    assert again.duplicate and again.records_count == 0
    assert (again.first_offset, again.last_offset) == (original.first_offset, original.last_offset)
    assert log.log_end_offset == end, "a duplicate must not be written"
    assert len(read_all(log)) == 2 + sum(range(1, 8))


def test_a_retry_older_than_the_last_five_gets_duplicate_sequence_number(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    for seq in range(6):
        log.append(pbatch(seq), 0)
    end = log.log_end_offset
    assert code_of(log, pbatch(0)) == ErrorCode.DUPLICATE_SEQUENCE_NUMBER
    assert log.log_end_offset == end


def test_a_sequence_gap_is_out_of_order_and_writes_nothing(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(pbatch(0, 3), 0)
    assert code_of(log, pbatch(4)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert code_of(log, pbatch(2, 3)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER  # overlaps, not a duplicate
    assert log.log_end_offset == 3
    assert log.append(pbatch(3), 0).first_offset == 3  # the state did not move


def test_an_old_epoch_is_fenced_and_a_new_epoch_starts_at_zero(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(pbatch(0, epoch=1), 0)
    assert code_of(log, pbatch(1, epoch=0)) == ErrorCode.INVALID_PRODUCER_EPOCH
    assert code_of(log, pbatch(5, epoch=2)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert log.append(pbatch(0, epoch=2), 0).first_offset == 1
    assert log.producer_state.producers[PID].epoch == 2
    assert log.log_end_offset == 2


def test_an_unknown_producer_must_start_at_sequence_zero(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    assert code_of(log, pbatch(7)) == ErrorCode.UNKNOWN_PRODUCER_ID
    assert log.log_end_offset == 0
    assert log.append(pbatch(0), 0).first_offset == 0


def test_batches_without_a_producer_id_are_not_checked(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    plain = encode_batch([(None, b"x", T0, ())])
    log.append(plain, 0)
    log.append(plain, 0)
    assert log.log_end_offset == 2 and not log.producer_state.producers


def test_sequences_wrap_after_int32_max() -> None:
    assert last_sequence(INT32_MAX - 1, 3) == 1


def test_wrapping_sequence_is_accepted(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(pbatch(0), 0)
    entry = log.producer_state.producers[PID]
    # pretend the producer got near the end of the sequence space
    entry.batches[-1] = entry.batches[-1]._replace(first_seq=INT32_MAX - 1, last_seq=INT32_MAX - 1)
    log.append(pbatch(INT32_MAX, 3), 0)
    assert log.producer_state.producers[PID].last_seq == 1


def test_a_follower_records_what_the_leader_wrote(tmp_path: Path) -> None:
    leader = open_log(tmp_path / "leader")
    follower = open_log(tmp_path / "follower")
    for seq in range(0, 6, 2):
        leader.append(pbatch(seq, 2), 0)
    data = leader.read(0, 1 << 20).region
    assert data is not None
    follower.append_as_follower(os.pread(data.file.fileno(), data.size, data.position))
    assert follower.producer_state.producers[PID].batches == leader.producer_state.producers[PID].batches


def test_state_is_rebuilt_from_the_log_after_an_unclean_stop(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    for seq in range(0, 10, 2):
        log.append(pbatch(seq, 2), 0)
    log.append(pbatch(0, pid=PID + 1), 0)
    before = {pid: list(e.batches) for pid, e in log.producer_state.producers.items()}
    log.close()
    assert not list_snapshots(log._fs, log.dir)
    again = open_log(tmp_path, needs_recovery=True)
    assert {pid: list(e.batches) for pid, e in again.producer_state.producers.items()} == before
    assert again.append(pbatch(8, 2), 0).duplicate  # still recognised


def test_snapshots_at_roll_and_rebuild_from_the_newest(tmp_path: Path) -> None:
    cfg = LogConfig(segment_bytes=600, index_interval_bytes=64)
    log = open_log(tmp_path, cfg)
    for seq in range(40):
        log.append(pbatch(seq), 0)
    snaps = list_snapshots(log._fs, log.dir)
    assert len(snaps) == 2, "the newest two snapshots are kept"
    assert snaps[-1] == log.active_segment.base_offset
    log.close()
    again = open_log(tmp_path, cfg, needs_recovery=True)
    assert again.producer_state.producers[PID].last_seq == 39
    assert again.append(pbatch(39), 0).duplicate
    assert code_of(again, pbatch(41)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_a_corrupt_snapshot_is_ignored_and_the_state_rebuilt(tmp_path: Path) -> None:
    cfg = LogConfig(segment_bytes=600, index_interval_bytes=64)
    log = open_log(tmp_path, cfg)
    for seq in range(20):
        log.append(pbatch(seq), 0)
    log.take_producer_snapshot()
    newest = list_snapshots(log._fs, log.dir)[-1]
    log.close()
    path = os.path.join(log.dir, snapshot_file_name(newest))
    data = bytearray(Path(path).read_bytes())
    data[-1] ^= 0xFF
    Path(path).write_bytes(data)
    Path(path + ".tmp").write_bytes(b"half a snapsh")  # a write a crash interrupted
    again = open_log(tmp_path, cfg)
    assert not os.path.exists(path + ".tmp")
    assert newest not in list_snapshots(again._fs, again.dir)
    assert again.producer_state.producers[PID].last_seq == 19
    assert again.append(pbatch(19), 0).duplicate


def test_truncation_rebuilds_the_state(tmp_path: Path) -> None:
    cfg = LogConfig(segment_bytes=600, index_interval_bytes=64)
    log = open_log(tmp_path, cfg)
    for seq in range(30):
        log.append(pbatch(seq), 0)
    log.truncate_to(5)
    assert all(s <= 5 for s in list_snapshots(log._fs, log.dir))
    assert log.producer_state.producers[PID].last_seq == 4
    assert log.append(pbatch(5), 0).first_offset == 5
    log.truncate_fully_and_start_at(100)
    assert not log.producer_state.producers and not list_snapshots(log._fs, log.dir)


def test_retention_forgets_producers_below_the_log_start(tmp_path: Path) -> None:
    cfg = LogConfig(segment_bytes=600, index_interval_bytes=64, retention_bytes=700)
    log = open_log(tmp_path, cfg)
    for seq in range(10):
        log.append(pbatch(seq, pid=PID + 1), 0)
    for seq in range(20):
        log.append(pbatch(seq), 0)
    assert log.delete_retention_segments() > 0
    assert PID + 1 not in log.producer_state.producers
    assert PID in log.producer_state.producers
    assert all(s >= log.log_start_offset for s in list_snapshots(log._fs, log.dir))
    assert code_of(log, pbatch(10, pid=PID + 1)) == ErrorCode.UNKNOWN_PRODUCER_ID
    log.close()  # the newest snapshot (from a roll) still holds the evicted producer
    again = open_log(tmp_path, cfg)
    assert set(again.producer_state.producers) == {PID}, "a reload must not bring an evicted producer back"


def test_snapshot_round_trip_and_rejections() -> None:
    e = ProducerEntry(7, 3)
    e.batches.extend([BatchMetadata(0, 1, 10, 11, T0), BatchMetadata(2, 4, 12, 14, T0 + 1)])
    data = encode_snapshot([e])
    got = decode_snapshot(data)
    assert got[7].epoch == 3 and list(got[7].batches) == [e.batches[-1]], "the last batch, as Kafka keeps"
    for bad in (data[:5], data[:-1], data + b"\0", b"\0\3" + data[2:], data[:-1] + bytes([data[-1] ^ 1])):
        with pytest.raises(SnapshotError):
            decode_snapshot(bad)


def test_a_multi_batch_set_is_checked_in_order(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(pbatch(0) + pbatch(1, 2), 0)
    assert log.producer_state.producers[PID].last_seq == 2
    assert code_of(log, pbatch(3) + pbatch(5)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert log.log_end_offset == 3
    assert read_header(pbatch(3)).base_sequence == 3


def test_idle_producers_expire(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(pbatch(0, pid=PID + 1), 0)  # timestamp T0
    log.append(encode_batch([(None, b"late", T0 + 5000, ())], producer_id=PID, producer_epoch=0, base_sequence=0), 0)
    assert log.producer_state.remove_expired(T0 + 4000, 4000) == 1
    assert set(log.producer_state.producers) == {PID}
    assert code_of(log, pbatch(1, pid=PID + 1)) == ErrorCode.UNKNOWN_PRODUCER_ID


def test_clean_shutdown_leaves_a_snapshot_at_the_log_end(tmp_path: Path) -> None:
    clock = ManualClock()
    mgr = LogManager([str(tmp_path)], LogConfig(), clock=clock)
    lg = mgr.create_log("t", 0)
    for seq in range(5):
        lg.append(pbatch(seq), 0)
    mgr.shutdown()
    assert list_snapshots(lg._fs, lg.dir) == [5]
    again = LogManager([str(tmp_path)], LogConfig(), clock=clock)
    reopened = again.get_log("t", 0)
    assert reopened is not None and reopened.append(pbatch(4), 0).duplicate
    clock.advance(600_000)  # the expiry pass runs, but the producer is recent (record timestamps vs wall time)
    again.producer_id_expiration_ms = 10**15
    again.tick()
    assert PID in reopened.producer_state.producers
    again.producer_id_expiration_ms = 0
    clock.advance(600_000)
    again.tick()
    assert not reopened.producer_state.producers
    again.shutdown()


def test_shutdown_of_many_logs_writes_snapshots_only_where_they_hold_something(tmp_path: Path) -> None:
    """Issue 26: a broker stopping with thousands of idle logs does not write (and fsync) a
    snapshot for each: none for an empty log, none when the newest is already at the log end;
    every log is still flushed, closed and reopened cleanly (the logs close on several threads)."""
    clock = ManualClock()
    mgr = LogManager([str(tmp_path)], LogConfig(), clock=clock)
    empty = [mgr.create_log("idle", p) for p in range(40)]
    busy = mgr.create_log("t", 0)
    for seq in range(5):
        busy.append(pbatch(seq), 0)
    mgr.shutdown()
    assert all(list_snapshots(lg._fs, lg.dir) == [] for lg in empty)
    assert list_snapshots(busy._fs, busy.dir) == [5]
    again = LogManager([str(tmp_path)], LogConfig(), clock=clock)
    snapshot = os.path.join(busy.dir, snapshot_file_name(5))
    written = os.stat(snapshot).st_mtime_ns
    again.shutdown()  # nothing appended since: the snapshot at 5 is not rewritten
    assert os.stat(snapshot).st_mtime_ns == written and list_snapshots(busy._fs, busy.dir) == [5]
    third = LogManager([str(tmp_path)], LogConfig(), clock=clock)
    reopened = third.get_log("t", 0)
    assert reopened is not None and reopened.append(pbatch(4), 0).duplicate
    assert sorted(p for t, p in (k for k, _ in third.all_logs()) if t == "idle") == list(range(40))
    third.shutdown()


def test_a_bad_header_in_an_unchecked_segment_does_not_stop_the_log_opening(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cfg = LogConfig(segment_bytes=600, index_interval_bytes=64)
    log = open_log(tmp_path, cfg)
    for seq in range(20):
        log.append(pbatch(seq), 0)
    first = log.segments[0].log_path
    log.close()
    for offset in list_snapshots(log._fs, log.dir):
        os.unlink(os.path.join(log.dir, snapshot_file_name(offset)))
    data = bytearray(Path(first).read_bytes())
    data[16] = 7  # the first batch's magic
    Path(first).write_bytes(data)
    again = open_log(tmp_path, cfg)  # a clean start: only the active segment is recovered
    assert again.log_end_offset == 20
    assert "producer state rebuilt only up to a bad batch header" in caplog.text


def test_the_snapshot_is_kafka_2_3s_version_1() -> None:
    """The bytes of Kafka 2.3's ProducerStateManager schema (version, crc, then per producer: id,
    epoch, last sequence, last offset, offset delta, timestamp, coordinator epoch, open transaction's
    first offset), written by hand; the sequence wraps below the batch's last."""
    import struct

    from crc32c import crc32c

    entries = struct.pack(">qhiqiqiq", 7, 3, 1, 41, 2, T0, 5, -1) + struct.pack(">qhiqiqiq", 9, 0, -1, -1, 0, -1, 2, 30)
    body = struct.pack(">i", 2) + entries
    kafka = struct.pack(">hI", 1, crc32c(body)) + body
    got = decode_snapshot(kafka)
    assert list(got[7].batches) == [BatchMetadata(2**31 - 1, 1, 39, 41, T0)] and got[7].coordinator_epoch == 5
    assert (got[9].epoch, got[9].txn_first_offset, list(got[9].batches)) == (0, 30, [])
    assert encode_snapshot(got.values()) == kafka


def test_headwater_s_earlier_snapshot_version_2_is_still_read() -> None:
    import struct

    from crc32c import crc32c

    batches = struct.pack(">iiqqq", 0, 1, 10, 11, T0) + struct.pack(">iiqqq", 2, 2, 12, 12, T0 + 1)
    body = struct.pack(">i", 1) + struct.pack(">qhqii", 7, 3, -1, 4, 2) + batches
    got = decode_snapshot(struct.pack(">hI", 2, crc32c(body)) + body)
    assert [b.last_offset for b in got[7].batches] == [11, 12] and got[7].coordinator_epoch == 4
