"""The log manager: loading log dirs, placement, checkpoints, clean-shutdown markers and tick()."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from headwater.broker.storage.clock import ManualClock
from headwater.broker.storage.log import LogConfig
from headwater.broker.storage.log_manager import (
    CLEAN_SHUTDOWN_FILE,
    HIGH_WATERMARK_CHECKPOINT_FILE,
    RECOVERY_POINT_CHECKPOINT_FILE,
    LogManager,
    format_checkpoint,
    parse_checkpoint,
    parse_topic_partition,
)
from headwater.protocol.errors import KafkaError
from tests.unit.storage.storage_helpers import FaultyFileSystem, batch, read_all


def test_topic_partition_names_split_at_the_last_dash() -> None:
    assert parse_topic_partition("my-topic.v2_x-13") == ("my-topic.v2_x", 13)
    assert parse_topic_partition("t-0") == ("t", 0)
    for bad in ("t", "-0", "t-", "t-x", "t-1-", "a/b-0"):
        assert parse_topic_partition(bad) is None


def test_checkpoint_format() -> None:
    data = format_checkpoint({("b.c", 1): 7, ("a-x", 0): 1500})
    assert data == b"0\n2\na-x 0 1500\nb.c 1 7\n"
    assert parse_checkpoint(data) == {("a-x", 0): 1500, ("b.c", 1): 7}
    assert parse_checkpoint(b"0\n0\n") == {}
    assert parse_checkpoint(b"") == {}  # Kafka 2.3 creates its checkpoints empty
    for bad in (b"1\n0\n", b"0\n2\nt 0 1\n", b"0\n1\nt 0\n", b"0\n1\nt x 1\n"):
        with pytest.raises(ValueError):
            parse_checkpoint(bad)


def test_new_partitions_go_to_the_emptiest_log_dir(tmp_path: Path) -> None:
    dirs = [str(tmp_path / d) for d in ("d1", "d2", "d3")]
    mgr = LogManager(dirs, LogConfig(), clock=ManualClock())
    placed = [mgr.log_dir_of("t", p) for p in range(6) if mgr.create_log("t", p)]
    assert placed == dirs + dirs
    mgr.delete_log("t", 1)  # d2 now holds the fewest
    mgr.create_log("u", 0)
    assert mgr.log_dir_of("u", 0) == dirs[1]
    assert os.path.isdir(os.path.join(dirs[1], "u-0"))
    assert not os.path.exists(os.path.join(dirs[1], "t-1"))
    assert mgr.create_log("t", 0) is mgr.get_log("t", 0)  # existing logs are returned
    assert mgr.partitions_of("t") == [0, 2, 3, 4, 5]
    with pytest.raises(KafkaError):
        mgr.create_log("../escape", 0)
    mgr.shutdown()


def test_shutdown_writes_checkpoints_and_markers(tmp_path: Path) -> None:
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    mgr = LogManager(dirs, LogConfig(), clock=ManualClock())
    for p in range(3):
        lg = mgr.create_log("my-topic", p)
        for _ in range(p + 1):
            lg.append(batch(5), 0)
    mgr.shutdown()
    for d in dirs:
        assert os.path.exists(os.path.join(d, CLEAN_SHUTDOWN_FILE))
    a = parse_checkpoint(Path(dirs[0], RECOVERY_POINT_CHECKPOINT_FILE).read_bytes())
    b = parse_checkpoint(Path(dirs[1], RECOVERY_POINT_CHECKPOINT_FILE).read_bytes())
    assert a == {("my-topic", 0): 5, ("my-topic", 2): 15}
    assert b == {("my-topic", 1): 10}

    again = LogManager(dirs, LogConfig(), clock=ManualClock())
    for d in dirs:  # the marker is gone once loaded: a crash from now on is noticed
        assert not os.path.exists(os.path.join(d, CLEAN_SHUTDOWN_FILE))
    assert [again.get_log("my-topic", p).log_end_offset for p in range(3)] == [5, 10, 15]  # type: ignore[union-attr]
    again.shutdown()


def test_an_unclean_start_recovers_from_the_checkpoint(tmp_path: Path) -> None:
    d = str(tmp_path / "logs")
    config = LogConfig(segment_bytes=2000)
    mgr = LogManager([d], config, clock=ManualClock())
    lg = mgr.create_log("t", 0)
    for i in range(20):
        lg.append(batch(2, value_size=150, tag=i), 0)
    lg.flush()
    mgr.checkpoint_recovery_points()
    flushed = lg.log_end_offset
    files = sorted(n for n in os.listdir(lg.dir) if n.endswith(".log"))
    # Damage a segment below the recovery point, and one above it.
    with open(os.path.join(lg.dir, files[0]), "r+b") as f:
        f.seek(100)
        f.write(b"\xff\xff")
    for i in range(20):
        lg.append(batch(2, value_size=150, tag=100 + i), 0)
    mgr.abort()  # crash: no flush, no checkpoint, no marker
    with open(os.path.join(lg.dir, sorted(os.listdir(lg.dir))[-1]), "ab") as f:
        f.write(b"torn tail")
    again = LogManager([d], config, clock=ManualClock())
    lg2 = again.get_log("t", 0)
    assert lg2 is not None
    assert lg2.log_end_offset == 80  # the first segment was trusted (below the recovery point), the tail cut
    assert lg2.recovery_point == flushed
    again.shutdown()
    # A clean start trusts everything but the active segment.
    third = LogManager([d], config, clock=ManualClock())
    assert third.get_log("t", 0).log_end_offset == 80  # type: ignore[union-attr]
    third.shutdown()


def test_without_the_marker_every_log_is_recovered(tmp_path: Path) -> None:
    d = str(tmp_path / "logs")
    config = LogConfig(segment_bytes=2000)
    mgr = LogManager([d], config, clock=ManualClock())
    lg = mgr.create_log("t", 0)
    for i in range(20):
        lg.append(batch(2, value_size=150, tag=i), 0)
    mgr.shutdown()
    files = sorted(n for n in os.listdir(lg.dir) if n.endswith(".log"))
    with open(os.path.join(lg.dir, files[1]), "r+b") as f:
        f.seek(100)
        f.write(b"\xff\xff")
    # With the marker, segment 1 is trusted.
    clean = LogManager([d], config, clock=ManualClock())
    assert clean.get_log("t", 0).log_end_offset == 40  # type: ignore[union-attr]
    clean.abort()
    # The marker was consumed by that start, so this start is unclean; the checkpoint says
    # everything was flushed, though, so only the last segment is checked...
    assert not os.path.exists(os.path.join(d, CLEAN_SHUTDOWN_FILE))
    os.unlink(os.path.join(d, RECOVERY_POINT_CHECKPOINT_FILE))  # ...unless the checkpoint is lost too
    recovered = LogManager([d], config, clock=ManualClock())
    lg2 = recovered.get_log("t", 0)
    assert lg2 is not None and lg2.log_end_offset == int(files[1][:20])
    assert [r.offset for r in read_all(lg2)] == list(range(lg2.log_end_offset))
    recovered.shutdown()


def test_a_log_dir_is_locked(tmp_path: Path) -> None:
    d = str(tmp_path / "logs")
    mgr = LogManager([d], LogConfig())
    with pytest.raises(RuntimeError, match="in use"):
        LogManager([d], LogConfig())
    mgr.shutdown()
    LogManager([d], LogConfig()).shutdown()


def test_tick_runs_retention_flush_and_checkpoints(tmp_path: Path) -> None:
    d = str(tmp_path / "logs")
    fs = FaultyFileSystem()
    clock = ManualClock()
    mgr = LogManager(
        [d],
        LogConfig(segment_bytes=1000, retention_ms=60_000, flush_interval_ms=5_000),
        fs,
        clock,
        retention_check_interval_ms=30_000,
        flush_scheduler_interval_ms=1_000,
        flush_offset_checkpoint_interval_ms=10_000,
    )
    lg = mgr.create_log("t", 0)
    for i in range(10):
        lg.append(batch(2, value_size=150, tag=i, ts=clock.time_ms()), 0)
    segments = len(lg.segments)
    checkpoint = os.path.join(d, RECOVERY_POINT_CHECKPOINT_FILE)
    mgr.tick()  # rolled segments are flushed on every tick
    assert lg.recovery_point == lg.active_segment.base_offset
    assert not os.path.exists(checkpoint)
    clock.advance(5_000)
    mgr.tick()  # flush.ms passed and the flush scheduler is due
    assert lg.recovery_point == lg.log_end_offset == 20
    clock.advance(5_000)
    mgr.tick()
    assert parse_checkpoint(Path(checkpoint).read_bytes()) == {("t", 0): 20}
    clock.advance(20_000)
    mgr.tick()  # retention check due, but nothing is a minute old yet
    assert len(lg.segments) == segments
    clock.advance(25_000)
    clock.set_time_ms(clock.time_ms() + 10**6)  # everything is old now...
    mgr.tick()
    assert len(lg.segments) == segments  # ...but the check runs every 30 s: not due yet
    clock.advance(5_000)
    mgr.tick()
    assert len(lg.segments) == 1 and lg.log_start_offset == lg.active_segment.base_offset
    mgr.shutdown()


def test_topic_configs_apply_to_loaded_and_created_logs(tmp_path: Path) -> None:
    d = str(tmp_path / "logs")
    small = LogConfig(segment_bytes=1000)
    mgr = LogManager([d], LogConfig(), clock=ManualClock())
    lg = mgr.create_log("small", 0, small)
    assert lg.config is small
    assert mgr.create_log("small", 1).config is small
    mgr.shutdown()
    again = LogManager([d], LogConfig(), clock=ManualClock(), topic_configs={"small": small})
    assert again.get_log("small", 0).config is small  # type: ignore[union-attr]
    again.shutdown()


def test_retention_never_passes_the_high_watermark(tmp_path: Path) -> None:
    """Issue 9, defect 5: retention stops at the segment holding the high watermark, so the log start
    offset never passes records that are not yet replicated (readable) everywhere."""
    clock = ManualClock()
    cfg = LogConfig(segment_bytes=600, retention_ms=1000)
    mgr = LogManager([str(tmp_path / "d")], cfg, clock=clock)
    lg = mgr.create_log("t", 0)
    for i in range(8):
        lg.append(batch(2, value_size=100, ts=clock.time_ms(), tag=i), 0)
    assert len(lg.segments) > 3
    clock.advance(10_000)
    hw = lg.segments[2].base_offset  # the leader's high watermark sits in the third segment
    mgr.high_watermark_of = lambda tp: hw if tp == ("t", 0) else None
    mgr.cleanup_logs()
    assert lg.log_start_offset == lg.segments[0].base_offset <= hw
    assert lg.segments[0].base_offset == hw  # the segments wholly below the HW went, not the rest
    mgr.high_watermark_of = lambda tp: None  # unknown HW (no replica state yet): delete nothing
    before = lg.log_start_offset
    mgr.cleanup_logs()
    assert lg.log_start_offset == before
    mgr.shutdown()


def test_an_idle_partition_rolls_on_segment_ms_and_expires(tmp_path: Path) -> None:
    """Issue 9, defect 5: without appends the active segment must still roll on segment.ms, so an
    idle partition's data goes when retention.ms says."""
    clock = ManualClock()
    cfg = LogConfig(segment_ms=5_000, retention_ms=60_000)
    mgr = LogManager([str(tmp_path / "d")], cfg, clock=clock)
    lg = mgr.create_log("t", 0)
    lg.append(batch(3, ts=clock.time_ms()), 0)
    end = lg.log_end_offset
    mgr.high_watermark_of = lambda tp: end
    clock.advance(120_000)  # no append since
    mgr.cleanup_logs()
    assert lg.log_start_offset == end == lg.log_end_offset  # rolled, then the old segment expired
    assert lg.active_segment.size == 0
    mgr.shutdown()


