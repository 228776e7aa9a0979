"""The record batch (magic 2) header: layout, parsing, CRC check and offset rewriting.

Layout of one batch (big-endian), 61 bytes of header then the records::

    offset  size  field
         0     8  base_offset             -- rewritten by the broker on append
         8     4  batch_length            -- bytes after this field (so total = 12 + batch_length)
        12     4  partition_leader_epoch  -- rewritten by the broker on append
        16     1  magic                   -- 2 (byte 16 is the magic in every format, 0/1 included)
        17     4  crc                     -- CRC-32C (Castagnoli) of bytes 21 .. end of batch
        21     2  attributes              -- bits 0-2 codec, 3 timestamp type, 4 transactional, 5 control
        23     4  last_offset_delta
        27     8  base_timestamp
        35     8  max_timestamp
        43     8  producer_id
        51     2  producer_epoch
        53     4  base_sequence
        57     4  records_count
        61        records (compressed as a whole when the codec is not 0)

Because base_offset and partition_leader_epoch lie before the CRC'd range, the broker assigns
offsets without recomputing the CRC or touching (decompressing) the records.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import NamedTuple

from crc32c import crc32c

from headwater.protocol.errors import ErrorCode, KafkaError

HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
LOG_OVERHEAD = 12  # base_offset + batch_length: the part not counted in batch_length
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
_OFFSET_AND_LENGTH = struct.Struct(">qi")
_OFFSET_LENGTH_EPOCH_MAGIC = struct.Struct(">qiib")
_BASE_OFFSET = struct.Struct(">q")
_LEADER_EPOCH = struct.Struct(">i")
_ATTRIBUTES = struct.Struct(">h")
_MAX_TIMESTAMP = struct.Struct(">q")
_CRC = struct.Struct(">I")
MAX_TIMESTAMP_OFFSET = 35

CODEC_MASK = 0x07
TIMESTAMP_TYPE_BIT = 0x08
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20

NO_PRODUCER_ID = -1
NO_TIMESTAMP = -1


class BatchHeader(NamedTuple):
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        """Total bytes of the batch on the wire and on disk."""
        return LOG_OVERHEAD + self.batch_length

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def codec(self) -> int:
        return self.attributes & CODEC_MASK

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)

    @property
    def is_log_append_time(self) -> bool:
        """Timestamp type LogAppendTime (bit 3): every record's timestamp is max_timestamp."""
        return bool(self.attributes & TIMESTAMP_TYPE_BIT)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)


def read_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Parse the 61-byte header at ``pos``. Raises KafkaError(CORRUPT_MESSAGE) if short or not magic 2."""
    if len(buf) - pos < HEADER_SIZE:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"record batch header truncated at byte {pos}")
    h = BatchHeader._make(HEADER.unpack_from(buf, pos))
    if h.magic != 2:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"record batch magic {h.magic} at byte {pos}, expected 2")
    if h.batch_length < HEADER_SIZE - LOG_OVERHEAD:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"record batch length {h.batch_length} is below the header size")
    return h


def peek_offset_and_length(buf: bytes | bytearray | memoryview, pos: int = 0) -> tuple[int, int] | None:
    """(base_offset, batch_length) at ``pos``, or None when fewer than 12 bytes remain."""
    if len(buf) - pos < LOG_OVERHEAD:
        return None
    base_offset, length = _OFFSET_AND_LENGTH.unpack_from(buf, pos)
    return int(base_offset), int(length)


def magic_at(buf: bytes | bytearray | memoryview, pos: int = 0) -> int | None:
    """The magic byte of the batch or legacy message at ``pos`` (None if too short)."""
    if len(buf) - pos <= MAGIC_OFFSET:
        return None
    return int(buf[pos + MAGIC_OFFSET])


def crc_matches(buf: bytes | bytearray | memoryview, pos: int, header: BatchHeader) -> bool:
    end = pos + header.size
    return crc32c(memoryview(buf)[pos + ATTRIBUTES_OFFSET : end]) == header.crc


def compute_crc(buf: bytes | bytearray | memoryview, pos: int, size: int) -> int:
    """The CRC-32C a batch of ``size`` bytes at ``pos`` should carry."""
    return int(crc32c(memoryview(buf)[pos + ATTRIBUTES_OFFSET : pos + size]))


def rewrite_offset_and_epoch(buf: bytearray | memoryview, pos: int, base_offset: int, leader_epoch: int) -> None:
    """Set base_offset and partition_leader_epoch in place (outside the CRC: no recomputation)."""
    _BASE_OFFSET.pack_into(buf, pos, base_offset)
    _LEADER_EPOCH.pack_into(buf, pos + 12, leader_epoch)


def set_log_append_time(buf: bytearray | memoryview, pos: int, append_time_ms: int) -> None:
    """Stamp the batch at ``pos`` as Kafka's leader does for a LogAppendTime topic: set the
    timestamp-type bit (3) of the attributes, set max_timestamp to ``append_time_ms`` (every
    record of the batch then reads as that time) and recompute the CRC, which covers both fields.
    base_timestamp and the records' deltas are left as the producer wrote them."""
    (attributes,) = _ATTRIBUTES.unpack_from(buf, pos + ATTRIBUTES_OFFSET)
    _ATTRIBUTES.pack_into(buf, pos + ATTRIBUTES_OFFSET, attributes | TIMESTAMP_TYPE_BIT)
    _MAX_TIMESTAMP.pack_into(buf, pos + MAX_TIMESTAMP_OFFSET, append_time_ms)
    (length,) = struct.unpack_from(">i", buf, pos + 8)
    _CRC.pack_into(buf, pos + CRC_OFFSET, compute_crc(buf, pos, LOG_OVERHEAD + length))


