"""SyncGroup (key 14), v0-3: the leader sends every member's assignment; each member gets its own.

The answer waits until the leader's assignment is stored in ``__consumer_offsets`` (acks=all).
Errors: UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS, FENCED_INSTANCE_ID (v3),
NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE (not replicated).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from headwater.protocol.schema import Message

if TYPE_CHECKING:
    from headwater.broker.request import RequestContext
    from headwater.broker.services import HandlerServices


async def handle(broker: HandlerServices, ctx: RequestContext, request: Message) -> Message:
    return {"throttle_time_ms": 0, **await broker.groups.sync(request)}
