"""LeaveGroup (key 13), v0-2: the member leaves at once (no session timeout to wait out) and the
group rebalances. UNKNOWN_MEMBER_ID for a member the group does not have."""

from __future__ import annotations

from typing import TYPE_CHECKING

from headwater.protocol.schema import Message

if TYPE_CHECKING:
    from headwater.broker.request import RequestContext
    from headwater.broker.services import HandlerServices


async def handle(broker: HandlerServices, ctx: RequestContext, request: Message) -> Message:
    return {"throttle_time_ms": 0, "error_code": broker.groups.leave(request)}
