"""Per-partition producer state for the idempotent producer, and its snapshot files.

For every producer id that wrote to the partition the state keeps its epoch and the metadata of
its last :data:`BATCHES_KEPT` batches (first/last sequence, first/last offset, max timestamp),
oldest first; the last of them holds the producer's last sequence. A leader checks each batch of
a client's append against it (:meth:`ProducerStateManager.check`) before anything is written,
then records the batches with their assigned offsets (:meth:`ProducerStateManager.update`);
followers and the rebuild at start-up only record (the leader already checked).

Rules of :meth:`ProducerStateManager.check` (Kafka 2.3's, per batch with producer id >= 0):

* epoch below the producer's epoch: INVALID_PRODUCER_EPOCH (47);
* same epoch and the same first *and* last sequence as one of the last five batches: a
  duplicate; the append writes nothing and answers NONE with the original batch's offsets;
* same epoch, the whole sequence range at or below the last sequence, but not one of the five
  kept batches (it cannot be matched to an offset): DUPLICATE_SEQUENCE_NUMBER (46). Kafka 2.3
  answers OUT_OF_ORDER_SEQUENCE_NUMBER there; a producer with at most five requests in flight
  never sends such a batch, and 46 tells it the data is already written rather than lost;
* same epoch, first sequence not last sequence + 1 (a gap or a partial overlap):
  OUT_OF_ORDER_SEQUENCE_NUMBER (45);
* a newer epoch must start at sequence 0, else OUT_OF_ORDER_SEQUENCE_NUMBER;
* an unknown producer id must start at sequence 0, else UNKNOWN_PRODUCER_ID (59). A producer
  becomes unknown when retention moves the log start offset past its last batch
  (:meth:`ProducerStateManager.evict_below`), as in Kafka: the client tells by the log start
  offset of its earlier answers that its data expired, and resets its sequence. It also does
  when its last batch's timestamp is older than transactional.id.expiration.ms (7 days;
  :meth:`ProducerStateManager.remove_expired`, run by the log manager every 10 minutes): an idle
  producer's state is not kept forever. A snapshot keeps expired producers until the next
  expiry pass after a restart.

Sequences are int32 and wrap from 2**31 - 1 to 0, as the clients number them.

Transactions (KIP-98): a producer's first transactional batch after a marker opens its
transaction at that batch's first offset (``txn_first_offset``); a control batch (COMMIT or ABORT
marker, written by the leader on WriteTxnMarkers) closes it and :meth:`ProducerStateManager.update`
returns the :class:`CompletedTxn` (a marker for a producer with no open transaction completes an
empty one at the marker's offset, as Kafka does). A completed transaction stays *unstable* until
the high watermark passes its marker (:meth:`ProducerStateManager.first_unstable_offset`), so the
last stable offset never runs ahead of a marker that a new leader might not have. Batches the
coordinators write (markers, transactional offset commits: ``coordinator=True``) carry no
sequence: only their epoch is checked (an older epoch is INVALID_PRODUCER_EPOCH), and a marker
whose coordinator epoch is below the one the producer last saw is TRANSACTION_COORDINATOR_FENCED.

Snapshot file ``<20-digit offset>.snapshot`` in the partition directory: the state of every
producer (with batches or an open transaction) after all batches below ``offset`` (a log end offset at the time of writing; the log
writes one when it rolls a segment and at clean shutdown, keeps the newest two, deletes those
above the log end at truncation and those below the log start at retention). It is Kafka 2.3's
file (``ProducerStateManager``'s version 1), so Apache Kafka 2.3 loads a log dir Headwater wrote
without replaying its logs, and Headwater one Kafka wrote. Big-endian::

    offset  size  field
         0     2  version           -- 1
         2     4  crc               -- CRC-32C (Castagnoli) of every byte after this field
         6     4  producer_count
        10        producer_count times, 46 bytes each:
                    8  producer_id
                    2  producer_epoch
                    4  last_sequence            -- of its last batch; -1: no batch
                    8  last_offset              -- of its last batch's last record; -1: no batch
                    4  offset_delta             -- last_sequence - first sequence of that batch
                    8  timestamp                -- that batch's max timestamp
                    4  coordinator_epoch        -- of the last marker written for it, -1: none
                    8  current_txn_first_offset -- first offset of its open transaction, -1: none

Only the *last* batch of each producer is kept (as in Kafka): after a restart a retried batch
older than the last one is DUPLICATE_SEQUENCE_NUMBER instead of a duplicate answered with its
offsets. Version 2 -- Headwater's own layout before it wrote Kafka's (per producer: id, epoch,
txn_first_offset, coordinator_epoch, then up to five batches of first/last sequence, first/last
offset, max timestamp) -- is still read.

A snapshot that is short, has another version, fails its CRC or holds trailing bytes is invalid:
the log ignores it (and deletes it) and rebuilds from an older snapshot or the log start.
Files are written atomically (``.tmp``, fsync, rename); the log fsyncs the directory with its
next flush, as it does for a new segment (a snapshot lost in a crash costs a longer rebuild).

Concurrency: owned by one :class:`~headwater.broker.storage.log.Log`, called from the broker's
asyncio thread like the log.
"""