def test_high_watermarks_are_checkpointed_and_read_back(tmp_path: Path) -> None:
    """replication-offset-checkpoint: written on tick() when due and something moved, and at
    shutdown; a partition whose high watermark is unknown now keeps the last one; read at start."""
    d = str(tmp_path / "logs")
    clock = ManualClock()
    mgr = LogManager([d], LogConfig(), clock=clock, high_watermark_checkpoint_interval_ms=5_000)
    for p in (0, 1):
        mgr.create_log("t", p)
    hws: dict[tuple[str, int], int | None] = {("t", 0): 12, ("t", 1): None}
    mgr.high_watermark_of = hws.get
    path = Path(d) / HIGH_WATERMARK_CHECKPOINT_FILE
    mgr.tick()
    assert not path.exists()  # not due yet
    clock.advance(5_000)
    mgr.tick()
    assert parse_checkpoint(path.read_bytes()) == {("t", 0): 12}
    written = path.stat().st_mtime_ns
    clock.advance(5_000)
    mgr.tick()
    assert path.stat().st_mtime_ns == written  # nothing moved: not rewritten
    hws[("t", 0)], hws[("t", 1)] = 20, 3
    mgr.shutdown()
    assert parse_checkpoint(path.read_bytes()) == {("t", 0): 20, ("t", 1): 3}

    again = LogManager([d], LogConfig(), clock=ManualClock())
    assert again.checkpointed_high_watermark("t", 0) == 20
    assert again.checkpointed_high_watermark("t", 1) == 3
    assert again.checkpointed_high_watermark("t", 2) is None
    again.high_watermark_of = {("t", 0): None, ("t", 1): 4}.get  # t-0 not known yet: keeps 20
    again.delete_log("t", 1)
    again.shutdown()
    assert parse_checkpoint(path.read_bytes()) == {("t", 0): 20}

    path.write_bytes(b"garbage")
    third = LogManager([d], LogConfig(), clock=ManualClock())
    assert third.checkpointed_high_watermark("t", 0) is None  # a malformed file is ignored
    third.shutdown()


