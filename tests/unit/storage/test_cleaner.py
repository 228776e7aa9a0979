"""Log compaction on a real log directory, with the clock and the file system injected: what survives
a cleaning, tombstones and delete.retention.ms, compressed batches, the dirty ratio, the cleaner
checkpoint, and a crash at each step of the segment swap."""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import os
from pathlib import Path

import pytest

from headwater.broker.storage.cleaner import CleanStats
from headwater.broker.storage.clock import ManualClock
from headwater.broker.storage.fs import OsFileSystem
from headwater.broker.storage.log import Log, LogConfig
from headwater.broker.storage.log_manager import LogManager
from headwater.broker.storage.txn_index import read_txn_index
from headwater.protocol.errors import ErrorCode, KafkaError
from headwater.protocol.records.compression import Codec
from headwater.protocol.records.control import encode_marker
from headwater.protocol.records.header import BatchHeader, read_header
from headwater.protocol.records.record import Record, encode_batch
from tests.unit.storage.storage_helpers import T0, open_log, read_all, segment_files

KEYS = 10
ROUNDS = 5


def compacted(retention_ms: int = 60_000, segment_bytes: int = 600) -> LogConfig:
    return LogConfig(
        segment_bytes=segment_bytes,
        cleanup_policy="compact",
        min_cleanable_dirty_ratio=0.01,
        delete_retention_ms=retention_ms,
    )


def keyed(*records: tuple[str, str | None], ts: int = T0, codec: int = Codec.NONE) -> bytes:
    return encode_batch(
        [(k.encode(), None if v is None else v.encode(), ts, ()) for k, v in records], compression=codec
    )


def write_rounds(lg: Log, rounds: int = ROUNDS) -> dict[str, tuple[int, str]]:
    """Each round updates every key once (one record a batch); returns key -> (last offset, value)."""
    latest = {}
    for r in range(rounds):
        for k in range(KEYS):
            info = lg.append(keyed((f"k{k}", f"v{r}-{k}")), 0)
            latest[f"k{k}"] = (info.last_offset, f"v{r}-{k}")
    return latest


def view(records: list[Record]) -> dict[str, tuple[int, str | None]]:
    out: dict[str, tuple[int, str | None]] = {}
    for r in records:
        assert r.key is not None
        out[r.key.decode()] = (r.offset, None if r.value is None else r.value.decode())
    return out


def batch_headers(lg: Log) -> list[BatchHeader]:
    """Every batch header of the log, control batches included."""
    out: list[BatchHeader] = []
    for seg in lg.segments:
        for b in seg.walk(0):
            out.append(read_header(seg.read_bytes(b.position, b.size)))
    return out


def clean(manager: LogManager) -> CleanStats | None:
    """One pass of the broker's cleaner task."""
    return asyncio.run(manager.clean_one())


@pytest.fixture
def manager(tmp_path: Path) -> LogManager:
    return LogManager([str(tmp_path / "logs")], LogConfig(), OsFileSystem(), ManualClock(T0))


def test_cleaning_keeps_the_latest_record_of_every_key_at_its_offset(manager: LogManager) -> None:
    lg = manager.create_log("c", 0, compacted())
    latest = write_rounds(lg)
    lg.roll()
    before = len(lg.segments)
    stats = clean(manager)
    assert stats is not None and stats.records_removed == KEYS * (ROUNDS - 1)
    records = read_all(lg)
    assert view(records) == latest and len(records) == KEYS  # one per key, at its original offset
    assert [r.offset for r in records] == sorted(r.offset for r in records)
    assert len(lg.segments) < before and lg.log_start_offset == 0 and lg.log_end_offset == KEYS * ROUNDS
    # the active segment was never touched, and a clean log is not cleaned again
    assert clean(manager) is None
    # the checkpoint says where the dirty section starts now
    checkpoint = Path(manager.log_dirs[0], "cleaner-offset-checkpoint").read_text().split("\n")
    assert checkpoint[2] == f"c 0 {KEYS * ROUNDS}"


def test_tombstones_stay_for_delete_retention_ms_then_go(manager: LogManager) -> None:
    clock = manager.clock
    assert isinstance(clock, ManualClock)
    lg = manager.create_log("c", 0, compacted(retention_ms=60_000))
    write_rounds(lg, 1)
    lg.append(keyed(("k3", None)), 0)  # delete k3
    lg.roll()
    assert clean(manager) is not None
    got = view(read_all(lg))
    assert got["k3"] == (KEYS, None)  # the tombstone is kept (and the value it deleted is gone)
    # later writes make the log dirty again; once delete.retention.ms has passed, the tombstone goes
    clock.advance(61_000)
    lg.append(keyed(("k1", "late"), ts=T0 + 61_000), 0)
    lg.roll()
    stats = clean(manager)
    assert stats is not None and stats.tombstones_removed == 1
    got = view(read_all(lg))
    assert "k3" not in got and got["k1"] == (KEYS + 1, "late") and len(got) == KEYS - 1


