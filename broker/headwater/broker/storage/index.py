"""The sparse indexes beside each log segment: ``.index`` (offset → position) and ``.timeindex``.

Both are *derived* files: the ``.log`` is the truth. An index that is missing, or that fails
the checks made when it is loaded, is thrown away and rebuilt from the log, never repaired.

``<base offset>.index`` — entries of 8 bytes, big-endian::

    offset  size  field
         0     4  relative_offset   -- the batch's LAST offset minus the segment's base offset (int32)
         4     4  position          -- byte position of that batch in the .log file (int32)

    An entry is added for the batch that starts after more than ``index.interval.bytes`` (4096)
    of log were appended since the previous entry. It names the batch by its last offset, as
    Kafka's LogSegment does, so the files are Kafka's (Headwater before issue 45 wrote the base
    offset: still accepted, both lead a lookup to the right batch). Invariants: the file size is a
    multiple of 8; relative offsets and positions are both strictly increasing; every entry points
    at the start of a batch holding the entry's offset (checked for the last entry on load), and
    lies before the end of the log. The first batch of a segment needs no entry (a lookup below
    every entry answers ``(base_offset, 0)``); a lookup of an offset answers the last entry at or
    below it, whose batch starts at or before the offset's batch.

``<base offset>.timeindex`` — entries of 12 bytes, big-endian::

    offset  size  field
         0     8  timestamp         -- the largest batch max_timestamp in the segment so far
         8     4  relative_offset   -- where that timestamp was first reached (the batch's last offset)

    An entry is added together with an offset-index entry, and only when the largest timestamp
    grew since the previous entry; one more is added when the segment stops being active.
    Invariants: size a multiple of 12; timestamps strictly increasing; offsets non-decreasing and
    below the segment's next offset. Hence every record before the batch of an entry's offset has
    a timestamp below the entry's timestamp, which is what a search by timestamp relies on.

The entries live in memory (``array``) and lookups bisect them; new entries are written to the
file in bulk (``flush``), not one syscall per entry. Concurrency: none. An index belongs to one
segment, which the broker calls from its single asyncio thread.
"""

from __future__ import annotations

import struct
import sys
from array import array
from bisect import bisect_left, bisect_right

from headwater.broker.storage.fs import FileSystem, read_file, write_all

INT32_MAX = 2**31 - 1


class IndexCorruptError(Exception):
    """An index file failed the checks made when loading it (the caller rebuilds it)."""


class InvalidOffsetError(Exception):
    """An append or index entry did not have an offset above everything already stored."""


def _int_array(code: str) -> array[int]:
    a: array[int] = array(code)
    if a.itemsize != (4 if code == "i" else 8):
        raise RuntimeError(f"array('{code}') has items of {a.itemsize} bytes on this platform")
    return a


def _strictly_increasing(values: array[int]) -> bool:
    as_list = values.tolist()
    return as_list == sorted(set(as_list))  # both in C; a Python loop per entry is far slower


def _non_decreasing(values: array[int]) -> bool:
    as_list = values.tolist()
    return as_list == sorted(as_list)


class _IndexFile:
    """An index file, opened only for the moment of a write, a truncation or an fsync, and how many
    entries of it are on disk.

    The entries live in memory, so between writes no descriptor is held: a broker with 10,000
    partitions would otherwise hold two index descriptors per segment beside the log's own and run
    out of them (issue 26: 30,000 descriptors against a limit of 20,000). An fsync through a new
    descriptor flushes what was written through an earlier one (it syncs the file, not the
    descriptor)."""

    def __init__(self, fs: FileSystem, path: str, entry_size: int) -> None:
        self.fs = fs
        self.path = path
        self.entry_size = entry_size
        self.persisted = 0  # entries written to the file
        self.unsynced = False  # written since the last fsync

    def write_entries(self, first: int, data: bytes) -> None:
        if data:
            fd = self.fs.open(self.path, create=True)
            try:
                write_all(self.fs, fd, data, first * self.entry_size)
            finally:
                self.fs.close(fd)
            self.unsynced = True
        self.persisted = first + len(data) // self.entry_size

    def truncate_entries(self, count: int) -> None:
        fd = self.fs.open(self.path, create=True)
        try:
            self.fs.ftruncate(fd, count * self.entry_size)
        finally:
            self.fs.close(fd)
        self.persisted = count
        self.unsynced = True

    def sync(self) -> None:
        if self.unsynced:
            fd = self.fs.open(self.path, create=True)
            try:
                self.fs.fsync(fd)
            finally:
                self.fs.close(fd)
        self.unsynced = False

    def close(self) -> None:
        """Nothing is held between operations (kept for the segment's close sequence)."""

    def delete(self) -> None:
        self.close()
        self.unsynced = False
        try:
            self.fs.unlink(self.path)
        except FileNotFoundError:
            pass