def test_log_start_offset_moved_by_delete_records_is_checkpointed_and_applied_on_open(tmp_path: Path) -> None:
    from headwater.broker.storage.log_manager import LOG_START_OFFSET_CHECKPOINT_FILE

    d = str(tmp_path / "logs")
    mgr = LogManager([d], LogConfig(segment_bytes=2000), clock=ManualClock())
    lg = mgr.create_log("t", 0)
    for _ in range(10):
        lg.append(batch(3), 0)  # ~350 bytes each: several segments
    bases = sorted(int(f.split(".")[0]) for f in os.listdir(lg.dir) if f.endswith(".log"))
    assert len(bases) >= 2 and bases[1] < 30
    target = bases[1] + 1  # inside the second segment
    assert lg.advance_log_start_offset(target, "DeleteRecords")
    assert not lg.advance_log_start_offset(10, "DeleteRecords")  # never backwards
    assert lg.log_start_offset == target
    assert lg.first_segment_base_offset == bases[1]  # the segment wholly below is gone, the one holding it stays
    assert not os.path.exists(os.path.join(lg.dir, f"{bases[0]:020d}.log"))
    assert [r.offset for r in read_all(lg, target)][:1] == [target]
    with pytest.raises(ValueError):
        lg.advance_log_start_offset(31, "DeleteRecords")  # beyond the log end offset (30)
    mgr.checkpoint_log_start_offsets()
    path = Path(d, LOG_START_OFFSET_CHECKPOINT_FILE)
    assert parse_checkpoint(path.read_bytes()) == {("t", 0): target}
    mgr.shutdown()

    again = LogManager([d], LogConfig(segment_bytes=2000), clock=ManualClock())
    reopened = again.get_log("t", 0)
    assert reopened is not None
    assert reopened.log_start_offset == target  # not the first segment's base offset
    assert reopened.log_end_offset == 30
    again.shutdown()