@pytest.mark.parametrize("codec", [Codec.GZIP, Codec.LZ4, Codec.ZSTD])
def test_compressed_batches_are_rebuilt_with_their_codec_offsets_and_last_offset(
    manager: LogManager, codec: int
) -> None:
    lg = manager.create_log("c", 0, compacted())
    lg.append(keyed(("a", "1"), ("b", "1"), ("c", "1"), ("d", "1"), codec=codec), 0)  # offsets 0..3
    lg.append(keyed(("b", "2"), ("d", "2"), codec=codec), 0)  # 4..5
    lg.roll()
    assert clean(manager) is not None
    assert view(read_all(lg)) == {"a": (0, "1"), "c": (2, "1"), "b": (4, "2"), "d": (5, "2")}
    first = lg.segments[0]
    batch = next(first.walk(0))
    header = first.read_bytes(batch.position, batch.size)
    assert (batch.base_offset, batch.last_offset) == (0, 3)  # the rebuilt batch keeps its offsets
    assert header[22] & 0x07 == codec  # attributes: the same codec


def test_nothing_is_cleaned_below_the_dirty_ratio(manager: LogManager) -> None:
    cfg = dataclasses.replace(compacted(), min_cleanable_dirty_ratio=0.9)
    lg = manager.create_log("c", 0, cfg)
    write_rounds(lg, 2)
    lg.roll()
    assert clean(manager) is not None  # everything is dirty at first: ratio 1.0
    lg.append(keyed(("k0", "again")), 0)
    lg.roll()
    assert clean(manager) is None  # a little dirt over a large clean head


class CrashingFileSystem(OsFileSystem):
    """Fails the first rename whose destination ends with ``at`` (then behaves)."""

    def __init__(self, at: str) -> None:
        self.at: str | None = at

    def rename(self, src: str, dst: str) -> None:
        if self.at is not None and dst.endswith(self.at):
            self.at = None
            raise OSError(errno.EIO, "injected crash")
        super().rename(src, dst)


class CrashAfterDeletes(OsFileSystem):
    """Fails renaming the swap file into place: the old segments are gone by then."""

    def rename(self, src: str, dst: str) -> None:
        if src.endswith(".swap"):
            raise OSError(errno.EIO, "injected crash")
        super().rename(src, dst)


@pytest.mark.parametrize(
    "fs",
    [CrashingFileSystem(".swap"), CrashAfterDeletes()],
    ids=["after the cleaned file was written", "after the old segments were deleted"],
)
def test_a_crash_during_the_swap_leaves_a_readable_log(tmp_path: Path, fs: OsFileSystem) -> None:
    clock = ManualClock(T0)
    mgr = LogManager([str(tmp_path / "logs")], LogConfig(), fs, clock)
    lg = mgr.create_log("c", 0, compacted())
    latest = write_rounds(lg)
    lg.roll()
    assert clean(mgr) is None  # the swap failed: logged, the log is offline until reopened
    assert lg.is_offline
    leftovers = [n for n in os.listdir(lg.dir) if n.endswith((".cleaned", ".swap"))]
    assert leftovers
    mgr.abort()

    reopened = open_log(tmp_path / "logs", compacted(), clock=clock, topic="c", needs_recovery=True)
    assert not [n for n in os.listdir(reopened.dir) if n.endswith((".cleaned", ".swap"))]
    records = read_all(reopened)
    assert view(records) == latest  # every key's latest value
    assert [r.offset for r in records] == sorted({r.offset for r in records})  # increasing, no repeats
    assert reopened.log_end_offset == KEYS * ROUNDS
    assert segment_files(reopened.dir)


def test_a_compacted_log_refuses_records_without_a_key(manager: LogManager) -> None:
    lg = manager.create_log("c", 0, compacted())
    with pytest.raises(KafkaError) as e:
        lg.append(encode_batch([(b"k", b"v", T0, ()), (None, b"no key", T0, ())]), 0)
    assert e.value.code == ErrorCode.CORRUPT_MESSAGE and lg.log_end_offset == 0
    plain = manager.create_log("d", 0, LogConfig())
    assert plain.append(encode_batch([(None, b"fine here", T0, ())]), 0).last_offset == 0


