"""Produce (key 0), v0-7.

- v3+ carry record batches (magic 2), stored byte for byte; the broker only assigns the base
  offset and the partition leader epoch. v0-2 carry legacy message sets (magic 0/1), which
  are up-converted to one magic-2 batch before the append.
- acks 0 / 1 / -1 (all). acks=-1 is refused with NOT_ENOUGH_REPLICAS when the ISR is smaller
  than ``min.insync.replicas`` (topic config, else the broker's). Other acks values get
  INVALID_REQUIRED_ACKS. With acks=0 no response is sent; on an error the connection is closed
  instead, which is how Kafka tells an acks=0 producer something went wrong.
- Per partition errors: UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_FOR_PARTITION, CORRUPT_MESSAGE
  (bad CRC/length/magic), MESSAGE_TOO_LARGE (a batch above max.message.bytes),
  UNSUPPORTED_COMPRESSION_TYPE (zstd below v7), KAFKA_STORAGE_ERROR. Nothing is written for a
  partition whose records are refused; other partitions of the request are unaffected.
- log_append_time_ms is -1 (CreateTime topics only); log_start_offset from v5.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from headwater.broker.network import CloseConnection
from headwater.protocol.errors import ErrorCode, KafkaError
from headwater.protocol.records.header import ATTRIBUTES_OFFSET, CODEC_MASK, HEADER_SIZE, MAGIC_OFFSET
from headwater.protocol.records.legacy import upconvert
from headwater.protocol.schema import Message

if TYPE_CHECKING:
    from headwater.broker.handlers import RequestContext
    from headwater.broker.server import KafkaBroker

log = logging.getLogger(__name__)

ZSTD = 4


async def handle(broker: KafkaBroker, ctx: RequestContext, request: Message) -> Message | None:
    acks = request["acks"]
    responses: list[Message] = []
    failed = False
    for topic in request["topics"]:
        name = topic["name"]
        parts = []
        for p in topic["partitions"]:
            result = _append(broker, ctx, name, p["partition_index"], p["records"], acks)
            failed = failed or result["error_code"] != ErrorCode.NONE
            parts.append(result)
        responses.append({"name": name, "partitions": parts})
    if acks == 0:
        if failed:
            raise CloseConnection("acks=0 produce request failed; closing the connection to signal the producer")
        return None
    return {"responses": responses, "throttle_time_ms": 0}


def _append(
    broker: KafkaBroker, ctx: RequestContext, topic: str, index: int, records: memoryview | None, acks: int
) -> Message:
    def error(code: ErrorCode, why: str = "") -> Message:
        if why:
            log.warning(
                "produce to %s-%d from %s (client %r) refused: %s: %s",
                topic,
                index,
                ctx.peer,
                ctx.client_id,
                code.name,
                why,
            )
        return {
            "partition_index": index,
            "error_code": code,
            "base_offset": -1,
            "log_append_time_ms": -1,
            "log_start_offset": -1,
        }

    if acks not in (0, 1, -1):
        return error(ErrorCode.INVALID_REQUIRED_ACKS, f"acks={acks}")
    part = broker.partition(topic, index)
    if part is None:
        known = broker.cache.partition(topic, index) is not None
        return error(ErrorCode.NOT_LEADER_FOR_PARTITION if known else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    if records is None or len(records) == 0:
        return error(ErrorCode.CORRUPT_MESSAGE, "no records")
    magic = records[MAGIC_OFFSET] if len(records) > MAGIC_OFFSET else -1
    max_bytes = part.log.config.max_message_bytes if part.log is not None else broker.config.message_max_bytes
    try:
        if ctx.version < 3:
            if magic not in (0, 1):
                raise KafkaError(
                    ErrorCode.CORRUPT_MESSAGE,
                    f"Produce v{ctx.version} requires a magic 0/1 message set, got magic {magic}",
                )
            records = memoryview(upconvert(records, max_batch_bytes=max_bytes))
        elif magic != 2:
            raise KafkaError(
                ErrorCode.CORRUPT_MESSAGE,
                f"Produce v{ctx.version} requires record batches (magic 2), got magic {magic}",
            )
        elif ctx.version < 7 and len(records) >= HEADER_SIZE and records[ATTRIBUTES_OFFSET + 1] & CODEC_MASK == ZSTD:
            raise KafkaError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, "zstd needs Produce v7 or later")
        topic_info = broker.cache.topics.get(topic)
        min_isr = (
            int(topic_info.config.get("min.insync.replicas", broker.config.min_insync_replicas))
            if topic_info
            else broker.config.min_insync_replicas
        )
        appended = part.append_as_leader(records, acks, min_isr)
    except KafkaError as e:
        return error(e.code, e.message)
    broker.purgatory.notify((topic, index))
    return {
        "partition_index": index,
        "error_code": ErrorCode.NONE,
        "base_offset": appended.first_offset,
        "log_append_time_ms": -1,
        "log_start_offset": appended.log_start_offset,
    }
