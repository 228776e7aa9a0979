"""The logs of one broker, spread over its log dirs, with their shared files and periodic work.

Each log dir (``log.dirs``) holds::

    <log dir>/
        .lock                              exclusive flock while a broker uses the dir
        .kafka_cleanshutdown               present only after a clean shutdown (empty file)
        recovery-point-offset-checkpoint   where each log's recovery point is
        cleaner-offset-checkpoint          each compacted log's first dirty offset (see cleaner.py)
        replication-offset-checkpoint      each partition's high watermark, as the replica layer last
                                           knew it (read back at start, so a restarted leader does not
                                           answer from its log start until its followers fetch)
        log-start-offset-checkpoint        each log's log start offset where DeleteRecords moved it above
                                           its first segment's base offset (written when it moves and at
                                           shutdown; applied again when the log is opened)
        <topic>-<partition>/               one Log each (see log.py); topic names may contain '-',
                                           the partition is after the LAST '-'
        <topic>-<partition>.<uuid>-delete/ a deleted partition's log as Kafka leaves it until
                                           file.delete.delay.ms has passed: removed at start
        meta.properties                    the broker (and cluster) the dir belongs to
                                           (broker_metadata.py; checked and written by the broker)

The checkpoints are Kafka's checkpoint text format, one item a line::

    0                     version
    2                     number of entries
    my.topic 0 1500       topic, partition, offset (space separated)
    my-other 3 0

It is replaced atomically (write ``.tmp``, fsync, rename, fsync the dir), so a crash leaves the old
or the new file. The clean-shutdown marker is written last at shutdown and deleted once the logs
were loaded at start, so its absence at start means the broker did not stop cleanly: logs are then
recovered from their checkpointed recovery points (from 0 without a checkpoint).

Failed log dirs (KIP-112): an I/O error in a log dir -- a log that went offline (a write, fsync,
roll or truncation failed), a checkpoint that cannot be written, a log that cannot be created, or a
dir that cannot be locked or loaded at start -- takes that whole dir offline, as Kafka's
LogDirFailureChannel does: its logs leave the manager (kept open until shutdown, never written
again), nothing is checkpointed there any more, no new log is placed there, and
``on_dir_failure(dir)`` tells the broker, which takes the partitions offline and notifies the
controller. The other dirs keep serving. Only when every dir has failed does the manager give up
(``all_dirs_failed``). A log that is not new (``create_log(is_new=False)``) is not created while
any dir is offline: its data may be in the failed dir, and an empty log elsewhere would lose it.

Concurrency: the constructor (loading) and :meth:`shutdown` may run in a worker thread while
nothing else uses the manager; everything else is called from the broker's asyncio thread, except
a log's ``on_io_error``, which may fire on the cleaner's thread: it only records the log, and the
next :meth:`tick` (or :meth:`check_failed_logs`) fails the dir on the asyncio thread.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor

from headwater.broker.storage.cleaner import (
    CLEANER_CHECKPOINT_FILE,
    Cleaning,
    CleanStats,
    cleanable_section,
    dirty_ratio,
    max_compaction_delay,
)
from headwater.broker.storage.clock import Clock, SystemClock
from headwater.broker.storage.fs import FileSystem, OsFileSystem, read_file, write_file_atomically
from headwater.broker.storage.log import MAX_LONG, Log, LogConfig
from headwater.protocol.errors import ErrorCode, KafkaError
from headwater.zk.topics import topic_name_error

log = logging.getLogger(__name__)

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
RECOVERY_POINT_CHECKPOINT_FILE = "recovery-point-offset-checkpoint"
HIGH_WATERMARK_CHECKPOINT_FILE = "replication-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT_FILE = "log-start-offset-checkpoint"
#: threads flushing and closing logs at shutdown (fsync waits on the disk, not the GIL)
SHUTDOWN_THREADS = 8
LOCK_FILE = ".lock"
#: Kafka renames a deleted partition's directory ``<topic>-<partition>.<32 hex digits>-delete`` and
#: removes it file.delete.delay.ms later; a dir a stop left behind is removed at the next start
DELETE_DIR_SUFFIX = "-delete"
CHECKPOINT_VERSION = 0

TopicPartition = tuple[str, int]


def parse_topic_partition(name: str) -> TopicPartition | None:
    """``my-topic-3`` → ``("my-topic", 3)``, split at the last '-'; None if it is not such a name."""
    topic, dash, partition = name.rpartition("-")
    if not dash or not topic or not partition.isdigit() or topic_name_error(topic) is not None:
        return None
    return topic, int(partition)


def format_checkpoint(offsets: Mapping[TopicPartition, int]) -> bytes:
    lines = [str(CHECKPOINT_VERSION), str(len(offsets))]
    lines += [f"{topic} {partition} {offset}" for (topic, partition), offset in sorted(offsets.items())]
    return ("\n".join(lines) + "\n").encode()


def parse_checkpoint(data: bytes) -> dict[TopicPartition, int]:
    """The entries of a checkpoint file; ValueError if it is malformed. An empty file has none:
    Kafka 2.3 creates its checkpoints empty (the cleaner's before anything was cleaned)."""
    if not data:
        return {}
    lines = data.decode().splitlines()
    if len(lines) < 2 or lines[0].strip() != str(CHECKPOINT_VERSION):
        raise ValueError(f"unknown checkpoint version or header {lines[:2]}")
    count = int(lines[1])
    entries = lines[2:]
    if len(entries) != count:
        raise ValueError(f"checkpoint announces {count} entries but holds {len(entries)}")
    out: dict[TopicPartition, int] = {}
    for line in entries:
        fields = line.split()
        if len(fields) != 3:
            raise ValueError(f"malformed checkpoint line {line!r}")
        out[(fields[0], int(fields[1]))] = int(fields[2])
    return out


class LogManager:
    """Every log of this broker (format of the shared files and concurrency in the module docstring).

    ``tick()`` is the scheduler: the broker calls it on a timer, and it runs whichever of the
    flush check (log.flush.scheduler.interval.ms), recovery-point checkpoint
    (log.flush.offset.checkpoint.interval.ms), retention check (log.retention.check.interval.ms)
    and idle idempotent producers' expiry (every 10 minutes, after transactional.id.expiration.ms,
    as Kafka 2.3) are due; segments the logs rolled past are fsynced on the next tick. That last is
    done for the logs that rolled since (each log tells the manager, ``Log.on_roll``), not by a walk
    over every log: a broker hosting thousands of idle partitions ticks twice a second. The log
    cleaner is the broker's own task (:meth:`clean_one` every log.cleaner.backoff.ms).
    """

    def __init__(
        self,
        log_dirs: list[str],
        default_config: LogConfig,
        fs: FileSystem | None = None,
        clock: Clock | None = None,
        *,
        topic_configs: Mapping[str, LogConfig] | None = None,
        retention_check_interval_ms: int = 300_000,
        flush_scheduler_interval_ms: int = MAX_LONG,
        flush_offset_checkpoint_interval_ms: int = 60_000,
        high_watermark_checkpoint_interval_ms: int = 5_000,
        producer_id_expiration_ms: int = 7 * 24 * 3600 * 1000,
        producer_id_expiration_check_interval_ms: int = 600_000,
        cleaner_io_bytes_per_second: float = float("inf"),
    ) -> None:
        if not log_dirs:
            raise ValueError("at least one log dir is needed")
        self.log_dirs = [os.path.abspath(d) for d in log_dirs]
        if len(set(self.log_dirs)) != len(self.log_dirs):
            raise ValueError(f"duplicate log dirs in {log_dirs}")
        self.default_config = default_config
        self.fs: FileSystem = fs or OsFileSystem()
        self.clock: Clock = clock or SystemClock()
        self.retention_check_interval_ms = retention_check_interval_ms
        self.flush_scheduler_interval_ms = flush_scheduler_interval_ms
        self.flush_offset_checkpoint_interval_ms = flush_offset_checkpoint_interval_ms
        self.high_watermark_checkpoint_interval_ms = high_watermark_checkpoint_interval_ms
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.producer_id_expiration_check_interval_ms = producer_id_expiration_check_interval_ms
        self.cleaner_io_bytes_per_second = cleaner_io_bytes_per_second
        #: called with each finished cleaning's stats (the broker counts them in its metrics)
        self.on_cleaned: Callable[[CleanStats], None] | None = None
        #: each compacted log's first dirty offset (cleaner-offset-checkpoint; see cleaner.py)
        self._first_dirty: dict[TopicPartition, int] = {}
        #: the high watermarks read from replication-offset-checkpoint at start, then as last written
        self._high_watermarks: dict[TopicPartition, int] = {}
        self._hw_written: dict[str, dict[TopicPartition, int]] = {}  # per log dir, as last written
        self._topic_configs = dict(topic_configs or {})
        #: The replica layer's high watermark of a partition, so retention never moves the log start past
        #: it (None from the callable: not known yet, nothing is deleted). Unset: no replication above
        #: this log manager, the log end offset is the limit.
        self.high_watermark_of: Callable[[TopicPartition], int | None] | None = None
        self._logs: dict[TopicPartition, Log] = {}
        #: logs that may hold segments before the active one not yet fsynced (rolled since, or new)
        self._rolled: dict[TopicPartition, Log] = {}
        self._dir_of: dict[TopicPartition, str] = {}
        self._locks: dict[str, int] = {}
        #: log dirs taken offline by an I/O error, with the error (KIP-112; module docstring)
        self.offline_dirs: dict[str, str] = {}
        #: called on the asyncio thread with a log dir that just failed and the partitions it held
        self.on_dir_failure: Callable[[str, list[TopicPartition]], None] | None = None
        self._failed_logs: list[Log] = []  # the logs of failed dirs: closed at shutdown, never written
        self._io_errors: set[TopicPartition] = set()  # logs that reported an I/O error (any thread)
        self._stopped = False
        now = self.clock.monotonic_ms()
        self._last_flush_check = self._last_checkpoint = self._last_retention_check = now
        self._last_hw_checkpoint = now
        self._log_starts_written: dict[str, dict[TopicPartition, int]] = {}
        self._last_producer_expiration = now
        try:
            for d in self.log_dirs:
                try:
                    self._lock_dir(d)
                    self._load_dir(d)
                except OSError as e:  # this dir is unusable: the broker starts with the others
                    self._fail_at_start(d, e)
            if len(self.offline_dirs) == len(self.log_dirs):
                raise RuntimeError(f"every log dir failed: {self.offline_dirs}")
        except BaseException:
            self.abort()
            raise

    def _fail_at_start(self, d: str, e: OSError) -> None:
        log.error("log dir %s is offline: it cannot be locked or loaded: %s", d, e)
        self.offline_dirs[d] = f"{e}"
        for tp in [tp for tp, dd in self._dir_of.items() if dd == d]:
            self._failed_logs.append(self._logs.pop(tp))
            del self._dir_of[tp]
            self._rolled.pop(tp, None)
        fd = self._locks.pop(d, None)
        if fd is not None:
            try:
                self.fs.close(fd)
            except OSError:
                pass

    # -- start ---------------------------------------------------------------------------------

    def _lock_dir(self, d: str) -> None:
        self.fs.makedirs(d)
        fd = self.fs.open(os.path.join(d, LOCK_FILE), create=True)
        try:
            self.fs.lock(fd)
        except OSError as e:
            self.fs.close(fd)
            raise RuntimeError(f"log dir {d} is in use by another broker (cannot lock {LOCK_FILE}): {e}") from e
        self._locks[d] = fd

    def _load_dir(self, d: str) -> None:
        fs = self.fs
        marker = os.path.join(d, CLEAN_SHUTDOWN_FILE)
        clean = fs.exists(marker)
        points = self._read_checkpoint(d)
        high_watermarks = self._read_checkpoint(d, HIGH_WATERMARK_CHECKPOINT_FILE)
        first_dirty = self._read_checkpoint(d, CLEANER_CHECKPOINT_FILE)
        log_starts = self._read_checkpoint(d, LOG_START_OFFSET_CHECKPOINT_FILE)
        loaded = 0
        for name in sorted(fs.listdir(d)):
            path = os.path.join(d, name)
            if not fs.is_dir(path):
                continue
            if name.endswith(DELETE_DIR_SUFFIX):  # a deleted partition Kafka had not yet removed
                log.info("deleting %s: the log of a deleted partition", path)
                for f in fs.listdir(path):
                    fs.unlink(os.path.join(path, f))
                fs.rmdir(path)
                fs.fsync_dir(d)
                continue
            tp = parse_topic_partition(name)
            if tp is None:
                log.warning("ignoring %s: not a <topic>-<partition> directory", path)
                continue
            if tp in self._logs:
                raise RuntimeError(f"duplicate log directories for {tp[0]}-{tp[1]}: {self._logs[tp].dir} and {path}")
            self._logs[tp] = Log.open(
                path,
                tp[0],
                tp[1],
                self._config_for(tp[0]),
                fs,
                self.clock,
                needs_recovery=not clean,
                recovery_point=points.get(tp, 0),
            )
            self._dir_of[tp] = d
            self._track(tp, self._logs[tp])
            if tp in log_starts:
                lg = self._logs[tp]
                lg.advance_log_start_offset(min(log_starts[tp], lg.log_end_offset), "the log start offset checkpoint")
            if tp in high_watermarks:
                self._high_watermarks[tp] = high_watermarks[tp]
            if tp in first_dirty:
                self._first_dirty[tp] = first_dirty[tp]
            loaded += 1
        if clean:
            fs.unlink(marker)  # a crash from now on must be noticed at the next start
        log.info("loaded %d logs from %s (%s)", loaded, d, "clean shutdown" if clean else "recovered after a crash")

    def _read_checkpoint(self, d: str, name: str = RECOVERY_POINT_CHECKPOINT_FILE) -> dict[TopicPartition, int]:
        path = os.path.join(d, name)
        if not self.fs.exists(path):
            return {}
        try:
            return parse_checkpoint(read_file(self.fs, path))
        except (ValueError, UnicodeDecodeError) as e:
            what = {
                RECOVERY_POINT_CHECKPOINT_FILE: "logs will be recovered from offset 0",
                CLEANER_CHECKPOINT_FILE: "compacted logs will be cleaned from their start",
                LOG_START_OFFSET_CHECKPOINT_FILE: "logs start at their first segment",
            }.get(name, "high watermarks unknown")
            log.warning("ignoring malformed %s (%s): %s", path, what, e)
            return {}

    def checkpointed_high_watermark(self, topic: str, partition: int) -> int | None:
        """The high watermark of (topic, partition) as last checkpointed, or None."""
        return self._high_watermarks.get((topic, partition))

    def _config_for(self, topic: str) -> LogConfig:
        return self._topic_configs.get(topic, self.default_config)

    # -- logs ----------------------------------------------------------------------------------

    def get_log(self, topic: str, partition: int) -> Log | None:
        return self._logs.get((topic, partition))

    def all_logs(self) -> Iterator[tuple[TopicPartition, Log]]:
        return iter(list(self._logs.items()))

    def partitions_of(self, topic: str) -> list[int]:
        return sorted(p for t, p in self._logs if t == topic)

    def log_dir_of(self, topic: str, partition: int) -> str | None:
        return self._dir_of.get((topic, partition))

    def create_log(self, topic: str, partition: int, config: LogConfig | None = None, is_new: bool = True) -> Log:
        """The partition's log, created in the online log dir holding the fewest partitions if needed.

        ``is_new`` False (a partition that existed before, LeaderAndIsr's ``is_new``): refused with
        KAFKA_STORAGE_ERROR while a log dir is offline, since its log may be there (Kafka 2.3)."""
        tp = (topic, partition)
        existing = self._logs.get(tp)
        if existing is not None:
            return existing
        if topic_name_error(topic) is not None or partition < 0:
            raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"illegal topic or partition {topic!r}-{partition}")
        online = [d for d in self.log_dirs if d not in self.offline_dirs]
        if not online or (not is_new and self.offline_dirs):
            raise KafkaError(
                ErrorCode.KAFKA_STORAGE_ERROR,
                f"cannot create the log of {topic}-{partition}: log dir(s) {sorted(self.offline_dirs)} are offline",
            )
        if config is not None:
            self._topic_configs[topic] = config
        counts = dict.fromkeys(online, 0)
        for d in self._dir_of.values():
            counts[d] += 1
        d = min(online, key=lambda x: counts[x])  # ties: the first in log.dirs order
        try:
            created = Log.open(
                os.path.join(d, f"{topic}-{partition}"),
                topic,
                partition,
                config or self._config_for(topic),
                self.fs,
                self.clock,
                needs_recovery=False,
            )
        except OSError as e:
            self.fail_dir(d, f"cannot create the log of {topic}-{partition}: {e}")
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"cannot create the log of {topic}-{partition}: {e}") from e
        self._logs[tp] = created
        self._dir_of[tp] = d
        self._track(tp, created)
        log.info("created log for partition %s-%d in %s", topic, partition, d)
        return created

    def _track(self, tp: TopicPartition, lg: Log) -> None:
        """Have ``lg`` report its rolls (and look at it once on the next tick: a log just opened may
        hold segments below the active one that its recovery point does not cover)."""
        lg.on_roll = lambda: self._rolled.__setitem__(tp, lg)
        lg.on_io_error = lambda: self._io_errors.add(tp)
        self._rolled[tp] = lg

    # -- failed log dirs (KIP-112) --------------------------------------------------------------

    def check_failed_logs(self) -> None:
        """Fail the dirs of the logs that reported an I/O error since the last call."""
        while self._io_errors:
            tp = self._io_errors.pop()
            d = self._dir_of.get(tp)
            if d is not None:
                self.fail_dir(d, f"an I/O error on the log of {tp[0]}-{tp[1]}")

    def fail_dir(self, d: str, reason: str) -> None:
        """Take log dir ``d`` offline (see the module docstring); asyncio thread only."""
        if d in self.offline_dirs or d not in self.log_dirs:
            return
        self.offline_dirs[d] = reason
        gone = sorted(tp for tp, dd in self._dir_of.items() if dd == d)
        for tp in gone:
            self._failed_logs.append(self._logs.pop(tp))
            del self._dir_of[tp]
            self._rolled.pop(tp, None)
            self._high_watermarks.pop(tp, None)
            self._first_dirty.pop(tp, None)
        log.error(
            "log dir %s is offline after an I/O error (%s): its %d partition(s) are offline on this broker",
            d,
            reason,
            len(gone),
        )
        if self.all_dirs_failed:
            log.critical("every log dir of this broker is offline: %s", sorted(self.offline_dirs))
        if self.on_dir_failure is not None:
            self.on_dir_failure(d, gone)

    @property
    def all_dirs_failed(self) -> bool:
        return len(self.offline_dirs) == len(self.log_dirs)

    @property
    def online_dirs(self) -> list[str]:
        return [d for d in self.log_dirs if d not in self.offline_dirs]

    def update_topic_config(self, topic: str, config: LogConfig) -> None:
        self._topic_configs[topic] = config
        for (t, _), lg in self._logs.items():
            if t == topic:
                lg.update_config(config)

    def delete_log(self, topic: str, partition: int) -> bool:
        """Delete the partition's log and its directory. Returns whether there was one."""
        tp = (topic, partition)
        lg = self._logs.pop(tp, None)
        self._dir_of.pop(tp, None)
        self._high_watermarks.pop(tp, None)
        self._first_dirty.pop(tp, None)
        if lg is None:
            return False
        lg.delete()
        return True

    # -- periodic work -------------------------------------------------------------------------

    def tick(self) -> None:
        """Run the periodic work that is due (see the class docstring). Errors are logged, per log."""
        self.check_failed_logs()
        now = self.clock.monotonic_ms()
        if now - self._last_flush_check >= self.flush_scheduler_interval_ms:
            self._last_flush_check = now
            self._each_log("flush", lambda lg: lg.maybe_flush())
        else:
            self._flush_rolled()
        if now - self._last_checkpoint >= self.flush_offset_checkpoint_interval_ms:
            self._last_checkpoint = now
            self.checkpoint_recovery_points()
        if now - self._last_hw_checkpoint >= self.high_watermark_checkpoint_interval_ms:
            self._last_hw_checkpoint = now
            self.checkpoint_high_watermarks()
            self.checkpoint_log_start_offsets()
        if now - self._last_retention_check >= self.retention_check_interval_ms:
            self._last_retention_check = now
            self.cleanup_logs()
        if now - self._last_producer_expiration >= self.producer_id_expiration_check_interval_ms:
            self._last_producer_expiration = now
            self.expire_producers()

    def _next_cleaning(self) -> tuple[TopicPartition, float, Cleaning] | None:
        """The compacted log with the highest dirty ratio among those at or above their
        min.cleanable.dirty.ratio or with a dirty segment older than max.compaction.lag.ms."""
        now_ms = self.clock.time_ms()
        best: tuple[float, TopicPartition, Log, int, int | None] | None = None
        for tp, lg in list(self._logs.items()):
            cfg = lg.config
            if not cfg.compact or lg.is_offline:
                continue
            cut = lg.take_truncation_point()
            if cut is not None and tp in self._first_dirty:
                self._first_dirty[tp] = min(self._first_dirty[tp], cut)
            hw = self.high_watermark_of(tp) if self.high_watermark_of is not None else lg.log_end_offset
            if hw is None:
                continue
            # Kafka 2.3: nothing from the first unstable offset on (an open transaction's record
            # may still be aborted; it must not make an older record of its key go)
            hw = lg.last_stable_offset(hw)
            first_dirty = min(self._first_dirty.get(tp, 0), lg.log_end_offset)
            segments = lg.segments
            start, end = cleanable_section(
                segments, first_dirty, lg.log_start_offset, cfg.min_compaction_lag_ms, now_ms, hw
            )
            ratio, dirty = dirty_ratio(segments, start, end)
            due = ratio >= cfg.min_cleanable_dirty_ratio or (
                max_compaction_delay(segments, first_dirty, cfg.max_compaction_lag_ms, now_ms) > 0
            )
            if dirty > 0 and due and (best is None or ratio > best[0]):
                best = (ratio, tp, lg, start, hw)
        if best is None:
            return None
        ratio, tp, lg, start, hw = best
        cfg = lg.config
        job = Cleaning(
            lg,
            self.fs,
            start,
            now_ms,
            compaction_lag_ms=cfg.min_compaction_lag_ms,
            delete_retention_ms=cfg.delete_retention_ms,
            segment_bytes=cfg.segment_bytes,
            log_start=lg.log_start_offset,
            # Kafka 2.3's cleaner keeps (empty) only the batch holding each producer's last sequence
            protected={e.batches[-1].last_offset for e in lg.producer_state.producers.values() if e.batches},
            high_watermark=hw,
            io_bytes_per_second=self.cleaner_io_bytes_per_second,
            aborted=[(a.producer_id, a.first_offset, a.last_offset) for a in lg.aborted],
            # a producer whose last entry is a marker (no data batch since its epoch): its markers stay
            last_markers={pid: e.epoch for pid, e in lg.producer_state.producers.items() if not e.batches},
        )
        log.info("cleaning %s-%d: dirty ratio %.2f from offset %d", tp[0], tp[1], ratio, job.stats.first_dirty)
        return tp, ratio, job

    async def clean_one(self) -> CleanStats | None:
        """Compact the dirtiest compacted log, reading and writing on a worker thread. The broker's
        cleaner task awaits one at a time."""
        found = self._next_cleaning()
        if found is None:
            return None
        tp, ratio, job = found
        try:
            return self._cleaned(tp, ratio, await job.run())
        except (KafkaError, OSError, ValueError) as e:
            log.error("cleaning %s-%d failed: %s", tp[0], tp[1], e)
            return None

    def _cleaned(self, tp: TopicPartition, ratio: float, stats: CleanStats) -> CleanStats:
        if tp in self._dir_of:  # not deleted meanwhile
            self._first_dirty[tp] = stats.first_uncleanable
            self._write_cleaner_checkpoint(self._dir_of[tp])
        if self.on_cleaned is not None:
            self.on_cleaned(stats)
        log.info(
            "cleaned %s-%d (dirty ratio %.2f): offsets %d..%d, %d bytes read, %d written, %d records kept, "
            "%d removed (%d tombstones), %d -> %d segments in %.3f s",
            tp[0],
            tp[1],
            ratio,
            stats.first_dirty,
            stats.first_uncleanable,
            stats.bytes_read,
            stats.bytes_written,
            stats.records_kept,
            stats.records_removed,
            stats.tombstones_removed,
            stats.segments_before,
            stats.segments_after,
            stats.seconds,
        )
        return stats

    def _write_cleaner_checkpoint(self, d: str) -> None:
        points = {tp: off for tp, off in self._first_dirty.items() if self._dir_of.get(tp) == d}
        try:
            write_file_atomically(self.fs, os.path.join(d, CLEANER_CHECKPOINT_FILE), format_checkpoint(points))
        except OSError as e:
            log.error("cannot write the cleaner checkpoint of %s: %s", d, e)

    def _flush_rolled(self) -> None:
        """fsync the segments the logs that rolled since the last tick rolled past (a log whose
        flush failed is tried again on the next tick, as every log was)."""
        rolled, self._rolled = self._rolled, {}
        for (topic, partition), lg in rolled.items():
            if self._logs.get((topic, partition)) is not lg:
                continue  # deleted since
            try:
                lg.flush_rolled_segments()
            except (KafkaError, OSError) as e:
                log.error("flush of %s-%d failed: %s", topic, partition, e)
                self._rolled[(topic, partition)] = lg

    def _each_log(self, what: str, action: Callable[[Log], None]) -> None:
        for (topic, partition), lg in list(self._logs.items()):
            try:
                action(lg)
            except (KafkaError, OSError) as e:
                log.error("%s of %s-%d failed: %s", what, topic, partition, e)

    def expire_producers(self) -> int:
        """Forget the idempotent producers idle for transactional.id.expiration.ms; returns how many."""
        wall = self.clock.time_ms()
        total = 0
        for (topic, partition), lg in list(self._logs.items()):
            n = lg.producer_state.remove_expired(wall, self.producer_id_expiration_ms)
            if n:
                log.info("%s-%d: forgot %d idle producer id(s)", topic, partition, n)
            total += n
        return total

    def cleanup_logs(self) -> int:
        """Apply retention to every log; returns the segments deleted."""
        total = 0
        for (topic, partition), lg in list(self._logs.items()):
            try:
                lg.roll_if_idle()  # segment.ms also applies to a partition nobody writes to
                hw = None
                if self.high_watermark_of is not None:
                    hw = self.high_watermark_of((topic, partition))
                    if hw is None:
                        continue
                total += lg.delete_retention_segments(high_watermark=hw)
            except (KafkaError, OSError) as e:
                log.error("retention of %s-%d failed: %s", topic, partition, e)
        return total

    def flush_all(self) -> None:
        self._each_log("flush", lambda lg: lg.flush())

    def checkpoint_recovery_points(self) -> None:
        """Write every log dir's recovery-point-offset-checkpoint."""
        for d in self.online_dirs:
            points = {tp: self._logs[tp].recovery_point for tp, dd in self._dir_of.items() if dd == d}
            try:
                write_file_atomically(
                    self.fs, os.path.join(d, RECOVERY_POINT_CHECKPOINT_FILE), format_checkpoint(points)
                )
            except OSError as e:
                self._checkpoint_failed(d, "recovery point", e)

    def checkpoint_high_watermarks(self) -> None:
        """Write every log dir's replication-offset-checkpoint from ``high_watermark_of`` (a partition
        whose high watermark is not known now keeps its last checkpointed one)."""
        if self.high_watermark_of is None:
            return
        for tp in self._logs:
            hw = self.high_watermark_of(tp)
            if hw is not None:
                self._high_watermarks[tp] = hw
        for d in self.online_dirs:
            hws = {tp: hw for tp, hw in self._high_watermarks.items() if self._dir_of.get(tp) == d}
            if self._hw_written.get(d) == hws:
                continue  # nothing moved: no write, no fsync
            try:
                write_file_atomically(self.fs, os.path.join(d, HIGH_WATERMARK_CHECKPOINT_FILE), format_checkpoint(hws))
                self._hw_written[d] = hws
            except OSError as e:
                self._checkpoint_failed(d, "high watermark", e)

    def checkpoint_log_start_offsets(self) -> None:
        """Write each log dir's log-start-offset-checkpoint: the logs whose log start offset is above
        their first segment's base offset (DeleteRecords). Called right after DeleteRecords moves one
        (before it is acknowledged), from the periodic high watermark checkpoint and at shutdown."""
        for d in self.online_dirs:
            starts = {
                tp: lg.log_start_offset
                for tp, lg in self._logs.items()
                if self._dir_of.get(tp) == d and lg.log_start_offset > lg.first_segment_base_offset
            }
            if self._log_starts_written.get(d, {}) == starts:
                continue
            try:
                write_file_atomically(
                    self.fs, os.path.join(d, LOG_START_OFFSET_CHECKPOINT_FILE), format_checkpoint(starts)
                )
                self._log_starts_written[d] = starts
            except OSError as e:
                self._checkpoint_failed(d, "log start offset", e)

    def _checkpoint_failed(self, d: str, what: str, e: OSError) -> None:
        log.error("cannot write the %s checkpoint of %s: %s", what, d, e)
        self.fail_dir(d, f"cannot write the {what} checkpoint: {e}")

    # -- stop ----------------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Flush and close every log, write the checkpoints, then the clean-shutdown markers."""
        if self._stopped:
            return
        log.info("shutting down the log manager (%d logs)", len(self._logs))
        self.on_dir_failure = None  # a dir failing now fails no partition: they all stop anyway
        failed_dirs: set[str] = set()

        def close(tp: TopicPartition, lg: Log) -> None:
            try:
                lg.take_producer_snapshot()  # so the next start replays nothing; the flush makes it durable
                lg.flush()
            except (KafkaError, OSError) as e:
                log.error("flush of %s-%d at shutdown failed: %s", tp[0], tp[1], e)
                failed_dirs.add(self._dir_of[tp])
            lg.close()

        # Each log by one thread (a Log is used from one thread at a time), several logs at once: the
        # fsyncs of thousands of logs overlap (and share journal commits) instead of queueing one
        # behind the other, as Kafka's shutdown runs num.recovery.threads.per.data.dir threads per dir.
        with ThreadPoolExecutor(SHUTDOWN_THREADS, thread_name_prefix="log-shutdown") as pool:
            for f in [pool.submit(close, tp, lg) for tp, lg in list(self._logs.items())]:
                f.result()
        self.checkpoint_recovery_points()
        self.checkpoint_high_watermarks()
        self.checkpoint_log_start_offsets()
        for lg in self._failed_logs:
            lg.close()
        for d in self.log_dirs:
            if d in failed_dirs or d in self.offline_dirs:
                continue
            try:
                write_file_atomically(self.fs, os.path.join(d, CLEAN_SHUTDOWN_FILE), b"")
            except OSError as e:
                log.error("cannot write the clean shutdown marker in %s: %s", d, e)
        self._release_locks()
        self._stopped = True
        log.info("log manager shut down")

    def abort(self) -> None:
        """Let go of every file and lock without flushing or writing anything (what a crash leaves)."""
        for lg in [*self._logs.values(), *self._failed_logs]:
            lg.close()
        self._release_locks()
        self._stopped = True

    def _release_locks(self) -> None:
        for fd in self._locks.values():
            try:
                self.fs.close(fd)
            except OSError:
                pass
        self._locks.clear()