def test_a_cleaning_over_a_segment_truncated_meanwhile_is_abandoned(manager: LogManager) -> None:
    lg = manager.create_log("c", 0, compacted())
    write_rounds(lg)
    lg.roll()
    found = manager._next_cleaning()
    assert found is not None
    _, _, job = found
    job.prepare()
    # a follower's truncation into the last planned segment, then new writes and a roll
    cut = lg.segments[-2].base_offset + 1
    lg.truncate_to(cut)
    lg.append(keyed(("k0", "after the truncation")), 0)
    lg.roll()
    with pytest.raises(ValueError):
        for group in job.groups:
            job.swap(group, job.write(group[0], group))
    got = view(read_all(lg))
    assert got["k0"] == (cut, "after the truncation")
    assert not [n for n in os.listdir(lg.dir) if n.endswith((".cleaned", ".swap"))]


def test_a_truncation_below_the_clean_head_makes_what_is_written_again_dirty(manager: LogManager) -> None:
    lg = manager.create_log("c", 0, compacted())
    write_rounds(lg)
    lg.roll()
    assert clean(manager) is not None
    lg.truncate_to(KEYS * ROUNDS - 3)  # a follower's truncation into the clean head
    lg.append(keyed(("k1", "rewritten"), ("k1", "rewritten again")), 0)
    lg.roll()
    stats = clean(manager)
    assert stats is not None and stats.first_dirty == KEYS * ROUNDS - 3
    got = read_all(lg)
    assert [r.value for r in got if r.key == b"k1"] == [b"rewritten again"]


def test_a_dirty_segment_older_than_max_compaction_lag_is_cleaned_below_the_dirty_ratio(tmp_path: Path) -> None:
    """KIP-354: the ratio alone would never clean this log; age does, and only once the lag passed."""
    clock = ManualClock(T0)
    manager = LogManager([str(tmp_path / "logs")], LogConfig(), OsFileSystem(), clock)
    cfg = dataclasses.replace(compacted(), min_cleanable_dirty_ratio=0.99, max_compaction_lag_ms=60_000)
    lg = manager.create_log("c", 0, cfg)
    write_rounds(lg, 2)
    lg.roll()
    assert clean(manager) is not None  # the first cleaning: everything dirty, ratio 1.0
    for k in range(3):  # a little dirt over a large clean head: ratio far below 0.99
        lg.append(keyed((f"k{k}", "again"), ts=clock.time_ms()), 0)
    lg.roll()
    lg.append(keyed(("k9", "active")), 0)
    assert clean(manager) is None
    clock.advance(60_001)
    stats = clean(manager)
    assert stats is not None and stats.records_removed == 3  # the older k0..k2 records went
    assert view(read_all(lg))["k0"][1] == "again"
    manager.shutdown()


def test_the_cleaner_never_cleans_at_or_past_the_first_unstable_offset(manager: LogManager) -> None:
    """Kafka 2.3's first uncleanable offset includes the first unstable one (issue 41): a record of
    an open transaction may still be aborted, so it must not make an older record of its key go,
    and nothing from the open transaction on is cleaned until it ends."""
    lg = manager.create_log("c", 0, compacted())
    lg.append(keyed(("k1", "committed")), 0)  # offset 0
    for i in range(10):
        lg.append(keyed((f"x{i % 3}", f"a{i}")), 0)
    open_txn = encode_batch(
        [(b"k1", b"open", T0, ())], producer_id=7000, producer_epoch=0, base_sequence=0, transactional=True
    )
    open_at = lg.append(open_txn, 0).first_offset
    for i in range(10):
        lg.append(keyed((f"x{i % 3}", f"b{i}")), 0)
    lg.roll()
    assert lg.last_stable_offset(lg.log_end_offset) == open_at
    stats = clean(manager)
    assert stats is not None and stats.first_uncleanable <= open_at
    records = read_all(lg)
    assert (0, b"k1", b"committed") in [(r.offset, r.key, r.value) for r in records]  # the open one may abort
    assert [r.offset for r in records if r.offset >= open_at] == list(range(open_at, lg.log_end_offset))


