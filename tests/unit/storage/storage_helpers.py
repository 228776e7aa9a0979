"""Helpers for the storage tests: record batches, a file system that fails on demand, region reads."""

from __future__ import annotations

import errno
import os
from pathlib import Path

from headwater.broker.storage.clock import ManualClock
from headwater.broker.storage.fs import BytesLike, OsFileSystem
from headwater.broker.storage.log import Log, LogConfig
from headwater.protocol.primitives import FileRegion
from headwater.protocol.records.header import LOG_OVERHEAD, read_header
from headwater.protocol.records.record import Record, decode_batch, encode_batch

T0 = 1_700_000_000_000


def batch(n: int = 1, *, value_size: int = 100, ts: int = T0, ts_step: int = 0, tag: int = 0) -> bytes:
    """One uncompressed batch of ``n`` records; record i has timestamp ts + i*ts_step."""
    return encode_batch(
        [(b"k%d" % i, (b"%d-%d:" % (tag, i) * value_size)[:value_size], ts + i * ts_step, ()) for i in range(n)]
    )


def region_bytes(region: FileRegion | None) -> bytes:
    """What a sendfile of ``region`` would send."""
    if region is None:
        return b""
    return os.pread(region.file.fileno(), region.size, region.position)


def decode_all(data: bytes) -> list[Record]:
    """The records of every whole batch in ``data`` (a partial trailing batch is skipped)."""
    out: list[Record] = []
    pos = 0
    while len(data) - pos >= 61:
        h = read_header(data, pos)
        if pos + h.size > len(data):
            break
        out += decode_batch(data, pos)[1]
        pos += h.size
    return out


def batch_offsets(data: bytes) -> list[tuple[int, int]]:
    """(base offset, last offset) of every whole batch in ``data``."""
    out = []
    pos = 0
    while len(data) - pos >= 61:
        h = read_header(data, pos)
        if pos + h.size > len(data):
            break
        out.append((h.base_offset, h.last_offset))
        pos += LOG_OVERHEAD + h.batch_length
    return out


def read_all(log: Log, start: int | None = None) -> list[Record]:
    """Every record from ``start`` (default the log start) to the end, fetching like a consumer."""
    offset = log.log_start_offset if start is None else start
    out: list[Record] = []
    while offset < log.log_end_offset:
        got = log.read(offset, 1 << 20)
        records = [r for r in decode_all(region_bytes(got.region)) if r.offset >= offset]
        assert records, f"no progress reading at {offset}"
        out += records
        offset = records[-1].offset + 1
    return out


class FaultyFileSystem(OsFileSystem):
    """An OsFileSystem that can fail the Nth write (after writing part of it), fsyncs or truncations.

    It also counts fsyncs per path and can make every write short (at most ``short_writes`` bytes
    per call), as a kernel may.
    """

    def __init__(self) -> None:
        self.paths: dict[int, str] = {}
        self.fsyncs: list[str] = []
        self.dir_fsyncs: list[str] = []
        self.renames: list[str] = []  # destinations
        self._write_countdown = 0
        self._write_suffix = ".log"
        self._partial = 0
        self.fail_truncate = False
        self.fail_fsync = False
        self.short_writes: int | None = None
        self.fail_open: str | None = None  # opening a path with this suffix fails (EMFILE)

    def fail_nth_write(self, n: int = 1, *, partial: int = 0, suffix: str = ".log") -> None:
        """The ``n``-th write from now to a file ending in ``suffix`` writes ``partial`` bytes, then raises EIO."""
        self._write_countdown = n
        self._partial = partial
        self._write_suffix = suffix

    def open(self, path: str, *, create: bool = False) -> int:
        if self.fail_open and path.endswith(self.fail_open):
            raise OSError(errno.EMFILE, "injected open failure: too many open files")
        fd = super().open(path, create=create)
        self.paths[fd] = path
        return fd

    def close(self, fd: int) -> None:
        self.paths.pop(fd, None)
        super().close(fd)

    def pwrite(self, fd: int, data: BytesLike, position: int) -> int:
        view = memoryview(data)
        if self._write_countdown and self.paths.get(fd, "").endswith(self._write_suffix):
            self._write_countdown -= 1
            if not self._write_countdown:
                if self._partial:
                    super().pwrite(fd, view[: self._partial], position)
                raise OSError(errno.EIO, "injected write failure")
        if self.short_writes is not None:
            view = view[: self.short_writes]
        return super().pwrite(fd, view, position)

    def fsync(self, fd: int) -> None:
        if self.fail_fsync:
            raise OSError(errno.EIO, "injected fsync failure")
        self.fsyncs.append(self.paths.get(fd, "?"))
        super().fsync(fd)

    def rename(self, src: str, dst: str) -> None:
        super().rename(src, dst)
        self.renames.append(dst)

    def fsync_dir(self, path: str) -> None:
        self.dir_fsyncs.append(path)
        super().fsync_dir(path)

    def ftruncate(self, fd: int, size: int) -> None:
        if self.fail_truncate:
            raise OSError(errno.EIO, "injected truncate failure")
        super().ftruncate(fd, size)

    def log_fsyncs(self) -> int:
        return sum(1 for p in self.fsyncs if p.endswith(".log"))


def open_log(
    path: Path,
    config: LogConfig | None = None,
    *,
    clock: ManualClock | None = None,
    fs: OsFileSystem | None = None,
    needs_recovery: bool = False,
    recovery_point: int = 0,
    topic: str = "t",
    partition: int = 0,
) -> Log:
    return Log.open(
        str(path / f"{topic}-{partition}"),
        topic,
        partition,
        config or LogConfig(),
        fs or OsFileSystem(),
        clock or ManualClock(),
        needs_recovery=needs_recovery,
        recovery_point=recovery_point,
    )


def segment_files(log_dir: str, suffix: str = ".log") -> list[str]:
    return sorted(n for n in os.listdir(log_dir) if n.endswith(suffix))
