"""Log compaction (``cleanup.policy=compact``): keep the latest record of every key.

A compacted log has a *clean* head, already compacted, and a *dirty* tail written since::

    log start ........ first dirty offset ........ first uncleanable offset ... active segment
    |  cleaned before  |  written since the last cleaning  |  too recent (lag) |  never cleaned

- The first dirty offset of each partition is kept in ``cleaner-offset-checkpoint`` in its log
  directory (the same text format as ``recovery-point-offset-checkpoint``: a version line, a
  count line, then ``topic partition offset`` lines).
- The first uncleanable offset is the active segment's base offset, or the base of the first
  segment holding a record younger than ``min.compaction.lag.ms``, or offsets at or above the high
  watermark or the last stable offset (Kafka 2.3's first unstable offset: the log manager passes
  the smaller of the two as ``high_watermark``), whichever is first.
- A log is cleaned when dirty bytes / (clean + dirty bytes) reaches ``min.cleanable.dirty.ratio``,
  or, whatever the ratio, when a dirty segment's first batch is older than ``max.compaction.lag.ms``
  (KIP-354; :func:`max_compaction_delay`). On a compacted log the active segment also rolls once
  it is that old (``LogConfig.max_segment_ms``), so no record stays uncompacted for much longer.

One cleaning: an offset map (key -> its last offset) is built over the dirty section; then every
segment below the first uncleanable offset is rewritten, grouped so that a group stays within
``segment.bytes``, keeping a record when no later record of its key is in the dirty section.
Records without a key are kept. Transactions (issue 41, as Kafka 2.3's cleaner): the records of
an aborted transaction (a transactional batch of a producer between the first offset and the
ABORT marker of an entry of the log's aborted-transaction index) are left out of the offset map --
so they never make an older, committed record of their key go -- and removed, unless their batch
holds its producer's last sequence (below). A marker goes as Kafka 2.3's CleanedTransactionMetadata
lets it: once no batch of its transaction is left before it (an earlier cleaning removed the
aborted records, or compaction all the committed ones: :class:`TransactionsSeen`), and, like a
tombstone, once its timestamp is older than ``delete.retention.ms``; never while it is its
producer's last entry (no data batch of the producer's epoch since: the marker's epoch fences
zombies after a restart). An ABORT marker's aborted-transaction entry goes with it (memory and
``.txnindex``, written before the swap).
A tombstone (null value) is kept while it may still be needed:
it goes only once it is in the clean head (it survived one cleaning already) and its batch's
timestamp is older than ``delete.retention.ms``, so a consumer reading from the start sees a
deletion for at least that long. A batch whose records all stay is copied byte for byte; a batch
that loses some is rebuilt with its base offset, last offset (kept even when its last record
goes), codec, producer fields and partition leader epoch, and only the surviving records at
their original offsets: offsets are never reassigned, gaps are normal. A batch that loses every
record disappears, unless it holds its idempotent producer's last sequence (the producer state
rebuilt from the log needs it): that one stays as a header with no records (:func:`empty_batch`,
Kafka 2.3's ``RETAIN_EMPTY`` for the batch at a producer's last data offset).

Crash safety -- the swap (file names beside the segments, base = the group's first base offset)::

    1. <base>.log.cleaned   written and fsynced          crash: deleted at the next open
    2. renamed <base>.log.swap, directory fsynced        crash: the swap is completed at open
    3. the group's old segments deleted (.log and indexes)
    4. <base>.log.swap renamed <base>.log                 crash: nothing left to do; indexes rebuilt

Completing a swap at open deletes every segment whose base offset lies within the swap file's
offsets, then renames it; so at any crash point the log reads every offset's latest data.
One log is cleaned per pass of ``log.cleaner.backoff.ms``. Reading the segments and writing the
cleaned files runs on a worker thread (throttled to ``log.cleaner.io.max.bytes.per.second``);
the swaps run on the broker's event loop, which owns the log, and a group whose segments the log
dropped meanwhile (retention, a truncation) is abandoned. One line is logged per cleaning: bytes
read and written, records kept and removed, time taken.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from headwater.broker.storage.fs import FileSystem, write_all
from headwater.broker.storage.segment import Segment
from headwater.protocol.records import header as _h
from headwater.protocol.records.control import ABORT, COMMIT
from headwater.protocol.records.header import TIMESTAMP_TYPE_BIT, TRANSACTIONAL_BIT, BatchHeader
from headwater.protocol.records.record import Record, RecordInput, decode_batch, encode_batch

log = logging.getLogger(__name__)

CLEANER_CHECKPOINT_FILE = "cleaner-offset-checkpoint"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"


@dataclass
class CleanStats:
    first_dirty: int
    first_uncleanable: int
    bytes_read: int = 0
    bytes_written: int = 0
    records_kept: int = 0
    records_removed: int = 0
    tombstones_removed: int = 0
    markers_removed: int = 0
    segments_before: int = 0
    segments_after: int = 0
    seconds: float = 0.0


class CleanableLog(Protocol):
    """What the cleaner needs of a log (:class:`~headwater.broker.storage.log.Log` has it)."""

    @property
    def segments(self) -> tuple[Segment, ...]: ...

    def swap_cleaned(
        self, old: Sequence[Segment], cleaned_path: str | None, *, dropped_aborts: Collection[int] = ()
    ) -> None: ...


def cleanable_section(
    segments: Sequence[Segment],
    first_dirty: int,
    log_start: int,
    lag_ms: int,
    now_ms: int,
    high_watermark: int | None = None,
) -> tuple[int, int]:
    """(first dirty offset, first uncleanable offset) of a log with these segments: the base of the
    active segment, of the first one younger than the compaction lag, or of the first one holding
    offsets at or above the high watermark (what a new leader may still truncate), whichever is first."""
    end = segments[-1].base_offset  # the active segment is never cleaned
    for s in segments[:-1]:
        if (lag_ms > 0 and s.largest_timestamp > now_ms - lag_ms) or (
            high_watermark is not None and s.next_offset > high_watermark
        ):
            end = s.base_offset
            break
    return max(first_dirty, log_start), end


def max_compaction_delay(segments: Sequence[Segment], first_dirty: int, max_lag_ms: int, now_ms: int) -> int:
    """How long past ``max.compaction.lag.ms`` the oldest dirty record is (KIP-354; 0: not past).

    As Kafka's ``LogCleanerManager.maxCompactionDelay``: over the dirty segments other than the
    active one, the earliest first-batch timestamp (a batch without one is skipped); a log whose
    delay is positive is cleaned even below ``min.cleanable.dirty.ratio``."""
    if max_lag_ms >= 2**63 - 1:
        return 0
    earliest: int | None = None
    for s in segments[:-1]:
        if s.next_offset <= first_dirty or not s.size:
            continue
        first = next(iter(s.walk(0)), None)
        if first is not None and first.max_timestamp > 0:
            earliest = first.max_timestamp if earliest is None else min(earliest, first.max_timestamp)
    clean_until = now_ms - max(max_lag_ms, 0)
    return clean_until - earliest if earliest is not None and earliest < clean_until else 0


def dirty_ratio(segments: Sequence[Segment], first_dirty: int, first_uncleanable: int) -> tuple[float, int]:
    """(dirty bytes / cleanable bytes, dirty bytes) over the segments below ``first_uncleanable``."""
    clean = dirty = 0
    for s in segments:
        if s.next_offset > first_uncleanable or s is segments[-1]:
            break
        if s.next_offset <= first_dirty:
            clean += s.size
        else:
            dirty += s.size
    total = clean + dirty
    return (dirty / total if total else 0.0), dirty


def _batches(seg: Segment) -> Iterator[tuple[bytes, BatchHeader, list[Record]]]:
    """Each batch of a segment: its bytes, header and records. Holding the segment's file keeps its
    descriptor (and so its number) alive while a worker thread reads; a segment the log deleted
    meanwhile raises ValueError, which abandons the cleaning."""
    held = seg.file()  # noqa: F841 - the reference is the point
    for b in seg.walk(0):
        data = seg.read_bytes(b.position, b.size)
        header, records = decode_batch(data)
        yield data, header, records


class AbortedRanges:
    """The aborted transactions of a log: producer id -> [(first offset, ABORT marker offset)]."""

    def __init__(self, aborted: Sequence[tuple[int, int, int]] = ()) -> None:
        self.by_producer: dict[int, list[tuple[int, int]]] = {}
        for producer_id, first, last in aborted:
            self.by_producer.setdefault(producer_id, []).append((first, last))

    def holds(self, header: BatchHeader) -> bool:
        """Whether the batch is data of an aborted transaction."""
        if header.is_control or not header.is_transactional:
            return False
        ranges = self.by_producer.get(header.producer_id)
        return ranges is not None and any(first <= header.base_offset < last for first, last in ranges)


class TransactionsSeen:
    """Which transactions still have batches, met in offset order over one cleaning (Kafka 2.3's
    CleanedTransactionMetadata): a marker may go only when no batch of its transaction was met
    before it in this cleaning, i.e. an earlier cleaning removed them all."""

    def __init__(self, aborted: Sequence[tuple[int, int, int]] = ()) -> None:
        self.pending = sorted(aborted, key=lambda a: a[1])  # by first offset
        self.next = 0
        self.ongoing_aborted: dict[int, bool] = {}  # producer id -> a batch of it was met
        self.ongoing_committed: set[int] = set()

    def _reach(self, offset: int) -> None:
        while self.next < len(self.pending) and self.pending[self.next][1] <= offset:
            self.ongoing_aborted[self.pending[self.next][0]] = False
            self.next += 1

    def data(self, header: BatchHeader) -> bool:
        """A data batch: whether its records are aborted ones (to remove)."""
        self._reach(header.last_offset)
        if not header.is_transactional:
            return False
        if header.producer_id in self.ongoing_aborted:
            self.ongoing_aborted[header.producer_id] = True
            return True
        self.ongoing_committed.add(header.producer_id)
        return False

    def marker(self, header: BatchHeader, records: list[Record]) -> bool:
        """A control batch: whether it may go (no batch of its transaction is left)."""
        self._reach(header.last_offset)
        if not records or records[0].key is None or len(records[0].key) < 4:
            return True  # an empty control batch: already cleaned
        kind = int.from_bytes(records[0].key[2:4], "big", signed=True)
        pid = header.producer_id
        if kind == ABORT:
            return not self.ongoing_aborted.pop(pid, False)
        if kind == COMMIT:
            if pid in self.ongoing_committed:
                self.ongoing_committed.discard(pid)
                return False
            return True
        return False


def empty_batch(header: BatchHeader) -> bytes:
    """The header alone of a batch whose records all went but which must stay (Kafka 2.3's
    ``BatchRetention.RETAIN_EMPTY``, ``DefaultRecordBatch.writeEmptyHeader``): its base and last
    offset, producer id, epoch and base sequence, partition leader epoch, timestamp type,
    transactional and control bits and max timestamp; no records, codec none, no first timestamp."""
    attributes = header.attributes & (_h.TIMESTAMP_TYPE_BIT | _h.TRANSACTIONAL_BIT | _h.CONTROL_BIT)
    out = bytearray(_h.HEADER_SIZE)
    _h.HEADER.pack_into(
        out,
        0,
        header.base_offset,
        _h.HEADER_SIZE - _h.LOG_OVERHEAD,
        header.partition_leader_epoch,
        2,
        0,  # crc, set below
        attributes,
        header.last_offset_delta,
        _h.NO_TIMESTAMP,
        header.max_timestamp,
        header.producer_id,
        header.producer_epoch,
        header.base_sequence,
        0,
    )
    struct.pack_into(">I", out, _h.CRC_OFFSET, _h.compute_crc(out, 0, len(out)))
    return bytes(out)


def build_offset_map(
    segments: Sequence[Segment], first_dirty: int, first_uncleanable: int, aborted: AbortedRanges | None = None
) -> dict[bytes, int]:
    """key -> the offset of its last record in [first_dirty, first_uncleanable), aborted
    transactions' records left out."""
    latest: dict[bytes, int] = {}
    for seg in segments:
        if seg.next_offset <= first_dirty or seg.base_offset >= first_uncleanable:
            continue
        for _, header, records in _batches(seg):
            if header.is_control or (aborted is not None and aborted.holds(header)):
                continue
            for r in records:
                if r.key is not None and first_dirty <= r.offset < first_uncleanable:
                    latest[r.key] = r.offset
    return latest


