"""A failed log dir (KIP-112) in the log manager: an I/O error in one dir takes that dir offline,
only that dir; nothing is written there again; the broker is told which partitions it held; a log
that is not new is not created elsewhere meanwhile; a dir unusable at start is offline and the
others load."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from headwater.broker.storage.clock import ManualClock
from headwater.broker.storage.fs import BytesLike
from headwater.broker.storage.log import LogConfig
from headwater.broker.storage.log_manager import CLEAN_SHUTDOWN_FILE, HIGH_WATERMARK_CHECKPOINT_FILE, LogManager
from headwater.protocol.errors import ErrorCode, KafkaError
from tests.unit.storage.storage_helpers import FaultyFileSystem, batch


class BrokenDirFileSystem(FaultyFileSystem):
    """Every open, write, fsync and rename under ``broken`` (once set) fails with EIO, as a disk gone bad."""

    def __init__(self) -> None:
        super().__init__()
        self.broken: str | None = None
        self.attempts_after_failure = 0

    def _check(self, path: str) -> None:
        if self.broken is not None and path.startswith(self.broken + os.sep):
            self.attempts_after_failure += 1
            raise OSError(errno.EIO, f"injected I/O error under {self.broken}")

    def open(self, path: str, *, create: bool = False) -> int:
        self._check(path)
        return super().open(path, create=create)

    def pwrite(self, fd: int, data: BytesLike, position: int) -> int:
        self._check(self.paths.get(fd, ""))
        return super().pwrite(fd, data, position)

    def fsync(self, fd: int) -> None:
        self._check(self.paths.get(fd, ""))
        super().fsync(fd)

    def rename(self, src: str, dst: str) -> None:
        self._check(dst)
        super().rename(src, dst)


def test_an_append_error_takes_its_dir_offline_and_only_that_dir(tmp_path: Path) -> None:
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    fs = BrokenDirFileSystem()
    mgr = LogManager(dirs, LogConfig(), fs, ManualClock(), high_watermark_checkpoint_interval_ms=0)
    failures: list[tuple[str, list[tuple[str, int]]]] = []
    mgr.on_dir_failure = lambda d, tps: failures.append((d, tps))
    mgr.high_watermark_of = lambda tp: 1
    logs = {p: mgr.create_log("t", p) for p in range(4)}  # placed a, b, a, b
    on_a = sorted(p for p in logs if mgr.log_dir_of("t", p) == dirs[0])
    assert on_a == [0, 2]
    for lg in logs.values():
        lg.append(batch(1), 0)

    fs.broken = dirs[0]
    with pytest.raises(KafkaError) as err:
        logs[0].append(batch(1), 0)
    assert err.value.code == ErrorCode.KAFKA_STORAGE_ERROR
    assert failures == []  # taken offline on the asyncio thread: the next tick
    mgr.tick()
    assert list(mgr.offline_dirs) == [dirs[0]] and not mgr.all_dirs_failed
    assert failures == [(dirs[0], [("t", 0), ("t", 2)])]
    assert sorted(tp for tp, _ in mgr.all_logs()) == [("t", 1), ("t", 3)]
    assert mgr.get_log("t", 2) is None

    # the other dir serves on; nothing touches the failed one again
    fs.attempts_after_failure = 0
    logs[1].append(batch(1), 0)
    mgr.checkpoint_high_watermarks()
    mgr.checkpoint_recovery_points()
    mgr.tick()
    assert fs.attempts_after_failure == 0
    assert (Path(dirs[1]) / HIGH_WATERMARK_CHECKPOINT_FILE).exists()

    # a new partition goes to the online dir; one that existed before is not created while a dir is offline
    assert mgr.create_log("t", 9).dir.startswith(dirs[1])
    with pytest.raises(KafkaError) as err:
        mgr.create_log("t", 2, is_new=False)
    assert err.value.code == ErrorCode.KAFKA_STORAGE_ERROR

    mgr.shutdown()
    assert fs.attempts_after_failure == 0
    assert (Path(dirs[1]) / CLEAN_SHUTDOWN_FILE).exists()
    assert not (Path(dirs[0]) / CLEAN_SHUTDOWN_FILE).exists()


def test_a_checkpoint_error_takes_its_dir_offline(tmp_path: Path) -> None:
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    fs = BrokenDirFileSystem()
    mgr = LogManager(dirs, LogConfig(), fs, ManualClock())
    failed: list[str] = []
    mgr.on_dir_failure = lambda d, tps: failed.append(d)
    mgr.create_log("t", 0)
    mgr.create_log("t", 1)
    fs.broken = dirs[1]
    mgr.checkpoint_recovery_points()
    assert failed == [dirs[1]] and list(mgr.offline_dirs) == [dirs[1]]
    mgr.shutdown()


def test_a_dir_unusable_at_start_is_offline_and_the_others_load(tmp_path: Path) -> None:
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    mgr = LogManager(dirs, LogConfig(), clock=ManualClock())
    for p in range(2):
        mgr.create_log("t", p).append(batch(1), 0)
    mgr.shutdown()
    os.rename(dirs[0], dirs[0] + ".moved")
    Path(dirs[0]).write_text("a file where the dir was\n")  # as Kafka's LogDirFailureTest breaks a dir

    again = LogManager(dirs, LogConfig(), clock=ManualClock())
    assert list(again.offline_dirs) == [dirs[0]]
    assert [tp for tp, _ in again.all_logs()] == [("t", 1)]
    with pytest.raises(KafkaError):
        again.create_log("t", 0, is_new=False)
    again.shutdown()

    Path(dirs[1]).rename(dirs[1] + ".moved")
    Path(dirs[1]).write_text("and here\n")
    with pytest.raises(RuntimeError, match="every log dir failed"):
        LogManager(dirs, LogConfig(), clock=ManualClock())