def test_tick_fsyncs_only_the_logs_that_rolled(tmp_path: Path) -> None:
    """An idle broker's tick (twice a second) must not walk thousands of logs: the rolled segments
    of the logs that rolled since are fsynced on the next tick. A failed fsync takes the log, and so
    its log dir, offline (KIP-112: the kernel may have dropped the dirty pages; test_failed_log_dir.py):
    the log is not tried again."""
    d = str(tmp_path / "logs")
    fs = FaultyFileSystem()
    mgr = LogManager([d], LogConfig(segment_bytes=1000), fs, ManualClock())
    logs = [mgr.create_log("t", i) for i in range(3)]
    mgr.tick()  # new logs are looked at once
    looked: list[int] = []
    for i, lg in enumerate(logs):
        real = lg.flush_rolled_segments
        lg.flush_rolled_segments = lambda i=i, real=real: (looked.append(i), real())[1]  # type: ignore[method-assign]
    mgr.tick()
    assert looked == []  # nothing rolled: no log looked at
    a = logs[1]
    for i in range(10):
        a.append(batch(2, value_size=150, tag=i), 0)
    assert len(a.segments) > 1 and a.recovery_point < a.active_segment.base_offset
    fs.fail_fsync = True
    mgr.tick()
    assert looked == [1] and a.recovery_point < a.active_segment.base_offset  # failed: logged
    assert a.is_offline and not mgr.offline_dirs  # the dir fails on the next tick
    fs.fail_fsync = False
    mgr.tick()
    assert list(mgr.offline_dirs) == [d] and mgr.get_log("t", 1) is None
    mgr.tick()
    assert looked == [1]  # never tried again
    mgr.shutdown()
