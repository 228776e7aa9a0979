"""The aborted-transaction index: ``<20-digit base offset>.txnindex`` beside each segment, Kafka's layout.

One entry per transaction that was aborted in this partition, in the segment that holds its
ABORT marker, in marker order. Entries are fixed-size, big-endian, with no file header::

    offset  size  field
         0     2  version             -- 0
         2     8  producer_id
        10     8  first_offset        -- the transaction's first record in this partition
        18     8  last_offset         -- the offset of its ABORT marker
        26     8  last_stable_offset  -- the partition's first unstable offset once the marker was
                                         appended (Kafka's field; Headwater does not read it back)

A read_committed Fetch answers, per partition, the aborted transactions that overlap what it
returns (``last_offset >= fetch offset`` and ``first_offset < LSO``), as ``aborted_transactions``
(producer id, first offset); the consumer drops that producer's records from ``first_offset``
until it meets the ABORT marker.

Invariants and who writes: the index is derived from the log, like the offset index. The log keeps
every entry in memory (:class:`~headwater.broker.storage.log.Log`), appends an entry when it writes
an ABORT marker (leader or follower) and rewrites the segment's file atomically (``.tmp``, fsync,
rename); truncation rewrites or deletes the files past the new log end, retention deletes a file
with its segment, the cleaner's swap rewrites the merged segment's file. On open, the files of
segments below the point where the producer state is replayed from are read; the entries at and
above that point come from the replay (which sees the markers again). A file that is short,
holds another version or an entry out of order makes the log rebuild the producer state (and the
whole index) from the log start: a derived file is rebuilt, never repaired.

Concurrency: owned by one Log, called from the broker's asyncio thread.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable
from typing import NamedTuple

from headwater.broker.storage.fs import FileSystem, read_file, replace_file

TXN_INDEX_SUFFIX = ".txnindex"
TXN_INDEX_VERSION = 0
_ENTRY = struct.Struct(">hqqqq")  # version, producer_id, first_offset, last_offset, last_stable_offset
ENTRY_SIZE = _ENTRY.size  # 34


class TxnIndexError(ValueError):
    """A ``.txnindex`` file is not what :func:`encode_entries` wrote."""


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


def txn_index_path(directory: str, base_offset: int) -> str:
    return os.path.join(directory, f"{base_offset:020d}{TXN_INDEX_SUFFIX}")


def encode_entries(entries: Iterable[AbortedTxn]) -> bytes:
    return b"".join(_ENTRY.pack(TXN_INDEX_VERSION, *e) for e in entries)


def decode_entries(data: bytes) -> list[AbortedTxn]:
    if len(data) % ENTRY_SIZE:
        raise TxnIndexError(f"{len(data)} bytes is not a whole number of {ENTRY_SIZE}-byte entries")
    out: list[AbortedTxn] = []
    for pos in range(0, len(data), ENTRY_SIZE):
        version, *fields = _ENTRY.unpack_from(data, pos)
        if version != TXN_INDEX_VERSION:
            raise TxnIndexError(f"entry {pos // ENTRY_SIZE} has version {version}")
        e = AbortedTxn(*fields)
        if e.first_offset > e.last_offset or (out and e.last_offset <= out[-1].last_offset):
            raise TxnIndexError(f"entry {pos // ENTRY_SIZE} is out of order: {e}")
        out.append(e)
    return out


def read_txn_index(fs: FileSystem, directory: str, base_offset: int) -> list[AbortedTxn]:
    """The entries of a segment's file; [] when it has none. Raises TxnIndexError, OSError."""
    try:
        return decode_entries(read_file(fs, txn_index_path(directory, base_offset)))
    except FileNotFoundError:
        return []


def write_txn_index(fs: FileSystem, directory: str, base_offset: int, entries: list[AbortedTxn]) -> None:
    """Replace a segment's file by ``entries`` (deleted when empty); the directory fsync is the caller's."""
    path = txn_index_path(directory, base_offset)
    if not entries:
        delete_txn_index(fs, directory, base_offset)
        return
    replace_file(fs, path, encode_entries(entries))


def delete_txn_index(fs: FileSystem, directory: str, base_offset: int) -> None:
    try:
        fs.unlink(txn_index_path(directory, base_offset))
    except FileNotFoundError:
        pass
