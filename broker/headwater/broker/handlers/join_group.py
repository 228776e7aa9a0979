"""JoinGroup (key 11), v0-5: see headwater.broker.group.coordinator for the rebalance protocol.

v0 has no rebalance timeout (the session timeout is used); v4+ answers a new member
MEMBER_ID_REQUIRED with its id first (KIP-394); v5 carries group.instance.id (KIP-345). The
answer waits until the group's join phase completes (every member rejoined, or the rebalance
timeout), as in Kafka.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from headwater.protocol.schema import Message

if TYPE_CHECKING:
    from headwater.broker.request import RequestContext
    from headwater.broker.services import HandlerServices


async def handle(broker: HandlerServices, ctx: RequestContext, request: Message) -> Message:
    host = ctx.peer.rsplit(":", 1)[0]
    response = await broker.groups.join(request, ctx.version, ctx.client_id or "", f"/{host}")
    return {"throttle_time_ms": 0, "members": [], **response}
