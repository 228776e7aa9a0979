"""AddOffsetsToTxn (key 25), v0-1: the transaction coordinator adds the group's partition of
``__consumer_offsets`` to the producer's transaction, so that its TxnOffsetCommit gets a marker.
Errors as AddPartitionsToTxn's, and INVALID_GROUP_ID for an empty group id.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from headwater.protocol.schema import Message

if TYPE_CHECKING:
    from headwater.broker.handlers import RequestContext
    from headwater.broker.services import HandlerServices


async def handle(broker: HandlerServices, ctx: RequestContext, request: Message) -> Message:
    code = await broker.txns.add_offsets(
        request["transactional_id"], request["producer_id"], request["producer_epoch"], request["group_id"]
    )
    return {"throttle_time_ms": 0, "error_code": code}
