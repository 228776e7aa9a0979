"""The file system the log writes through, injected so tests can fail a write or crash mid-write.

The log uses raw file descriptors and positional I/O only (``pwrite``/``pread``): the file offset
of a descriptor is never used, so one descriptor can be shared by the appender and by any number
of zero-copy ``sendfile`` calls (which take their own offset).

:class:`OsFileSystem` is the real thing (``os.*``). Tests wrap it to inject faults. Nothing here
is thread-safe beyond what the kernel gives positional I/O; the log calls it from one thread.
"""

from __future__ import annotations

import errno
import fcntl
import os
from typing import Protocol, TypeAlias

BytesLike: TypeAlias = bytes | bytearray | memoryview


class FileSystem(Protocol):
    """The operations the log needs. Paths are ``str``; descriptors are ``int``."""

    def open(self, path: str, *, create: bool = False) -> int:
        """Open read-write (creating the file when ``create``); FileNotFoundError if absent."""
        ...

    def close(self, fd: int) -> None: ...

    def pwrite(self, fd: int, data: BytesLike, position: int) -> int:
        """Write at ``position``; returns the bytes written (may be fewer than asked)."""
        ...

    def pread(self, fd: int, size: int, position: int) -> bytes:
        """Up to ``size`` bytes at ``position`` (fewer only at end of file)."""
        ...

    def fsync(self, fd: int) -> None: ...

    def ftruncate(self, fd: int, size: int) -> None: ...

    def fsize(self, fd: int) -> int: ...

    def lock(self, fd: int) -> None:
        """Take an exclusive advisory lock without waiting; BlockingIOError if another process holds it."""
        ...

    def exists(self, path: str) -> bool: ...

    def is_dir(self, path: str) -> bool: ...

    def size(self, path: str) -> int: ...

    def mtime_ms(self, path: str) -> int: ...

    def listdir(self, path: str) -> list[str]: ...

    def makedirs(self, path: str) -> None:
        """Create ``path`` and its parents; no error if it exists."""
        ...

    def rename(self, src: str, dst: str) -> None:
        """Atomically replace ``dst`` by ``src``."""
        ...

    def unlink(self, path: str) -> None: ...

    def rmdir(self, path: str) -> None: ...

    def fsync_dir(self, path: str) -> None:
        """Make the directory's entries (creations, renames, unlinks) durable."""
        ...


class OsFileSystem:
    """:class:`FileSystem` on ``os.*`` with raw descriptors."""

    def open(self, path: str, *, create: bool = False) -> int:
        flags = os.O_RDWR | getattr(os, "O_CLOEXEC", 0)
        if create:
            flags |= os.O_CREAT
        return os.open(path, flags, 0o644)

    def close(self, fd: int) -> None:
        os.close(fd)

    def pwrite(self, fd: int, data: BytesLike, position: int) -> int:
        return os.pwrite(fd, data, position)

    def pread(self, fd: int, size: int, position: int) -> bytes:
        return os.pread(fd, size, position)

    def fsync(self, fd: int) -> None:
        os.fsync(fd)

    def ftruncate(self, fd: int, size: int) -> None:
        os.ftruncate(fd, size)

    def fsize(self, fd: int) -> int:
        return os.fstat(fd).st_size

    def lock(self, fd: int) -> None:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def is_dir(self, path: str) -> bool:
        return os.path.isdir(path)

    def size(self, path: str) -> int:
        return os.stat(path).st_size

    def mtime_ms(self, path: str) -> int:
        return os.stat(path).st_mtime_ns // 1_000_000

    def listdir(self, path: str) -> list[str]:
        return os.listdir(path)

    def makedirs(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)

    def rename(self, src: str, dst: str) -> None:
        os.replace(src, dst)

    def unlink(self, path: str) -> None:
        os.unlink(path)

    def rmdir(self, path: str) -> None:
        os.rmdir(path)

    def fsync_dir(self, path: str) -> None:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(fd)
        except OSError as e:  # some file systems refuse fsync on a directory
            if e.errno not in (errno.EINVAL, errno.EBADF):
                raise
        finally:
            os.close(fd)


def write_all(fs: FileSystem, fd: int, data: BytesLike, position: int) -> None:
    """``pwrite`` until every byte of ``data`` is written (a short write is retried, zero is EIO)."""
    view = memoryview(data).cast("B")
    done = 0
    total = len(view)
    while done < total:
        n = fs.pwrite(fd, view[done:], position + done)
        if n <= 0:
            raise OSError(errno.EIO, f"write of {total - done} bytes returned {n}")
        done += n


def write_file_atomically(fs: FileSystem, path: str, data: bytes) -> None:
    """Replace ``path`` by ``data`` so a crash leaves either the old or the new file, never a mix.

    Writes ``path.tmp``, fsyncs it, renames it over ``path`` and fsyncs the directory.
    """
    replace_file(fs, path, data)
    fs.fsync_dir(os.path.dirname(path) or ".")


def replace_file(fs: FileSystem, path: str, data: bytes, fsync: bool = True) -> None:
    """Write ``path.tmp``, fsync it and rename it over ``path``; the directory fsync (which makes
    the rename durable) is the caller's, for callers that defer it. ``fsync=False``: the caller
    fsyncs ``path`` later too, and must tolerate a torn file after a crash until it has."""
    tmp = path + ".tmp"
    fd = fs.open(tmp, create=True)
    try:
        fs.ftruncate(fd, 0)
        write_all(fs, fd, data, 0)
        if fsync:
            fs.fsync(fd)
    finally:
        fs.close(fd)
    fs.rename(tmp, path)


def read_file(fs: FileSystem, path: str) -> bytes:
    """The whole content of ``path``."""
    fd = fs.open(path)
    try:
        size = fs.fsize(fd)
        out = bytearray()
        while len(out) < size:
            chunk = fs.pread(fd, size - len(out), len(out))
            if not chunk:
                break
            out += chunk
        return bytes(out)
    finally:
        fs.close(fd)