class BatchSummary(NamedTuple):
    """What an append needs to know about one validated batch."""

    position: int  # within the validated buffer
    header: BatchHeader


def validate_batches(
    buf: bytes | bytearray | memoryview, max_batch_bytes: int, *, compacted: bool = False
) -> list[BatchSummary]:
    """Check every batch in a producer's record set; per batch work only, never per record.

    A producer's batch holds exactly last_offset_delta + 1 records; with ``compacted`` (batches a
    leader's log compaction rewrote, fetched by a follower) fewer are allowed: offsets have gaps.

    Raises KafkaError with Kafka's code: CORRUPT_MESSAGE (bad length, magic, CRC, record count,
    trailing bytes, empty set), MESSAGE_TOO_LARGE (a batch above ``max_batch_bytes``),
    UNSUPPORTED_FOR_MESSAGE_FORMAT is left to the caller for magic 0/1 sets (see legacy).
    """
    out: list[BatchSummary] = []
    pos = 0
    n = len(buf)
    while pos < n:
        if n - pos < HEADER_SIZE:
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"{n - pos} trailing bytes are not a whole record batch")
        h = read_header(buf, pos)
        if h.size > max_batch_bytes:
            raise KafkaError(
                ErrorCode.MESSAGE_TOO_LARGE,
                f"record batch of {h.size} bytes exceeds the maximum of {max_batch_bytes} bytes",
            )
        if pos + h.size > n:
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"record batch of {h.size} bytes is truncated at byte {n}")
        if not crc_matches(buf, pos, h):
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"record batch at byte {pos} fails its CRC-32C check")
        # a compacted log's leader may hold a batch with no records left (the cleaner keeps its
        # header for its producer's sequence: Kafka's RETAIN_EMPTY); a follower takes it as is
        if (
            h.records_count < 0
            or (h.records_count == 0 and not compacted)
            or (
                h.last_offset_delta != h.records_count - 1
                and not (compacted and h.records_count <= h.last_offset_delta + 1)
            )
        ):
            raise KafkaError(
                ErrorCode.CORRUPT_MESSAGE,
                f"record batch claims {h.records_count} records but a last offset delta of {h.last_offset_delta}",
            )
        out.append(BatchSummary(pos, h))
        pos += h.size
    if not out:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "empty record set")
    return out


_PRODUCER_ID = struct.Struct(">q")
_BATCH_LENGTH = struct.Struct(">i")
PRODUCER_ID_OFFSET = 43


def batch_flags(buf: bytes | bytearray | memoryview | None) -> Iterator[tuple[int, int]]:
    """(attributes, producer_id) of each magic-2 batch header in ``buf``, without validating the
    batches: what the broker looks at before it authorizes or appends a producer's record set (Kafka's
    ProduceRequest flags and LogValidator's control-batch refusal). Total: stops at the first short,
    non-magic-2 or non-positive-length batch (the append's validation refuses those)."""
    if buf is None:
        return
    pos, n = 0, len(buf)
    while n - pos >= HEADER_SIZE and buf[pos + MAGIC_OFFSET] == 2:
        (attributes,) = _ATTRIBUTES.unpack_from(buf, pos + ATTRIBUTES_OFFSET)
        (producer_id,) = _PRODUCER_ID.unpack_from(buf, pos + PRODUCER_ID_OFFSET)
        yield int(attributes), int(producer_id)
        (length,) = _BATCH_LENGTH.unpack_from(buf, pos + 8)
        if length <= 0:
            return
        pos += LOG_OVERHEAD + length


def has_control_batch(buf: bytes | bytearray | memoryview | None) -> bool:
    """A control batch (transaction marker) in a producer's record set: clients may not write them."""
    return any(attributes & CONTROL_BIT for attributes, _ in batch_flags(buf))
