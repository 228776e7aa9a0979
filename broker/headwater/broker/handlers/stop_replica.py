"""StopReplica (key 5), v0-1: stop replicating (and, with delete_partitions, delete) partitions.

Used by the controller for topic deletion and controlled shutdown. Stale controller epochs
get STALE_CONTROLLER_EPOCH; stale broker epochs (v1) STALE_BROKER_EPOCH.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from headwater.protocol.errors import ErrorCode
from headwater.protocol.schema import Message

if TYPE_CHECKING:
    from headwater.broker.request import RequestContext
    from headwater.broker.services import HandlerServices


async def handle(broker: HandlerServices, ctx: RequestContext, request: Message) -> Message:
    if request["broker_epoch"] >= 0 and request["broker_epoch"] < broker.broker_epoch:
        return {"error_code": ErrorCode.STALE_BROKER_EPOCH, "partition_errors": []}
    if not broker.replicas.check_controller_epoch(request["controller_epoch"]):
        return {"error_code": ErrorCode.STALE_CONTROLLER_EPOCH, "partition_errors": []}
    tps = [(p["topic_name"], p["partition_index"]) for p in request["ungrouped_partitions"]]
    tps += [(t["name"], p) for t in request["topics"] for p in t["partition_indexes"]]
    errors = broker.replicas.stop_replicas(tps, bool(request["delete_partitions"]))
    return {"error_code": ErrorCode.NONE, "partition_errors": errors}
