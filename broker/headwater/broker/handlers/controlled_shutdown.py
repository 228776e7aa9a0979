"""ControlledShutdown (key 7), v1-2: a broker asks the controller to move its leadership away.

Only the active controller answers (others: NOT_CONTROLLER). The controller moves leadership
of every partition the broker leads to another ISR member, takes it out of the ISRs, and
answers with the partitions it still leads (the broker retries while any remain). v2 carries
the broker epoch; an older one gets STALE_BROKER_EPOCH. v0 (a different request header) is
not offered, as in Kafka 4.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from headwater.broker.controller.controller import StaleBrokerEpoch
from headwater.protocol.errors import ErrorCode
from headwater.protocol.schema import Message

if TYPE_CHECKING:
    from headwater.broker.request import RequestContext
    from headwater.broker.services import HandlerServices


async def handle(broker: HandlerServices, ctx: RequestContext, request: Message) -> Message:
    try:
        remaining = await broker.controller.controlled_shutdown(request["broker_id"], request["broker_epoch"])
    except StaleBrokerEpoch:
        return {"error_code": ErrorCode.STALE_BROKER_EPOCH, "remaining_partitions": []}
    if remaining is None:
        return {"error_code": ErrorCode.NOT_CONTROLLER, "remaining_partitions": []}
    return {
        "error_code": ErrorCode.NONE,
        "remaining_partitions": [{"topic_name": t, "partition_index": p} for t, p in remaining],
    }
