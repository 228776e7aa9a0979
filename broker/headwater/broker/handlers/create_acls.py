"""CreateAcls (key 30), v0-1.

Needs Alter on the Cluster; otherwise every creation answers CLUSTER_AUTHORIZATION_FAILED and
nothing is written. Each creation is validated (a concrete resource type, pattern, operation and
permission; a TYPE:NAME principal) and written to ZooKeeper with Kafka's change notification;
one that is invalid answers INVALID_REQUEST with the reason and the others still apply.
Without an authorizer: SECURITY_DISABLED.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from headwater.acls import CLUSTER_NAME, AclError, binding_from_wire
from headwater.protocol.errors import ErrorCode
from headwater.protocol.schema import Message

if TYPE_CHECKING:
    from headwater.broker.request import RequestContext
    from headwater.broker.services import HandlerServices


async def handle(broker: HandlerServices, ctx: RequestContext, request: Message) -> Message:
    az = broker.authorizer
    creations = request["creations"]

    def all_fail(code: ErrorCode, message: str) -> Message:
        return {"throttle_time_ms": 0, "results": [{"error_code": code, "error_message": message} for _ in creations]}

    if az is None:
        return all_fail(ErrorCode.SECURITY_DISABLED, "No Authorizer is configured on the broker")
    if not az.allowed(ctx, "Alter", "Cluster", CLUSTER_NAME):
        return all_fail(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
    results = []
    for c in creations:
        try:
            res, acl = binding_from_wire(
                c["resource_type"],
                c["resource_name"],
                c["resource_pattern_type"],
                c["principal"],
                c["host"],
                c["operation"],
                c["permission_type"],
            )
            await az.change(res, add=[acl], remove=[])
        except AclError as e:
            results.append({"error_code": ErrorCode.INVALID_REQUEST, "error_message": str(e)})
            continue
        results.append({"error_code": ErrorCode.NONE, "error_message": None})
    return {"throttle_time_ms": 0, "results": results}
