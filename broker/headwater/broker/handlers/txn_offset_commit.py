"""TxnOffsetCommit (key 28), v0-2: a transactional producer's offset commit for a consumer group
(sent to the group coordinator after AddOffsetsToTxn).

The offsets are appended to the group's ``__consumer_offsets`` partition in a transactional batch
of the producer (its id and epoch; Kafka's offset commit records), acks=all; they are not visible
to OffsetFetch until the transaction's COMMIT marker reaches that partition (an ABORT drops them).
Errors per partition: NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE,
INVALID_GROUP_ID, OFFSET_METADATA_TOO_LARGE, INVALID_PRODUCER_EPOCH (an older epoch than the
partition has seen: fenced), UNKNOWN_TOPIC_OR_PARTITION for a partition the cluster does not have
(not committed; the others are).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from headwater.protocol.errors import ErrorCode
from headwater.protocol.schema import Message

if TYPE_CHECKING:
    from headwater.broker.handlers import RequestContext
    from headwater.broker.services import HandlerServices


async def handle(broker: HandlerServices, ctx: RequestContext, request: Message) -> Message:
    # a partition the cluster does not have: UNKNOWN_TOPIC_OR_PARTITION, the others committed (Kafka 2.3)
    codes: dict[tuple[str, int], ErrorCode] = {
        (t["name"], p["partition_index"]): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        for t in request["topics"]
        for p in t["partitions"]
        if broker.cache.partition(t["name"], p["partition_index"]) is None
    }
    known = [
        {**t, "partitions": [p for p in t["partitions"] if (t["name"], p["partition_index"]) not in codes]}
        for t in request["topics"]
    ]
    known = [t for t in known if t["partitions"]]
    if known:
        codes.update(await broker.groups.txn_commit({**request, "topics": known}))
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
