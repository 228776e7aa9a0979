"""The leader epoch cache of one partition: where each leader epoch starts in the log (KIP-101).

Every record batch carries the epoch of the leader that first appended it (its
``partition_leader_epoch``). The cache keeps, for each epoch that wrote to the log, the offset of
its first batch, so that OffsetsForLeaderEpoch can tell a follower (or, from KIP-320, a consumer)
where an epoch ends, and a follower can truncate exactly the tail that diverged from the leader.

On disk: ``<topic>-<partition>/leader-epoch-checkpoint``, Kafka's checkpoint text format, one item
a line, ``\\n`` line ends::

    0            version (always 0)
    3            number of entries
    0 0          epoch, start offset (space separated), in increasing order
    2 1500
    5 4821

Invariants (checked when the file is read; a file that breaks one, or an empty file, which
Kafka would read as no entries, is invalid and the Log rebuilds it from its batch headers):

* entries strictly increase in both epoch and start offset;
* epochs and start offsets are ≥ 0;
* (kept by the :class:`~headwater.broker.storage.log.Log`) once the log was opened, truncated or
  cut by retention, no entry starts below the log start offset nor at or above the log end
  offset; the one exception is a new leader's entry at the log end offset
  (``Log.maybe_assign_epoch_start_offset``) until it appends.

The file is replaced atomically: ``leader-epoch-checkpoint.tmp`` is written, fsynced and renamed
over it (through the injected :class:`~headwater.broker.storage.fs.FileSystem`), so a crash
leaves the old or the new file. Owned by a Log, the cache hands both fsyncs to ``defer_sync``
instead (it writes the temporary file, renames it and passes the checkpoint's path): the Log
fsyncs the file and then the directory at its next flush, which happens before the recovery
point passes any batch the new entry describes. A new leader's entry at its log end offset
(``Log.maybe_assign_epoch_start_offset``, ``assign_all(defer_write=True)``) is not even written
then: it stays in memory until that flush writes the file (:meth:`LeaderEpochCache.write_unwritten`)
and fsyncs it, or until another change writes the file; a crash before loses it as it could lose
an unsynced rename (the "old" case below).
After a crash the file is then the old one, the new one, or a torn new one. Old: the batches the lost entry describes are above the recovery
point and are re-read by recovery, which assigns their epochs again (an entry no batch followed,
a leader's epoch at its log end offset, describes nothing a follower can be asked about once the
broker restarted as a follower). Torn: it breaks the invariants and the Log rebuilds the cache
from its batch headers. This is what lets a broker take leadership of thousands of partitions
in one LeaderAndIsr without thousands of file writes and fsyncs on the request's path (issue
26). Without ``defer_sync``, and for truncations, every change is written before it is made in
memory: when writing or renaming fails (OSError) the cache is as before the call (once renamed,
the memory follows the file even if an immediate fsync then fails); a deferred entry's failed
write fails the Log's flush, which takes the log offline.

Rules, as Kafka 2.3's ``LeaderEpochFileCache``:

* :meth:`LeaderEpochCache.assign` adds an epoch only when it is above the latest (-1 when
  empty), the rule of Kafka's segment recovery. Kafka's ``assign`` itself also accepts a lower
  epoch and drops the later entries; a batch below the latest epoch can only come from a fenced
  leader or bad data, and we do not let it rewrite the history of the cache.
  When the new entry's start offset does not increase (the latest epoch started at an offset
  where nothing was written before a newer leader took over, as when a leader records its
  epoch at the log end offset on election: KAFKA-7415), every entry starting at or above it is
  removed first, as Kafka's ``truncateAndAppend`` does; a warning is logged unless only one
  entry with the very same start offset went (the expected case: no data was written in it).
* :meth:`LeaderEpochCache.end_offset_for` answers OffsetsForLeaderEpoch: see its docstring.
* :meth:`LeaderEpochCache.truncate_from_end` drops entries starting at or after an offset (log
  truncation); :meth:`LeaderEpochCache.truncate_from_start` moves the earliest remaining entry up
  to a new log start offset (retention).

Concurrency: like the Log that owns it, a cache is used from one thread.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

from headwater.broker.storage.fs import FileSystem, read_file, replace_file

log = logging.getLogger(__name__)

CHECKPOINT_FILE = "leader-epoch-checkpoint"
CHECKPOINT_VERSION = 0
#: OffsetsForLeaderEpoch's "no such epoch" (Kafka's EpochEndOffset.UNDEFINED_EPOCH) ...
UNDEFINED_EPOCH = -1
#: ... and "no such end offset" (UNDEFINED_EPOCH_OFFSET).
UNDEFINED_EPOCH_OFFSET = -1


class EpochEntry(NamedTuple):
    epoch: int
    start_offset: int


class CheckpointError(ValueError):
    """A leader-epoch-checkpoint that is malformed or breaks an invariant."""


def format_checkpoint(entries: Sequence[EpochEntry]) -> bytes:
    lines = [str(CHECKPOINT_VERSION), str(len(entries))]
    lines += [f"{e.epoch} {e.start_offset}" for e in entries]
    return ("\n".join(lines) + "\n").encode()


class EmptyCheckpointError(CheckpointError):
    """A leader-epoch-checkpoint of zero bytes: what Kafka 2.3 creates with a partition's log and
    leaves until the partition's first batch (rebuilt from the log: nothing to do when it is empty)."""