def test_an_aborted_transaction_neither_removes_the_committed_value_nor_survives_a_cleaning(
    manager: LogManager,
) -> None:
    """Kafka's cleaner leaves aborted records out of the offset map and removes them (issue 41):
    here an aborted ``k1`` used to make the committed ``k1`` go and stay itself, so a read_committed
    consumer lost ``k1``. The ABORT marker is kept (with its .txnindex entry). (An aborted batch
    that holds its producer's last sequence keeps an empty header: the test below.)"""
    lg = manager.create_log("c", 0, compacted())
    lg.append(keyed(("k1", "committed")), 0)  # offset 0
    aborted = encode_batch(
        [(b"k1", b"aborted", T0, ()), (b"k2", b"aborted", T0, ())],
        producer_id=7000,
        producer_epoch=0,
        base_sequence=0,
        transactional=True,
    )
    first = lg.append(aborted, 0).first_offset
    marker_at = lg.append(encode_marker(7000, 0, False, 0, T0), 0, coordinator=True).first_offset
    for seq in range(2, 7):  # five committed transactions: the aborted batch is no longer among its newest
        y = [(f"y{seq}".encode(), b"committed", T0, ())]
        lg.append(encode_batch(y, producer_id=7000, producer_epoch=0, base_sequence=seq, transactional=True), 0)
        lg.append(encode_marker(7000, 0, True, 0, T0), 0, coordinator=True)
    for i in range(10):
        lg.append(keyed((f"x{i % 3}", f"a{i}")), 0)
    lg.roll()
    assert lg.last_stable_offset(lg.log_end_offset) == lg.log_end_offset
    stats = clean(manager)
    assert stats is not None and stats.first_uncleanable == lg.log_end_offset
    data = [(r.offset, r.key, r.value) for r in read_all(lg) if r.key is not None and r.key.startswith(b"k")]
    assert data == [(0, b"k1", b"committed")]  # the aborted records are gone, the committed k1 stays
    assert first > 0 and any(a.last_offset == marker_at for a in lg.aborted)  # the marker's entry stays
    assert marker_at in [h.base_offset for h in batch_headers(lg) if h.is_control]
    # recovery from the log alone (the aborted batch before its marker is gone) rebuilds the same index
    end = lg.log_end_offset
    manager.abort()
    reopened = open_log(Path(manager.log_dirs[0]), compacted(), clock=manager.clock, topic="c", needs_recovery=True)
    assert reopened.log_end_offset == end and reopened.last_stable_offset(end) == end
    assert [(r.offset, r.key, r.value) for r in read_all(reopened) if r.key == b"k1"] == [(0, b"k1", b"committed")]


def _txn(pid: int, epoch: int, seq: int, *records: tuple[bytes, bytes], ts: int = T0) -> bytes:
    return encode_batch(
        [(k, v, ts, ()) for k, v in records],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        transactional=True,
    )


def _on_disk_aborted(lg: Log) -> list[int]:
    """The ABORT marker offsets of every segment's .txnindex file."""
    return sorted(a.last_offset for seg in lg.segments for a in read_txn_index(OsFileSystem(), lg.dir, seg.base_offset))


def test_markers_go_after_delete_retention_ms_once_their_transaction_has_no_data_left(manager: LogManager) -> None:
    """Kafka 2.3's cleaner (CleanedTransactionMetadata): a marker may go once no batch of its
    transaction is left before it -- an ABORT marker after the cleaning that removed its aborted
    records, a COMMIT marker after its records were all superseded -- and, as a tombstone, only
    past ``delete.retention.ms``; the ABORT marker's aborted-transaction entry goes with it (memory
    and .txnindex: an entry without its marker would hide the producer's later records from
    read_committed consumers). A marker that is its producer's last entry stays (its epoch fences
    zombies after a restart), as do markers whose transactions still have records."""
    clock = manager.clock
    assert isinstance(clock, ManualClock)
    lg = manager.create_log("c", 0, compacted())
    lg.append(keyed(("k1", "committed")), 0)
    lg.append(_txn(7000, 0, 0, (b"k1", b"aborted"), (b"k2", b"aborted")), 0)
    abort_at = lg.append(encode_marker(7000, 0, False, 0, T0), 0, coordinator=True).first_offset
    lg.append(_txn(7000, 0, 2, (b"k3", b"superseded")), 0)
    superseded_commit_at = lg.append(encode_marker(7000, 0, True, 0, T0), 0, coordinator=True).first_offset
    kept_commits = []
    for seq in range(3, 8):  # five more committed transactions: the k3 batch is not among the newest five
        lg.append(_txn(7000, 0, seq, (f"y{seq}".encode(), b"committed")), 0)
        kept_commits.append(lg.append(encode_marker(7000, 0, True, 0, T0), 0, coordinator=True).first_offset)
    lg.append(_txn(7001, 0, 0, (b"k4", b"aborted")), 0)  # 7001 is fenced: its abort comes with epoch 1
    fence_at = lg.append(encode_marker(7001, 1, False, 0, T0), 0, coordinator=True).first_offset
    lg.append(keyed(("k3", "plain")), 0)
    for i in range(10):
        lg.append(keyed((f"x{i % 3}", f"a{i}")), 0)
    lg.roll()

    assert clean(manager) is not None  # the aborted and superseded records go; every marker stays
    markers = [h.base_offset for h in batch_headers(lg) if h.is_control]
    assert {abort_at, superseded_commit_at, fence_at, *kept_commits} <= set(markers)
    assert _on_disk_aborted(lg) == [abort_at, fence_at]

    clock.advance(61_000)  # past delete.retention.ms; more writes make the log dirty again
    for i in range(10):
        lg.append(keyed((f"x{i % 3}", f"b{i}"), ts=T0 + 61_000), 0)
    lg.roll()
    assert clean(manager) is not None
    markers = [h.base_offset for h in batch_headers(lg) if h.is_control]
    assert abort_at not in markers and superseded_commit_at not in markers, "markers of transactions with no data"
    assert fence_at in markers, "a producer's last entry (its fencing epoch) stays"
    assert set(kept_commits) <= set(markers), "markers of transactions with records stay"
    assert [a.last_offset for a in lg.aborted] == [fence_at] and _on_disk_aborted(lg) == [fence_at]
    view_now = {r.key: r.value for r in read_all(lg) if r.key and r.key[:1] in (b"k", b"y")}
    assert view_now == {
        b"k1": b"committed",
        b"k3": b"plain",
        **{f"y{s}".encode(): b"committed" for s in range(3, 8)},
    }
    # recovery from the log alone rebuilds the same aborted-transaction index
    end = lg.log_end_offset
    manager.abort()
    reopened = open_log(Path(manager.log_dirs[0]), compacted(), clock=manager.clock, topic="c", needs_recovery=True)
    assert reopened.log_end_offset == end and [a.last_offset for a in reopened.aborted] == [fence_at]


