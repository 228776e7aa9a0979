"""DescribeAcls (key 29), v0-1.

Needs Describe on the Cluster (CLUSTER_AUTHORIZATION_FAILED). Answers from the broker's ACL cache
(ZooKeeper, kept current by change notifications) every ACL the filter matches, grouped by
resource. Without an authorizer: SECURITY_DISABLED, as Kafka answers.
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


def _error(code: ErrorCode, message: str) -> Message:
    return {"throttle_time_ms": 0, "error_code": code, "error_message": message, "resources": []}


async def handle(broker: HandlerServices, ctx: RequestContext, request: Message) -> Message:
    az = broker.authorizer
    if az is None:
        return _error(ErrorCode.SECURITY_DISABLED, "No Authorizer is configured on the broker")
    if not az.allowed(ctx, "Describe", "Cluster", CLUSTER_NAME):
        return _error(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
    f = AclFilter(
        request["resource_type_filter"],
        request["resource_name_filter"],
        request["pattern_type_filter"],
        request["principal_filter"],
        request["host_filter"],
        request["operation"],
        request["permission_type"],
    )
    resources = []
    for res, acls in sorted(az.cache.acls.items(), key=lambda kv: (kv[0].type, kv[0].name, kv[0].pattern)):
        matched = [a for a in acls if f.matches(res, a)]
        if matched:
            resources.append(
                {
                    "resource_type": RESOURCE_TYPE_CODES[res.type],
                    "resource_name": res.name,
                    "pattern_type": PATTERN_CODES[res.pattern],
                    "acls": [
                        {
                            "principal": a.principal,
                            "host": a.host,
                            "operation": OPERATION_CODES[a.operation],
                            "permission_type": PERMISSION_CODES[a.permission],
                        }
                        for a in matched
                    ],
                }
            )
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None, "resources": resources}