def group_segments(segments: Sequence[Segment], first_uncleanable: int, max_bytes: int) -> list[list[Segment]]:
    """Consecutive segments below ``first_uncleanable``, grouped up to ``max_bytes`` each."""
    groups: list[list[Segment]] = []
    size = 0
    for s in segments[:-1]:
        if s.next_offset > first_uncleanable:
            break
        if groups and size + s.size <= max_bytes and s.next_offset - groups[-1][0].base_offset <= 2**31 - 1:
            groups[-1].append(s)
            size += s.size
        else:
            groups.append([s])
            size = s.size
    return groups


class _Keep:
    """The rule deciding which records survive one cleaning."""

    def __init__(
        self,
        offset_map: dict[bytes, int],
        first_dirty: int,
        tombstone_horizon_ms: int,
        protected: set[int],
        aborted: AbortedRanges | None = None,
    ) -> None:
        self.aborted = aborted or AbortedRanges()
        self.offset_map = offset_map
        self.first_dirty = first_dirty
        self.tombstone_horizon_ms = tombstone_horizon_ms
        self.protected = protected  # last offsets of the batches holding producers' last sequences
        #: producer id -> epoch, for producers whose last entry in the log is a marker (it stays)
        self.last_markers: dict[int, int] = {}
        self.seen = TransactionsSeen()
        #: offsets of the ABORT markers this cleaning removed (their index entries go too)
        self.dropped_aborts: set[int] = set()

    def record(self, r: Record, batch_max_timestamp: int, stats: CleanStats) -> bool:
        if r.key is not None and self.offset_map.get(r.key, -1) > r.offset:
            return False  # superseded by a later record of its key
        if r.value is None and r.offset < self.first_dirty and batch_max_timestamp < self.tombstone_horizon_ms:
            stats.tombstones_removed += 1
            return False  # a tombstone past delete.retention.ms in the clean head
        return True


