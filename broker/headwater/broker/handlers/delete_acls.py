"""DeleteAcls (key 31), v0-1.

Needs Alter on the Cluster (else each filter answers CLUSTER_AUTHORIZATION_FAILED and nothing is
removed). Each filter removes the ACLs it matches in the broker's cache from ZooKeeper (with
Kafka's change notification) and answers them. Without an authorizer: SECURITY_DISABLED.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from headwater.acls import (
    CLUSTER_NAME,
    OPERATION_CODES,
    PATTERN_CODES,
    PERMISSION_CODES,
    RESOURCE_TYPE_CODES,
    AclFilter,
)
from headwater.protocol.errors import ErrorCode
from headwater.protocol.schema import Message

if TYPE_CHECKING:
    from headwater.broker.request import RequestContext
    from headwater.broker.services import HandlerServices


async def handle(broker: HandlerServices, ctx: RequestContext, request: Message) -> Message:
    az = broker.authorizer
    filters = request["filters"]

    def all_fail(code: ErrorCode, message: str) -> Message:
        return {
            "throttle_time_ms": 0,
            "filter_results": [{"error_code": code, "error_message": message, "matching_acls": []} for _ in filters],
        }

    if az is None:
        return all_fail(ErrorCode.SECURITY_DISABLED, "No Authorizer is configured on the broker")
    if not az.allowed(ctx, "Alter", "Cluster", CLUSTER_NAME):
        return all_fail(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
    out = []
    for raw in filters:
        f = AclFilter(
            raw["resource_type_filter"],
            raw["resource_name_filter"],
            raw["pattern_type_filter"],
            raw["principal_filter"],
            raw["host_filter"],
            raw["operation"],
            raw["permission_type"],
        )
        matching = []
        for res, acls in list(az.cache.acls.items()):
            doomed = [a for a in acls if f.matches(res, a)]
            if not doomed:
                continue
            await az.change(res, add=[], remove=doomed)
            matching += [
                {
                    "error_code": ErrorCode.NONE,
                    "error_message": None,
                    "resource_type": RESOURCE_TYPE_CODES[res.type],
                    "resource_name": res.name,
                    "pattern_type": PATTERN_CODES[res.pattern],
                    "principal": a.principal,
                    "host": a.host,
                    "operation": OPERATION_CODES[a.operation],
                    "permission_type": PERMISSION_CODES[a.permission],
                }
                for a in doomed
            ]
        out.append({"error_code": ErrorCode.NONE, "error_message": None, "matching_acls": matching})
    return {"throttle_time_ms": 0, "filter_results": out}
