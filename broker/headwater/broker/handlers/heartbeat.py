"""Heartbeat (key 12), v0-3: keeps a member's session; REBALANCE_IN_PROGRESS tells it to rejoin.

Errors: UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, FENCED_INSTANCE_ID (v3), NOT_COORDINATOR,
COORDINATOR_LOAD_IN_PROGRESS. A heartbeat while the leader's assignment is awaited
(CompletingRebalance) is answered NONE.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from headwater.protocol.schema import Message

if TYPE_CHECKING:
    from headwater.broker.request import RequestContext
    from headwater.broker.services import HandlerServices


async def handle(broker: HandlerServices, ctx: RequestContext, request: Message) -> Message:
    return {"throttle_time_ms": 0, "error_code": broker.groups.heartbeat(request)}