def _filtered_batch(
    data: bytes, header: BatchHeader, records: list[Record], keep: _Keep, stats: CleanStats
) -> bytes | None:
    if header.is_control:
        may_go = keep.seen.marker(header, records)
        if (
            may_go
            and header.max_timestamp < keep.tombstone_horizon_ms
            and keep.last_markers.get(header.producer_id) != header.producer_epoch
        ):
            if records and records[0].key is not None and records[0].key[2:4] == ABORT.to_bytes(2, "big"):
                keep.dropped_aborts.add(header.base_offset)
            stats.markers_removed += 1
            return None
        return data
    if keep.seen.data(header):
        kept: list[Record] = []
    else:
        kept = [r for r in records if keep.record(r, header.max_timestamp, stats)]
    stats.records_kept += len(kept)
    stats.records_removed += len(records) - len(kept)
    if len(kept) == len(records):
        return data
    if not kept:
        if header.producer_id >= 0 and header.last_offset in keep.protected:
            return empty_batch(header)  # its producer's sequence stays in the log
        return None
    return encode_batch(
        [RecordInput(r.key, r.value, r.timestamp, r.headers) for r in kept],
        base_offset=header.base_offset,
        compression=header.codec,
        timestamp_type=1 if header.attributes & TIMESTAMP_TYPE_BIT else 0,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        partition_leader_epoch=header.partition_leader_epoch,
        transactional=bool(header.attributes & TRANSACTIONAL_BIT),
        offset_deltas=[r.offset - header.base_offset for r in kept],
        last_offset_delta=header.last_offset_delta,
    )


