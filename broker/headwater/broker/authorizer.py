"""The broker's Authorizer: Kafka 2.3's SimpleAclAuthorizer over ACLs kept in ZooKeeper.

Enabled by ``authorizer.class.name`` (``kafka.security.auth.SimpleAclAuthorizer`` or
``kafka.security.authorizer.AclAuthorizer``); ``super.users`` (``User:admin;User:broker``) may do
everything; ``allow.everyone.if.no.acl.found`` (default false) decides for resources without ACLs.

The ACL cache (headwater.acls.AclCache) is loaded from ``/kafka-acl`` and
``/kafka-acl-extended/prefixed`` at start-up and reloaded whenever a change notification appears
under ``/kafka-acl-changes`` or ``/kafka-acl-extended-changes`` (what ``headwater acls`` and
Kafka's kafka-acls write).

:func:`authorize` is the request table, one entry per API, as Kafka's KafkaApis checks them:

=====================  ==============================================================
Produce                Write on each Topic (TOPIC_AUTHORIZATION_FAILED per partition)
Fetch                  consumers: Read on each Topic; followers: ClusterAction on Cluster
ListOffsets            Describe on each Topic
Metadata               lists only topics the principal may Describe; a topic asked for by
                       name and not describable gets TOPIC_AUTHORIZATION_FAILED; automatic
                       creation needs Create on Cluster or the Topic
OffsetCommit           Read on the Group, Read on each Topic
OffsetFetch            Describe on the Group
FindCoordinator        Describe on the Group (group coordinators)
JoinGroup, SyncGroup,  Read on the Group (GROUP_AUTHORIZATION_FAILED)
Heartbeat, LeaveGroup
DeleteGroups           Delete on each Group
CreateTopics           Create on Cluster, or on each Topic
DeleteTopics           Delete on each Topic
InitProducerId         IdempotentWrite on Cluster (no transactional id) or Write on the
                       TransactionalId
controller APIs,       ClusterAction on Cluster; refused -> the connection is closed
OffsetForLeaderEpoch
=====================  ==============================================================

Checked in their handlers instead (they filter or answer per resource): DescribeGroups (Describe
on each Group), ListGroups (Describe on the Cluster, else only the Groups it may Describe),
DescribeConfigs (DescribeConfigs on each Topic / the Cluster), DescribeLogDirs, ElectLeaders,
AlterConfigs and the ACL APIs. Without an authorizer none of this runs: no per-request cost.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from headwater.acls import (
    CLUSTER_NAME,
    EXTENDED_CHANGES,
    LITERAL_CHANGES,
    LITERAL_ROOT,
    PREFIXED_ROOT,
    RESOURCE_TYPES,
    Acl,
    AclCache,
    AclError,
    Resource,
    decode_acls,
    encode_acls,
)
from headwater.broker.txn import authorization as txn_authorization
from headwater.protocol.errors import ErrorCode
from headwater.protocol.schema import Message

if TYPE_CHECKING:
    from headwater.broker.request import RequestContext
    from headwater.broker.zk import ZooKeeper

log = logging.getLogger(__name__)

AUTHORIZER_CLASSES = ("kafka.security.auth.SimpleAclAuthorizer", "kafka.security.authorizer.AclAuthorizer")

TOPIC_DENIED = ErrorCode.TOPIC_AUTHORIZATION_FAILED
GROUP_DENIED = ErrorCode.GROUP_AUTHORIZATION_FAILED
CLUSTER_DENIED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED


class Authorizer:
    def __init__(self, zk: ZooKeeper, super_users: frozenset[str], allow_if_no_acl: bool) -> None:
        self.zk = zk
        self.cache = AclCache(super_users, allow_if_no_acl)
        self._reloading: asyncio.Task[None] | None = None
        self._again = False

    async def start(self) -> None:
        for path in (LITERAL_CHANGES, EXTENDED_CHANGES, LITERAL_ROOT, PREFIXED_ROOT):
            await self.zk.call(self.zk.client.ensure_path, path)
        await self.reload()
        for path in (LITERAL_CHANGES, EXTENDED_CHANGES):
            self.zk.watch_children(path, lambda _children: self._schedule_reload())

    def _schedule_reload(self) -> None:
        if self._reloading is not None and not self._reloading.done():
            self._again = True
            return
        self._reloading = asyncio.ensure_future(self._reload_loop())

    async def _reload_loop(self) -> None:
        while True:
            self._again = False
            try:
                await self.reload()
            except Exception:
                log.exception("reloading ACLs from ZooKeeper failed; keeping the previous ACLs until the next change")
            if not self._again:
                return

    async def reload(self) -> None:
        acls: dict[Resource, list[Any]] = {}
        for root, pattern in ((LITERAL_ROOT, "LITERAL"), (PREFIXED_ROOT, "PREFIXED")):
            for type_ in RESOURCE_TYPES:
                for name in await self.zk.children(f"{root}/{type_}"):
                    res = Resource(type_, name, pattern)
                    try:
                        data, _ = await self.zk.call(self.zk.client.get, res.zk_path())
                        entries = decode_acls(data)
                    except NoNodeError:
                        continue
                    except AclError as e:
                        log.error("ignoring malformed ACLs at %s: %s", res.zk_path(), e)
                        continue
                    if entries:
                        acls[res] = entries
        self.cache.acls = acls
        log.info("loaded %d ACLs on %d resources", sum(len(v) for v in acls.values()), len(acls))

    async def change(self, res: Resource, add: list[Acl], remove: list[Acl]) -> None:
        """Add and remove ACLs of one resource in ZooKeeper (compare-and-set on the node's version),
        then write Kafka's change notification; every broker (this one too) reloads from it."""
        client = self.zk.client
        for _ in range(20):
            try:
                data, stat = await self.zk.call(client.get, res.zk_path())
                current, version = decode_acls(data), stat.version
            except NoNodeError:
                current, version = [], None
            updated = [a for a in current if a not in remove] + [a for a in add if a not in current]
            if updated == current:
                return
            try:
                if version is None:
                    await self.zk.call(client.create, res.zk_path(), encode_acls(updated), makepath=True)
                elif updated:
                    await self.zk.call(client.set, res.zk_path(), encode_acls(updated), version=version)
                else:
                    await self.zk.call(client.delete, res.zk_path(), version=version)
            except (BadVersionError, NodeExistsError, NoNodeError):
                continue  # another writer got there first: read again
            parent, value = res.change_notification()
            await self.zk.call(client.create, f"{parent}/acl_changes_", value, sequence=True, makepath=True)
            return
        raise RuntimeError(f"could not update ACLs of {res} after 20 attempts (concurrent writers)")

    def allowed(self, ctx: RequestContext, operation: str, resource_type: str, name: str) -> bool:
        host = ctx.peer.rsplit(":", 1)[0]
        return self.cache.authorize(ctx.principal, host, operation, resource_type, name)


class Refused(Exception):
    """The principal may not use this API at all (controller APIs): the connection is closed."""


#: what the handler's response needs added afterwards (errors for what was filtered out)
Post = Callable[[Message], Message]
#: (a response to send instead of calling the handler, or None; the request for the handler; post-step)
Result = tuple[Message | None, Message, Post | None]


def authorize(az: Authorizer, api_key: int, ctx: RequestContext, body: Message) -> Result:
    """Check one request against the table below; raises :class:`Refused` to close the connection."""
    check = _CHECKS.get(api_key)
    if check is None:
        return None, body, None
    return check(az, ctx, body)


def _topics_split(
    az: Authorizer, ctx: RequestContext, topics: list[Any], op: str, key: str = "name"
) -> tuple[list[Any], list[Any]]:
    ok: list[Any] = []
    denied: list[Any] = []
    for t in topics:
        (ok if az.allowed(ctx, op, "Topic", t[key]) else denied).append(t)
    return ok, denied


def _produce(az: Authorizer, ctx: RequestContext, body: Message) -> Result:
    ok, denied = _topics_split(az, ctx, body["topics"], "Write")
    if body.get("transactional_id") and not az.allowed(ctx, "Write", "TransactionalId", body["transactional_id"]):
        ok, denied = [], body["topics"]
    if not denied:
        return None, body, None

    def post(resp: Message) -> Message:
        resp["responses"] = list(resp["responses"]) + [
            {
                "name": t["name"],
                "partitions": [
                    {
                        "partition_index": p["partition_index"],
                        "error_code": TOPIC_DENIED,
                        "base_offset": -1,
                        "log_append_time_ms": -1,
                        "log_start_offset": -1,
                    }
                    for p in t["partitions"]
                ],
            }
            for t in denied
        ]
        return resp

    return None, {**body, "topics": ok}, post


def _fetch(az: Authorizer, ctx: RequestContext, body: Message) -> Result:
    if body["replica_id"] >= 0:
        if az.allowed(ctx, "ClusterAction", "Cluster", CLUSTER_NAME):
            return None, body, None
        raise Refused(f"{ctx.principal} may not fetch as a follower (ClusterAction on Cluster)")
    ok, denied = _topics_split(az, ctx, body["topics"], "Read", key="topic")
    if not denied:
        return None, body, None

    def post(resp: Message) -> Message:
        resp["responses"] = list(resp["responses"]) + [
            {
                "topic": t["topic"],
                "partitions": [
                    {
                        "partition_index": p["partition"],
                        "error_code": TOPIC_DENIED,
                        "high_watermark": -1,
                        "last_stable_offset": -1,
                        "log_start_offset": -1,
                        "aborted_transactions": None,
                        "records": None,
                    }
                    for p in t["partitions"]
                ],
            }
            for t in denied
        ]
        return resp

    return None, {**body, "topics": ok}, post


def _list_offsets(az: Authorizer, ctx: RequestContext, body: Message) -> Result:
    ok, denied = _topics_split(az, ctx, body["topics"], "Describe")
    if not denied:
        return None, body, None

    def post(resp: Message) -> Message:
        resp["topics"] = list(resp["topics"]) + [
            {
                "name": t["name"],
                "partitions": [
                    {"partition_index": p["partition_index"], "error_code": TOPIC_DENIED, "offset": -1, "timestamp": -1}
                    for p in t["partitions"]
                ],
            }
            for t in denied
        ]
        return resp

    return None, {**body, "topics": ok}, post


def _metadata(az: Authorizer, ctx: RequestContext, body: Message) -> Result:
    requested = body.get("topics")
    may_create = az.allowed(ctx, "Create", "Cluster", CLUSTER_NAME)
    denied: list[str] = []
    new_body = body
    if requested is not None:
        ok = [t for t in requested if az.allowed(ctx, "Describe", "Topic", t["name"])]
        creatable = may_create or all(az.allowed(ctx, "Create", "Topic", t["name"]) for t in ok)
        new_body = {
            **body,
            "topics": ok,
            "allow_auto_topic_creation": body.get("allow_auto_topic_creation", True) and creatable,
        }
        denied = [t["name"] for t in requested if t not in ok]
    elif not may_create:
        new_body = {**body, "allow_auto_topic_creation": False}

    def post(resp: Message) -> Message:
        visible = [t for t in resp["topics"] if az.allowed(ctx, "Describe", "Topic", t["name"])]
        visible += [{"error_code": TOPIC_DENIED, "name": n, "is_internal": False, "partitions": []} for n in denied]
        resp["topics"] = visible
        return resp

    return None, new_body, post


def _group_read(error_field: str = "error_code") -> Callable[[Authorizer, RequestContext, Message], Result]:
    def check(az: Authorizer, ctx: RequestContext, body: Message) -> Result:
        if az.allowed(ctx, "Read", "Group", body["group_id"]):
            return None, body, None
        return {error_field: GROUP_DENIED, "throttle_time_ms": 0}, body, None

    return check


def _join_group(az: Authorizer, ctx: RequestContext, body: Message) -> Result:
    if az.allowed(ctx, "Read", "Group", body["group_id"]):
        return None, body, None
    return (
        {
            "error_code": GROUP_DENIED,
            "generation_id": -1,
            "protocol_name": "",
            "leader": "",
            "member_id": body["member_id"],
            "members": [],
        },
        body,
        None,
    )


def _offset_commit(az: Authorizer, ctx: RequestContext, body: Message) -> Result:
    group_ok = az.allowed(ctx, "Read", "Group", body["group_id"])
    ok, denied = _topics_split(az, ctx, body["topics"], "Read")
    if group_ok and not denied:
        return None, body, None

    def errors(topics: list[Any], code: ErrorCode) -> list[Any]:
        return [
            {
                "name": t["name"],
                "partitions": [{"partition_index": p["partition_index"], "error_code": code} for p in t["partitions"]],
            }
            for t in topics
        ]

    if not group_ok:
        return {"throttle_time_ms": 0, "topics": errors(body["topics"], GROUP_DENIED)}, body, None

    def post(resp: Message) -> Message:
        resp["topics"] = list(resp["topics"]) + errors(denied, TOPIC_DENIED)
        return resp

    return None, {**body, "topics": ok}, post


def _offset_fetch(az: Authorizer, ctx: RequestContext, body: Message) -> Result:
    if az.allowed(ctx, "Describe", "Group", body["group_id"]):
        return None, body, None
    topics = [
        {
            "name": t["name"],
            "partitions": [
                {"partition_index": p, "committed_offset": -1, "metadata": "", "error_code": GROUP_DENIED}
                for p in t["partition_indexes"]
            ],
        }
        for t in body.get("topics") or []
    ]
    return {"throttle_time_ms": 0, "topics": topics, "error_code": GROUP_DENIED}, body, None


def _find_coordinator(az: Authorizer, ctx: RequestContext, body: Message) -> Result:
    if (txn := txn_authorization.find_coordinator(az, ctx, body)) is not None:
        return txn
    if body.get("key_type", 0) != 0 or az.allowed(ctx, "Describe", "Group", body["key"]):
        return None, body, None
    message = "Group authorization failed."
    return (
        {
            "throttle_time_ms": 0,
            "error_code": GROUP_DENIED,
            "error_message": message,
            "node_id": -1,
            "host": "",
            "port": -1,
        },
        body,
        None,
    )


def _delete_groups(az: Authorizer, ctx: RequestContext, body: Message) -> Result:
    ok = [g for g in body["groups_names"] if az.allowed(ctx, "Delete", "Group", g)]
    denied = [g for g in body["groups_names"] if g not in ok]
    if not denied:
        return None, body, None

    def post(resp: Message) -> Message:
        resp["results"] = list(resp["results"]) + [{"group_id": g, "error_code": GROUP_DENIED} for g in denied]
        return resp

    return None, {**body, "groups_names": ok}, post


def _create_topics(az: Authorizer, ctx: RequestContext, body: Message) -> Result:
    if az.allowed(ctx, "Create", "Cluster", CLUSTER_NAME):
        return None, body, None
    ok, denied = _topics_split(az, ctx, body["topics"], "Create")
    if not denied:
        return None, body, None

    def post(resp: Message) -> Message:
        resp["topics"] = list(resp["topics"]) + [
            {"name": t["name"], "error_code": TOPIC_DENIED, "error_message": "Authorization failed."} for t in denied
        ]
        return resp

    return None, {**body, "topics": ok}, post


def _delete_topics(az: Authorizer, ctx: RequestContext, body: Message) -> Result:
    ok = [n for n in body["topic_names"] if az.allowed(ctx, "Delete", "Topic", n)]
    denied = [n for n in body["topic_names"] if n not in ok]
    if not denied:
        return None, body, None

    def post(resp: Message) -> Message:
        resp["responses"] = list(resp["responses"]) + [{"name": n, "error_code": TOPIC_DENIED} for n in denied]
        return resp

    return None, {**body, "topic_names": ok}, post


def _init_producer_id(az: Authorizer, ctx: RequestContext, body: Message) -> Result:
    tid = body.get("transactional_id")
    if tid is None:
        if az.allowed(ctx, "IdempotentWrite", "Cluster", CLUSTER_NAME):
            return None, body, None
        code = CLUSTER_DENIED
    else:
        if az.allowed(ctx, "Write", "TransactionalId", tid):
            return None, body, None
        code = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    return {"throttle_time_ms": 0, "error_code": code, "producer_id": -1, "producer_epoch": -1}, body, None


def _cluster_action(az: Authorizer, ctx: RequestContext, body: Message) -> Result:
    if az.allowed(ctx, "ClusterAction", "Cluster", CLUSTER_NAME):
        return None, body, None
    raise Refused(f"{ctx.principal} may not send controller requests (ClusterAction on Cluster)")


_CHECKS: dict[int, Callable[[Authorizer, RequestContext, Message], Result]] = {
    0: _produce,
    1: _fetch,
    2: _list_offsets,
    3: _metadata,
    4: _cluster_action,  # LeaderAndIsr
    5: _cluster_action,  # StopReplica
    6: _cluster_action,  # UpdateMetadata
    7: _cluster_action,  # ControlledShutdown
    8: _offset_commit,
    9: _offset_fetch,
    10: _find_coordinator,
    11: _join_group,
    12: _group_read(),  # Heartbeat
    13: _group_read(),  # LeaveGroup
    14: _group_read(),  # SyncGroup (assignment defaults to empty)
    19: _create_topics,
    20: _delete_topics,
    22: _init_producer_id,
    23: _cluster_action,  # OffsetForLeaderEpoch (followers)
    42: _delete_groups,
    24: txn_authorization.add_partitions_to_txn,
    25: txn_authorization.add_offsets_to_txn,
    26: txn_authorization.end_txn,
    27: txn_authorization.write_txn_markers,
    28: txn_authorization.txn_offset_commit,
}
