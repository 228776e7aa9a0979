"""The log of one partition: a directory ``<topic>-<partition>/`` of segments.

On disk (see :mod:`~headwater.broker.storage.segment` and :mod:`~headwater.broker.storage.index`)::

    <topic>-<partition>/
        00000000000000000000.log        record batches, offsets 0 ..
        00000000000000000000.index      sparse offset → position
        00000000000000000000.timeindex  sparse timestamp → offset
        00000000000000004821.log        the next segment starts at offset 4821
        00000000000000004821.snapshot   idempotent producers' state below offset 4821 (producer_state.py)
        00000000000000004821.txnindex   transactions aborted in that segment (txn_index.py)
        ...
        leader-epoch-checkpoint         where each leader epoch starts (see leader_epoch.py)
        00000000000000000000.log.deleted  (Kafka's) a deleted segment's file: removed at open

Segments cover increasing, non-overlapping offset ranges; the last one is the *active* segment,
the only one appended to. The log start offset is the first segment's base offset (retention
moves it by deleting whole segments) or above it, inside the first segment, after DeleteRecords
(:meth:`Log.advance_log_start_offset`; the log manager checkpoints it); the log end offset is one above the last offset written.
The recovery point is the offset below which everything is known to be fsynced: an unclean start
re-checks only the segments from the one holding it.

Appends are validated (length, magic 2, CRC-32C, size) before anything is written, written with
one ``pwrite``, and only then made visible. A failed write truncates the file back, so the log on
disk never holds what the log in memory does not.

Two kinds of append: :meth:`Log.append` (leader) assigns offsets from the log end offset and
stamps the leader's epoch on every batch (and, per the topic's configs, refuses timestamps outside
message.timestamp.difference.max.ms, recompresses to compression.type and stamps LogAppendTime:
see :mod:`~headwater.broker.storage.validator`); :meth:`Log.append_as_follower` keeps the offsets and
epochs the leader assigned, byte for byte. Either way a batch whose epoch is above the cache's
latest starts a new entry in the :class:`~headwater.broker.storage.leader_epoch.LeaderEpochCache`
(``leader_epoch_cache``). The entry is written to the checkpoint *before* the batch is written
(and removed again if the batch write fails), so the checkpoint covers every batch in the log;
its directory fsync waits for the next flush like a new segment's. Truncation, a full truncation
and retention keep the cache consistent (``truncate_from_end`` / ``clear`` /
``truncate_from_start``). On open the checkpoint is loaded; when it is missing or invalid it is
rebuilt from the batch headers of the whole log, and after an unclean shutdown the epochs of the
recovered segments are assigned again (what the checkpoint may have missed); then entries at or
above the log end offset are dropped and the earliest is moved up to the log start offset.

The idempotent producers' state (``producer_state``, see
:mod:`~headwater.broker.storage.producer_state`) is checked by :meth:`Log.append` before anything
is written (a refused batch writes nothing; a retry of a recent batch writes nothing and answers
its original offsets), updated after every append (leader and follower), snapshotted at each roll
and by the log manager at clean shutdown, and rebuilt at open and after a truncation from the
newest snapshot at or below the log end plus the batches after it.

Transactions: the producer state tracks each producer's open transaction; :meth:`Log.last_stable_offset`
is the first offset of an open (or not yet replicated completed) transaction, capped by the high
watermark. Every ABORT marker appended (leader or follower) adds an entry to the aborted-transaction
index (``aborted``, one ``.txnindex`` file per segment, see txn_index.py), which a read_committed
Fetch asks through :meth:`Log.collect_aborted`. Truncation and retention delete the files of the
segments they delete; loading rebuilds the entries above the producer state's replay point.

Concurrency: a Log is not thread-safe. The broker calls it from its single asyncio thread (the
log manager may load and shut down logs from a worker thread while nothing else uses them).
``FileRegion``s returned by :meth:`Log.read` may be sent from anywhere: they keep their file open.

Observers, instead of walks over every log: ``on_offsets_moved`` is called after every move of the
log end or log start offset (append, truncation, full truncation, DeleteRecords, retention, a
cleaned first segment dropped), ``on_roll`` after every roll. Both are called on the asyncio thread
(nothing that runs on a worker thread moves an offset or rolls) and must not raise.
"""

from __future__ import annotations

import logging
import os
import random
import struct
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from headwater.broker.storage.cleaner import SWAP_SUFFIX, cleaned_files, swap_target
from headwater.broker.storage.clock import Clock
from headwater.broker.storage.fs import FileSystem
from headwater.broker.storage.index import INT32_MAX, IndexCorruptError
from headwater.broker.storage.leader_epoch import (
    CheckpointError,
    EmptyCheckpointError,
    LeaderEpochCache,
    read_checkpoint,
)
from headwater.broker.storage.producer_state import (
    SNAPSHOT_SUFFIX,
    SNAPSHOTS_KEPT,
    CompletedTxn,
    ProducerStateManager,
    SnapshotError,
    delete_snapshot,
    list_snapshots,
    read_snapshot,
    write_snapshot,
)
from headwater.broker.storage.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    BatchEntry,
    Segment,
    SegmentCorruptError,
    SegmentWriteError,
    parse_segment_file_name,
)
from headwater.broker.storage.txn_index import (
    TXN_INDEX_SUFFIX,
    AbortedTxn,
    TxnIndexError,
    delete_txn_index,
    read_txn_index,
    write_txn_index,
)
from headwater.broker.storage.validator import (
    COMPRESSION_TYPES,
    CREATE_TIME,
    LOG_APPEND_TIME,
    TIMESTAMP_TYPES,
    check_timestamps,
    recompress,
    stamp_log_append_time,
    target_codec,
)
from headwater.protocol.errors import ErrorCode, KafkaError
from headwater.protocol.primitives import FileRegion
from headwater.protocol.records.control import Marker, decode_marker
from headwater.protocol.records.header import (
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    BatchSummary,
    read_header,
    rewrite_offset_and_epoch,
    validate_batches,
)
from headwater.protocol.records.record import decode_batch

log = logging.getLogger(__name__)

MAX_LONG = 2**63 - 1
LATEST_TIMESTAMP = -1  # ListOffsets: the log end offset
EARLIEST_TIMESTAMP = -2  # ListOffsets: the log start offset
_DAY_MS = 24 * 3600 * 1000
# The start of a batch header as far as the partition leader epoch and magic (see records/header.py).
_EPOCH_HEADER = struct.Struct(">qiib")  # base_offset, batch_length, partition_leader_epoch, magic
_EPOCH_WALK_CHUNK = 8192


