"""What the leader does to a producer's batches besides assigning offsets (Kafka's ``LogValidator``).

Three topic configs change the bytes or refuse them, checked in this order by
:meth:`~headwater.broker.storage.log.Log.append` (a follower's append keeps the leader's bytes
and runs none of this):

1. ``message.timestamp.difference.max.ms`` (CreateTime topics): a record whose timestamp is
   further than that from the broker's clock, either way, refuses the whole record set with
   INVALID_TIMESTAMP, as Kafka 2.3 checks every record (nothing is written).
2. ``compression.type`` other than ``producer``: a batch in another codec is decoded and
   re-encoded in the topic's codec (``uncompressed`` = none), keeping its records (keys, values,
   headers, timestamps, offset deltas), producer id / epoch / base sequence and transactional
   bit; a batch already in that codec is kept byte for byte, as Kafka's in-place assignment.
3. ``message.timestamp.type=LogAppendTime``: every batch is stamped with the append time
   (:func:`~headwater.protocol.records.header.set_log_append_time`: timestamp-type bit, max
   timestamp, CRC), so consumers, the time index and ListOffsets by time all see that time.

Pure functions over bytes; the log passes its clock's time. Not thread-safe state: none.
"""

from __future__ import annotations

from collections.abc import Sequence

from headwater.protocol.errors import ErrorCode, KafkaError
from headwater.protocol.records.compression import Codec, codec_from_name
from headwater.protocol.records.header import NO_TIMESTAMP, BatchSummary, set_log_append_time
from headwater.protocol.records.record import decode_batch, encode_batch

CREATE_TIME = "CreateTime"
LOG_APPEND_TIME = "LogAppendTime"
TIMESTAMP_TYPES = (CREATE_TIME, LOG_APPEND_TIME)
#: compression.type values: the producer's codec kept, or one the broker recompresses to
COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
MAX_LONG = 2**63 - 1


def target_codec(compression_type: str) -> Codec | None:
    """The codec a topic's ``compression.type`` asks for; None for ``producer`` (keep the producer's)."""
    if compression_type == "producer":
        return None
    if compression_type == "uncompressed":
        return Codec.NONE
    return codec_from_name(compression_type)


def check_timestamps(
    records: bytes | bytearray | memoryview,
    summaries: Sequence[BatchSummary],
    now_ms: int,
    max_difference_ms: int,
) -> None:
    """Raise INVALID_TIMESTAMP when a record's timestamp lies more than ``max_difference_ms`` from
    ``now_ms`` (Kafka's message.timestamp.difference.max.ms, CreateTime topics only). Every
    record is checked, as Kafka does, so a batch is decoded only when the limit is set; a record
    without a timestamp (-1, an up-converted magic 0 message) is not checked, as in Kafka."""
    if max_difference_ms >= MAX_LONG:
        return
    for position, h in summaries:
        for r in decode_batch(records, position, verify_crc=False)[1]:
            if r.timestamp != NO_TIMESTAMP and abs(r.timestamp - now_ms) > max_difference_ms:
                raise KafkaError(
                    ErrorCode.INVALID_TIMESTAMP,
                    f"Timestamp {r.timestamp} of message with offset {r.offset - h.base_offset} is out of range. "
                    f"The timestamp should be within [{now_ms - max_difference_ms}, {now_ms + max_difference_ms}]",
                )


def recompress(
    records: bytes | bytearray | memoryview, summaries: Sequence[BatchSummary], codec: Codec
) -> bytes | None:
    """The record set with every batch in ``codec``; None when all batches already are (keep the bytes)."""
    if all(h.codec == codec for _, h in summaries):
        return None
    out = bytearray()
    for position, h in summaries:
        if h.codec == codec:
            out += records[position : position + h.size]
            continue
        _, decoded = decode_batch(records, position, verify_crc=False)
        out += encode_batch(
            [(r.key, r.value, r.timestamp, r.headers) for r in decoded],
            base_offset=h.base_offset,
            compression=codec,
            producer_id=h.producer_id,
            producer_epoch=h.producer_epoch,
            base_sequence=h.base_sequence,
            partition_leader_epoch=h.partition_leader_epoch,
            transactional=h.is_transactional,
            control=h.is_control,
            offset_deltas=[r.offset - h.base_offset for r in decoded],
            last_offset_delta=h.last_offset_delta,
        )
    return bytes(out)


def stamp_log_append_time(buf: bytearray, summaries: Sequence[BatchSummary], now_ms: int) -> None:
    """Stamp every batch of ``buf`` (offsets final or not: base offset is outside the CRC) with ``now_ms``."""
    for position, _ in summaries:
        set_log_append_time(buf, position, now_ms)