class OffsetIndex:
    """The ``.index`` of one segment (layout and invariants in the module docstring)."""

    ENTRY = struct.Struct(">ii")

    def __init__(self, fs: FileSystem, path: str, base_offset: int) -> None:
        self.base_offset = base_offset
        self._file = _IndexFile(fs, path, self.ENTRY.size)
        self._offsets = _int_array("i")  # relative offsets
        self._positions = _int_array("i")

    @classmethod
    def load(cls, fs: FileSystem, path: str, base_offset: int, log_size: int) -> OffsetIndex:
        """Read and check ``path``. FileNotFoundError if absent, IndexCorruptError if it breaks an invariant."""
        data = read_file(fs, path)
        if len(data) % cls.ENTRY.size:
            raise IndexCorruptError(f"{path}: size {len(data)} is not a multiple of {cls.ENTRY.size}")
        both = _int_array("i")
        both.frombytes(data)
        if sys.byteorder == "little":
            both.byteswap()
        index = cls(fs, path, base_offset)
        index._offsets = both[0::2]
        index._positions = both[1::2]
        index._file.persisted = len(index._offsets)
        if index._offsets:
            if index._offsets[0] < 0 or index._positions[0] < 0:
                raise IndexCorruptError(f"{path}: negative first entry")
            if not (_strictly_increasing(index._offsets) and _strictly_increasing(index._positions)):
                raise IndexCorruptError(f"{path}: entries are not strictly increasing")
            if index._positions[-1] >= log_size:
                raise IndexCorruptError(
                    f"{path}: last entry points at position {index._positions[-1]} beyond the log's {log_size} bytes"
                )
        return index

    @property
    def path(self) -> str:
        return self._file.path

    def __len__(self) -> int:
        return len(self._offsets)

    def entries(self) -> list[tuple[int, int]]:
        """(absolute offset, position) of every entry (for tests and tools)."""
        b = self.base_offset
        return [(b + o, p) for o, p in zip(self._offsets, self._positions)]

    def last_entry(self) -> tuple[int, int]:
        """The last entry, or ``(base_offset, 0)`` when empty."""
        if not self._offsets:
            return self.base_offset, 0
        return self.base_offset + self._offsets[-1], self._positions[-1]

    def append(self, offset: int, position: int) -> None:
        rel = offset - self.base_offset
        if not 0 <= rel <= INT32_MAX or not 0 <= position <= INT32_MAX:
            raise InvalidOffsetError(f"index entry ({offset}, {position}) outside the segment at {self.base_offset}")
        if self._offsets and (rel <= self._offsets[-1] or position <= self._positions[-1]):
            raise InvalidOffsetError(
                f"index entry ({offset}, {position}) is not above the last one {self.last_entry()} in {self.path}"
            )
        self._offsets.append(rel)
        self._positions.append(position)

    def lookup(self, offset: int) -> tuple[int, int]:
        """The entry with the largest offset ≤ ``offset``, or ``(base_offset, 0)``."""
        rel = min(offset - self.base_offset, INT32_MAX)
        i = bisect_right(self._offsets, rel) - 1
        if i < 0:
            return self.base_offset, 0
        return self.base_offset + self._offsets[i], self._positions[i]

    def truncate_to(self, offset: int) -> None:
        """Drop the entries for offsets ≥ ``offset`` (in memory and in the file)."""
        self._truncate_entries(bisect_left(self._offsets, offset - self.base_offset))

    def truncate_to_position(self, position: int) -> None:
        """Drop the entries pointing at ``position`` or beyond."""
        self._truncate_entries(bisect_left(self._positions, position))

    def _truncate_entries(self, keep: int) -> None:
        if keep < len(self._offsets):
            del self._offsets[keep:]
            del self._positions[keep:]
        if self._file.persisted > keep:
            self._file.truncate_entries(keep)

    def clear(self) -> None:
        """Forget every entry in memory (before a rebuild; ``rewrite`` then replaces the file)."""
        self._offsets = _int_array("i")
        self._positions = _int_array("i")

    def _encode(self, first: int) -> bytes:
        n = len(self._offsets) - first
        both = _int_array("i")
        both.frombytes(bytes(8 * n))
        both[0::2] = self._offsets[first:]
        both[1::2] = self._positions[first:]
        if sys.byteorder == "little":
            both.byteswap()
        return both.tobytes()

    def flush(self, *, sync: bool) -> None:
        """Write the entries not yet on disk; fsync too when ``sync``."""
        first = self._file.persisted
        if first < len(self._offsets):
            self._file.write_entries(first, self._encode(first))
        if sync:
            self._file.sync()

    def rewrite(self) -> None:
        """Replace the whole file by the entries in memory (after a rebuild)."""
        self._file.truncate_entries(0)
        self.flush(sync=False)

    def close(self) -> None:
        self._file.close()

    def delete(self) -> None:
        self._file.delete()