from __future__ import annotations

import logging
import os
import struct
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from crc32c import crc32c

from headwater.broker.storage.fs import FileSystem, read_file, replace_file
from headwater.protocol.errors import ErrorCode, KafkaError
from headwater.protocol.records.control import Marker
from headwater.protocol.records.header import BatchHeader

log = logging.getLogger(__name__)

BATCHES_KEPT = 5
SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_VERSION = 1  # Kafka 2.3's
HEADWATER_SNAPSHOT_VERSION = 2  # Headwater's earlier layout, still read
SNAPSHOTS_KEPT = 2
INT32_MAX = 2**31 - 1

_FILE_HEADER = struct.Struct(">hIi")  # version, crc, producer_count
# producer_id, producer_epoch, last_sequence, last_offset, offset_delta, timestamp, coordinator_epoch,
# current_txn_first_offset
_KAFKA_PRODUCER = struct.Struct(">qhiqiqiq")
_PRODUCER_V2 = struct.Struct(">qhqii")  # producer_id, producer_epoch, txn_first_offset, coordinator_epoch, batch_count
_BATCH = struct.Struct(">iiqqq")  # first_seq, last_seq, first_offset, last_offset, max_timestamp
_CRC_START = 6


class SnapshotError(ValueError):
    """A snapshot file is not what :func:`encode_snapshot` wrote."""


def last_sequence(base_sequence: int, last_offset_delta: int) -> int:
    """The sequence of a batch's last record (int32 sequences wrap to 0 after 2**31 - 1)."""
    return (base_sequence + last_offset_delta) % (INT32_MAX + 1)


def next_sequence(sequence: int) -> int:
    return 0 if sequence == INT32_MAX else sequence + 1


class BatchMetadata(NamedTuple):
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    max_timestamp: int


@dataclass
class ProducerEntry:
    producer_id: int
    epoch: int
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=BATCHES_KEPT))
    txn_first_offset: int = -1  # first offset of its open transaction; -1: none open
    coordinator_epoch: int = -1  # of the last marker written for it

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    def find_duplicate(self, first_seq: int, last_seq: int) -> BatchMetadata | None:
        for b in self.batches:
            if b.first_seq == first_seq and b.last_seq == last_seq:
                return b
        return None


class CompletedTxn(NamedTuple):
    """A transaction a marker ended: from its first offset to the marker's offset."""

    producer_id: int
    first_offset: int
    last_offset: int  # the marker's offset
    aborted: bool


class Duplicate(NamedTuple):
    """A client's batch that is already in the log: answer with its original offsets."""

    batch: BatchMetadata


def _is_older(first_seq: int, last_seq: int, entry_last_seq: int) -> bool:
    """Whether [first_seq, last_seq] lies wholly at or below the entry's last sequence (no wrap)."""
    return first_seq <= last_seq <= entry_last_seq