def parse_checkpoint(data: bytes) -> list[EpochEntry]:
    """The entries of a checkpoint file; CheckpointError if it is malformed or breaks an invariant."""
    if not data:
        raise EmptyCheckpointError("empty file")  # Kafka reads it as no entries; we rebuild, to be safe
    try:
        lines = data.decode("ascii").splitlines()
        if len(lines) < 2 or lines[0].strip() != str(CHECKPOINT_VERSION):
            raise CheckpointError(f"unknown version or header {lines[:2]}")
        count = int(lines[1])
        if len(lines) - 2 != count:
            raise CheckpointError(f"announces {count} entries but holds {len(lines) - 2}")
        entries: list[EpochEntry] = []
        for line in lines[2:]:
            fields = line.split()
            if len(fields) != 2:
                raise CheckpointError(f"malformed line {line!r}")
            entries.append(EpochEntry(int(fields[0]), int(fields[1])))
    except (UnicodeDecodeError, ValueError) as e:
        if isinstance(e, CheckpointError):
            raise
        raise CheckpointError(str(e)) from e
    _check(entries)
    return entries


def _check(entries: Sequence[EpochEntry]) -> None:
    for i, e in enumerate(entries):
        if e.epoch < 0 or e.start_offset < 0:
            raise CheckpointError(f"negative entry {e}")
        if i and (e.epoch <= entries[i - 1].epoch or e.start_offset <= entries[i - 1].start_offset):
            raise CheckpointError(f"entry {e} does not increase on {entries[i - 1]}")


def read_checkpoint(fs: FileSystem, directory: str) -> list[EpochEntry]:
    """The entries of ``directory``'s checkpoint: FileNotFoundError if absent, CheckpointError if invalid."""
    return parse_checkpoint(read_file(fs, os.path.join(directory, CHECKPOINT_FILE)))


