"""ACLs as Kafka 2.3 stores and evaluates them (SimpleAclAuthorizer), shared by broker and CLI.

ZooKeeper layout::

    /kafka-acl/<ResourceType>/<name>                      literal patterns (name "*" = every resource)
    /kafka-acl-extended/prefixed/<ResourceType>/<prefix>  prefixed patterns
    /kafka-acl-changes/acl_changes_<seq>                  "<ResourceType>:<name>" after a literal change
    /kafka-acl-extended-changes/acl_changes_<seq>         {"version":1,"resourceType":..,"name":..,"patternType":"PREFIXED"}

Each resource node holds ``{"version": 1, "acls": [{"principal": "User:alice", "permissionType":
"Allow", "operation": "Read", "host": "*"}, ...]}``.

Evaluation (``authorize``): a super user may do everything; otherwise the ACLs whose pattern
matches the resource (literal name, ``*``, or a prefix) decide: any matching Deny wins, else any
matching Allow (Describe is allowed by Read, Write, Delete or Alter; DescribeConfigs by
AlterConfigs; ``All`` covers every operation), else -- when no ACL at all matches the resource --
``allow.everyone.if.no.acl.found``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from headwater.zk.paths import (
    ACL_CHANGE_PREFIX,
    ACL_EXTENDED_CHANGES,
    ACL_LITERAL_CHANGES,
    ACL_LITERAL_ROOT,
    ACL_PREFIXED_ROOT,
)

RESOURCE_TYPES = ("Topic", "Group", "Cluster", "TransactionalId", "DelegationToken")
OPERATIONS = (
    "All",
    "Read",
    "Write",
    "Create",
    "Delete",
    "Alter",
    "Describe",
    "ClusterAction",
    "DescribeConfigs",
    "AlterConfigs",
    "IdempotentWrite",
)
CLUSTER_NAME = "kafka-cluster"
WILDCARD = "*"

LITERAL_ROOT = ACL_LITERAL_ROOT
PREFIXED_ROOT = ACL_PREFIXED_ROOT
LITERAL_CHANGES = ACL_LITERAL_CHANGES
EXTENDED_CHANGES = ACL_EXTENDED_CHANGES
CHANGE_PREFIX = ACL_CHANGE_PREFIX

_IMPLIES = {"Describe": {"Read", "Write", "Delete", "Alter"}, "DescribeConfigs": {"AlterConfigs"}}


class AclError(ValueError):
    """A malformed ACL or name; the text names what is wrong."""


def _canonical(value: str, allowed: tuple[str, ...], what: str) -> str:
    for a in allowed:
        if a.lower() == value.replace("_", "").lower():
            return a
    raise AclError(f"unknown {what} {value!r} (one of {', '.join(allowed)})")


def resource_type(value: str) -> str:
    return _canonical(value, RESOURCE_TYPES, "resource type")


def operation(value: str) -> str:
    return _canonical(value, OPERATIONS, "operation")


@dataclass(frozen=True)
class Acl:
    principal: str  # "User:alice" or "User:*"
    permission: str  # "Allow" | "Deny"
    operation: str
    host: str = "*"

    def to_json(self) -> dict[str, str]:
        return {
            "principal": self.principal,
            "permissionType": self.permission,
            "operation": self.operation,
            "host": self.host,
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Acl:
        try:
            permission = str(doc["permissionType"]).capitalize()
            if permission not in ("Allow", "Deny"):
                raise AclError(f"permissionType {permission!r}")
            return cls(str(doc["principal"]), permission, operation(str(doc["operation"])), str(doc.get("host", "*")))
        except KeyError as e:
            raise AclError(f"ACL entry without {e}") from None


@dataclass(frozen=True)
class Resource:
    type: str
    name: str
    pattern: str = "LITERAL"  # LITERAL | PREFIXED

    def zk_path(self) -> str:
        root = PREFIXED_ROOT if self.pattern == "PREFIXED" else LITERAL_ROOT
        return f"{root}/{self.type}/{self.name}"

    def change_notification(self) -> tuple[str, bytes]:
        """(parent path, value) of the change node Kafka 2.3 writes after changing this resource."""
        if self.pattern == "PREFIXED":
            value = {"version": 1, "resourceType": self.type, "name": self.name, "patternType": "PREFIXED"}
            return EXTENDED_CHANGES, json.dumps(value).encode()
        return LITERAL_CHANGES, f"{self.type}:{self.name}".encode()


def encode_acls(acls: list[Acl]) -> bytes:
    return json.dumps({"version": 1, "acls": [a.to_json() for a in acls]}).encode()


def decode_acls(data: bytes | None) -> list[Acl]:
    if not data:
        return []
    try:
        doc = json.loads(data)
    except ValueError:
        raise AclError("ACL node is not JSON") from None
    return [Acl.from_json(a) for a in (doc.get("acls") or [])] if isinstance(doc, dict) else []


class AclCache:
    """Every ACL of the cluster, by resource; ``authorize`` is a pure function of its contents."""

    def __init__(self, super_users: frozenset[str] = frozenset(), allow_if_no_acl: bool = False) -> None:
        self.super_users = super_users
        self.allow_if_no_acl = allow_if_no_acl
        self.acls: dict[Resource, list[Acl]] = {}

    def matching(self, type_: str, name: str) -> list[Acl]:
        """The ACLs of the literal resource, the wildcard and every prefixed resource that is a
        prefix of ``name``: dictionary lookups (one per prefix length), so a request's cost does not
        grow with the number of resources that have ACLs."""
        candidates = [Resource(type_, name), Resource(type_, WILDCARD)] if name != WILDCARD else [Resource(type_, name)]
        candidates += [Resource(type_, name[:i], "PREFIXED") for i in range(1, len(name) + 1)]
        out: list[Acl] = []
        for res in candidates:
            out.extend(self.acls.get(res, ()))
        return out

    def authorize(self, principal: str, host: str, op: str, type_: str, name: str) -> bool:
        if principal in self.super_users:
            return True
        acls = self.matching(type_, name)
        if not acls:
            return self.allow_if_no_acl
        ops = {op, "All"} | _IMPLIES.get(op, set())
        principal_type = principal.split(":", 1)[0]

        def applies(a: Acl, permitted_ops: set[str]) -> bool:
            return (
                a.principal in (principal, f"{principal_type}:*")
                and a.host in (host, "*")
                and a.operation in permitted_ops
            )

        if any(a.permission == "Deny" and applies(a, {op, "All"}) for a in acls):
            return False
        return any(a.permission == "Allow" and applies(a, ops) for a in acls)


# -- the wire's int8 codes (DescribeAcls, CreateAcls, DeleteAcls) ---------------------------------

RESOURCE_TYPE_CODES = {"Topic": 2, "Group": 3, "Cluster": 4, "TransactionalId": 5, "DelegationToken": 6}
OPERATION_CODES = {op: code for code, op in enumerate(OPERATIONS, start=2)}  # All=2 ... IdempotentWrite=12
PERMISSION_CODES = {"Deny": 2, "Allow": 3}
PATTERN_CODES = {"LITERAL": 3, "PREFIXED": 4}
ANY, MATCH = 1, 2


def _by_code(table: dict[str, int], code: int, what: str) -> str:
    for name, c in table.items():
        if c == code:
            return name
    raise AclError(f"{what} code {code} is not valid here")


def binding_from_wire(
    resource_type_code: int, name: str, pattern_code: int, principal: str, host: str, op_code: int, perm_code: int
) -> tuple[Resource, Acl]:
    """A CreateAcls creation as (resource, ACL); AclError for ANY/UNKNOWN codes or a bad principal."""
    if ":" not in principal:
        raise AclError(f"principal {principal!r} must be TYPE:NAME")
    res = Resource(
        _by_code(RESOURCE_TYPE_CODES, resource_type_code, "resource type"),
        name,
        _by_code(PATTERN_CODES, pattern_code, "pattern type"),
    )
    if res.type == "Cluster" and name != CLUSTER_NAME:
        raise AclError(f"the cluster resource is named {CLUSTER_NAME}")
    acl = Acl(
        principal,
        _by_code(PERMISSION_CODES, perm_code, "permission type"),
        _by_code(OPERATION_CODES, op_code, "operation"),
        host,
    )
    return res, acl


@dataclass(frozen=True)
class AclFilter:
    """DescribeAcls / DeleteAcls filters: None or ANY matches everything."""

    resource_type: int
    name: str | None
    pattern: int
    principal: str | None
    host: str | None
    operation: int
    permission: int

    def matches(self, res: Resource, acl: Acl) -> bool:
        if self.resource_type != ANY and RESOURCE_TYPE_CODES.get(res.type) != self.resource_type:
            return False
        if self.pattern == MATCH:
            if self.name is not None and not (
                res.name == WILDCARD
                or (res.pattern == "LITERAL" and res.name == self.name)
                or (res.pattern == "PREFIXED" and self.name.startswith(res.name))
            ):
                return False
        else:
            if self.pattern != ANY and PATTERN_CODES.get(res.pattern) != self.pattern:
                return False
            if self.name is not None and res.name != self.name:
                return False
        if self.principal is not None and acl.principal != self.principal:
            return False
        if self.host is not None and acl.host != self.host:
            return False
        if self.operation != ANY and OPERATION_CODES.get(acl.operation) != self.operation:
            return False
        return self.permission == ANY or PERMISSION_CODES.get(acl.permission) == self.permission
