"""WriteTxnMarkers (key 27), v0: inter-broker, from a transaction coordinator (txn/markers.py).

For each marker and each partition this broker leads: a control batch (COMMIT or ABORT, the
producer id and epoch, the coordinator epoch; records/control.py) is appended as leader with
acks=all and the topic's ``min.insync.replicas``, and answered once the ISR has it. The log checks
it (storage/producer_state.py): INVALID_PRODUCER_EPOCH for an epoch older than the producer's,
TRANSACTION_COORDINATOR_FENCED for an older coordinator epoch. A marker for ``__consumer_offsets``
also tells the group coordinator to apply (commit) or drop (abort) the producer's transactional
offset commits in that partition.

Per partition errors: UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_FOR_PARTITION, NOT_ENOUGH_REPLICAS
(_AFTER_APPEND), REQUEST_TIMED_OUT, KAFKA_STORAGE_ERROR (the coordinator retries them), and the
two fencing errors above (it stops).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from headwater.broker.group.formats import OFFSETS_TOPIC
from headwater.broker.replication_wait import ReplicationWait, wait_for_replication
from headwater.protocol.errors import ErrorCode, KafkaError
from headwater.protocol.records.control import encode_marker
from headwater.protocol.schema import Message

if TYPE_CHECKING:
    from headwater.broker.handlers import RequestContext
    from headwater.broker.services import HandlerServices

log = logging.getLogger(__name__)

REPLICATION_TIMEOUT_MS = 10000


async def _write_one(broker: HandlerServices, topic: str, index: int, marker: Message, now_ms: int) -> ErrorCode:
    try:
        part, _ = broker.replicas.leader_partition(topic, index)
        min_isr = int(broker.cache.config_of(topic).get("min.insync.replicas", broker.config.min_insync_replicas))
        batch = encode_marker(
            marker["producer_id"],
            marker["producer_epoch"],
            marker["transaction_result"],
            marker["coordinator_epoch"],
            now_ms,
        )
        appended = part.append_as_leader(memoryview(batch), -1, min_isr, coordinator=True)
    except KafkaError as e:
        if e.code not in (ErrorCode.NOT_LEADER_FOR_PARTITION, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION):
            log.warning("marker for %s-%d refused: %s", topic, index, e)
        return e.code
    broker.purgatory.notify(part.key)
    wait = ReplicationWait(part, part.leadership, appended.last_offset + 1, min_isr)
    await wait_for_replication(broker.purgatory, [wait], REPLICATION_TIMEOUT_MS)
    if wait.error == ErrorCode.NONE and topic == OFFSETS_TOPIC:
        broker.groups.complete_txn(index, marker["producer_id"], marker["transaction_result"])
    return wait.error


async def handle(broker: HandlerServices, ctx: RequestContext, request: Message) -> Message:
    now_ms = int(time.time() * 1000)
    out = []
    for marker in request["markers"]:
        jobs = [(t["name"], p) for t in marker["topics"] for p in t["partition_indexes"]]
        codes = await asyncio.gather(*(_write_one(broker, t, p, marker, now_ms) for t, p in jobs))
        by_topic: dict[str, list[Message]] = {}
        for (t, p), code in zip(jobs, codes, strict=True):
            by_topic.setdefault(t, []).append({"partition_index": p, "error_code": code})
        out.append(
            {
                "producer_id": marker["producer_id"],
                "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
            }
        )
    return {"markers": out}