@dataclass(frozen=True, slots=True)
class LogConfig:
    """A log's settings, named after Kafka's (broker-wide name / topic-level name)."""

    segment_bytes: int = 1 << 30  # log.segment.bytes / segment.bytes
    segment_ms: int = 7 * _DAY_MS  # log.roll.ms / segment.ms
    retention_ms: int = 7 * _DAY_MS  # log.retention.ms / retention.ms; -1: no limit
    retention_bytes: int = -1  # log.retention.bytes / retention.bytes; -1: no limit
    flush_interval_messages: int = MAX_LONG  # log.flush.interval.messages / flush.messages
    flush_interval_ms: int | None = None  # log.flush.interval.ms / flush.ms; None: never by time
    index_interval_bytes: int = 4096  # log.index.interval.bytes / index.interval.bytes
    max_message_bytes: int = 1000012  # message.max.bytes / max.message.bytes (largest batch)
    cleanup_policy: str = "delete"  # log.cleanup.policy / cleanup.policy: delete, compact or both
    min_cleanable_dirty_ratio: float = 0.5  # log.cleaner.min.cleanable.ratio / min.cleanable.dirty.ratio
    min_compaction_lag_ms: int = 0  # log.cleaner.min.compaction.lag.ms / min.compaction.lag.ms
    delete_retention_ms: int = 86_400_000  # log.cleaner.delete.retention.ms / delete.retention.ms
    #: log.cleaner.max.compaction.lag.ms / max.compaction.lag.ms (KIP-354): a dirty segment older
    #: than this is cleaned whatever the dirty ratio; a compacted log's active segment rolls by it
    max_compaction_lag_ms: int = MAX_LONG
    #: log.message.timestamp.type / message.timestamp.type: CreateTime or LogAppendTime (the
    #: leader stamps each batch, see validator.py)
    message_timestamp_type: str = CREATE_TIME
    #: log.message.timestamp.difference.max.ms / message.timestamp.difference.max.ms
    message_timestamp_difference_max_ms: int = MAX_LONG
    #: compression.type: producer (keep the producer's codec) or the codec the leader recompresses to
    compression_type: str = "producer"
    #: log.index.size.max.bytes / segment.index.bytes: a segment rolls once its offset index holds
    #: this many bytes of entries (8 each) or its time index (12 each), as Kafka's full index does
    segment_index_bytes: int = 10 * 1024 * 1024
    #: log.roll.jitter.ms / segment.jitter.ms: each segment rolls up to this much before segment.ms
    #: (a random amount drawn when it becomes active), so partitions created together do not roll together
    segment_jitter_ms: int = 0

    def __post_init__(self) -> None:
        if not 61 <= self.segment_bytes <= INT32_MAX:
            raise ValueError(f"segment_bytes {self.segment_bytes} must be between 61 and {INT32_MAX}")
        if self.segment_ms <= 0:
            raise ValueError(f"segment_ms {self.segment_ms} must be positive")
        if self.flush_interval_messages < 0:
            raise ValueError(f"flush_interval_messages {self.flush_interval_messages} must not be negative")
        if self.flush_interval_ms is not None and self.flush_interval_ms < 0:
            raise ValueError(f"flush_interval_ms {self.flush_interval_ms} must not be negative")
        if self.index_interval_bytes < 0:
            raise ValueError(f"index_interval_bytes {self.index_interval_bytes} must not be negative")
        if self.max_message_bytes < 0:
            raise ValueError(f"max_message_bytes {self.max_message_bytes} must not be negative")
        if not 0.0 <= self.min_cleanable_dirty_ratio <= 1.0:
            raise ValueError(f"min_cleanable_dirty_ratio {self.min_cleanable_dirty_ratio} must be between 0 and 1")
        if self.min_compaction_lag_ms < 0 or self.delete_retention_ms < 0:
            raise ValueError("min_compaction_lag_ms and delete_retention_ms must not be negative")
        if self.max_compaction_lag_ms < 1:
            raise ValueError(f"max_compaction_lag_ms {self.max_compaction_lag_ms} must be at least 1")
        if self.min_compaction_lag_ms > self.max_compaction_lag_ms:
            raise ValueError(
                f"conflict topic config setting min.compaction.lag.ms ({self.min_compaction_lag_ms}) > "
                f"max.compaction.lag.ms ({self.max_compaction_lag_ms})"
            )
        if self.message_timestamp_type not in TIMESTAMP_TYPES:
            raise ValueError(f"message_timestamp_type {self.message_timestamp_type!r} must be one of {TIMESTAMP_TYPES}")
        if self.message_timestamp_difference_max_ms < 0:
            raise ValueError("message_timestamp_difference_max_ms must not be negative")
        if self.segment_index_bytes < 0 or self.segment_jitter_ms < 0:
            raise ValueError("segment_index_bytes and segment_jitter_ms must not be negative")
        if self.compression_type not in COMPRESSION_TYPES:
            raise ValueError(f"compression_type {self.compression_type!r} must be one of {COMPRESSION_TYPES}")

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy.split(",")

    @property
    def max_segment_ms(self) -> int:
        """How old the active segment may get before it rolls: segment.ms, or max.compaction.lag.ms
        when that is shorter on a compacted log (Kafka's ``maxSegmentMs``, KIP-354)."""
        return min(self.segment_ms, self.max_compaction_lag_ms) if self.compact else self.segment_ms


class AppendInfo(NamedTuple):
    first_offset: int
    last_offset: int
    max_timestamp: int  # -1 when no batch carried a timestamp
    offset_of_max_timestamp: int  # the last offset of the batch with max_timestamp (-1 with none)
    records_count: int
    log_start_offset: int
    #: an idempotent producer's retry of a batch already in the log: nothing was written, the
    #: offsets are the original batch's
    duplicate: bool = False
    #: the time the leader stamped on the batches of a LogAppendTime topic (-1: CreateTime)
    log_append_time: int = -1


class FetchData(NamedTuple):
    """What a read found: ``region`` (None: nothing to send) starts at the batch holding the offset."""

    region: FileRegion | None
    first_batch_offset: int


def _storage_error(what: str, e: BaseException) -> KafkaError:
    return KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"{what}: {e}")


class UnexpectedAppendOffsetError(KafkaError):
    """A follower's record set does not start at the log end offset (nothing was written).

    Kafka raises its UnexpectedAppendOffsetException (no wire code of its own) only for a first
    offset *below* the log end offset; we also refuse a gap above it. The code is
    OFFSET_OUT_OF_RANGE. ``first_offset`` / ``last_offset`` are the set's, ``expected_offset``
    the log end offset: a fetcher whose log is empty may ``truncate_fully_and_start_at`` the
    first offset (Kafka's follower does that after a leader's DeleteRecords) and append again.
    """

    def __init__(self, message: str, first_offset: int, last_offset: int, expected_offset: int) -> None:
        super().__init__(ErrorCode.OFFSET_OUT_OF_RANGE, message)
        self.first_offset = first_offset
        self.last_offset = last_offset
        self.expected_offset = expected_offset


def _batch_epochs(segments: Sequence[Segment]) -> Iterator[tuple[int, int]]:
    """(partition_leader_epoch, base_offset) of every batch of checked segments, reading headers only."""
    for seg in segments:
        size = seg.size
        pos = 0
        buf = b""
        buf_start = 0
        while pos < size:
            rel = pos - buf_start
            if rel + _EPOCH_HEADER.size > len(buf):
                buf, buf_start, rel = seg.read_bytes(pos, min(_EPOCH_WALK_CHUNK, size - pos)), pos, 0
                if len(buf) < _EPOCH_HEADER.size:
                    raise SegmentCorruptError(f"{seg.log_path}: no whole batch header at position {pos}")
            base, length, epoch, magic = _EPOCH_HEADER.unpack_from(buf, rel)
            if magic != 2 or length < HEADER_SIZE - LOG_OVERHEAD:
                raise SegmentCorruptError(f"{seg.log_path}: bad batch header at position {pos}")
            yield int(epoch), int(base)
            pos += LOG_OVERHEAD + int(length)


def _refuse_null_keys(records: bytes | bytearray | memoryview, summaries: list[BatchSummary], where: str) -> None:
    """A compacted log refuses records without a key, as Kafka's LogValidator does (CORRUPT_MESSAGE):
    compaction keeps the latest record *of a key*. Decodes the batches: compacted topics only."""
    for position, h in summaries:
        if h.is_control:
            continue
        for r in decode_batch(records, position, verify_crc=False)[1]:
            if r.key is None:
                raise KafkaError(
                    ErrorCode.CORRUPT_MESSAGE,
                    f"Compacted topic cannot accept message without key in topic partition {where}.",
                )


def _finish_interrupted_cleaning(fs: FileSystem, directory: str, ident: str) -> None:
    """A crash mid-swap (cleaner.py): ``.cleaned`` files are dropped; a ``.swap`` file replaces every
    segment whose base offset lies within its offsets, then takes its name."""
    names = fs.listdir(directory)
    for name in names:
        if name.endswith(DELETED_SUFFIX):  # Kafka's segments waiting for file.delete.delay.ms
            log.info("%s deleting %s, a segment file deleted before the last stop", ident, name)
            fs.unlink(os.path.join(directory, name))
    cleaned, swaps = cleaned_files(names)
    for name in cleaned:
        log.info("%s deleting %s left by an interrupted cleaning", ident, name)
        fs.unlink(os.path.join(directory, name))
    for name in swaps:
        parsed = parse_segment_file_name(swap_target(name))
        if parsed is None or parsed[1] != LOG_SUFFIX:  # Kafka's index swaps: the indexes are rebuilt
            if parsed is not None:
                log.info("%s deleting %s left by an interrupted swap", ident, name)
                fs.unlink(os.path.join(directory, name))
            continue
        base = parsed[0]
        path = os.path.join(directory, name)
        last = base
        fd = fs.open(path)
        try:
            size, pos = fs.fsize(fd), 0
            while pos + HEADER_SIZE <= size:
                h = read_header(fs.pread(fd, HEADER_SIZE, pos))
                last, pos = h.base_offset + h.last_offset_delta, pos + LOG_OVERHEAD + h.batch_length
        finally:
            fs.close(fd)
        for other in fs.listdir(directory):
            got = parse_segment_file_name(other)
            if got is not None and base <= got[0] <= last and got[1] in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX):
                fs.unlink(os.path.join(directory, other))
        fs.rename(path, os.path.join(directory, swap_target(name)))
        fs.fsync_dir(directory)
        log.info("%s completed the interrupted swap of cleaned segment %s (offsets %d..%d)", ident, name, base, last)


