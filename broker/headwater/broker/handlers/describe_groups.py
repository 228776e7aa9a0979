"""DescribeGroups (key 15), v0-3: state, protocol and members of each group (their metadata and
assignments only when Stable, as Kafka). A group this coordinator does not know: state Dead, no
error; a group coordinated elsewhere: NOT_COORDINATOR."""

from __future__ import annotations

from typing import TYPE_CHECKING

from headwater.protocol.schema import Message

if TYPE_CHECKING:
    from headwater.broker.handlers import RequestContext
    from headwater.broker.services import HandlerServices


async def handle(broker: HandlerServices, ctx: RequestContext, request: Message) -> Message:
    return {"throttle_time_ms": 0, "groups": [broker.groups.describe(g) for g in request["groups"]]}