class ProducerStateManager:
    """The producers of one partition (rules, snapshot format, concurrency in the module docstring)."""

    def __init__(self) -> None:
        self.producers: dict[int, ProducerEntry] = {}
        #: transactions a marker ended whose marker may still be above the high watermark
        self.unreplicated: list[CompletedTxn] = []

    # -- the leader's checks -------------------------------------------------------------------

    def check(self, headers: Iterable[BatchHeader], *, coordinator: bool = False) -> Duplicate | None:
        """Check a client's batches in order; raises KafkaError (nothing changes) or returns a Duplicate.

        Batches without a producer id pass. A later batch of the same set is checked against the
        state as the earlier ones would leave it. A duplicate ends the check: the whole set is
        answered with that batch's offsets (Kafka's behaviour; a v3+ produce carries one batch).
        """
        pending: dict[int, tuple[int, int]] = {}  # producer id -> (epoch, last sequence) after earlier batches
        for h in headers:
            pid = h.producer_id
            if pid < 0:
                continue
            if coordinator:
                self._check_coordinator_batch(h)
                continue
            if h.is_control:
                raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "a client may not produce a control batch")
            first = h.base_sequence
            last = last_sequence(first, h.last_offset_delta)
            entry = self.producers.get(pid)
            if pid in pending:
                epoch, last_seq = pending[pid]
            elif entry is not None:
                epoch, last_seq = entry.epoch, entry.last_seq
                if h.producer_epoch == epoch:
                    dup = entry.find_duplicate(first, last)
                    if dup is not None:
                        return Duplicate(dup)
            else:
                epoch, last_seq = -1, -1
            self._check_one(pid, h.producer_epoch, first, last, epoch, last_seq, entry is not None or pid in pending)
            pending[pid] = (h.producer_epoch, last)
        return None

    def _check_coordinator_batch(self, h: BatchHeader) -> None:
        entry = self.producers.get(h.producer_id)
        if entry is None:
            return
        if h.producer_epoch < entry.epoch:
            raise KafkaError(
                ErrorCode.INVALID_PRODUCER_EPOCH,
                f"producer id {h.producer_id}: epoch {h.producer_epoch} is older than the current epoch {entry.epoch}",
            )

    def check_marker(self, marker: Marker) -> None:
        """A marker's epochs against the producer's: INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED."""
        entry = self.producers.get(marker.producer_id)
        if entry is None:
            return
        if marker.producer_epoch < entry.epoch:
            raise KafkaError(
                ErrorCode.INVALID_PRODUCER_EPOCH,
                f"marker for producer id {marker.producer_id}: epoch {marker.producer_epoch} < {entry.epoch}",
            )
        if marker.coordinator_epoch < entry.coordinator_epoch:
            raise KafkaError(
                ErrorCode.TRANSACTION_COORDINATOR_FENCED,
                f"marker for producer id {marker.producer_id}: coordinator epoch {marker.coordinator_epoch} "
                f"< {entry.coordinator_epoch}",
            )

    @staticmethod
    def _check_one(pid: int, epoch: int, first: int, last: int, cur_epoch: int, cur_last: int, known: bool) -> None:
        if not known:
            if first != 0:
                raise KafkaError(
                    ErrorCode.UNKNOWN_PRODUCER_ID,
                    f"no state for producer id {pid} (epoch {epoch}); its first batch has sequence {first}, not 0",
                )
            return
        if epoch < cur_epoch:
            raise KafkaError(
                ErrorCode.INVALID_PRODUCER_EPOCH,
                f"producer id {pid}: epoch {epoch} is older than the current epoch {cur_epoch}",
            )
        if epoch > cur_epoch:
            if first != 0:
                raise KafkaError(
                    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                    f"producer id {pid}: new epoch {epoch} starts at sequence {first}, not 0",
                )
            return
        if first == next_sequence(cur_last):
            return
        if _is_older(first, last, cur_last):
            raise KafkaError(
                ErrorCode.DUPLICATE_SEQUENCE_NUMBER,
                f"producer id {pid}: sequences {first}..{last} were written before (last sequence {cur_last}) "
                f"but are older than the last {BATCHES_KEPT} batches",
            )
        raise KafkaError(
            ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
            f"producer id {pid} epoch {epoch}: sequence {first} after last sequence {cur_last}",
        )

    # -- recording -----------------------------------------------------------------------------

    def update(self, h: BatchHeader, first_offset: int, marker: Marker | None = None) -> CompletedTxn | None:
        """Record a batch written at ``first_offset`` (leader after check, follower, rebuild).

        ``marker``: the control record of a control batch. Returns the transaction it ended."""
        pid = h.producer_id
        if pid < 0:
            return None
        entry = self.producers.get(pid)
        if entry is None or h.producer_epoch != entry.epoch:
            # a new producer, or a new epoch (a follower or a rebuild accepts what the leader wrote);
            # an open transaction stays open across an epoch bump (its marker comes with the new epoch)
            txn = entry.txn_first_offset if entry is not None else -1
            coord = entry.coordinator_epoch if entry is not None else -1
            entry = self.producers[pid] = ProducerEntry(
                pid, h.producer_epoch, txn_first_offset=txn, coordinator_epoch=coord
            )
        if h.is_control:
            first = entry.txn_first_offset if entry.txn_first_offset >= 0 else first_offset
            entry.txn_first_offset = -1
            if marker is not None:
                entry.coordinator_epoch = max(entry.coordinator_epoch, marker.coordinator_epoch)
            done = CompletedTxn(pid, first, first_offset, marker is not None and not marker.commit)
            self.unreplicated.append(done)
            return done
        if h.is_transactional and entry.txn_first_offset < 0:
            entry.txn_first_offset = first_offset
        if h.base_sequence < 0:
            return None  # a coordinator's batch (transactional offset commit): no sequence to track
        entry.batches.append(
            BatchMetadata(
                h.base_sequence,
                last_sequence(h.base_sequence, h.last_offset_delta),
                first_offset,
                first_offset + h.last_offset_delta,
                h.max_timestamp,
            )
        )
        return None

    def first_unstable_offset(self, high_watermark: int) -> int | None:
        """The first offset of an open transaction, or of a completed one whose marker is at or
        above ``high_watermark``; None when there is none. Forgets the completed ones below it."""
        self.on_high_watermark(high_watermark)
        firsts = [e.txn_first_offset for e in self.producers.values() if e.txn_first_offset >= 0]
        firsts.extend(t.first_offset for t in self.unreplicated)
        return min(firsts) if firsts else None

    def on_high_watermark(self, high_watermark: int) -> None:
        """Forget the completed transactions whose marker is below ``high_watermark`` (they are
        appended in marker order, so from the front)."""
        u = self.unreplicated
        n = 0
        while n < len(u) and u[n].last_offset < high_watermark:
            n += 1
        if n:
            del u[:n]

    def open_transactions(self) -> int:
        return sum(1 for e in self.producers.values() if e.txn_first_offset >= 0)

    def evict_below(self, log_start_offset: int) -> int:
        """Forget producers whose last batch lies below the log start offset; returns how many."""
        gone = [pid for pid, e in self.producers.items() if e.last_offset < log_start_offset and e.txn_first_offset < 0]
        for pid in gone:
            del self.producers[pid]
        return len(gone)

    def remove_expired(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers whose last batch's max timestamp is ``expiration_ms`` or more before
        ``now_ms`` (Kafka 2.3's rule: transactional.id.expiration.ms applies to idle producers);
        returns how many. A forgotten producer's next batch gets UNKNOWN_PRODUCER_ID (unless it
        starts at sequence 0)."""
        gone = [
            pid
            for pid, e in self.producers.items()
            if e.batches and now_ms - e.batches[-1].max_timestamp >= expiration_ms and e.txn_first_offset < 0
        ]
        for pid in gone:
            del self.producers[pid]
        return len(gone)

    def clear(self) -> None:
        self.producers.clear()
        self.unreplicated.clear()


# -- snapshot files ----------------------------------------------------------------------------


def snapshot_file_name(offset: int) -> str:
    return f"{offset:020d}{SNAPSHOT_SUFFIX}"


def parse_snapshot_file_name(name: str) -> int | None:
    stem, suffix = name[: -len(SNAPSHOT_SUFFIX)], name[-len(SNAPSHOT_SUFFIX) :]
    if suffix != SNAPSHOT_SUFFIX or len(stem) != 20 or not stem.isdigit():
        return None
    return int(stem)


def encode_snapshot(producers: Iterable[ProducerEntry]) -> bytes:
    """Kafka 2.3's snapshot (version 1) of ``producers``: each one's last batch, epochs and open
    transaction."""
    body = bytearray()
    count = 0
    for e in sorted(producers, key=lambda p: p.producer_id):
        if not e.batches and e.txn_first_offset < 0:
            continue
        count += 1
        if e.batches:
            b = e.batches[-1]
            last = (b.last_seq, b.last_offset, b.last_offset - b.first_offset, b.max_timestamp)
        else:
            last = (-1, -1, 0, -1)
        body += _KAFKA_PRODUCER.pack(e.producer_id, e.epoch, *last, e.coordinator_epoch, e.txn_first_offset)
    out = bytearray(_FILE_HEADER.pack(SNAPSHOT_VERSION, 0, count))
    out += body
    struct.pack_into(">I", out, 2, crc32c(memoryview(out)[_CRC_START:]))
    return bytes(out)


def _kafka_entry(data: bytes, pos: int) -> ProducerEntry:
    pid, epoch, last_seq, last_offset, delta, timestamp, coord, txn = _KAFKA_PRODUCER.unpack_from(data, pos)
    entry = ProducerEntry(pid, epoch, txn_first_offset=txn, coordinator_epoch=coord)
    if last_seq >= 0 and last_offset >= 0:
        if not 0 <= delta <= last_offset:
            raise SnapshotError(f"producer {pid}: offset delta {delta} of a batch ending at offset {last_offset}")
        first_seq = (last_seq - delta) % (INT32_MAX + 1)  # sequences wrap
        entry.batches.append(BatchMetadata(first_seq, last_seq, last_offset - delta, last_offset, timestamp))
    return entry


def decode_snapshot(data: bytes) -> dict[int, ProducerEntry]:
    """The producers of a snapshot file's bytes; raises SnapshotError when they are not valid."""
    if len(data) < _FILE_HEADER.size:
        raise SnapshotError(f"{len(data)} bytes are too short for a snapshot header")
    version, crc, count = _FILE_HEADER.unpack_from(data, 0)
    if version not in (SNAPSHOT_VERSION, HEADWATER_SNAPSHOT_VERSION):
        raise SnapshotError(f"unknown snapshot version {version}")
    if crc32c(memoryview(data)[_CRC_START:]) != crc:
        raise SnapshotError("snapshot fails its CRC-32C check")
    pos = _FILE_HEADER.size
    out: dict[int, ProducerEntry] = {}
    try:
        for _ in range(count):
            if version == SNAPSHOT_VERSION:
                entry = _kafka_entry(data, pos)
                pos += _KAFKA_PRODUCER.size
            else:
                pid, epoch, txn, coord, n = _PRODUCER_V2.unpack_from(data, pos)
                pos += _PRODUCER_V2.size
                if not 0 <= n <= BATCHES_KEPT:
                    raise SnapshotError(f"producer {pid} has {n} batches")
                entry = ProducerEntry(pid, epoch, txn_first_offset=txn, coordinator_epoch=coord)
                for _ in range(n):
                    entry.batches.append(BatchMetadata(*_BATCH.unpack_from(data, pos)))
                    pos += _BATCH.size
            out[entry.producer_id] = entry
    except struct.error as e:
        raise SnapshotError(f"snapshot truncated: {e}") from None
    if pos != len(data):
        raise SnapshotError(f"{len(data) - pos} trailing bytes after the snapshot")
    return out


def list_snapshots(fs: FileSystem, directory: str) -> list[int]:
    """Offsets of the snapshot files in ``directory``, ascending."""
    out = []
    for name in fs.listdir(directory):
        off = parse_snapshot_file_name(name)
        if off is not None:
            out.append(off)
    return sorted(out)


def write_snapshot(fs: FileSystem, directory: str, offset: int, state: ProducerStateManager) -> None:
    """Write and fsync the file, then rename it into place; the directory fsync is the caller's."""
    replace_file(fs, os.path.join(directory, snapshot_file_name(offset)), encode_snapshot(state.producers.values()))


def read_snapshot(fs: FileSystem, directory: str, offset: int) -> dict[int, ProducerEntry]:
    return decode_snapshot(read_file(fs, os.path.join(directory, snapshot_file_name(offset))))


def delete_snapshot(fs: FileSystem, directory: str, offset: int) -> None:
    try:
        fs.unlink(os.path.join(directory, snapshot_file_name(offset)))
    except FileNotFoundError:
        pass