class Throttle:
    """``log.cleaner.io.max.bytes.per.second``: sleeps the cleaning thread to stay under the rate."""

    def __init__(self, bytes_per_second: float) -> None:
        self.rate = bytes_per_second
        self.started = time.monotonic()
        self.done = 0

    def consumed(self, n: int) -> None:
        self.done += n
        if self.rate <= 0 or self.rate == float("inf"):
            return
        ahead = self.done / self.rate - (time.monotonic() - self.started)
        if ahead > 0:
            time.sleep(ahead)


class Cleaning:
    """One cleaning of one log, in steps. :meth:`prepare` and :meth:`write` only read the log's
    inactive segments and write new files, so a worker thread may run them while the broker goes on
    appending to the active segment; :meth:`swap` changes the log and runs where the log's owner
    does. :meth:`run` drives them."""

    def __init__(
        self,
        lg: CleanableLog,
        fs: FileSystem,
        first_dirty: int,
        now_ms: int,
        *,
        compaction_lag_ms: int,
        delete_retention_ms: int,
        segment_bytes: int,
        log_start: int,
        protected: set[int],
        high_watermark: int | None = None,
        io_bytes_per_second: float = float("inf"),
        aborted: Sequence[tuple[int, int, int]] = (),
        last_markers: dict[int, int] | None = None,
    ) -> None:
        self.lg, self.fs = lg, fs
        self.aborted_list = list(aborted)
        self.last_markers = dict(last_markers or {})
        #: (producer id, first offset, ABORT marker offset) of the log's aborted transactions
        self.aborted = AbortedRanges(aborted)
        self.started = time.monotonic()
        self.segments = lg.segments
        first_dirty, end = cleanable_section(
            self.segments, first_dirty, log_start, compaction_lag_ms, now_ms, high_watermark
        )
        self.stats = CleanStats(first_dirty, end, segments_before=len(self.segments))
        self.groups = group_segments(self.segments, end, segment_bytes)
        self.tombstone_horizon_ms = now_ms - delete_retention_ms
        self.protected = protected
        self.throttle = Throttle(io_bytes_per_second)
        self.keep: _Keep | None = None
        #: each planned segment's size: a swap over a segment that changed since (a follower's
        #: truncation into it) would bring back what the truncation removed, so it is abandoned
        self.sizes = {id(s): s.size for s in self.segments}

    def prepare(self) -> None:
        """Build the offset map over the dirty section (reads only)."""
        for seg in self.segments:
            if self.stats.first_dirty < seg.next_offset and seg.base_offset < self.stats.first_uncleanable:
                self.throttle.consumed(seg.size)
        offset_map = build_offset_map(self.segments, self.stats.first_dirty, self.stats.first_uncleanable, self.aborted)
        self.keep = _Keep(offset_map, self.stats.first_dirty, self.tombstone_horizon_ms, self.protected, self.aborted)
        self.keep.seen = TransactionsSeen(self.aborted_list)
        self.keep.last_markers = self.last_markers

    def write(self, named_after: Segment, group: Sequence[Segment]) -> str | None:
        """Write the group's surviving batches to ``<base>.log.cleaned`` (fsynced; ``base`` is
        ``named_after``'s); None when nothing survives."""
        assert self.keep is not None, "prepare() first"
        fs, stats = self.fs, self.stats
        path = named_after.log_path + CLEANED_SUFFIX
        fd = fs.open(path, create=True)
        try:
            fs.ftruncate(fd, 0)
            position = 0
            for seg in group:
                stats.bytes_read += seg.size
                for data, header, records in _batches(seg):
                    out = _filtered_batch(data, header, records, self.keep, stats)
                    self.throttle.consumed(len(data) + (len(out) if out is not None else 0))
                    if out is not None:
                        write_all(fs, fd, out, position)
                        position += len(out)
            fs.fsync(fd)
        finally:
            fs.close(fd)
        if position == 0:
            fs.unlink(path)
            return None
        stats.bytes_written += position
        return path

    def swap(self, old: Sequence[Segment], cleaned: str | None) -> None:
        """Put a written group in place (the cleaned file keeps the first base offset of everything it
        replaces, so the log start offset does not move unless nothing at all survived from it)."""
        try:
            if any(s.size != self.sizes.get(id(s)) for s in old):
                raise ValueError("a planned segment changed during the cleaning")
            assert self.keep is not None
            self.lg.swap_cleaned(old, cleaned, dropped_aborts=self.keep.dropped_aborts)
        except ValueError:
            # the log changed meanwhile (retention or a truncation removed some of these segments)
            if cleaned is not None:
                self.fs.unlink(cleaned)
            raise

    def finish(self) -> CleanStats:
        self.stats.segments_after = len(self.lg.segments)
        self.stats.seconds = time.monotonic() - self.started
        return self.stats

    async def run(self) -> CleanStats:
        """The whole cleaning: reading and writing on a worker thread, the swaps here (the event loop)."""
        await asyncio.to_thread(self.prepare)
        emptied: list[Segment] = []  # segments nothing survived in: they go with the next group's swap
        for i, group in enumerate(self.groups):
            cleaned = await asyncio.to_thread(self.write, (emptied or group)[0], group)
            if cleaned is None and i + 1 < len(self.groups):
                emptied += group
                continue
            self.swap(emptied + group, cleaned)
            emptied = []
        return self.finish()


def cleaned_files(directory_entries: Sequence[str]) -> tuple[list[str], list[str]]:
    """(``.cleaned`` files, ``.swap`` files) among a log directory's names."""
    return (
        [n for n in directory_entries if n.endswith(CLEANED_SUFFIX)],
        [n for n in directory_entries if n.endswith(SWAP_SUFFIX)],
    )


def swap_target(swap_name: str) -> str:
    return swap_name[: -len(SWAP_SUFFIX)]


__all__ = [
    "CLEANED_SUFFIX",
    "CLEANER_CHECKPOINT_FILE",
    "SWAP_SUFFIX",
    "CleanStats",
    "Cleaning",
    "cleanable_section",
    "cleaned_files",
    "dirty_ratio",
    "swap_target",
]
