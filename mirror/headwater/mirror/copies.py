"""Copies the mirror already made: how a copier avoids producing a batch twice.

On the fast path a batch reaches the target byte for byte from its CRC field on (the broker
rewrites only the base offset and the partition leader epoch, which lie before it), so a batch's
identity in the target is a hash of those bytes. Two moments need it:

- A new owner of a partition (after a crash of the previous one) resumes at the committed source
  offset; the previous owner may have copied more before it died. The target offset committed with
  the source offset (``/consumers/<group>/mirror-target``) says where its later appends can start;
  the batches found from there to the target's high watermark are skipped, not produced again.
- A produce that failed without an answer (the target leader died, the connection broke, a timeout)
  may still have been appended: before retrying, the copier looks for it in the target the same way.

A copier produces its batches in source order and waits for each produce, so what the target holds
of a run of batches is always a prefix of it: matching stops at the first batch not found. Only
what is below the high watermark can be read: after a leader change the new leader's high watermark
catches up within a follower fetch, so the retry path scans until the high watermark has stood
still for three seconds. A batch still not found is produced again — then the mirror is at-least-once,
as without this; it never skips a batch the target does not hold.

Memory. A scan holds one entry per target batch it read (a 16-byte key in a dict, a list, an
int: about :data:`ENTRY_BYTES`), so with small batches it holds about twice the bytes it read.
Two bounds keep that in check (review finding 8): a scan gives up (the copier is then
at-least-once for that range, logged) once its entries would hold more than
``resume.scan.max.bytes``, or once it has read :data:`SCAN_MAX_BYTES` of the target; and a
:class:`ScanBudget` lets at most ``resume.scan.total.max.bytes // resume.scan.max.bytes`` scans
hold their entries at once (the others wait), so a restart that claims many partitions does not
add them all up.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence

from headwater.client.cluster import Cluster
from headwater.client.errors import OffsetOutOfRangeError
from headwater.client.raw import fetch_raw
from headwater.protocol.errors import ErrorCode, KafkaError
from headwater.protocol.records.header import CRC_OFFSET

__all__ = ["ENTRY_BYTES", "SCAN_MAX_BYTES", "ScanBudget", "TargetCopies", "batch_key", "scan_target", "skip_copied"]

#: a scan that would read more of the target than this gives up (the copier is then at-least-once)
SCAN_MAX_BYTES = 256 * 1024 * 1024
#: what one recorded target batch holds in memory (dict slot, 16-byte key, list, int), measured
ENTRY_BYTES = 220

#: batch key -> the target offsets right after each batch with that key, in log order
TargetCopies = dict[bytes, list[int]]


def batch_key(batch: bytes | memoryview) -> bytes:
    """The identity of a magic-2 batch in the target: its bytes from the CRC field on."""
    return hashlib.blake2b(batch[CRC_OFFSET:], digest_size=16).digest()


class ScanBudget:
    """How much memory the scans of one mirror may hold: ``max_bytes`` each, and at most
    ``total_max_bytes // max_bytes`` of them at once (:meth:`slot`)."""

    def __init__(self, max_bytes: int, total_max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.slots = max(1, total_max_bytes // max(max_bytes, 1))
        self._semaphore = asyncio.Semaphore(self.slots)

    async def acquire(self) -> None:
        await self._semaphore.acquire()

    def release(self) -> None:
        self._semaphore.release()


async def scan_target(
    cluster: Cluster,
    topic: str,
    partition: int,
    start: int,
    *,
    max_bytes: int = SCAN_MAX_BYTES,
    max_held_bytes: int | None = None,
) -> tuple[TargetCopies | None, int]:
    """The batches of the target partition from ``start`` to its high watermark, and that high
    watermark (-1 when the range is gone). None instead of the batches when reading them would
    take more than ``max_bytes`` of the target, or holding them more than ``max_held_bytes`` of
    memory (estimated at :data:`ENTRY_BYTES` a batch). Raises KafkaError or connection errors
    (the caller retries)."""
    copies: TargetCopies = {}
    max_entries = None if max_held_bytes is None else max_held_bytes // ENTRY_BYTES
    entries = 0
    offset, scanned = start, 0
    while True:
        try:
            got, failed = await fetch_raw(cluster, [(topic, partition, offset)], max_wait_ms=0)
        except OffsetOutOfRangeError:
            return copies, -1  # the target lost or deleted that range: nothing there to skip
        tp = (topic, partition)
        if tp in failed or tp not in got:
            await cluster.refresh([topic])
            raise KafkaError(failed.get(tp, ErrorCode.UNKNOWN_SERVER_ERROR), f"scanning {topic}-{partition}")
        part = got[tp]
        for h, b in part.batches:
            copies.setdefault(batch_key(b), []).append(h.next_offset)
            scanned += len(b)
            entries += 1
            if max_entries is not None and entries > max_entries:
                return None, part.high_watermark
        if scanned > max_bytes:
            return None, part.high_watermark
        if not part.batches or part.batches[-1][0].next_offset >= part.high_watermark:
            return copies, part.high_watermark
        offset = part.batches[-1][0].next_offset


def skip_copied(batches: Sequence[bytes | memoryview], copies: TargetCopies) -> tuple[int, int]:
    """How many leading ``batches`` the target already holds (each match used once), and the target
    offset right after the last of them (-1 when none)."""
    n, end = 0, -1
    for b in batches:
        found = copies.get(batch_key(b))
        if not found:
            break
        end = max(end, found.pop(0))
        n += 1
    return n, end
