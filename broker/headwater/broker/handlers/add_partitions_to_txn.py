"""AddPartitionsToTxn (key 24), v0-1: the transaction coordinator adds partitions to the producer's
transaction (Empty/Complete* -> Ongoing, or more partitions for an Ongoing one; txn/coordinator.py).

Every partition gets the same answer: NONE, or NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS,
COORDINATOR_NOT_AVAILABLE, INVALID_PRODUCER_ID_MAPPING, INVALID_PRODUCER_EPOCH,
CONCURRENT_TRANSACTIONS, INVALID_TXN_STATE. A partition the cluster does not have gets
UNKNOWN_TOPIC_OR_PARTITION and the others OPERATION_NOT_ATTEMPTED (nothing is added), as Kafka does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from headwater.broker.txn.authorization import add_partitions_answer as answer
from headwater.protocol.errors import ErrorCode
from headwater.protocol.schema import Message

if TYPE_CHECKING:
    from headwater.broker.handlers import RequestContext
    from headwater.broker.services import HandlerServices


async def handle(broker: HandlerServices, ctx: RequestContext, request: Message) -> Message:
    wanted = {(t["name"], p) for t in request["topics"] for p in t["partitions"]}
    unknown = {tp for tp in wanted if broker.cache.partition(*tp) is None}
    if unknown:
        codes = {
            tp: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if tp in unknown else ErrorCode.OPERATION_NOT_ATTEMPTED
            for tp in wanted
        }
        return answer(request["topics"], codes)
    code = await broker.txns.add_partitions(
        request["transactional_id"], request["producer_id"], request["producer_epoch"], wanted
    )
    return answer(request["topics"], dict.fromkeys(wanted, code))
