"""The partition side of transactions: open transactions in the producer state, the last stable
offset, control batches (markers) from the coordinator only, and the aborted-transaction index
(``.txnindex``, Kafka's 34-byte entries) through appends, reopening, rebuilds and truncation."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from headwater.broker.storage.log import Log, LogConfig
from headwater.broker.storage.producer_state import decode_snapshot, encode_snapshot
from headwater.broker.storage.txn_index import (
    ENTRY_SIZE,
    AbortedTxn,
    TxnIndexError,
    decode_entries,
    encode_entries,
    txn_index_path,
)
from headwater.protocol.errors import ErrorCode, KafkaError
from headwater.protocol.records.control import decode_marker, encode_marker
from headwater.protocol.records.record import encode_batch
from tests.unit.storage.storage_helpers import T0, open_log

A, B = 7000, 8000


def txn_batch(pid: int, seq: int, n: int = 1, epoch: int = 0) -> bytes:
    return encode_batch(
        [(None, f"{pid}-{seq + i}".encode(), T0, ()) for i in range(n)],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        transactional=True,
    )


def marker(log: Log, pid: int, commit: bool, epoch: int = 0, coordinator_epoch: int = 0) -> int:
    return log.append(encode_marker(pid, epoch, commit, coordinator_epoch, T0), 0, coordinator=True).first_offset


def test_the_lso_stops_at_the_first_open_transaction_and_moves_when_it_ends(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(encode_batch([(None, b"plain", T0, ())]), 0)  # offset 0, not transactional
    log.append(txn_batch(A, 0, 2), 0)  # 1..2
    log.append(txn_batch(B, 0), 0)  # 3
    hw = log.log_end_offset
    assert log.last_stable_offset(hw) == 1
    commit_at = marker(log, A, commit=True)  # 4
    # A's transaction is decided, but its marker is not below the high watermark yet
    assert log.last_stable_offset(hw) == 1
    assert log.last_stable_offset(commit_at + 1) == 3  # B is still open
    abort_at = marker(log, B, commit=False)
    assert log.last_stable_offset(abort_at + 1) == abort_at + 1
    assert log.aborted == [AbortedTxn(B, 3, abort_at, log.aborted[0].last_stable_offset)]
    assert log.collect_aborted(0, abort_at + 1) == log.aborted
    assert log.collect_aborted(abort_at + 1, abort_at + 5) == []  # the marker lies below the fetch
    assert log.collect_aborted(0, 3) == []  # the transaction starts at the upper bound


def test_a_client_may_not_produce_a_control_batch(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    with pytest.raises(KafkaError) as e:
        log.append(encode_marker(A, 0, True, 0, T0), 0)
    assert e.value.code == ErrorCode.CORRUPT_MESSAGE
    assert log.log_end_offset == 0


def test_markers_of_an_old_producer_or_coordinator_epoch_are_fenced(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(txn_batch(A, 0, epoch=3), 0)
    marker(log, A, commit=True, epoch=3, coordinator_epoch=5)
    for epoch, coord, code in (
        (2, 5, ErrorCode.INVALID_PRODUCER_EPOCH),
        (3, 4, ErrorCode.TRANSACTION_COORDINATOR_FENCED),
    ):
        with pytest.raises(KafkaError) as e:
            marker(log, A, commit=False, epoch=epoch, coordinator_epoch=coord)
        assert e.value.code == code
    # a marker with a bumped epoch (the coordinator fenced the producer) is accepted, and the
    # producer's next batch under that epoch starts at sequence 0
    marker(log, A, commit=False, epoch=4, coordinator_epoch=5)
    log.append(txn_batch(A, 0, epoch=4), 0)


def test_the_marker_format_round_trips() -> None:
    m = decode_marker(encode_marker(A, 9, False, 12, T0))
    assert (m.producer_id, m.producer_epoch, m.commit, m.coordinator_epoch) == (A, 9, False, 12)


def test_aborted_transactions_survive_a_clean_reopen_and_a_rebuild(tmp_path: Path) -> None:
    cfg = LogConfig(segment_bytes=700, index_interval_bytes=64)
    log = open_log(tmp_path, cfg)
    for i in range(12):
        pid = A + i
        log.append(txn_batch(pid, 0, 2), 0)
        marker(log, pid, commit=i % 3 != 0)
    log.append(txn_batch(B + 100, 0), 0)  # left open
    assert len(log.segments) > 3, "the test needs several segments"
    aborted = [(a.producer_id, a.first_offset, a.last_offset) for a in log.aborted]
    assert [p for p, _, _ in aborted] == [A, A + 3, A + 6, A + 9]
    files = sorted(n for n in os.listdir(log.dir) if n.endswith(".txnindex"))
    on_disk = []
    for n in files:
        with open(os.path.join(log.dir, n), "rb") as f:
            data = f.read()
        assert len(data) % ENTRY_SIZE == 0
        on_disk += [(a.producer_id, a.first_offset, a.last_offset) for a in decode_entries(data)]
    assert on_disk == aborted, "each abort is in the .txnindex of the segment holding its marker"
    lso = log.last_stable_offset(log.log_end_offset)
    log.close()

    again = open_log(tmp_path, cfg)  # clean: snapshots and files
    assert [(a.producer_id, a.first_offset, a.last_offset) for a in again.aborted] == aborted
    assert again.last_stable_offset(again.log_end_offset) == lso
    again.close()

    for n in os.listdir(again.dir):  # no snapshot, a damaged index: rebuilt from the log
        if n.endswith(".snapshot"):
            os.unlink(os.path.join(again.dir, n))
    with open(os.path.join(again.dir, files[0]), "ab") as f:
        f.write(b"\x00")
    rebuilt = open_log(tmp_path, cfg, needs_recovery=True)
    assert [(a.producer_id, a.first_offset, a.last_offset) for a in rebuilt.aborted] == aborted
    assert rebuilt.last_stable_offset(rebuilt.log_end_offset) == lso
    with open(os.path.join(rebuilt.dir, files[0]), "rb") as f:
        assert len(f.read()) % ENTRY_SIZE == 0, "the damaged file was rewritten"


def test_truncation_drops_the_aborts_past_the_new_end(tmp_path: Path) -> None:
    cfg = LogConfig(segment_bytes=700, index_interval_bytes=64)
    log = open_log(tmp_path, cfg)
    ends = []
    for i in range(8):
        log.append(txn_batch(A + i, 0, 2), 0)
        ends.append(marker(log, A + i, commit=False))
    cut = ends[3] + 1
    log.truncate_to(cut)
    assert [a.last_offset for a in log.aborted] == ends[:4]
    for n in os.listdir(log.dir):
        if n.endswith(".txnindex"):
            with open(os.path.join(log.dir, n), "rb") as f:
                assert all(a.last_offset < cut for a in decode_entries(f.read()))
    log.append(txn_batch(B, 0), 0)
    assert log.last_stable_offset(log.log_end_offset) == cut


def test_the_index_file_format() -> None:
    e = [AbortedTxn(1, 10, 20, 21), AbortedTxn(2, 15, 30, 31)]
    data = encode_entries(e)
    assert len(data) == 2 * 34 and data[:2] == b"\x00\x00"
    assert decode_entries(data) == e
    for bad in (data[:-1], b"\x00\x01" + data[2:], encode_entries(e[::-1])):
        with pytest.raises(TxnIndexError):
            decode_entries(bad)
    assert txn_index_path("d", 42).endswith("00000000000000000042.txnindex")


def test_an_open_transaction_is_kept_in_the_snapshot() -> None:
    from headwater.broker.storage.producer_state import ProducerEntry

    e = ProducerEntry(A, 2, txn_first_offset=17, coordinator_epoch=4)
    got = decode_snapshot(encode_snapshot([e]))[A]
    assert (got.epoch, got.txn_first_offset, got.coordinator_epoch, len(got.batches)) == (2, 17, 4, 0)


def test_a_producer_with_an_open_transaction_is_neither_evicted_nor_expired(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(txn_batch(A, 0), 0)
    log.append(encode_batch([(None, b"idem", T0, ())], producer_id=B, producer_epoch=0, base_sequence=0), 0)
    state = log.producer_state
    assert state.remove_expired(T0 + 10**12, 1) == 1, "only the idle idempotent producer expires"
    assert state.evict_below(10) == 0 and A in state.producers
    assert log.last_stable_offset(log.log_end_offset) == 0, "the open transaction still holds the LSO"