def test_a_batch_kept_for_its_producer_loses_its_records_but_keeps_an_empty_header(manager: LogManager) -> None:
    """Kafka 2.3's BatchRetention.RETAIN_EMPTY: a batch whose records all go but that holds its
    producer's last sequence (needed to rebuild the producer's state) is written as a header alone
    (no records, codec none, its base and last offset, producer id, epoch and base sequence, max
    timestamp); here an aborted batch and a superseded one, each its producer's newest."""
    lg = manager.create_log("c", 0, compacted())
    lg.append(keyed(("k1", "committed")), 0)
    aborted_at = lg.append(_txn(7000, 0, 0, (b"k1", b"aborted"), (b"k2", b"aborted")), 0).first_offset
    lg.append(encode_marker(7000, 0, False, 0, T0), 0, coordinator=True)
    idempotent = encode_batch(
        [(b"k5", b"old", T0 + 5, ())], producer_id=7002, producer_epoch=3, base_sequence=0, compression=Codec.GZIP
    )
    superseded_at = lg.append(idempotent, 0).first_offset
    lg.append(keyed(("k5", "new")), 0)
    for i in range(10):
        lg.append(keyed((f"x{i % 3}", f"a{i}")), 0)
    lg.roll()
    assert clean(manager) is not None
    headers = {h.base_offset: h for h in batch_headers(lg)}
    a, s = headers[aborted_at], headers[superseded_at]
    assert (a.records_count, a.last_offset, a.producer_id, a.base_sequence) == (0, aborted_at + 1, 7000, 0)
    assert a.is_transactional and a.codec == Codec.NONE
    assert (s.records_count, s.last_offset, s.producer_id, s.producer_epoch, s.base_sequence) == (
        0,
        superseded_at,
        7002,
        3,
        0,
    )
    assert s.codec == Codec.NONE and s.max_timestamp == T0 + 5
    got = {r.key: r.value for r in read_all(lg) if r.key and r.key.startswith(b"k")}
    assert got == {b"k1": b"committed", b"k5": b"new"}
    # a follower of the compacted log takes the empty headers as the leader serves them
    follower = manager.create_log("c", 1, compacted())
    stored = b"".join(seg.read_bytes(0, seg.size) for seg in lg.segments)
    follower.append_as_follower(stored)
    assert follower.log_end_offset == lg.log_end_offset
    assert [h.records_count for h in batch_headers(follower)] == [h.records_count for h in batch_headers(lg)]
    # the producers' state is rebuilt from the empty headers: the next sequence follows on
    end = lg.log_end_offset
    manager.abort()
    reopened = open_log(Path(manager.log_dirs[0]), compacted(), clock=manager.clock, topic="c", needs_recovery=True)
    assert reopened.log_end_offset == end
    assert reopened.producer_state.producers[7002].batches[-1].last_seq == 0
    assert reopened.producer_state.producers[7002].epoch == 3
