"""LeaderAndIsr (key 4), v0-2: the controller tells this broker its role for some partitions.

- A request from a controller with an older controller epoch gets STALE_CONTROLLER_EPOCH and
  changes nothing; from v2 a broker epoch older than this broker's registration gets
  STALE_BROKER_EPOCH (the request was meant for an earlier incarnation).
- Per partition: applied only if its leader epoch is newer than ours (else
  STALE_CONTROLLER_EPOCH for that partition); becoming leader stops fetching, becoming follower
  starts fetching from ``leader`` (truncating by leader epoch first).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from headwater.broker.handlers._controller_requests import flat_partition_states
from headwater.protocol.errors import ErrorCode
from headwater.protocol.schema import Message

if TYPE_CHECKING:
    from headwater.broker.request import RequestContext
    from headwater.broker.services import HandlerServices


async def handle(broker: HandlerServices, ctx: RequestContext, request: Message) -> Message:
    rm = broker.replicas
    if request["broker_epoch"] >= 0 and request["broker_epoch"] < broker.broker_epoch:
        return {"error_code": ErrorCode.STALE_BROKER_EPOCH, "partition_errors": []}
    if not rm.check_controller_epoch(request["controller_epoch"]):
        return {"error_code": ErrorCode.STALE_CONTROLLER_EPOCH, "partition_errors": []}
    leaders = {b["broker_id"]: (b["host_name"], b["port"]) for b in request["live_leaders"]}
    errors = rm.become_leader_or_follower(flat_partition_states(request), leaders)
    return {"error_code": ErrorCode.NONE, "partition_errors": errors}
