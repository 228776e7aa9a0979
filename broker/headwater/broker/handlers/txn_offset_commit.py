"""TxnOffsetCommit (key 28), v0-2: a transactional producer's offset commit for a consumer group
(sent to the group coordinator after AddOffsetsToTxn).

The offsets are appended to the group's ``__consumer_offsets`` partition in a transactional batch
of the producer (its id and epoch; Kafka's offset commit records), acks=all; they are not visible
to OffsetFetch until the transaction's COMMIT marker reaches that partition (an ABORT drops them).
Errors per partition: NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE,
INVALID_GROUP_ID, OFFSET_METADATA_TOO_LARGE, INVALID_PRODUCER_EPOCH (an older epoch than the
partition has seen: fenced).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from headwater.protocol.schema import Message

if TYPE_CHECKING:
    from headwater.broker.handlers import RequestContext
    from headwater.broker.services import HandlerServices


async def handle(broker: HandlerServices, ctx: RequestContext, request: Message) -> Message:
    codes = await broker.groups.txn_commit(request)
    return {
        "throttle_time_ms": 0,
        "topics": [
            {
                "name": t["name"],
                "partitions": [
                    {"partition_index": p["partition_index"], "error_code": codes[(t["name"], p["partition_index"])]}
                    for p in t["partitions"]
                ],
            }
            for t in request["topics"]
        ],
    }
