"""DeleteGroups (key 42), v0-1: an Empty group's metadata and committed offsets are tombstoned in
``__consumer_offsets``. NON_EMPTY_GROUP while it has members, GROUP_ID_NOT_FOUND if unknown."""

from __future__ import annotations

from typing import TYPE_CHECKING

from headwater.protocol.schema import Message

if TYPE_CHECKING:
    from headwater.broker.request import RequestContext
    from headwater.broker.services import HandlerServices


async def handle(broker: HandlerServices, ctx: RequestContext, request: Message) -> Message:
    results = [{"group_id": g, "error_code": await broker.groups.delete(g)} for g in request["groups_names"]]
    return {"throttle_time_ms": 0, "results": results}
