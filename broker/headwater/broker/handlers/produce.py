"""Produce (key 0), v0-7.

- v3+ carry record batches (magic 2), stored byte for byte; the broker only assigns the base
  offset and the partition leader epoch. v0-2 carry legacy message sets (magic 0/1), which
  are up-converted to one magic-2 batch before the append.
- acks 0 / 1 / -1 (all). acks=-1 is refused with NOT_ENOUGH_REPLICAS when the ISR is smaller
  than ``min.insync.replicas`` (topic config, else the broker's); otherwise the answer waits
  in the purgatory until the high watermark passes the appended records (every ISR member
  has them). It then answers NONE, or NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR shrank
  below min.insync.replicas meanwhile, NOT_LEADER_FOR_PARTITION if leadership moved, and
  REQUEST_TIMED_OUT after ``timeout_ms``. Other acks values get INVALID_REQUIRED_ACKS. With acks=0 no response is sent; on an error the connection is closed
  instead, which is how Kafka tells an acks=0 producer something went wrong.
- Per partition errors: INVALID_TOPIC_EXCEPTION (``__consumer_offsets``: only the group
  coordinator writes it), UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_FOR_PARTITION, CORRUPT_MESSAGE
  (bad CRC/length/magic; a control batch: clients may not write control records, as Kafka's
  LogValidator), MESSAGE_TOO_LARGE (a batch above max.message.bytes),
  UNSUPPORTED_COMPRESSION_TYPE (zstd below v7), KAFKA_STORAGE_ERROR. Nothing is written for a
  partition whose records are refused; other partitions of the request are unaffected.
- Idempotent producers (producer id >= 0, see storage/producer_state.py): INVALID_PRODUCER_EPOCH,
  OUT_OF_ORDER_SEQUENCE_NUMBER, UNKNOWN_PRODUCER_ID, DUPLICATE_SEQUENCE_NUMBER refuse the batch
  (nothing written); a retry of one of the producer's last five batches is answered NONE with
  the original base offset (after replication, for acks=all) and written nothing.
- log_append_time_ms (v2+) is the time the leader stamped on the batches of a LogAppendTime
  topic (storage/validator.py), -1 for CreateTime; log_start_offset from v5.
- INVALID_TIMESTAMP (message.timestamp.difference.max.ms) refuses the whole record set; a topic
  with compression.type other than producer has its batches recompressed before the append.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from headwater.broker.group.formats import OFFSETS_TOPIC
from headwater.broker.network import CloseConnection
from headwater.broker.replication_wait import ReplicationWait, wait_for_replication
from headwater.protocol.errors import ErrorCode, KafkaError
from headwater.protocol.records.header import (
    ATTRIBUTES_OFFSET,
    CODEC_MASK,
    HEADER_SIZE,
    MAGIC_OFFSET,
    has_control_batch,
)
from headwater.protocol.records.legacy import upconvert
from headwater.protocol.schema import Message

if TYPE_CHECKING:
    from headwater.broker.request import RequestContext
    from headwater.broker.services import HandlerServices

log = logging.getLogger(__name__)

ZSTD = 4


async def handle(broker: HandlerServices, ctx: RequestContext, request: Message) -> Message | None:
    acks = request["acks"]
    responses: list[Message] = []
    waiting: list[tuple[Message, ReplicationWait]] = []
    failed = False
    for topic in request["topics"]:
        name = topic["name"]
        parts = []
        for p in topic["partitions"]:
            result, waiter = _append(broker, ctx, name, p["partition_index"], p["records"], acks)
            failed = failed or result["error_code"] != ErrorCode.NONE
            parts.append(result)
            if waiter is not None:
                waiting.append(waiter)
        responses.append({"name": name, "partitions": parts})
    if acks == 0:
        if failed:
            raise CloseConnection("acks=0 produce request failed; closing the connection to signal the producer")
        return None
    if waiting:
        await _wait(broker, waiting, request["timeout_ms"])
    return {"responses": responses, "throttle_time_ms": 0}


async def _wait(broker: HandlerServices, waiting: list[tuple[Message, ReplicationWait]], timeout_ms: int) -> None:
    """The delayed produce: complete each partition once the ISR has the records, or time out."""
    await wait_for_replication(broker.purgatory, [w for _, w in waiting], timeout_ms)
    for result, w in waiting:
        if w.error != ErrorCode.NONE:
            result["error_code"] = w.error


def _append(
    broker: HandlerServices, ctx: RequestContext, topic: str, index: int, records: memoryview | None, acks: int
) -> tuple[Message, tuple[Message, ReplicationWait] | None]:
    def error(code: ErrorCode, why: str = "") -> tuple[Message, None]:
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
        if code != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and topic in broker.cache.topics:
            # a series per existing topic only: names a client makes up make none (Kafka does not
            # count UnknownTopicOrPartition as a failed produce either)
            broker.metrics.failed_produce.labels(topic).inc()
        return {
            "partition_index": index,
            "error_code": code,
            "base_offset": -1,
            "log_append_time_ms": -1,
            "log_start_offset": -1,
        }, None

    if acks not in (0, 1, -1):
        return error(ErrorCode.INVALID_REQUIRED_ACKS, f"acks={acks}")
    if topic == OFFSETS_TOPIC:
        return error(ErrorCode.INVALID_TOPIC_EXCEPTION, f"cannot append to the internal topic {topic}")
    try:
        part, log_ = broker.replicas.leader_partition(topic, index)
    except KafkaError as e:
        return error(e.code)
    if records is None or len(records) == 0:
        return error(ErrorCode.CORRUPT_MESSAGE, "no records")
    magic = records[MAGIC_OFFSET] if len(records) > MAGIC_OFFSET else -1
    max_bytes = log_.config.max_message_bytes
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
        elif has_control_batch(records):  # Kafka's LogValidator: InvalidRecordException, CORRUPT_MESSAGE
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "Clients are not allowed to write control records")
        min_isr = int(broker.cache.config_of(topic).get("min.insync.replicas", broker.config.min_insync_replicas))
        appended = part.append_as_leader(records, acks, min_isr)
    except KafkaError as e:
        return error(e.code, e.message)
    if appended.duplicate:
        log.info(
            "produce to %s-%d from %s (client %r): a retried batch, already at offsets %d..%d, not written again",
            topic,
            index,
            ctx.peer,
            ctx.client_id,
            appended.first_offset,
            appended.last_offset,
        )
    broker.purgatory.notify((topic, index))
    bytes_in, messages_in = broker.metrics.topic_in_children(topic)
    bytes_in.inc(len(records))
    messages_in.inc(appended.records_count)
    result: Message = {
        "partition_index": index,
        "error_code": ErrorCode.NONE,
        "base_offset": appended.first_offset,
        "log_append_time_ms": appended.log_append_time,
        "log_start_offset": appended.log_start_offset,
    }
    if acks != -1 or part.high_watermark > appended.last_offset:
        return result, None
    return result, (result, ReplicationWait(part, part.leadership, appended.last_offset + 1, min_isr))
