"""ACLs through the brokers: DescribeAcls, CreateAcls and DeleteAcls (AdminClient's
describe_acls / create_acls / delete_acls), as ``kafka-acls --bootstrap-server`` uses them.

Any broker answers (it reads its ACL cache and writes ZooKeeper in Kafka 2.3's layout). The broker
checks Describe (list) or Alter (add, remove) on the Cluster: a principal without it gets
``CLUSTER_AUTHORIZATION_FAILED`` and nothing is written; a broker without an authorizer answers
``SECURITY_DISABLED``. Each function raises the broker's KafkaError with its message.
"""

from __future__ import annotations

from collections.abc import Iterable

from headwater.acls import (
    ANY,
    OPERATION_CODES,
    PATTERN_CODES,
    PERMISSION_CODES,
    RESOURCE_TYPE_CODES,
    Acl,
    AclFilter,
    Resource,
    binding_from_wire,
)
from headwater.client.cluster import Cluster
from headwater.protocol.apis import CREATE_ACLS, DELETE_ACLS, DESCRIBE_ACLS
from headwater.protocol.errors import ErrorCode, KafkaError
from headwater.protocol.schema import Message

Binding = tuple[Resource, Acl]


def resource_filter(res: Resource | None) -> AclFilter:
    """Every ACL of ``res`` (its type, name and pattern), or of the whole cluster for None."""
    if res is None:
        return AclFilter(ANY, None, ANY, None, None, ANY, ANY)
    return AclFilter(RESOURCE_TYPE_CODES[res.type], res.name, PATTERN_CODES[res.pattern], None, None, ANY, ANY)


def binding_filter(res: Resource, acl: Acl) -> AclFilter:
    """Exactly this ACL on exactly this resource (what ``--remove`` names)."""
    return AclFilter(
        RESOURCE_TYPE_CODES[res.type],
        res.name,
        PATTERN_CODES[res.pattern],
        acl.principal,
        acl.host,
        OPERATION_CODES[acl.operation],
        PERMISSION_CODES[acl.permission],
    )


def _filter_body(f: AclFilter) -> Message:
    return {
        "resource_type_filter": f.resource_type,
        "resource_name_filter": f.name,
        "pattern_type_filter": f.pattern,
        "principal_filter": f.principal,
        "host_filter": f.host,
        "operation": f.operation,
        "permission_type": f.permission,
    }


def _raise(code: int, message: str | None, doing: str) -> None:
    error = ErrorCode.of(code)
    if error is not ErrorCode.NONE:
        raise KafkaError(error, message or f"{doing}: {error.name}")


async def describe_acls(cluster: Cluster, f: AclFilter) -> list[Binding]:
    response = await cluster.request(None, DESCRIBE_ACLS, _filter_body(f))
    _raise(response["error_code"], response.get("error_message"), "describing ACLs")
    return [
        binding_from_wire(
            r["resource_type"],
            r["resource_name"],
            r["pattern_type"],
            a["principal"],
            a["host"],
            a["operation"],
            a["permission_type"],
        )
        for r in response["resources"]
        for a in r["acls"]
    ]


async def create_acls(cluster: Cluster, bindings: Iterable[Binding]) -> None:
    creations = [
        {
            "resource_type": RESOURCE_TYPE_CODES[res.type],
            "resource_name": res.name,
            "resource_pattern_type": PATTERN_CODES[res.pattern],
            "principal": acl.principal,
            "host": acl.host,
            "operation": OPERATION_CODES[acl.operation],
            "permission_type": PERMISSION_CODES[acl.permission],
        }
        for res, acl in bindings
    ]
    if not creations:
        return
    response = await cluster.request(None, CREATE_ACLS, {"creations": creations})
    for r in response["results"]:
        _raise(r["error_code"], r.get("error_message"), "creating ACLs")


async def delete_acls(cluster: Cluster, filters: Iterable[AclFilter]) -> list[Binding]:
    """Deletes every ACL matching any filter; returns what was deleted."""
    body = {"filters": [_filter_body(f) for f in filters]}
    if not body["filters"]:
        return []
    response = await cluster.request(None, DELETE_ACLS, body)
    deleted: list[Binding] = []
    for r in response["filter_results"]:
        _raise(r["error_code"], r.get("error_message"), "deleting ACLs")
        for m in r["matching_acls"]:
            _raise(m["error_code"], m.get("error_message"), "deleting an ACL")
            deleted.append(
                binding_from_wire(
                    m["resource_type"],
                    m["resource_name"],
                    m["pattern_type"],
                    m["principal"],
                    m["host"],
                    m["operation"],
                    m["permission_type"],
                )
            )
    return deleted