class LeaderEpochCache:
    """(epoch, start offset) entries of one partition (format, invariants and rules in the module docstring).

    ``entries`` must satisfy the invariants (ValueError otherwise); the constructor writes
    nothing. ``defer_sync``, when given, is called with the checkpoint's path after each rename
    instead of fsyncing the file and the directory at once (see the module docstring).
    """

    def __init__(
        self,
        fs: FileSystem,
        directory: str,
        entries: Iterable[EpochEntry] = (),
        *,
        defer_sync: Callable[[str], None] | None = None,
    ) -> None:
        self._fs = fs
        self._dir = directory
        self._entries = [EpochEntry(*e) for e in entries]
        _check(self._entries)
        self._defer_sync = defer_sync
        self._unwritten = False
        self.path = os.path.join(directory, CHECKPOINT_FILE)

    # -- reading -------------------------------------------------------------------------------

    def entries(self) -> list[EpochEntry]:
        """A copy of the entries, oldest first."""
        return list(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def latest_epoch(self) -> int:
        """The latest epoch, -1 (UNDEFINED_EPOCH) when the cache is empty."""
        return self._entries[-1].epoch if self._entries else UNDEFINED_EPOCH

    @property
    def earliest_entry(self) -> EpochEntry | None:
        return self._entries[0] if self._entries else None

    def epoch_for_offset(self, offset: int) -> int:
        """The epoch of the record at ``offset``: the latest entry starting at or below it (-1 below the first)."""
        found = UNDEFINED_EPOCH
        for e in self._entries:
            if e.start_offset > offset:
                break
            found = e.epoch
        return found

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """OffsetsForLeaderEpoch: (epoch, end offset) for ``requested_epoch``, as Kafka 2.3 answers it.

        * the latest epoch: (latest, ``log_end_offset``) — it is still being written to;
        * an older epoch: the largest epoch ≤ the requested one, and as its end offset the start
          offset of the first epoch above the requested one;
        * below the earliest epoch: (requested epoch, the earliest entry's start offset) —
          KAFKA-7415 (Kafka 2.1+): the data before it was deleted, and a follower must start at
          the leader's log start. (Before 2.1 this answered (-1, -1).)
        * -1 (UNDEFINED_EPOCH), an epoch above the latest, or an empty cache:
          (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET) = (-1, -1).
        """
        if requested_epoch == UNDEFINED_EPOCH or not self._entries:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if requested_epoch == self._entries[-1].epoch:
            return requested_epoch, log_end_offset
        floor: EpochEntry | None = None
        for e in self._entries:
            if e.epoch > requested_epoch:
                if floor is None:
                    return requested_epoch, e.start_offset
                return floor.epoch, e.start_offset
            floor = e
        return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET  # above the latest epoch

    # -- changing ------------------------------------------------------------------------------

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset``; ignored unless ``epoch`` is above the latest.

        Entries starting at or above ``start_offset`` are removed first (see the module
        docstring). Returns whether the cache changed. Raises ValueError for a negative start
        offset and OSError when the checkpoint cannot be written (the cache is then unchanged).
        """
        return self.assign_all(((epoch, start_offset),))

    def assign_all(self, assignments: Iterable[tuple[int, int]], *, defer_write: bool = False) -> bool:
        """:meth:`assign` each (epoch, start offset) in turn, writing the checkpoint once at the end.

        ``defer_write`` (only with ``defer_sync``, i.e. owned by a Log): leave the file to the Log's
        next flush (:meth:`write_unwritten`); see the module docstring.
        """
        entries = self._entries
        for epoch, start_offset in assignments:
            if start_offset < 0:
                raise ValueError(f"leader epoch {epoch} cannot start at a negative offset {start_offset}")
            if epoch <= (entries[-1].epoch if entries else UNDEFINED_EPOCH):
                continue
            new = EpochEntry(epoch, start_offset)
            kept = [e for e in entries if e.start_offset < start_offset]
            removed = entries[len(kept) :]
            if len(removed) > 1 or (removed and removed[0].start_offset != start_offset):
                log.warning(
                    "%s: new epoch entry %s replaces conflicting entries %s",
                    self.path,
                    tuple(new),
                    [tuple(e) for e in removed],
                )
            entries = [*kept, new]
        if entries is self._entries:
            return False
        if self._defer_sync is None or not defer_write:
            self._replace(entries)
        else:
            # A new leader's entry: the file is written at the Log's next flush (module docstring),
            # so a broker taking leadership of thousands of partitions does no file I/O for each
            self._entries = entries
            self._unwritten = True
            self._defer_sync(self.path)
        return True

    def truncate_from_end(self, end_offset: int) -> bool:
        """Remove every entry starting at or after ``end_offset`` (the log was truncated to it)."""
        if end_offset < 0 or not self._entries or self._entries[-1].start_offset < end_offset:
            return False
        self._replace([e for e in self._entries if e.start_offset < end_offset])
        return True

    def truncate_from_start(self, start_offset: int) -> bool:
        """The log now starts at ``start_offset``: the entry covering it starts there, earlier ones go.

        An entry starting exactly at ``start_offset`` stays as it is; with no entry at or below
        it, nothing changes.
        """
        previous = [e for e in self._entries if e.start_offset <= start_offset]
        if not previous:
            return False
        first = EpochEntry(previous[-1].epoch, start_offset)
        updated = [first, *self._entries[len(previous) :]]
        if updated == self._entries:
            return False
        self._replace(updated)
        return True

    def clear(self) -> bool:
        """Remove every entry (the log was emptied)."""
        if not self._entries:
            return False
        self._replace([])
        return True

    def write(self) -> None:
        """Write the checkpoint as the cache holds it (after a rebuild)."""
        self._replace(self._entries)

    @property
    def unwritten(self) -> bool:
        """Whether an assignment is in memory only, waiting for :meth:`write_unwritten`."""
        return self._unwritten

    def write_unwritten(self) -> None:
        """Write the checkpoint if an assignment was deferred (the owning Log's flush calls this)."""
        if self._unwritten:
            self._replace(self._entries)

    def _replace(self, entries: list[EpochEntry]) -> None:
        replace_file(self._fs, self.path, format_checkpoint(entries), fsync=self._defer_sync is None)
        self._entries = entries  # the file holds them now, durable or not
        self._unwritten = False
        if self._defer_sync is None:
            self._fs.fsync_dir(self._dir)
        else:
            self._defer_sync(self.path)

    def __repr__(self) -> str:
        return f"LeaderEpochCache({self.path}, {[tuple(e) for e in self._entries]})"
