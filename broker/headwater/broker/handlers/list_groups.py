"""ListGroups (key 16), v0-2: the groups this broker coordinates (``kafka-consumer-groups --list``
asks every broker). COORDINATOR_LOAD_IN_PROGRESS while a partition of the offsets topic loads.

With an authorizer, as Kafka 2.3's KafkaApis (KIP-231): Describe on the Cluster lists every group;
without it, only the groups the principal may Describe are listed (no error: the others are just
not there)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from headwater.acls import CLUSTER_NAME
from headwater.protocol.schema import Message

if TYPE_CHECKING:
    from headwater.broker.request import RequestContext
    from headwater.broker.services import HandlerServices


async def handle(broker: HandlerServices, ctx: RequestContext, request: Message) -> Message:
    code, groups = broker.groups.list_groups()
    az = broker.authorizer
    if az is not None and not az.allowed(ctx, "Describe", "Cluster", CLUSTER_NAME):
        groups = [g for g in groups if az.allowed(ctx, "Describe", "Group", g.group_id)]
    return {
        "throttle_time_ms": 0,
        "error_code": code,
        "groups": [{"group_id": g.group_id, "protocol_type": g.protocol_type or ""} for g in groups],
    }
