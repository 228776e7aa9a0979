"""DescribeGroups (key 15), v0-3: state, protocol and members of each group (their metadata and
assignments only when Stable, as Kafka). A group this coordinator does not know: state Dead, no
error; a group coordinated elsewhere: NOT_COORDINATOR.

With an authorizer, as Kafka 2.3's KafkaApis: Describe on each Group, else that group alone gets
GROUP_AUTHORIZATION_FAILED with an empty state, protocol and member list (Kafka's
``DescribeGroupsResponse.forError``); the others are described as usual."""

from __future__ import annotations

from typing import TYPE_CHECKING

from headwater.protocol.errors import ErrorCode
from headwater.protocol.schema import Message

if TYPE_CHECKING:
    from headwater.broker.request import RequestContext
    from headwater.broker.services import HandlerServices


def _denied(group_id: str) -> Message:
    return {
        "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED,
        "group_id": group_id,
        "group_state": "",
        "protocol_type": "",
        "protocol_data": "",
        "members": [],
    }


async def handle(broker: HandlerServices, ctx: RequestContext, request: Message) -> Message:
    az = broker.authorizer
    return {
        "throttle_time_ms": 0,
        "groups": [
            broker.groups.describe(g) if az is None or az.allowed(ctx, "Describe", "Group", g) else _denied(g)
            for g in request["groups"]
        ],
    }
