"""One log segment: ``<20-digit base offset>.log`` and its ``.index`` and ``.timeindex``.

The ``.log`` file is a plain concatenation of magic-2 record batches (layout in
:mod:`headwater.protocol.records.header`), each byte for byte as its producer sent it except the
base offset and partition leader epoch, which the broker assigned and which lie outside the CRC.
There is no other framing and no file header. Invariants:

* every batch is whole and passes its length, magic and CRC-32C checks;
* batch offsets strictly increase: a batch's base offset is above the previous batch's last offset,
  and the first is ≥ the segment's base offset (the name of the file);
* last offset - base offset of the segment fits in an int32 (the indexes' relative offsets), and
  positions fit in an int32 (the log rolls before ``segment.bytes``).

``append`` refuses a batch whose offset is not above the segment's last offset. ``recover`` walks
the file, checks each batch, truncates at the first invalid byte, and rebuilds both indexes.

The ``.log`` descriptor lives in a :class:`SegmentFile`, shared with every ``FileRegion`` a read
returns (``sendfile`` sends from it). It is closed when the last reference goes, so a region stays
readable after its segment was deleted (the path is unlinked at delete, the inode lives on).

Concurrency: a segment belongs to one :class:`~headwater.broker.storage.log.Log`, which the broker
calls from its single asyncio thread. Only ``sendfile`` on a region may run elsewhere; the bytes a
region covers are immutable unless the log is truncated (a follower's truncation), in which case
the send may come up short, which the network layer must treat as end of data.
"""

from __future__ import annotations

import logging
import os
import struct
import weakref
from collections.abc import Iterator, Sequence
from typing import NamedTuple

from headwater.broker.storage.fs import BytesLike, FileSystem, write_all
from headwater.broker.storage.index import INT32_MAX, IndexCorruptError, InvalidOffsetError, OffsetIndex, TimeIndex
from headwater.protocol.errors import ErrorCode, KafkaError
from headwater.protocol.primitives import FileRegion
from headwater.protocol.records.header import HEADER, HEADER_SIZE, LOG_OVERHEAD, BatchHeader, crc_matches
from headwater.protocol.records.record import decode_batch

log = logging.getLogger(__name__)

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"

# The part of a batch header a walk needs: base_offset, batch_length, magic, last_offset_delta,
# max_timestamp (skipping partition_leader_epoch, crc, attributes and base_timestamp).
_WALK = struct.Struct(">qi4xb4x2xi8xq")
_WALK_SIZE = _WALK.size  # 43
_MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD  # 49
_WALK_CHUNK = 8192  # a walk starts at an index entry, at most ~index.interval.bytes before its target
_RECOVER_CHUNK = 1 << 20


def segment_file_stem(base_offset: int) -> str:
    return f"{base_offset:020d}"


def parse_segment_file_name(name: str) -> tuple[int, str] | None:
    """(base offset, suffix) of ``00000000000000000042.log``-like names, else None."""
    stem, dot, ext = name.partition(".")
    if not dot or len(stem) != 20 or not stem.isdigit():
        return None
    return int(stem), "." + ext


