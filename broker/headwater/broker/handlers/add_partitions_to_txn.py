"""AddPartitionsToTxn (key 24), v0-1: the transaction coordinator adds partitions to the producer's
transaction (Empty/Complete* -> Ongoing, or more partitions for an Ongoing one; txn/coordinator.py).

Every partition gets the same answer: NONE, or NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS,
COORDINATOR_NOT_AVAILABLE, INVALID_PRODUCER_ID_MAPPING, INVALID_PRODUCER_EPOCH,
CONCURRENT_TRANSACTIONS, INVALID_TXN_STATE. A partition the cluster does not have gets
UNKNOWN_TOPIC_OR_PARTITION and the others OPERATION_NOT_ATTEMPTED (nothing is added), as Kafka does;
so does an internal topic (``__consumer_offsets``, ``__transaction_state``: a producer adds them only
through AddOffsetsToTxn), with TOPIC_AUTHORIZATION_FAILED whoever asks, as Kafka 2.3's KafkaApis;
and so does a topic the authorizer refused (its partitions TOPIC_AUTHORIZATION_FAILED, added to the
answer by txn/authorization.py; the unknown partitions of the others still UNKNOWN_TOPIC_OR_PARTITION).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from headwater.broker.replica_manager import INTERNAL_TOPICS
from headwater.broker.txn.authorization import NOT_ATTEMPTED
from headwater.broker.txn.authorization import add_partitions_answer as answer
from headwater.protocol.errors import ErrorCode
from headwater.protocol.schema import Message

if TYPE_CHECKING:
    from headwater.broker.handlers import RequestContext
    from headwater.broker.services import HandlerServices


async def handle(broker: HandlerServices, ctx: RequestContext, request: Message) -> Message:
    wanted = {(t["name"], p) for t in request["topics"] for p in t["partitions"]}
    internal = {tp for tp in wanted if tp[0] in INTERNAL_TOPICS}
    unknown = {tp for tp in wanted if tp not in internal and broker.cache.partition(*tp) is None}
    # NOT_ATTEMPTED: the authorizer refused another topic of the request (txn/authorization.py)
    if internal or unknown or request.get(NOT_ATTEMPTED):
        codes = {
            tp: ErrorCode.TOPIC_AUTHORIZATION_FAILED
            if tp in internal
            else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            if tp in unknown
            else ErrorCode.OPERATION_NOT_ATTEMPTED
            for tp in wanted
        }
        return answer(request["topics"], codes)
    code = await broker.txns.add_partitions(
        request["transactional_id"], request["producer_id"], request["producer_epoch"], wanted
    )
    return answer(request["topics"], dict.fromkeys(wanted, code))