#: Kafka renames a segment's files ``<name>.deleted`` and removes them file.delete.delay.ms later
#: (Headwater deletes at once); what a stop left behind is removed when the log is opened
DELETED_SUFFIX = ".deleted"


class Log:
    """The log of one partition (layout, invariants and concurrency in the module docstring)."""

    def __init__(
        self,
        directory: str,
        topic: str,
        partition: int,
        config: LogConfig,
        fs: FileSystem,
        clock: Clock,
        segments: list[Segment],
        recovery_point: int,
    ) -> None:
        """Use :meth:`open`."""
        self._dir = directory
        self.topic = topic
        self.partition = partition
        self._config = config
        self._roll_jitter_ms = self._draw_roll_jitter()
        self._fs = fs
        self._clock = clock
        self._segments = segments
        self._base_offsets = [s.base_offset for s in segments]
        self._next_offset = segments[-1].next_offset
        self._log_start_offset = segments[0].base_offset
        self._size_bytes = sum(s.size for s in segments)
        self._recovery_point = min(recovery_point, self._next_offset)
        self._unflushed_messages = 0
        self._last_flush_ms = clock.monotonic_ms()
        self._dir_unsynced = False
        self._unsynced_files: set[str] = set()
        self._offline = False
        self._closed = False
        #: called (on the event loop) after every move of the log end or log start offset: the replica
        #: manager wakes the fetches watching this partition with it
        self.on_offsets_moved: Callable[[], None] | None = None
        #: called after each roll: the log manager fsyncs the segments rolled past on its next tick
        self.on_roll: Callable[[], None] | None = None
        #: called (on whichever thread hit it) when an I/O error took this log offline: the log
        #: manager takes the whole log dir offline (KIP-112), as Kafka's LogDirFailureChannel
        self.on_io_error: Callable[[], None] | None = None
        self._ident = f"[Log partition={topic}-{partition}, dir={os.path.dirname(directory) or '.'}]"
        #: Where each leader epoch starts; :meth:`open` loads it (see leader_epoch.py).
        self.leader_epoch_cache = LeaderEpochCache(fs, directory, defer_sync=self._file_changed)
        #: The idempotent producers' state (see producer_state.py); :meth:`open` loads it.
        self.producer_state = ProducerStateManager()
        self._lowest_truncation: int | None = None  # for the cleaner: see take_truncation_point
        #: aborted transactions, by marker offset (see txn_index.py); :meth:`open` loads them
        self.aborted: list[AbortedTxn] = []

    # -- opening -------------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        directory: str,
        topic: str,
        partition: int,
        config: LogConfig,
        fs: FileSystem,
        clock: Clock,
        *,
        needs_recovery: bool,
        recovery_point: int = 0,
    ) -> Log:
        """Open (or create) the log in ``directory``.

        Every segment's indexes are loaded and checked, and rebuilt from the log when missing or
        bad. With ``needs_recovery`` (no clean shutdown) every segment from the one holding
        ``recovery_point`` on is recovered; the last segment always is. Where recovery truncates a
        segment, every later segment is deleted.
        """
        ident = f"[Log partition={topic}-{partition}, dir={os.path.dirname(directory) or '.'}]"
        fs.makedirs(directory)
        _finish_interrupted_cleaning(fs, directory, ident)
        bases: list[int] = []
        indexes: list[tuple[int, str]] = []
        for name in fs.listdir(directory):
            parsed = parse_segment_file_name(name)
            if parsed is None:
                continue
            base, suffix = parsed
            if suffix == LOG_SUFFIX:
                bases.append(base)
            elif suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
                indexes.append((base, name))
        bases.sort()
        for base, name in indexes:
            if base not in bases:
                log.info("%s deleting index %s without a log file", ident, name)
                fs.unlink(os.path.join(directory, name))

        segments = [Segment.open(fs, directory, b, config.index_interval_bytes) for b in bases]
        if needs_recovery and segments:
            first_to_recover = max(bisect_right(bases, recovery_point) - 1, 0)
        else:
            first_to_recover = len(segments) - 1
        max_batch_bytes = max(config.max_message_bytes, config.segment_bytes)
        ok: list[Segment] = []  # the segments kept, in order
        drop_from = len(segments)  # segments from this index on are deleted (after a corruption)
        last_recovered = False  # whether ok[-1] was recovered (the active segment always is)
        for i, seg in enumerate(segments):
            if ok and seg.base_offset < ok[-1].next_offset:
                if seg.size == 0 and i < len(segments) - 1:
                    # An empty segment inside the previous one's offsets: what a roll that failed
                    # half-way left in older versions (the log went on in the previous segment).
                    # Dropped alone, rather than as an overlap that would drop every later segment.
                    # An empty segment that overlaps nothing is kept: Kafka's cleaner leaves one
                    # where it removed every record of a group of segments.
                    log.warning("%s deleting empty segment %s left by a failed roll", ident, seg.log_path)
                    seg.delete()
                    continue
                log.warning(
                    "%s segment %s starts at offset %d, below the previous segment's end %d",
                    ident,
                    seg.log_path,
                    seg.base_offset,
                    ok[-1].next_offset,
                )
                drop_from = i
                break
            if i >= first_to_recover:
                if needs_recovery:
                    log.info("%s recovering unflushed segment %s (%d bytes)", ident, seg.log_path, seg.size)
                truncated = seg.recover(max_batch_bytes)
                last_recovered = True
            else:
                try:
                    seg.load()
                    truncated = 0
                    last_recovered = False
                except (FileNotFoundError, IndexCorruptError, SegmentCorruptError) as e:
                    log.warning("%s rebuilding the indexes of %s: %s", ident, seg.log_path, e)
                    truncated = seg.recover(max_batch_bytes)
                    last_recovered = True
            ok.append(seg)
            if truncated:
                log.warning(
                    "%s recovery truncated %d bytes from %s; the log now ends at offset %d",
                    ident,
                    truncated,
                    seg.log_path,
                    seg.next_offset,
                )
                drop_from = i + 1
                break
        for seg in segments[drop_from:]:
            log.warning(
                "%s deleting segment %s (offsets from %d, %d bytes) after the corruption",
                ident,
                seg.log_path,
                seg.base_offset,
                seg.size,
            )
            seg.delete()
        segments = ok
        if segments and not last_recovered:  # the active segment is always checked
            segments[-1].recover(max_batch_bytes)
        if not segments:
            segments = [Segment.create(fs, directory, 0, config.index_interval_bytes, clock.time_ms())]
        for seg in segments[:-1]:
            seg.become_inactive()
        result = cls(
            directory,
            topic,
            partition,
            config,
            fs,
            clock,
            segments,
            recovery_point if needs_recovery else segments[-1].next_offset,
        )
        result._load_leader_epochs(min(first_to_recover, len(segments)) if needs_recovery else None)
        result._load_producer_state()
        log.info(
            "%s loaded %d segments: log start offset %d, log end offset %d, recovery point %d, latest epoch %d",
            ident,
            len(segments),
            result.log_start_offset,
            result.log_end_offset,
            result.recovery_point,
            result.leader_epoch_cache.latest_epoch,
        )
        return result

    def _load_leader_epochs(self, recovered_from: int | None) -> None:
        """Load the checkpoint (or rebuild it), re-assign the recovered segments' epochs, trim both ends.

        ``recovered_from``: the index of the first segment recovery re-read (None after a clean
        shutdown); their batches may carry epochs the checkpoint never durably recorded.
        """
        rebuild = False
        try:
            entries = read_checkpoint(self._fs, self._dir)
        except FileNotFoundError:
            entries, rebuild = [], True
            if self._next_offset > self._segments[0].base_offset:
                log.warning("%s no leader-epoch-checkpoint: rebuilding it from the log", self._ident)
        except CheckpointError as e:
            entries, rebuild = [], True
            # Kafka creates the file empty with the log: only worth a warning when the log is not
            if not isinstance(e, EmptyCheckpointError) or self._next_offset > self._segments[0].base_offset:
                log.warning("%s invalid leader-epoch-checkpoint (%s): rebuilding it from the log", self._ident, e)
        cache = self.leader_epoch_cache = LeaderEpochCache(self._fs, self._dir, entries, defer_sync=self._file_changed)
        walk_from = 0 if rebuild else recovered_from
        changed = False
        if walk_from is not None:
            changed = cache.assign_all(_batch_epochs(self._segments[walk_from:]))
        changed |= cache.truncate_from_end(self._next_offset)
        changed |= cache.truncate_from_start(self._log_start_offset)
        if rebuild and not changed:
            cache.write()

    # -- producer state ------------------------------------------------------------------------

    def _load_producer_state(self) -> None:
        """Rebuild the producer state: the newest valid snapshot within [log start, log end], then
        the batches from its offset to the log end (from the log start without one).

        Snapshots above the log end (an unclean shutdown lost their tail, or a truncation) and
        invalid ones are deleted; older valid ones are kept.
        """
        state = self.producer_state
        state.clear()
        start_from = self._log_start_offset
        for name in self._fs.listdir(self._dir):
            if name.endswith((SNAPSHOT_SUFFIX + ".tmp", TXN_INDEX_SUFFIX + ".tmp")):  # writes a crash interrupted
                self._fs.unlink(os.path.join(self._dir, name))
        for offset in reversed(list_snapshots(self._fs, self._dir)):
            if offset > self._next_offset:
                delete_snapshot(self._fs, self._dir, offset)
                continue
            if offset < self._log_start_offset:
                break
            try:
                state.producers = read_snapshot(self._fs, self._dir, offset)
            except (SnapshotError, OSError) as e:
                log.warning("%s ignoring producer state snapshot at offset %d: %s", self._ident, offset, e)
                delete_snapshot(self._fs, self._dir, offset)
                continue
            start_from = offset
            break
        aborted = self._read_txn_indexes(start_from)
        if aborted is None:  # an unreadable .txnindex: rebuild the state and the index from the log start
            state.clear()
            start_from, aborted = self._log_start_offset, []
        self.aborted = aborted
        n = 0
        try:
            for base_offset, h, seg, position in self._batch_headers(start_from):
                marker = self._marker_at(seg, position, h) if h.is_control else None
                done = state.update(h, base_offset, marker)
                if done is not None and done.aborted:
                    self.aborted.append(AbortedTxn(done.producer_id, done.first_offset, done.last_offset, -1))
                n += 1
        except SegmentCorruptError as e:
            # Only a segment recovery did not check can be bad here. The state is derived: a producer
            # missing from it is treated as unknown, which is better than a log that cannot open.
            log.error("%s producer state rebuilt only up to a bad batch header: %s", self._ident, e)
        state.evict_below(self._log_start_offset)  # as retention did (a snapshot may predate it)
        self._write_txn_indexes_from(start_from)
        if state.producers or n:
            log.info(
                "%s producer state: %d producers (replayed %d batches from offset %d)",
                self._ident,
                len(state.producers),
                n,
                start_from,
            )

    def _read_txn_indexes(self, below: int) -> list[AbortedTxn] | None:
        """The entries of the segments' ``.txnindex`` files with a marker below ``below``; None
        when a file is unreadable (the caller rebuilds from the log start)."""
        out: list[AbortedTxn] = []
        for seg in self._segments:
            if seg.base_offset >= below:
                break
            try:
                entries = read_txn_index(self._fs, self._dir, seg.base_offset)
            except (TxnIndexError, OSError) as e:
                log.warning(
                    "%s unreadable transaction index of segment %d (%s): rebuilding", self._ident, seg.base_offset, e
                )
                return None
            out.extend(e for e in entries if e.last_offset < below and e.last_offset >= self._log_start_offset)
        return out

    def _write_txn_indexes_from(self, offset: int) -> None:
        """Rewrite the ``.txnindex`` file of every segment holding offsets at or above ``offset``."""
        for i, seg in enumerate(self._segments):
            end = self._segments[i + 1].base_offset if i + 1 < len(self._segments) else MAX_LONG
            if end <= offset:
                continue
            self._write_txn_index(seg.base_offset, end)

    def _write_txn_index(self, base: int, end: int) -> None:
        lo = bisect_left([a.last_offset for a in self.aborted], base)
        entries = [a for a in self.aborted[lo:] if a.last_offset < end]
        try:
            write_txn_index(self._fs, self._dir, base, entries)
        except OSError as e:
            self._offline = True
            raise _storage_error(f"{self._ident} cannot write the transaction index of segment {base}", e) from e
        self._dir_unsynced = True

    @staticmethod
    def _marker_at(seg: Segment, position: int, h: BatchHeader) -> Marker | None:
        try:
            return decode_marker(seg.read_bytes(position, h.size))
        except KafkaError:
            return None

    def _record_completed(self, done: CompletedTxn | None) -> None:
        """A marker was appended: an ABORT goes into the aborted-transaction index (and its file)."""
        if done is None or not done.aborted:
            return
        unstable = self.producer_state.first_unstable_offset(-1)
        lso = self._next_offset if unstable is None else unstable
        self.aborted.append(AbortedTxn(done.producer_id, done.first_offset, done.last_offset, lso))
        i = max(bisect_right(self._base_offsets, done.last_offset) - 1, 0)
        end = self._base_offsets[i + 1] if i + 1 < len(self._base_offsets) else MAX_LONG
        self._write_txn_index(self._base_offsets[i], end)

    def last_stable_offset(self, high_watermark: int) -> int:
        """The LSO: the first offset of a transaction not yet decided (or whose marker is not yet
        below ``high_watermark``), at most ``high_watermark``; read_committed consumers stop there."""
        unstable = self.producer_state.first_unstable_offset(high_watermark)
        return high_watermark if unstable is None else min(unstable, high_watermark)

    def on_high_watermark(self, high_watermark: int) -> None:
        """The partition's high watermark moved: decided transactions below it are now stable."""
        self.producer_state.on_high_watermark(high_watermark)

    def collect_aborted(self, fetch_offset: int, upper: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping [fetch_offset, upper): marker at or above the fetch
        offset, first record below ``upper``."""
        lo = bisect_left([a.last_offset for a in self.aborted], fetch_offset)
        return [a for a in self.aborted[lo:] if a.first_offset < upper]

    def _batch_headers(self, from_offset: int) -> Iterator[tuple[int, BatchHeader, Segment, int]]:
        """(base offset, header, segment, position) of every batch holding offsets at or above ``from_offset``."""
        i = max(bisect_right(self._base_offsets, from_offset) - 1, 0)
        for seg in self._segments[i:]:
            start = 0
            if seg.base_offset < from_offset:
                found = seg.find_batch(from_offset)
                if found is None:
                    continue
                start = found.position
            for b in seg.walk(start):
                data = seg.read_bytes(b.position, HEADER_SIZE)
                if len(data) < HEADER_SIZE:
                    raise SegmentCorruptError(f"{seg.log_path}: short batch header at position {b.position}")
                yield b.base_offset, BatchHeader._make(HEADER.unpack_from(data)), seg, b.position

    def take_producer_snapshot(self) -> None:
        """Write the producer state as of the log end offset; keep the newest two snapshots.

        Nothing is written when the log holds no batch (a reload replays nothing) or the newest
        snapshot is already at the log end offset (Kafka too snapshots only a new offset): a broker
        stopping with thousands of idle partitions does not write and fsync thousands of files.
        """
        offset = self._next_offset
        try:
            if offset == self._log_start_offset or (list_snapshots(self._fs, self._dir)[-1:] == [offset]):
                return
            write_snapshot(self._fs, self._dir, offset, self.producer_state)
            self._dir_unsynced = True
            for old in list_snapshots(self._fs, self._dir)[:-SNAPSHOTS_KEPT]:
                delete_snapshot(self._fs, self._dir, old)
        except OSError as e:  # a missing snapshot costs a longer rebuild, nothing else
            log.error("%s cannot write the producer state snapshot at offset %d: %s", self._ident, offset, e)

    def _producer_state_after_truncation(self) -> None:
        try:
            self._load_producer_state()
        except (OSError, KafkaError) as e:
            self._io_failed()
            raise _storage_error(f"{self._ident} cannot rebuild the producer state", e) from e

    # -- state ---------------------------------------------------------------------------------

    @property
    def dir(self) -> str:
        return self._dir

    @property
    def config(self) -> LogConfig:
        return self._config

    def update_config(self, config: LogConfig) -> None:
        """Apply changed topic settings."""
        self._config = config
        for seg in self._segments:
            seg.index_interval_bytes = config.index_interval_bytes

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._next_offset

    @property
    def first_segment_base_offset(self) -> int:
        return self._segments[0].base_offset

    @property
    def size_bytes(self) -> int:
        return self._size_bytes

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def unflushed_messages(self) -> int:
        return self._unflushed_messages

    def _io_failed(self) -> None:
        """An I/O error left this log's files in doubt: refuse appends from now on, and say so."""
        self._offline = True
        if self.on_io_error is not None:
            self.on_io_error()

    @property
    def is_offline(self) -> bool:
        """True after an I/O error left the files in doubt: appends are refused.

        That is, a write could not be undone, an fsync failed, or the leader-epoch-checkpoint
        could not be written.
        """
        return self._offline

    @property
    def segments(self) -> tuple[Segment, ...]:
        return tuple(self._segments)

    @property
    def active_segment(self) -> Segment:
        return self._segments[-1]

    # -- appending -----------------------------------------------------------------------------

    def append(
        self, records: bytes | bytearray | memoryview, leader_epoch: int, *, coordinator: bool = False
    ) -> AppendInfo:
        """Append a producer's record set as leader: assign offsets from the log end offset.

        Every batch gets ``leader_epoch``; when it is above the cache's latest epoch, it starts
        at the first offset appended.

        ``coordinator``: the batches come from a coordinator (transaction markers, transactional offset
        commits), not a client: no sequences are checked, only producer and coordinator epochs
        (INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED); a client's control batch is refused
        (CORRUPT_MESSAGE).

        Raises KafkaError: CORRUPT_MESSAGE / MESSAGE_TOO_LARGE from validation and
        RECORD_LIST_TOO_LARGE for a set above segment.bytes (nothing written), KAFKA_STORAGE_ERROR
        when the write failed (the log is as before the call) or the log is offline.
        """
        summaries = self._validate(records)
        cfg = self._config
        if cfg.compact:
            _refuse_null_keys(records, summaries, f"{self.topic}-{self.partition}")
        now_ms = self._clock.time_ms()
        if cfg.message_timestamp_type == CREATE_TIME:
            check_timestamps(records, summaries, now_ms, cfg.message_timestamp_difference_max_ms)
        duplicate = self.producer_state.check((h for _, h in summaries), coordinator=coordinator)
        markers: dict[int, Marker] = {}
        for i, (position, h) in enumerate(summaries):  # by index: recompression may move positions
            if h.is_control and coordinator:
                try:
                    markers[i] = m = decode_marker(memoryview(records)[position : position + h.size])
                except KafkaError as err:
                    raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"invalid control batch: {err.message}") from None
                self.producer_state.check_marker(m)
        if duplicate is not None:
            b = duplicate.batch
            return AppendInfo(
                b.first_offset, b.last_offset, b.max_timestamp, b.last_offset, 0, self._log_start_offset, True
            )
        codec = target_codec(cfg.compression_type)
        if codec is not None and (recompressed := recompress(records, summaries, codec)) is not None:
            records = recompressed
            summaries = self._validate(records)
        buf = bytearray(records)  # the one copy: offsets are rewritten in it, then it is written
        log_append_time = -1
        if cfg.message_timestamp_type == LOG_APPEND_TIME:
            log_append_time = now_ms
            stamp_log_append_time(buf, summaries, now_ms)
            summaries = [s._replace(header=s.header._replace(max_timestamp=now_ms)) for s in summaries]
        first_offset = offset = self._next_offset
        max_timestamp = -1
        offset_of_max_timestamp = -1
        entries: list[BatchEntry] = []
        for position, h in summaries:
            rewrite_offset_and_epoch(buf, position, offset, leader_epoch)
            last = offset + h.last_offset_delta
            if h.max_timestamp > max_timestamp:
                max_timestamp, offset_of_max_timestamp = h.max_timestamp, last
            entries.append(BatchEntry(position, offset, last, h.max_timestamp, h.size))
            offset = last + 1
        self._write(buf, entries, [(leader_epoch, first_offset)], offset - first_offset)
        for i, ((_, h), e) in enumerate(zip(summaries, entries, strict=True)):
            self._record_completed(self.producer_state.update(h, e.base_offset, markers.get(i)))
        return AppendInfo(
            first_offset,
            offset - 1,
            max_timestamp,
            offset_of_max_timestamp,
            offset - first_offset,
            self._log_start_offset,
            log_append_time=log_append_time,
        )

    def append_as_follower(self, records: bytes | bytearray | memoryview) -> AppendInfo:
        """Append batches fetched from the leader, keeping their offsets and leader epochs byte for byte.

        Validated as :meth:`append` does. The first batch must start at the log end offset
        (else UnexpectedAppendOffsetError, OFFSET_OUT_OF_RANGE), or above it in a compacted log
        (the leader's cleaner removed what lay between), and each batch above the previous
        one's last offset (else CORRUPT_MESSAGE; gaps between batches are allowed, as Kafka allows
        them for compacted leaders). Each batch whose partition leader epoch is above the
        cache's latest starts that epoch at its base offset. Nothing is written when it raises;
        errors otherwise as :meth:`append`.
        """
        summaries = self._validate(records, compacted=self._config.compact)
        first = summaries[0].header
        last_offset = summaries[-1].header.last_offset
        if first.base_offset < self._next_offset or (
            first.base_offset > self._next_offset and not self._config.compact
        ):
            raise UnexpectedAppendOffsetError(
                f"{self._ident} follower append starts at offset {first.base_offset} (last offset "
                f"{last_offset}), not at the log end offset {self._next_offset}",
                first.base_offset,
                last_offset,
                self._next_offset,
            )
        if last_offset - first.base_offset > INT32_MAX:
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"offsets {first.base_offset}..{last_offset} span too far")
        expected = first.base_offset
        max_timestamp = -1
        offset_of_max_timestamp = -1
        count = 0
        entries: list[BatchEntry] = []
        for position, h in summaries:
            if h.base_offset < expected:
                raise KafkaError(
                    ErrorCode.CORRUPT_MESSAGE,
                    f"out of order offsets in a follower append: batch at {h.base_offset} after offset {expected - 1}",
                )
            last = h.last_offset
            if h.max_timestamp > max_timestamp:
                max_timestamp, offset_of_max_timestamp = h.max_timestamp, last
            entries.append(BatchEntry(position, h.base_offset, last, h.max_timestamp, h.size))
            count += h.records_count
            expected = last + 1
        epochs = [(h.partition_leader_epoch, h.base_offset) for _, h in summaries]
        self._write(records, entries, epochs, count)
        for position, h in summaries:
            marker = None
            if h.is_control:
                try:
                    marker = decode_marker(memoryview(records)[position : position + h.size])
                except KafkaError:
                    marker = None
            self._record_completed(self.producer_state.update(h, h.base_offset, marker))
        return AppendInfo(
            first.base_offset,
            last_offset,
            max_timestamp,
            offset_of_max_timestamp,
            count,
            self._log_start_offset,
        )

    def _validate(self, records: bytes | bytearray | memoryview, *, compacted: bool = False) -> list[BatchSummary]:
        if self._offline:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"{self._ident} is offline after an I/O error")
        summaries = validate_batches(records, self._config.max_message_bytes, compacted=compacted)
        if len(records) > self._config.segment_bytes:
            raise KafkaError(
                ErrorCode.RECORD_LIST_TOO_LARGE,
                f"a record set of {len(records)} bytes exceeds segment.bytes {self._config.segment_bytes}",
            )
        return summaries

    def _write(
        self,
        data: bytes | bytearray | memoryview,
        entries: list[BatchEntry],
        epochs: Iterable[tuple[int, int]],
        records_count: int,
    ) -> None:
        """Write validated batches (offsets final) at the log end, new leader epochs first."""
        first_offset = entries[0].base_offset
        next_offset = entries[-1].last_offset + 1
        now_ms = self._clock.time_ms()
        segment = self._maybe_roll(len(data), next_offset - 1, now_ms)
        assigned = self._assign_epochs(epochs)
        try:
            segment.append(data, entries, now_ms)
        except SegmentWriteError as e:
            if not e.rolled_back:
                self._io_failed()
            log.error("%s append of %d bytes at offset %d failed: %s", self._ident, len(data), first_offset, e)
            if assigned:
                self._unassign_epochs_from(first_offset)
            raise _storage_error(f"{self._ident} append failed", e.cause) from e
        self._next_offset = next_offset
        self._size_bytes += len(data)
        self._unflushed_messages += records_count
        self._flush_if_due()
        self._offsets_moved()

    # -- leader epochs -------------------------------------------------------------------------

    def maybe_assign_epoch_start_offset(self, leader_epoch: int, start_offset: int) -> bool:
        """Record that ``leader_epoch`` starts at ``start_offset`` when it is a new epoch (Kafka's name).

        A new leader calls it with the log end offset (KAFKA-7415), so that it can answer
        OffsetsForLeaderEpoch for its own epoch before it appended anything. The checkpoint file
        is written by the next flush (or the next change that writes it), not here: a broker
        elected leader of thousands of partitions at once does no file I/O per partition
        (issue 26; why a crash before that loses nothing, in ``leader_epoch.py``).
        """
        return self._assign_epochs([(leader_epoch, start_offset)], defer_write=True)

    def _assign_epochs(self, epochs: Iterable[tuple[int, int]], defer_write: bool = False) -> bool:
        try:
            return self.leader_epoch_cache.assign_all(epochs, defer_write=defer_write)
        except OSError as e:
            self._io_failed()
            log.error("%s cannot write the leader epoch checkpoint: %s", self._ident, e)
            raise _storage_error(f"{self._ident} cannot write the leader epoch checkpoint", e) from e

    def _unassign_epochs_from(self, offset: int) -> None:
        """Undo :meth:`_assign_epochs` after a failed write (best effort: a failure takes the log offline)."""
        try:
            self.leader_epoch_cache.truncate_from_end(offset)
        except OSError as e:
            self._io_failed()
            log.error("%s cannot write the leader epoch checkpoint: %s", self._ident, e)

    def _update_epochs(self, change: Callable[[LeaderEpochCache], bool]) -> None:
        try:
            change(self.leader_epoch_cache)
        except OSError as e:
            self._io_failed()
            log.error("%s cannot write the leader epoch checkpoint: %s", self._ident, e)
            raise _storage_error(f"{self._ident} cannot write the leader epoch checkpoint", e) from e

    def _dir_changed(self) -> None:
        """A file was created or renamed in the directory: the next flush fsyncs the directory."""
        self._dir_unsynced = True

    def _file_changed(self, path: str) -> None:
        """``path`` was rewritten (not fsynced) and renamed into the directory: the next flush
        fsyncs it, then the directory (the leader epoch checkpoint's deferred durability)."""
        self._unsynced_files.add(path)
        self._dir_unsynced = True

    def _maybe_roll(self, append_bytes: int, last_offset: int, now_ms: int) -> Segment:
        """The segment to append to, rolling a new one when the active one is full or old enough."""
        seg = self._segments[-1]
        if not seg.size:
            return seg
        cfg = self._config
        if seg.size + append_bytes > cfg.segment_bytes:
            reason = f"size {seg.size} + {append_bytes} > segment.bytes {cfg.segment_bytes}"
        elif seg.rolling_base_ms is not None and now_ms - seg.rolling_base_ms > self._roll_after_ms():
            reason = (
                f"segment.ms {cfg.segment_ms} (less segment.jitter.ms {self._roll_jitter_ms}, or "
                f"max.compaction.lag.ms {cfg.max_compaction_lag_ms}) passed"
            )
        elif len(seg.index) >= cfg.segment_index_bytes // 8 or len(seg.time_index) >= cfg.segment_index_bytes // 12:
            reason = f"its index is full (segment.index.bytes {cfg.segment_index_bytes})"
        elif last_offset - seg.base_offset > INT32_MAX:
            reason = "relative offsets would overflow"
        else:
            return seg
        return self.roll(reason)

    def _draw_roll_jitter(self) -> int:
        """Kafka's ``rollJitterMs``: drawn for each active segment, below min(segment.jitter.ms, segment.ms)."""
        jitter = min(self._config.segment_jitter_ms, self._config.segment_ms)
        return random.randrange(jitter) if jitter > 0 else 0

    def _roll_after_ms(self) -> int:
        """How long the active segment stays active: segment.ms (or max.compaction.lag.ms) less its jitter."""
        return self._config.max_segment_ms - self._roll_jitter_ms

    def roll_if_idle(self) -> bool:
        """Roll the active segment when segment.ms has passed since its first append even though
        nothing was appended since (an idle partition's data must still expire by retention.ms)."""
        seg = self._segments[-1]
        if self._offline or not seg.size or seg.rolling_base_ms is None:
            return False
        now = self._clock.time_ms()
        if now - seg.rolling_base_ms <= self._roll_after_ms():
            return False
        self.roll(f"segment.ms {self._config.segment_ms} (or max.compaction.lag.ms) passed without appends")
        return True

    def roll(self, reason: str = "requested") -> Segment:
        """Start a new active segment at the log end offset (unless the active one is empty)."""
        old = self._segments[-1]
        if not old.size:
            return old
        try:
            old.become_inactive()  # its indexes are complete on disk before a later segment exists
            new = Segment.create(
                self._fs, self._dir, self._next_offset, self._config.index_interval_bytes, self._clock.time_ms()
            )
        except OSError as e:
            # the log itself stays consistent (nothing was added), but its dir gave an I/O error
            if self.on_io_error is not None:
                self.on_io_error()
            raise _storage_error(f"{self._ident} cannot roll a new segment", e) from e
        self._segments.append(new)
        self._base_offsets.append(new.base_offset)
        self._roll_jitter_ms = self._draw_roll_jitter()
        self._dir_unsynced = True
        log.info("%s rolled new segment at offset %d (%s)", self._ident, new.base_offset, reason)
        self.take_producer_snapshot()
        if self.on_roll is not None:
            self.on_roll()
        return new

    # -- flushing ------------------------------------------------------------------------------

    def _flush_if_due(self) -> None:
        cfg = self._config
        if self._unflushed_messages >= cfg.flush_interval_messages or (
            cfg.flush_interval_ms is not None
            and self._clock.monotonic_ms() - self._last_flush_ms >= cfg.flush_interval_ms
        ):
            self.flush()

    def flush(self) -> None:
        """fsync everything appended; the recovery point becomes the log end offset."""
        self._flush_to(self._next_offset)
        self._unflushed_messages = 0
        self._last_flush_ms = self._clock.monotonic_ms()

    def maybe_flush(self) -> None:
        """For a timer: flush segments rolled since the last flush, and everything when flush.ms passed."""
        cfg = self._config
        if (
            cfg.flush_interval_ms is not None
            and self._unflushed_messages
            and self._clock.monotonic_ms() - self._last_flush_ms >= cfg.flush_interval_ms
        ):
            self.flush()
        else:
            self.flush_rolled_segments()

    def flush_rolled_segments(self) -> None:
        """fsync the segments before the active one (Kafka flushes them once it rolled past them)."""
        active_base = self._segments[-1].base_offset
        if self._recovery_point < active_base:
            self._flush_to(active_base)

    def _flush_to(self, offset: int) -> None:
        i = max(bisect_right(self._base_offsets, self._recovery_point) - 1, 0)
        try:
            self.leader_epoch_cache.write_unwritten()  # entries assigned since the last flush
            for seg in self._segments[i:]:
                if seg.base_offset >= offset:
                    break
                seg.flush()
            for path in sorted(self._unsynced_files):
                try:
                    fd = self._fs.open(path)
                except FileNotFoundError:
                    continue  # replaced by a rebuild or removed with the log since
                try:
                    self._fs.fsync(fd)
                finally:
                    self._fs.close(fd)
            self._unsynced_files.clear()
            if self._dir_unsynced:
                self._fs.fsync_dir(self._dir)
                self._dir_unsynced = False
        except OSError as e:
            self._io_failed()  # after a failed fsync the kernel may have dropped the dirty pages
            log.error("%s flush failed: %s", self._ident, e)
            raise _storage_error(f"{self._ident} flush failed", e) from e
        self._recovery_point = max(self._recovery_point, min(offset, self._next_offset))

    # -- reading -------------------------------------------------------------------------------

    def _check_offset(self, offset: int) -> None:
        if not self._log_start_offset <= offset <= self._next_offset:
            raise KafkaError(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"offset {offset} is out of range for {self.topic}-{self.partition}: "
                f"log start offset {self._log_start_offset}, log end offset {self._next_offset}",
            )

    def read(
        self, offset: int, max_bytes: int, *, max_offset: int | None = None, min_one_batch: bool = True
    ) -> FetchData:
        """Bytes from the start of the batch holding ``offset``, for a Fetch.

        Raises KafkaError(OFFSET_OUT_OF_RANGE) outside [log start offset, log end offset]. Reads
        within one segment, at most ``max_bytes`` and nothing at or above ``max_offset`` (the
        high watermark for consumers); but a first batch larger than ``max_bytes`` comes whole when
        ``min_one_batch`` (KIP-74). The last batch may be cut short (clients skip it).
        """
        self._check_offset(offset)
        limit = self._next_offset if max_offset is None else min(max_offset, self._next_offset)
        if offset >= limit:
            return FetchData(None, offset)
        try:
            i = max(bisect_right(self._base_offsets, offset) - 1, 0)
            for seg in self._segments[i:]:
                found = seg.find_batch(offset)
                if found is None:
                    continue  # offset lies beyond this segment's last batch: the next one starts above it
                if found.base_offset >= limit:
                    return FetchData(None, offset)
                if limit >= seg.next_offset:
                    end = seg.size
                else:
                    at_limit = seg.find_batch(limit, found.position)
                    end = seg.size if at_limit is None else at_limit.position
                cap = max(max_bytes, found.size) if min_one_batch else max_bytes
                size = min(end - found.position, cap)
                if size <= 0:
                    return FetchData(None, found.base_offset)
                return FetchData(seg.region(found.position, size), found.base_offset)
        except OSError as e:
            raise _storage_error(f"{self._ident} read failed", e) from e
        return FetchData(None, offset)

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """ListOffsets v1+: (offset, timestamp) of the first record whose timestamp is ≥ ``timestamp``.

        -1 (latest) answers the log end offset and -2 (earliest) the log start offset, each with
        timestamp -1. None when no record is that recent.
        """
        if timestamp == LATEST_TIMESTAMP:
            return self._next_offset, -1
        if timestamp == EARLIEST_TIMESTAMP:
            return self._log_start_offset, -1
        if timestamp < 0:
            return None
        try:
            for seg in self._segments:
                if seg.max_timestamp < timestamp:
                    continue
                found = seg.find_offset_by_timestamp(timestamp, self._log_start_offset)
                if found is not None:
                    return found
        except OSError as e:
            raise _storage_error(f"{self._ident} read failed", e) from e
        return None

    def legacy_offsets_before(self, timestamp: int, max_n: int) -> list[int]:
        """ListOffsets v0 (Kafka's ``fetchOffsetsBefore``): segment start offsets, newest first.

        Candidates are each segment's base offset (or the log start offset) with its last-modified
        time, then the log end offset with the current time when the active segment is not empty.
        -1 (latest) starts from the last candidate, -2 (earliest) from the first, any other time
        from the last candidate modified at or before it. Returns at most ``max_n`` offsets, descending.
        """
        candidates = [(max(s.base_offset, self._log_start_offset), s.last_modified_ms) for s in self._segments]
        if self._segments[-1].size:
            candidates.append((self._next_offset, self._clock.time_ms()))
        if timestamp == LATEST_TIMESTAMP:
            start = len(candidates) - 1
        elif timestamp == EARLIEST_TIMESTAMP:
            start = 0
        else:
            start = len(candidates) - 1
            while start >= 0 and candidates[start][1] > timestamp:
                start -= 1
        n = max(min(max_n, start + 1), 0)
        return sorted((candidates[start - j][0] for j in range(n)), reverse=True)

    # -- retention -----------------------------------------------------------------------------

    def delete_retention_segments(self, *, high_watermark: int | None = None) -> int:
        """Delete old segments by retention.ms and retention.bytes; returns how many.

        A segment goes when its largest record timestamp (its last-modified time without any) is
        older than retention.ms, or while the log stays at or above retention.bytes without it.
        Oldest first, and (given ``high_watermark``) never one holding offsets above it. The active
        segment goes by retention.ms only when every record of the log is past it and below the high
        watermark: the log rolls first, as Kafka 2.3 does (the way operators purge a topic). The log start offset moves to the next segment's base offset, and the
        leader epoch covering it now starts there (``truncate_from_start``).
        """
        if "delete" not in self._config.cleanup_policy:
            return 0
        cfg = self._config
        deleted = 0
        if cfg.retention_ms >= 0:
            now = self._clock.time_ms()

            def expired(s: Segment) -> bool:
                return now - s.largest_timestamp > cfg.retention_ms

            deleted += self._delete_oldest(expired, "retention.ms", high_watermark)
            active = self._segments[-1]
            if (
                len(self._segments) == 1
                and active.size
                and expired(active)
                and (high_watermark is None or high_watermark >= self._next_offset)
            ):  # every record is past retention and committed: Kafka 2.3 rolls, then deletes the old one
                self.roll("retention.ms")
                deleted += self._delete_oldest(expired, "retention.ms", high_watermark)
        if cfg.retention_bytes >= 0:
            excess = self._size_bytes - cfg.retention_bytes

            def over_size(s: Segment) -> bool:
                nonlocal excess
                if excess - s.size < 0:
                    return False
                excess -= s.size
                return True

            deleted += self._delete_oldest(over_size, "retention.bytes", high_watermark)
        if deleted:
            start = self._log_start_offset
            self._update_epochs(lambda c: c.truncate_from_start(start))
            self.producer_state.evict_below(start)
            for old in list_snapshots(self._fs, self._dir):
                if old < start:
                    delete_snapshot(self._fs, self._dir, old)
        return deleted

    def advance_log_start_offset(self, offset: int, why: str) -> bool:
        """Move the log start offset up to ``offset`` (DeleteRecords on the leader, the leader's
        log start offset on a follower); returns whether it moved.

        Records below it are no longer readable (OFFSET_OUT_OF_RANGE, ListOffsets earliest answers
        it); segments wholly below it are deleted, the one holding it stays. Never past the log end
        offset (ValueError); a lower offset than the current log start is a no-op. Not persisted by
        the log itself: the log manager checkpoints it (``log-start-offset-checkpoint``) and moves
        it again when the log is opened.
        """
        if offset > self._next_offset:
            raise ValueError(f"{self._ident}: log start offset {offset} beyond the log end offset {self._next_offset}")
        if offset <= self._log_start_offset:
            return False
        self._log_start_offset = offset
        self._delete_oldest(lambda s: self._segments[1].base_offset <= offset, why, None)
        self._update_epochs(lambda c: c.truncate_from_start(offset))
        self.producer_state.evict_below(offset)
        for old in list_snapshots(self._fs, self._dir):
            if old < self._segments[0].base_offset:
                delete_snapshot(self._fs, self._dir, old)
        log.info("%s log start offset moved to %d by %s", self._ident, offset, why)
        self._offsets_moved()
        return True

    def _offsets_moved(self) -> None:
        if self.on_offsets_moved is not None:
            self.on_offsets_moved()

    def _delete_oldest(self, deletable: Callable[[Segment], bool], why: str, high_watermark: int | None) -> int:
        n = 0
        while len(self._segments) > 1:
            seg = self._segments[0]
            if high_watermark is not None and self._segments[1].base_offset > high_watermark:
                break
            if not deletable(seg):
                break
            self._segments.pop(0)
            self._base_offsets.pop(0)
            self._size_bytes -= seg.size
            self._log_start_offset = max(self._log_start_offset, self._segments[0].base_offset)
            start = self._log_start_offset
            self.aborted = [a for a in self.aborted if a.last_offset >= start]
            try:
                seg.delete()
                delete_txn_index(self._fs, self._dir, seg.base_offset)
            except OSError as e:
                log.error("%s cannot delete %s: %s", self._ident, seg.log_path, e)
            log.info(
                "%s deleted segment %s (%d bytes, largest timestamp %d) by %s; log start offset %d",
                self._ident,
                seg.log_path,
                seg.size,
                seg.largest_timestamp,
                why,
                self._log_start_offset,
            )
            n += 1
        if n:
            self._offsets_moved()
        return n

    # -- compaction (see cleaner.py) -------------------------------------------------------------

    def take_truncation_point(self) -> int | None:
        """The lowest offset this log was truncated to since the last call (None: no truncation).
        The cleaner lowers its first dirty offset to it: what is written there again is new."""
        point, self._lowest_truncation = self._lowest_truncation, None
        return point

    def _truncated(self, offset: int) -> None:
        low = self._lowest_truncation
        self._lowest_truncation = offset if low is None else min(low, offset)

    def swap_cleaned(
        self, old: Sequence[Segment], cleaned_path: str | None, *, dropped_aborts: Collection[int] = ()
    ) -> None:
        """Replace consecutive segments ``old`` (never the active one) by the cleaned segment file
        ``cleaned_path`` (written and fsynced as ``<old[0] base>.log.cleaned``), or drop them when
        None (nothing in them survived). The crash-safe order is in cleaner.py's docstring.
        ``dropped_aborts``: offsets of ABORT markers the cleaning removed; their aborted-transaction
        entries go first (memory and the group's .txnindex, before the swap: an entry whose marker
        is gone would hide the producer's later records from read_committed readers, a marker
        without its entry hides nothing)."""
        i = self._segments.index(old[0])
        if self._segments[i : i + len(old)] != list(old) or i + len(old) >= len(self._segments):
            raise ValueError(f"{self._ident} cannot swap {old}: not consecutive inactive segments")
        base = old[0].base_offset
        end = self._segments[i + len(old)].base_offset
        gone = [a for a in self.aborted if base <= a.last_offset < end and a.last_offset in dropped_aborts]
        if gone:
            self.aborted = [a for a in self.aborted if a not in gone]
            for seg in old:
                nxt = self._segments[self._segments.index(seg) + 1].base_offset
                self._write_txn_index(seg.base_offset, nxt)
        try:
            swap = old[0].log_path + SWAP_SUFFIX
            if cleaned_path is not None:
                self._fs.rename(cleaned_path, swap)
                self._fs.fsync_dir(self._dir)
            for seg in old:
                seg.delete()
                if seg is not old[0]:
                    delete_txn_index(self._fs, self._dir, seg.base_offset)
            new: list[Segment] = []
            if cleaned_path is not None:
                self._fs.rename(swap, old[0].log_path)
                self._fs.fsync_dir(self._dir)
                seg = Segment.open(self._fs, self._dir, base, self._config.index_interval_bytes)
                seg.recover(max(self._config.max_message_bytes, self._config.segment_bytes))
                seg.become_inactive()
                new = [seg]
        except OSError as e:
            self._io_failed()  # the files are in doubt until the next open completes the swap
            raise _storage_error(f"{self._ident} swapping cleaned segments failed", e) from e
        self._segments[i : i + len(old)] = new
        self._base_offsets = [s.base_offset for s in self._segments]
        if not new:
            delete_txn_index(self._fs, self._dir, base)
            self.aborted = [a for a in self.aborted if not base <= a.last_offset < self._segments[i].base_offset]
        else:
            self._write_txn_index(base, self._base_offsets[i + 1])
        self._size_bytes = sum(s.size for s in self._segments)
        if i == 0 and not new:
            self._log_start_offset = max(self._log_start_offset, self._segments[0].base_offset)
            start = self._log_start_offset
            self._update_epochs(lambda c: c.truncate_from_start(start))
            self._offsets_moved()

    # -- truncation ----------------------------------------------------------------------------

    def truncate_to(self, offset: int) -> bool:
        """Remove every record at ``offset`` or above (whole batches). Returns whether anything went.

        A batch holding ``offset`` goes whole, so the log end offset may end up below ``offset``.
        Leader epochs starting at or above the new log end offset go too.
        """
        if offset < 0:
            raise ValueError(f"cannot truncate to a negative offset {offset}")
        if offset >= self._next_offset:
            return False
        if offset < self._segments[0].base_offset:
            self.truncate_fully_and_start_at(offset)
            return True
        try:
            while len(self._segments) > 1 and self._segments[-1].base_offset > offset:
                seg = self._segments.pop()
                self._base_offsets.pop()
                self._size_bytes -= seg.size
                seg.delete()
                delete_txn_index(self._fs, self._dir, seg.base_offset)
            active = self._segments[-1]
            self._size_bytes -= active.truncate_to(offset)
        except OSError as e:
            self._io_failed()
            raise _storage_error(f"{self._ident} truncation failed", e) from e
        log.info(
            "%s truncated to offset %d: log end offset %d (was %d)",
            self._ident,
            offset,
            active.next_offset,
            self._next_offset,
        )
        self._next_offset = end = active.next_offset
        self._truncated(end)
        self._recovery_point = min(self._recovery_point, self._next_offset)
        self._log_start_offset = min(self._log_start_offset, self._next_offset)
        self._unflushed_messages = 0
        self._update_epochs(lambda c: c.truncate_from_end(end))
        self._producer_state_after_truncation()
        self._offsets_moved()
        return True

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment and start empty at ``offset`` (log start = log end = ``offset``).

        The leader epoch cache is emptied: the next batch appended starts its epoch again.
        """
        if offset < 0:
            raise ValueError(f"cannot start a log at a negative offset {offset}")
        try:
            for seg in self._segments:
                seg.delete()
                delete_txn_index(self._fs, self._dir, seg.base_offset)
            new = Segment.create(self._fs, self._dir, offset, self._config.index_interval_bytes, self._clock.time_ms())
        except OSError as e:
            self._io_failed()
            raise _storage_error(f"{self._ident} truncation failed", e) from e
        log.info("%s truncated fully; the log starts again at offset %d", self._ident, offset)
        self._truncated(offset)
        self._segments = [new]
        self._base_offsets = [offset]
        self._next_offset = offset
        self._log_start_offset = offset
        self._recovery_point = offset
        self._size_bytes = 0
        self._unflushed_messages = 0
        self._dir_unsynced = True
        self._update_epochs(LeaderEpochCache.clear)
        for old in list_snapshots(self._fs, self._dir):
            delete_snapshot(self._fs, self._dir, old)
        self.producer_state.clear()
        self.aborted = []
        self._offsets_moved()

    # -- closing -------------------------------------------------------------------------------

    def close(self) -> None:
        """Write the indexes and release the files (regions being sent keep theirs open). Does not flush."""
        if self._closed:
            return
        self._closed = True
        for seg in self._segments:
            seg.close()

    def delete(self) -> None:
        """Delete every segment and the partition directory itself."""
        self.close()
        for seg in self._segments:
            seg.delete()
        try:
            for name in self._fs.listdir(self._dir):
                self._fs.unlink(os.path.join(self._dir, name))
            self._fs.rmdir(self._dir)
        except FileNotFoundError:
            pass
        log.info("%s deleted", self._ident)

    def __repr__(self) -> str:
        return (
            f"Log({self.topic}-{self.partition}, start={self._log_start_offset}, end={self._next_offset}, "
            f"segments={len(self._segments)})"
        )