class SegmentCorruptError(KafkaError):
    """A segment's bytes are not what the log wrote (a bad header met in a walk)."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.KAFKA_STORAGE_ERROR, message)


class SegmentWriteError(Exception):
    """An append failed. ``rolled_back`` says whether the file was truncated back to its old end."""

    def __init__(self, cause: OSError, rolled_back: bool) -> None:
        super().__init__(f"append failed ({cause}); {'rolled back' if rolled_back else 'NOT rolled back'}")
        self.cause = cause
        self.rolled_back = rolled_back


class SegmentFile:
    """The ``.log`` descriptor. Readers hold it through FileRegions; it closes when unreferenced.

    ``weakref.finalize`` closes the descriptor once neither the segment nor any region refers to
    this object (immediately in CPython, where references are counted), or at interpreter exit.
    """

    __slots__ = ("__weakref__", "_fd", "_finalizer")

    def __init__(self, fs: FileSystem, fd: int) -> None:
        self._fd = fd
        self._finalizer = weakref.finalize(self, fs.close, fd)

    def fileno(self) -> int:
        if not self._finalizer.alive:
            raise ValueError("segment file is closed")
        return self._fd

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive


class BatchEntry(NamedTuple):
    """One batch of an append: where it lies in the appended buffer and the offsets it holds."""

    position: int  # within the appended buffer
    base_offset: int
    last_offset: int
    max_timestamp: int
    size: int


class BatchLocation(NamedTuple):
    """A batch found in a segment by ``find_batch``."""

    position: int
    base_offset: int
    last_offset: int
    size: int
    max_timestamp: int


class Segment:
    """One segment (format, invariants and concurrency in the module docstring).

    Open an existing one with :meth:`open` and then either :meth:`load` (trust the data, check the
    indexes) or :meth:`recover` (check every batch); make a new one with :meth:`create`.
    """

    def __init__(self, fs: FileSystem, directory: str, base_offset: int, index_interval_bytes: int) -> None:
        stem = os.path.join(directory, segment_file_stem(base_offset))
        self.fs = fs
        self.base_offset = base_offset
        self.log_path = stem + LOG_SUFFIX
        self.index_interval_bytes = index_interval_bytes
        self._index = OffsetIndex(fs, stem + INDEX_SUFFIX, base_offset)
        self._time_index = TimeIndex(fs, stem + TIME_INDEX_SUFFIX, base_offset)
        self._file: SegmentFile | None = None
        self._size = 0
        self._next_offset = base_offset
        self._max_timestamp = -1  # largest batch max_timestamp (-1: none)
        self._offset_of_max_timestamp = base_offset - 1
        self._bytes_since_last_index_entry = 0
        self._unsynced = False
        self._deleted = False
        self.last_modified_ms = 0
        # Wall-clock ms of the first append (segment.ms rolls from it); None while empty.
        self.rolling_base_ms: int | None = None

    # -- opening -------------------------------------------------------------------------------

    @classmethod
    def create(
        cls, fs: FileSystem, directory: str, base_offset: int, index_interval_bytes: int, now_ms: int
    ) -> Segment:
        """A new empty segment (an existing file of the same name is emptied, with a warning)."""
        seg = cls(fs, directory, base_offset, index_interval_bytes)
        fd = fs.open(seg.log_path, create=True)
        seg._file = SegmentFile(fs, fd)
        try:
            if fs.fsize(fd):
                log.warning("%s already exists with %d bytes; emptying it", seg.log_path, fs.fsize(fd))
                fs.ftruncate(fd, 0)
            seg._index.rewrite()
            seg._time_index.rewrite()
        except OSError:
            # No half-made segment may stay: an empty .log left here would overlap the previous
            # segment once that one grows past this base offset, and the next start would drop it
            # together with every later segment.
            seg._file = None  # the descriptor closes with its last reference
            for index in (seg._index, seg._time_index):
                try:
                    index.close()
                except OSError:
                    pass
            for path in (seg.log_path, seg._index.path, seg._time_index.path):
                try:
                    fs.unlink(path)
                except OSError:
                    pass
            raise
        seg.last_modified_ms = now_ms
        return seg

    @classmethod
    def open(cls, fs: FileSystem, directory: str, base_offset: int, index_interval_bytes: int) -> Segment:
        """An existing segment, not yet checked: call :meth:`load` or :meth:`recover` next."""
        seg = cls(fs, directory, base_offset, index_interval_bytes)
        seg._size = fs.size(seg.log_path)
        seg.last_modified_ms = fs.mtime_ms(seg.log_path)
        return seg

    def load(self) -> None:
        """Load both indexes and find the segment's end by walking the batches after the last entry.

        Raises FileNotFoundError (an index is missing), IndexCorruptError (an index breaks an
        invariant) or SegmentCorruptError (a header after the last entry is bad): then the caller
        recovers the segment, which rebuilds the indexes.
        """
        index = OffsetIndex.load(self.fs, self._index.path, self.base_offset, self._size)
        last_offset, last_position = index.last_entry()
        if len(index):
            at = self._read_walk_header(last_position)  # the entry's batch: its offset within it
            if at is None or not at[0] <= last_offset <= at[0] + at[3]:
                raise IndexCorruptError(
                    f"{index.path}: last entry ({last_offset}, {last_position}) is not the start of its batch"
                )
        time_index = TimeIndex.load(self.fs, self._time_index.path, self.base_offset)
        self._index.close()
        self._time_index.close()
        self._index, self._time_index = index, time_index
        self._rescan_tail()
        time_index.check_last(self._next_offset)
        self._load_rolling_base()

    def _load_rolling_base(self) -> None:
        first = self._read_walk_header(0) if self._size else None
        self.rolling_base_ms = first[4] if first is not None and first[4] >= 0 else None

    def recover(self, max_batch_bytes: int) -> int:
        """Check every batch, truncate at the first invalid byte, rebuild both indexes.

        A batch is valid when its header is whole, its magic is 2, its length is at least the
        header's and at most ``max_batch_bytes``, it ends within the file, its CRC-32C matches, its
        record count is at most its last offset delta + 1 (fewer after compaction), its offsets are above the previous
        batch's. Returns the number of bytes truncated.
        """
        fs = self.fs
        fd = self._fd()
        file_size = fs.fsize(fd)
        self._index.clear()
        self._time_index.clear()
        self._next_offset = self.base_offset
        self._max_timestamp = -1
        self._offset_of_max_timestamp = self.base_offset - 1
        self._bytes_since_last_index_entry = 0
        buf = b""
        buf_start = 0
        pos = 0
        problem = ""
        while pos < file_size:
            rel = pos - buf_start
            if rel + HEADER_SIZE > len(buf):
                buf, buf_start, rel = fs.pread(fd, min(_RECOVER_CHUNK, file_size - pos), pos), pos, 0
                if len(buf) < HEADER_SIZE:
                    problem = f"{file_size - pos} bytes are too few for a batch header"
                    break
            h = BatchHeader._make(HEADER.unpack_from(buf, rel))
            size = LOG_OVERHEAD + h.batch_length
            if h.magic != 2:
                problem = f"magic {h.magic}"
                break
            if h.batch_length < _MIN_BATCH_LENGTH or size > max_batch_bytes:
                problem = f"batch length {h.batch_length}"
                break
            if pos + size > file_size:
                problem = f"a batch of {size} bytes runs past the end of the file"
                break
            if rel + size > len(buf):
                buf, buf_start, rel = fs.pread(fd, max(size, min(_RECOVER_CHUNK, file_size - pos)), pos), pos, 0
                if len(buf) < size:
                    problem = "short read"
                    break
            if not crc_matches(buf, rel, h):
                problem = "CRC-32C mismatch"
                break
            # fewer: compacted; none: a header the cleaner kept for its producer (RETAIN_EMPTY)
            if h.records_count < 0 or h.records_count > h.last_offset_delta + 1:
                problem = f"{h.records_count} records but a last offset delta of {h.last_offset_delta}"
                break
            last = h.base_offset + h.last_offset_delta
            if h.base_offset < self._next_offset or last - self.base_offset > INT32_MAX:
                problem = f"offset {h.base_offset} out of order (expected ≥ {self._next_offset})"
                break
            self._index_batch(pos, h.base_offset, last, h.max_timestamp, size)
            self._next_offset = last + 1
            pos += size
        truncated = file_size - pos
        if truncated:
            log.warning(
                "%s: invalid data at position %d (%s): truncating %d bytes; the segment now ends at offset %d",
                self.log_path,
                pos,
                problem,
                truncated,
                self._next_offset,
            )
            fs.ftruncate(fd, pos)
            self._unsynced = True
        self._size = pos
        self._index.rewrite()
        self._time_index.rewrite()
        self._load_rolling_base()
        return truncated

    # -- state ---------------------------------------------------------------------------------

    @property
    def size(self) -> int:
        return self._size

    @property
    def next_offset(self) -> int:
        """One above the last offset in the segment (the base offset when empty)."""
        return self._next_offset

    @property
    def max_timestamp(self) -> int:
        """The largest batch max_timestamp (-1 when none)."""
        return self._max_timestamp

    @property
    def offset_of_max_timestamp(self) -> int:
        return self._offset_of_max_timestamp

    @property
    def largest_timestamp(self) -> int:
        """Kafka's ``largestTimestamp``: the largest record timestamp, or the last-modified time."""
        return self._max_timestamp if self._max_timestamp >= 0 else self.last_modified_ms

    @property
    def index(self) -> OffsetIndex:
        return self._index

    @property
    def time_index(self) -> TimeIndex:
        return self._time_index

    def _fd(self) -> int:
        return self.file().fileno()

    def file(self) -> SegmentFile:
        """The shared ``.log`` descriptor (opened on first use)."""
        if self._file is None:
            if self._deleted:
                raise ValueError(f"{self.log_path} was deleted")
            self._file = SegmentFile(self.fs, self.fs.open(self.log_path))
        return self._file

    # -- appending -----------------------------------------------------------------------------

    def append(self, data: BytesLike, batches: Sequence[BatchEntry], now_ms: int) -> None:
        """Write ``data`` (whole, validated batches with offsets assigned) at the end, in one write.

        Raises InvalidOffsetError (nothing written) if an offset does not increase, and
        SegmentWriteError if the write failed (the file is truncated back when possible).
        """
        expected = self._next_offset
        for b in batches:
            if b.base_offset < expected or b.last_offset < b.base_offset:
                raise InvalidOffsetError(
                    f"batch at offset {b.base_offset} appended to {self.log_path} whose next offset is {expected}"
                )
            expected = b.last_offset + 1
        if batches and batches[-1].last_offset - self.base_offset > INT32_MAX:
            raise InvalidOffsetError(f"offset {batches[-1].last_offset} too far above the segment's base")
        position = self._size
        fd = self._fd()
        try:
            write_all(self.fs, fd, data, position)
        except OSError as e:
            try:
                self.fs.ftruncate(fd, position)
            except OSError:
                raise SegmentWriteError(e, rolled_back=False) from e
            raise SegmentWriteError(e, rolled_back=True) from e
        for b in batches:
            self._index_batch(position + b.position, b.base_offset, b.last_offset, b.max_timestamp, b.size)
        if batches:
            self._next_offset = batches[-1].last_offset + 1
        if self.rolling_base_ms is None:
            self.rolling_base_ms = now_ms
        self._size = position + len(data)
        self._unsynced = True
        self.last_modified_ms = now_ms

    def _index_batch(self, position: int, base_offset: int, last_offset: int, max_timestamp: int, size: int) -> None:
        """Account one batch for the indexes (the same rule at append and at rebuild)."""
        if max_timestamp > self._max_timestamp:
            self._max_timestamp = max_timestamp
            self._offset_of_max_timestamp = last_offset
        if self._bytes_since_last_index_entry > self.index_interval_bytes:
            self._index.append(last_offset, position)  # Kafka's entry: the batch's last offset
            self._time_index.maybe_append(self._max_timestamp, self._offset_of_max_timestamp)
            self._bytes_since_last_index_entry = 0
        self._bytes_since_last_index_entry += size

    # -- reading -------------------------------------------------------------------------------

    def _read_walk_header(self, position: int) -> tuple[int, int, int, int, int] | None:
        """(base_offset, batch_length, magic, last_offset_delta, max_timestamp) at ``position``."""
        data = self.fs.pread(self._fd(), _WALK_SIZE, position)
        if len(data) < _WALK_SIZE:
            return None
        base, length, magic, delta, max_ts = _WALK.unpack_from(data)
        return int(base), int(length), int(magic), int(delta), int(max_ts)

    def walk(self, start: int, end: int | None = None) -> Iterator[BatchLocation]:
        """The batches from ``start`` (a batch start) to ``end`` (default: the end), headers only."""
        fs = self.fs
        fd = self._fd()
        stop = self._size if end is None else end
        buf = b""
        buf_start = start
        pos = start
        while pos < stop:
            rel = pos - buf_start
            if rel + _WALK_SIZE > len(buf):
                buf, buf_start, rel = fs.pread(fd, min(_WALK_CHUNK, stop - pos), pos), pos, 0
                if len(buf) < _WALK_SIZE:
                    raise SegmentCorruptError(f"{self.log_path}: no whole batch header at position {pos}")
            base, length, magic, delta, max_ts = _WALK.unpack_from(buf, rel)
            size = LOG_OVERHEAD + length
            if magic != 2 or length < _MIN_BATCH_LENGTH or pos + size > stop:
                raise SegmentCorruptError(
                    f"{self.log_path}: bad batch header at position {pos} (magic {magic}, length {length})"
                )
            yield BatchLocation(pos, base, base + delta, size, max_ts)
            pos += size

    def find_batch(self, offset: int, start_position: int = 0) -> BatchLocation | None:
        """The first batch at or after ``start_position`` whose last offset is ≥ ``offset``, or None.

        An index lookup, then a walk over batch headers (at most about index.interval.bytes).
        """
        if offset >= self._next_offset:
            return None
        position = max(self._index.lookup(offset)[1], start_position)
        for b in self.walk(position):
            if b.last_offset >= offset:
                return b
        return None

    def region(self, position: int, size: int) -> FileRegion:
        """``size`` bytes at ``position`` for a zero-copy send."""
        return FileRegion(self.file(), position, size)

    def read_bytes(self, position: int, size: int) -> bytes:
        return self.fs.pread(self._fd(), size, position)

    def find_offset_by_timestamp(self, timestamp: int, starting_offset: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp ≥ ``timestamp`` and offset ≥ ``starting_offset``.

        The time index gives where the timestamp was first reached, the offset index a position
        before it; batches are walked by header until one's max_timestamp reaches the target, and
        only that batch is decoded to find the exact record.
        """
        _, ts_offset = self._time_index.lookup(timestamp)
        position = self._index.lookup(max(ts_offset, starting_offset))[1]
        for b in self.walk(position):
            if b.max_timestamp < timestamp or b.last_offset < starting_offset:
                continue
            _, records = decode_batch(self.read_bytes(b.position, b.size), verify_crc=False)
            for r in records:
                if r.timestamp >= timestamp and r.offset >= starting_offset:
                    return r.offset, r.timestamp
        return None

    # -- changing ------------------------------------------------------------------------------

    def truncate_to(self, offset: int) -> int:
        """Remove every batch holding an offset ≥ ``offset`` (a batch is removed whole).

        Returns the bytes removed. Indexes are truncated before the log, so a crash in between
        leaves an index that is a valid prefix.
        """
        found = self.find_batch(offset)
        if found is None:
            return 0
        position = found.position
        removed = self._size - position
        self._index.truncate_to_position(position)
        self._time_index.truncate_to(found.base_offset)
        self.fs.ftruncate(self._fd(), position)
        self._size = position
        self._unsynced = True
        self._rescan_tail()
        if not self._size:
            self.rolling_base_ms = None
        return removed

    def _rescan_tail(self) -> None:
        """Find the next offset and largest timestamp from the last index entries and the batches after them.

        The last time-index entry holds the largest timestamp up to the batch of the last offset-
        index entry (entries are added together); only the batches after that need reading.
        """
        _, last_position = self._index.last_entry()
        last_time = self._time_index.last_entry()
        if last_time is None:
            self._max_timestamp, self._offset_of_max_timestamp = -1, self.base_offset - 1
        else:
            self._max_timestamp, self._offset_of_max_timestamp = last_time
        next_offset = self.base_offset  # the entry's batch may start below its (last) offset
        for b in self.walk(last_position):
            if b.base_offset < next_offset:
                raise SegmentCorruptError(f"{self.log_path}: offset {b.base_offset} out of order at {b.position}")
            next_offset = b.last_offset + 1
            if b.max_timestamp > self._max_timestamp:
                self._max_timestamp, self._offset_of_max_timestamp = b.max_timestamp, b.last_offset
        self._next_offset = next_offset
        self._bytes_since_last_index_entry = self._size - last_position

    def become_inactive(self) -> None:
        """The log rolled past this segment: add the final time-index entry, write the indexes, close them."""
        self._time_index.maybe_append(self._max_timestamp, self._offset_of_max_timestamp)
        self._index.flush(sync=False)
        self._time_index.flush(sync=False)
        self._index.close()
        self._time_index.close()

    def flush(self) -> None:
        """fsync the data, then write and fsync the indexes."""
        if self._unsynced:
            self.fs.fsync(self._fd())
            self._unsynced = False
        self._index.flush(sync=True)
        self._time_index.flush(sync=True)

    def close(self) -> None:
        """Write the indexes and let go of the descriptors (a region still being sent keeps the .log open)."""
        self._index.flush(sync=False)
        self._time_index.flush(sync=False)
        self._index.close()
        self._time_index.close()
        self._file = None

    def delete(self) -> None:
        """Unlink the three files. Regions already handed out stay readable until dropped."""
        self._deleted = True
        self._file = None
        self._index.delete()
        self._time_index.delete()
        try:
            self.fs.unlink(self.log_path)
        except FileNotFoundError:
            pass

    def __repr__(self) -> str:
        return f"Segment({self.log_path}, size={self._size}, next_offset={self._next_offset})"