class TimeIndex:
    """The ``.timeindex`` of one segment (layout and invariants in the module docstring)."""

    ENTRY = struct.Struct(">qi")

    def __init__(self, fs: FileSystem, path: str, base_offset: int) -> None:
        self.base_offset = base_offset
        self._file = _IndexFile(fs, path, self.ENTRY.size)
        self._timestamps = _int_array("q")
        self._offsets = _int_array("i")  # relative offsets

    @classmethod
    def load(cls, fs: FileSystem, path: str, base_offset: int) -> TimeIndex:
        """Read and check ``path`` (the caller checks the last offset against the log with ``check_last``)."""
        data = read_file(fs, path)
        if len(data) % cls.ENTRY.size:
            raise IndexCorruptError(f"{path}: size {len(data)} is not a multiple of {cls.ENTRY.size}")
        index = cls(fs, path, base_offset)
        for ts, rel in cls.ENTRY.iter_unpack(data):
            index._timestamps.append(ts)
            index._offsets.append(rel)
        index._file.persisted = len(index._offsets)
        if index._offsets:
            if index._offsets[0] < 0:
                raise IndexCorruptError(f"{path}: negative relative offset")
            if not (_strictly_increasing(index._timestamps) and _non_decreasing(index._offsets)):
                raise IndexCorruptError(f"{path}: entries are not increasing")
        return index

    def check_last(self, next_offset: int) -> None:
        """IndexCorruptError unless every entry's offset is below ``next_offset`` (the segment's end)."""
        if self._offsets and self.base_offset + self._offsets[-1] >= next_offset:
            raise IndexCorruptError(
                f"{self.path}: last entry at offset {self.base_offset + self._offsets[-1]} "
                f"is not below the log's next offset {next_offset}"
            )

    @property
    def path(self) -> str:
        return self._file.path

    def __len__(self) -> int:
        return len(self._timestamps)

    def entries(self) -> list[tuple[int, int]]:
        """(timestamp, absolute offset) of every entry (for tests and tools)."""
        b = self.base_offset
        return [(t, b + o) for t, o in zip(self._timestamps, self._offsets)]

    def last_entry(self) -> tuple[int, int] | None:
        """(timestamp, absolute offset) of the last entry, or None."""
        if not self._timestamps:
            return None
        return self._timestamps[-1], self.base_offset + self._offsets[-1]

    def maybe_append(self, timestamp: int, offset: int) -> bool:
        """Add an entry if ``timestamp`` is above the last one (and not -1). Returns whether it was added."""
        if timestamp <= (self._timestamps[-1] if self._timestamps else -1):  # -1 is Kafka's NO_TIMESTAMP
            return False
        rel = offset - self.base_offset
        if not 0 <= rel <= INT32_MAX:
            raise InvalidOffsetError(f"time index offset {offset} outside the segment at {self.base_offset}")
        if self._offsets and rel < self._offsets[-1]:
            raise InvalidOffsetError(f"time index offset {offset} is below the last entry's in {self.path}")
        self._timestamps.append(timestamp)
        self._offsets.append(rel)
        return True

    def lookup(self, timestamp: int) -> tuple[int, int]:
        """(timestamp, absolute offset) of the entry with the largest timestamp ≤ ``timestamp``, or (-1, base)."""
        i = bisect_right(self._timestamps, timestamp) - 1
        if i < 0:
            return -1, self.base_offset
        return self._timestamps[i], self.base_offset + self._offsets[i]

    def truncate_to(self, offset: int) -> None:
        """Drop the entries for offsets ≥ ``offset``."""
        keep = bisect_left(self._offsets, offset - self.base_offset)  # offsets are non-decreasing
        if keep < len(self._offsets):
            del self._timestamps[keep:]
            del self._offsets[keep:]
        if self._file.persisted > keep:
            self._file.truncate_entries(keep)

    def clear(self) -> None:
        self._timestamps = _int_array("q")
        self._offsets = _int_array("i")

    def flush(self, *, sync: bool) -> None:
        first = self._file.persisted
        if first < len(self._timestamps):
            pack = self.ENTRY.pack
            data = b"".join(pack(t, o) for t, o in zip(self._timestamps[first:], self._offsets[first:]))
            self._file.write_entries(first, data)
        if sync:
            self._file.sync()

    def rewrite(self) -> None:
        self._file.truncate_entries(0)
        self.flush(sync=False)

    def close(self) -> None:
        self._file.close()

    def delete(self) -> None:
        self._file.delete()
