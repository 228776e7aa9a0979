"""The broker's Authorizer: Kafka 2.3's SimpleAclAuthorizer over ACLs kept in ZooKeeper.

Enabled by ``authorizer.class.name`` (``kafka.security.auth.SimpleAclAuthorizer`` or
``kafka.security.authorizer.AclAuthorizer``); ``super.users`` (``User:admin;User:broker``) may do
everything; ``allow.everyone.if.no.acl.found`` (default false) decides for resources without ACLs.

The ACL cache (headwater.acls.AclCache) is loaded from ``/kafka-acl`` and
``/kafka-acl-extended/prefixed`` at start-up and reloaded whenever a change notification appears
under ``/kafka-acl-changes`` or ``/kafka-acl-extended-changes`` (what ``headwater acls`` and
Kafka's kafka-acls write).

:data:`TABLE` is the request table as data: every API key the broker serves, with the operations
and resources Kafka 2.3's KafkaApis checks, the error a refused principal gets, and where the check
runs -- :func:`authorize` before the handler (it filters the request and adds the refused resources'
errors to the answer), or the handler itself where it filters or answers per resource (Fetch
re-checks every partition of an incremental fetch session on each request; DescribeGroups,
ListGroups, DescribeConfigs, DescribeLogDirs, ElectLeaders and the ACL APIs), or no check
(ApiVersions and the SASL APIs, served before login). A refused request changes nothing, and every
topic API answers TOPIC_AUTHORIZATION_FAILED before it looks at whether the topic exists.
docs/security.md's table is :func:`markdown_table`. Without an authorizer none of this runs: no
per-request cost.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
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
from headwater.protocol.records.header import TRANSACTIONAL_BIT, batch_flags
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
        #: bumped whenever the ACLs are replaced: what remembers a decision (a fetch session) asks again
        self.generation = 0

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
        self.generation += 1
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

    @staticmethod
    def host_of(ctx: RequestContext) -> str:
        """The client address ACL hosts are compared with."""
        return ctx.peer.rsplit(":", 1)[0]

    def allowed(self, ctx: RequestContext, operation: str, resource_type: str, name: str) -> bool:
        return self.cache.authorize(ctx.principal, self.host_of(ctx), operation, resource_type, name)


class Refused(Exception):
    """Nothing may be answered to this request: the connection is closed (a refused Produce with
    acks=0, as Kafka closes the connection of an acks=0 producer whose request failed)."""


#: what the handler's response needs added afterwards (errors for what was filtered out)
Post = Callable[[Message], Message]
#: (a response to send instead of calling the handler, or None; the request for the handler; post-step)
Result = tuple[Message | None, Message, Post | None]
Check = Callable[[Authorizer, "RequestContext", Message], Result]

#: where a rule is enforced
BEFORE = "before the handler"  # :func:`authorize` runs the rule's check on the decoded request
HANDLER = "in the handler"  # the handler asks the authorizer itself (it filters or answers per resource)
NO_CHECK = "no check"  # served before login, to anyone (ApiVersions, the SASL APIs)

#: one (operation, resource type) an ACL must allow; "Topic" / "Group" / "TransactionalId" mean the
#: ones the request names, "Cluster" the cluster
Need = tuple[str, str]


@dataclass(frozen=True, slots=True)
class Rule:
    """How one API is authorized, as Kafka 2.3's KafkaApis does it.

    ``needs`` lists alternatives: any one of them (all of its operation/resource pairs) allows the
    request; ``denied`` is what a principal without them gets; ``note`` says what else decides
    (per-resource filtering, follower requests, ...); ``check`` is the function :func:`authorize`
    runs for ``where == BEFORE``."""

    api: str
    needs: tuple[tuple[Need, ...], ...]
    denied: str
    where: str
    note: str = ""
    check: Check | None = None


def _topics_split(
    az: Authorizer, ctx: RequestContext, topics: list[Any], op: str, key: str = "name"
) -> tuple[list[Any], list[Any]]:
    ok: list[Any] = []
    denied: list[Any] = []
    for t in topics:
        (ok if az.allowed(ctx, op, "Topic", t[key]) else denied).append(t)
    return ok, denied


# -- Produce ----------------------------------------------------------------------------------------


def producer_flags(records: memoryview | bytes | None) -> tuple[bool, bool]:
    """(a batch carries a producer id, a batch is transactional) of one partition's record set:
    Kafka 2.3's ProduceRequest flags, which look at each partition's first batch; every batch is
    looked at here, so a plain first batch cannot hide an idempotent second one."""
    idempotent = transactional = False
    for attributes, producer_id in batch_flags(records):
        idempotent = idempotent or producer_id >= 0
        transactional = transactional or bool(attributes & TRANSACTIONAL_BIT)
    return idempotent, transactional


def _produce_errors(topics: list[Any], code: ErrorCode) -> list[Message]:
    return [
        {
            "name": t["name"],
            "partitions": [
                {
                    "partition_index": p["partition_index"],
                    "error_code": code,
                    "base_offset": -1,
                    "log_append_time_ms": -1,
                    "log_start_offset": -1,
                }
                for p in t["partitions"]
            ],
        }
        for t in topics
    ]


def _produce(az: Authorizer, ctx: RequestContext, body: Message) -> Result:
    idempotent = transactional = False
    for t in body["topics"]:
        for p in t["partitions"]:
            i, tx = producer_flags(p["records"])
            idempotent, transactional = idempotent or i, transactional or tx
    code: ErrorCode | None = None
    tid = body.get("transactional_id")
    if transactional:
        if tid is None or not az.allowed(ctx, "Write", "TransactionalId", tid):
            code = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    elif idempotent and not az.allowed(ctx, "IdempotentWrite", "Cluster", CLUSTER_NAME):
        code = CLUSTER_DENIED
    if code is not None:
        if body["acks"] == 0:
            raise Refused(f"{ctx.principal}: produce refused with {code.name} (acks=0)")
        return {"responses": _produce_errors(body["topics"], code), "throttle_time_ms": 0}, body, None
    ok, denied = _topics_split(az, ctx, body["topics"], "Write")
    if not denied:
        return None, body, None
    if body["acks"] == 0:
        raise Refused(f"{ctx.principal} may not write {sorted(t['name'] for t in denied)} (acks=0)")

    def post(resp: Message) -> Message:
        resp["responses"] = list(resp["responses"]) + _produce_errors(denied, TOPIC_DENIED)
        return resp

    return None, {**body, "topics": ok}, post


# -- topic APIs -------------------------------------------------------------------------------------


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
    """Describe per topic here; Create for automatic creation in the handler, per topic that does
    not exist (only it knows which), as KafkaApis.handleTopicMetadataRequest. Every topic (v1+
    topics null, v0 an empty list): only the describable ones, nothing said of the others."""
    requested = body.get("topics")
    ok = [t for t in requested or [] if az.allowed(ctx, "Describe", "Topic", t["name"])]
    denied = [t["name"] for t in requested or [] if t not in ok]
    keep = {t["name"] for t in ok}

    def post(resp: Message) -> Message:
        if requested:  # only what was asked for and may be described (a v0 request left empty asks for all)
            visible = [t for t in resp["topics"] if t["name"] in keep]
        else:
            visible = [t for t in resp["topics"] if az.allowed(ctx, "Describe", "Topic", t["name"])]
        resp["topics"] = visible + [
            {"error_code": TOPIC_DENIED, "name": n, "is_internal": False, "partitions": []} for n in denied
        ]
        return resp

    return None, ({**body, "topics": ok} if denied else body), post


def _delete_records(az: Authorizer, ctx: RequestContext, body: Message) -> Result:
    ok, denied = _topics_split(az, ctx, body["topics"], "Delete")
    if not denied:
        return None, body, None

    def post(resp: Message) -> Message:
        resp["topics"] = list(resp["topics"]) + [
            {
                "name": t["name"],
                "partitions": [
                    {"partition_index": p["partition_index"], "low_watermark": -1, "error_code": TOPIC_DENIED}
                    for p in t["partitions"]
                ],
            }
            for t in denied
        ]
        return resp

    return None, {**body, "topics": ok}, post


def _create_partitions(az: Authorizer, ctx: RequestContext, body: Message) -> Result:
    counts = Counter(t["name"] for t in body["topics"])
    # a topic named twice is INVALID_REQUEST whoever asks (the handler's answer), as in Kafka
    denied = [t for t in body["topics"] if counts[t["name"]] == 1 and not az.allowed(ctx, "Alter", "Topic", t["name"])]
    if not denied:
        return None, body, None
    refused = {t["name"] for t in denied}

    def post(resp: Message) -> Message:
        resp["results"] = list(resp["results"]) + [
            {"name": t["name"], "error_code": TOPIC_DENIED, "error_message": "The topic authorization is failed."}
            for t in denied
        ]
        return resp

    return None, {**body, "topics": [t for t in body["topics"] if t["name"] not in refused]}, post


TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4  # ConfigResource types


def _alter_configs(az: Authorizer, ctx: RequestContext, body: Message) -> Result:
    """AlterConfigs and IncrementalAlterConfigs: AlterConfigs on the Topic (TOPIC resources) or on
    the Cluster (BROKER resources) before anything is looked up; other types are the handler's
    INVALID_REQUEST."""
    denied: list[tuple[Message, ErrorCode]] = []
    for r in body["resources"]:
        if r["resource_type"] == TOPIC_RESOURCE and not az.allowed(ctx, "AlterConfigs", "Topic", r["resource_name"]):
            denied.append((r, TOPIC_DENIED))
        elif r["resource_type"] == BROKER_RESOURCE and not az.allowed(ctx, "AlterConfigs", "Cluster", CLUSTER_NAME):
            denied.append((r, CLUSTER_DENIED))
    if not denied:
        return None, body, None
    refused = {id(r) for r, _ in denied}

    def post(resp: Message) -> Message:
        resp["responses"] = list(resp["responses"]) + [
            {
                "error_code": code,
                "error_message": None,
                "resource_type": r["resource_type"],
                "resource_name": r["resource_name"],
            }
            for r, code in denied
        ]
        return resp

    return None, {**body, "resources": [r for r in body["resources"] if id(r) not in refused]}, post


def _offset_for_leader_epoch(az: Authorizer, ctx: RequestContext, body: Message) -> Result:
    """ClusterAction on the Cluster (followers) answers every partition; otherwise Describe on each
    Topic (KIP-320 consumers), TOPIC_AUTHORIZATION_FAILED for the others. replica_id (v3) does not
    take part, as in Kafka 2.3."""
    if az.allowed(ctx, "ClusterAction", "Cluster", CLUSTER_NAME):
        return None, body, None
    ok, denied = _topics_split(az, ctx, body["topics"], "Describe", key="topic")
    if not denied:
        return None, body, None

    def post(resp: Message) -> Message:
        resp["topics"] = list(resp["topics"]) + [
            {
                "topic": t["topic"],
                "partitions": [
                    {"error_code": TOPIC_DENIED, "partition": p["partition"], "leader_epoch": -1, "end_offset": -1}
                    for p in t["partitions"]
                ],
            }
            for t in denied
        ]
        return resp

    return None, {**body, "topics": ok}, post


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


# -- group APIs -------------------------------------------------------------------------------------


def _group_read(az: Authorizer, ctx: RequestContext, body: Message) -> Result:
    if az.allowed(ctx, "Read", "Group", body["group_id"]):
        return None, body, None
    return {"error_code": GROUP_DENIED, "throttle_time_ms": 0}, body, None


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
    """Describe on the Group, else GROUP_AUTHORIZATION_FAILED; then, as KafkaApis 2.3: every
    partition of the group (topics null) lists only the topics the principal may Describe; a listed
    partition of a topic it may not Describe answers TOPIC_AUTHORIZATION_FAILED (offset -1)."""
    if not az.allowed(ctx, "Describe", "Group", body["group_id"]):
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
    if body.get("topics") is None:

        def visible(resp: Message) -> Message:
            resp["topics"] = [t for t in resp["topics"] if az.allowed(ctx, "Describe", "Topic", t["name"])]
            return resp

        return None, body, visible
    ok, denied = _topics_split(az, ctx, body["topics"], "Describe")
    if not denied:
        return None, body, None

    def post(resp: Message) -> Message:
        resp["topics"] = list(resp["topics"]) + [
            {
                "name": t["name"],
                "partitions": [
                    {"partition_index": p, "committed_offset": -1, "metadata": "", "error_code": TOPIC_DENIED}
                    for p in t["partition_indexes"]
                ],
            }
            for t in denied
        ]
        return resp

    return None, {**body, "topics": ok}, post


def _find_coordinator(az: Authorizer, ctx: RequestContext, body: Message) -> Result:
    if (txn := txn_authorization.find_coordinator(az, ctx, body)) is not None:
        return txn
    if body.get("key_type", 0) != 0 or az.allowed(ctx, "Describe", "Group", body["key"]):
        return None, body, None
    return (
        {
            "throttle_time_ms": 0,
            "error_code": GROUP_DENIED,
            "error_message": "Group authorization failed.",
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


def _cluster_action_partitions(partitions: Callable[[Message], list[tuple[str, int]]] | None = None) -> Check:
    """Controller requests: ClusterAction on the Cluster, else the API's error response with
    CLUSTER_AUTHORIZATION_FAILED -- on every partition it names too, where the answer lists
    partitions (Kafka's authorizeClusterAction, then the request's getErrorResponse); nothing is done."""

    def check(az: Authorizer, ctx: RequestContext, body: Message) -> Result:
        if az.allowed(ctx, "ClusterAction", "Cluster", CLUSTER_NAME):
            return None, body, None
        log.warning("%s from %s refused: ClusterAction on the Cluster is needed", ctx.principal, ctx.peer)
        response: Message = {"error_code": CLUSTER_DENIED}
        if partitions is not None:
            response["partition_errors"] = [
                {"topic_name": t, "partition_index": p, "error_code": CLUSTER_DENIED} for t, p in partitions(body)
            ]
        return response, body, None

    return check


def _leader_and_isr_partitions(body: Message) -> list[tuple[str, int]]:
    out = [(p["topic_name"], p["partition_index"]) for p in body.get("ungrouped_partition_states") or []]
    for t in body.get("topic_states") or []:
        out += [(t["topic_name"], p["partition_index"]) for p in t["partition_states"]]
    return out


def _stop_replica_partitions(body: Message) -> list[tuple[str, int]]:
    out = [(p["topic_name"], p["partition_index"]) for p in body.get("ungrouped_partitions") or []]
    for t in body.get("topics") or []:
        out += [(t["name"], p) for p in t["partition_indexes"]]
    return out


_cluster_action = _cluster_action_partitions()


# -- the table --------------------------------------------------------------------------------------

CLUSTER_ACTION: tuple[tuple[Need, ...], ...] = ((("ClusterAction", "Cluster"),),)

#: Every API key the broker serves (handlers.HANDLERS) -> how Kafka 2.3's KafkaApis authorizes it.
#: A served key without a row fails tests/unit/security/test_authorization_table.py, and
#: docs/security.md's table is this one (:func:`markdown_table`).
TABLE: dict[int, Rule] = {
    0: Rule(
        "Produce",
        ((("Write", "Topic"),),),
        "TOPIC_AUTHORIZATION_FAILED per partition",
        BEFORE,
        "batches with a producer id also need IdempotentWrite on the Cluster (else CLUSTER_AUTHORIZATION_FAILED "
        "on every partition), transactional batches Write on the request's TransactionalId (else "
        "TRANSACTIONAL_ID_AUTHORIZATION_FAILED); a refused acks=0 request closes the connection",
        _produce,
    ),
    1: Rule(
        "Fetch",
        ((("Read", "Topic"),), (("ClusterAction", "Cluster"),)),
        "TOPIC_AUTHORIZATION_FAILED per partition",
        HANDLER,
        "consumers: Read on each Topic, re-checked on every request for every partition of an incremental "
        "fetch session (listed or not); followers (replica_id >= 0): ClusterAction on the Cluster; a session "
        "answers only the principal that opened it (else FETCH_SESSION_ID_NOT_FOUND)",
    ),
    2: Rule(
        "ListOffsets",
        ((("Describe", "Topic"),),),
        "TOPIC_AUTHORIZATION_FAILED per partition",
        BEFORE,
        "",
        _list_offsets,
    ),
    3: Rule(
        "Metadata",
        ((("Describe", "Topic"),),),
        "TOPIC_AUTHORIZATION_FAILED per topic named; all topics: only the describable ones",
        BEFORE,
        "automatic creation of a topic that does not exist needs Create on the Cluster or on that Topic, "
        "checked in the handler per topic (TOPIC_AUTHORIZATION_FAILED)",
        _metadata,
    ),
    4: Rule(
        "LeaderAndIsr",
        CLUSTER_ACTION,
        "CLUSTER_AUTHORIZATION_FAILED (and on each partition)",
        BEFORE,
        "",
        _cluster_action_partitions(_leader_and_isr_partitions),
    ),
    5: Rule(
        "StopReplica",
        CLUSTER_ACTION,
        "CLUSTER_AUTHORIZATION_FAILED (and on each partition)",
        BEFORE,
        "",
        _cluster_action_partitions(_stop_replica_partitions),
    ),
    6: Rule("UpdateMetadata", CLUSTER_ACTION, "CLUSTER_AUTHORIZATION_FAILED", BEFORE, "", _cluster_action),
    7: Rule("ControlledShutdown", CLUSTER_ACTION, "CLUSTER_AUTHORIZATION_FAILED", BEFORE, "", _cluster_action),
    8: Rule(
        "OffsetCommit",
        ((("Read", "Group"), ("Read", "Topic")),),
        "GROUP_AUTHORIZATION_FAILED (group); TOPIC_AUTHORIZATION_FAILED per partition",
        BEFORE,
        "",
        _offset_commit,
    ),
    9: Rule(
        "OffsetFetch",
        ((("Describe", "Group"), ("Describe", "Topic")),),
        "GROUP_AUTHORIZATION_FAILED (group); TOPIC_AUTHORIZATION_FAILED per listed partition",
        BEFORE,
        "all partitions (topics null): only topics the principal may Describe are listed",
        _offset_fetch,
    ),
    10: Rule(
        "FindCoordinator",
        ((("Describe", "Group"),),),
        "GROUP_AUTHORIZATION_FAILED",
        BEFORE,
        "group coordinators (key_type 0); transaction coordinators (key_type 1): Describe on the "
        "TransactionalId, else TRANSACTIONAL_ID_AUTHORIZATION_FAILED (txn/authorization.py)",
        _find_coordinator,
    ),
    11: Rule("JoinGroup", ((("Read", "Group"),),), "GROUP_AUTHORIZATION_FAILED", BEFORE, "", _join_group),
    12: Rule("Heartbeat", ((("Read", "Group"),),), "GROUP_AUTHORIZATION_FAILED", BEFORE, "", _group_read),
    13: Rule("LeaveGroup", ((("Read", "Group"),),), "GROUP_AUTHORIZATION_FAILED", BEFORE, "", _group_read),
    14: Rule("SyncGroup", ((("Read", "Group"),),), "GROUP_AUTHORIZATION_FAILED", BEFORE, "", _group_read),
    15: Rule(
        "DescribeGroups",
        ((("Describe", "Group"),),),
        "GROUP_AUTHORIZATION_FAILED per group",
        HANDLER,
        "answers per group (handlers/describe_groups.py)",
    ),
    16: Rule(
        "ListGroups",
        ((("Describe", "Cluster"),), (("Describe", "Group"),)),
        "no error: only the groups it may Describe",
        HANDLER,
        "Describe on the Cluster lists every group, else each group is filtered (handlers/list_groups.py)",
    ),
    17: Rule("SaslHandshake", (), "-", NO_CHECK, "served before authentication"),
    18: Rule("ApiVersions", (), "-", NO_CHECK, "served before authentication"),
    19: Rule(
        "CreateTopics",
        ((("Create", "Cluster"),), (("Create", "Topic"),)),
        "TOPIC_AUTHORIZATION_FAILED per topic",
        BEFORE,
        "",
        _create_topics,
    ),
    20: Rule(
        "DeleteTopics", ((("Delete", "Topic"),),), "TOPIC_AUTHORIZATION_FAILED per topic", BEFORE, "", _delete_topics
    ),
    21: Rule(
        "DeleteRecords",
        ((("Delete", "Topic"),),),
        "TOPIC_AUTHORIZATION_FAILED per partition",
        BEFORE,
        "internal topics (`__consumer_offsets`, `__transaction_state`) are refused with INVALID_TOPIC_EXCEPTION "
        "whoever asks",
        _delete_records,
    ),
    22: Rule(
        "InitProducerId",
        ((("IdempotentWrite", "Cluster"),), (("Write", "TransactionalId"),)),
        "CLUSTER_AUTHORIZATION_FAILED / TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
        BEFORE,
        "IdempotentWrite on the Cluster without a transactional id, Write on the TransactionalId with one",
        _init_producer_id,
    ),
    24: Rule(
        "AddPartitionsToTxn",
        ((("Write", "TransactionalId"), ("Write", "Topic")),),
        "TRANSACTIONAL_ID_AUTHORIZATION_FAILED / TOPIC_AUTHORIZATION_FAILED per partition",
        BEFORE,
        "a refused topic makes the partitions the cluster lacks UNKNOWN_TOPIC_OR_PARTITION and the others "
        "OPERATION_NOT_ATTEMPTED (txn/authorization.py)",
        txn_authorization.add_partitions_to_txn,
    ),
    25: Rule(
        "AddOffsetsToTxn",
        ((("Write", "TransactionalId"), ("Read", "Group")),),
        "TRANSACTIONAL_ID_AUTHORIZATION_FAILED / GROUP_AUTHORIZATION_FAILED",
        BEFORE,
        "",
        txn_authorization.add_offsets_to_txn,
    ),
    26: Rule(
        "EndTxn",
        ((("Write", "TransactionalId"),),),
        "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
        BEFORE,
        "",
        txn_authorization.end_txn,
    ),
    27: Rule(
        "WriteTxnMarkers",
        CLUSTER_ACTION,
        "CLUSTER_AUTHORIZATION_FAILED on every partition",
        BEFORE,
        "inter-broker: from transaction coordinators",
        txn_authorization.write_txn_markers,
    ),
    28: Rule(
        "TxnOffsetCommit",
        ((("Write", "TransactionalId"), ("Read", "Group"), ("Read", "Topic")),),
        "TRANSACTIONAL_ID_AUTHORIZATION_FAILED / GROUP_AUTHORIZATION_FAILED / TOPIC_AUTHORIZATION_FAILED per partition",
        BEFORE,
        "Read on each Topic: the refused ones are answered TOPIC_AUTHORIZATION_FAILED, the others committed",
        txn_authorization.txn_offset_commit,
    ),
    23: Rule(
        "OffsetForLeaderEpoch",
        ((("ClusterAction", "Cluster"),), (("Describe", "Topic"),)),
        "TOPIC_AUTHORIZATION_FAILED per partition",
        BEFORE,
        "ClusterAction on the Cluster answers every partition (followers); else Describe per Topic (KIP-320 consumers)",
        _offset_for_leader_epoch,
    ),
    29: Rule(
        "DescribeAcls",
        ((("Describe", "Cluster"),),),
        "CLUSTER_AUTHORIZATION_FAILED",
        HANDLER,
        "SECURITY_DISABLED without an authorizer (handlers/describe_acls.py)",
    ),
    30: Rule(
        "CreateAcls",
        ((("Alter", "Cluster"),),),
        "CLUSTER_AUTHORIZATION_FAILED",
        HANDLER,
        "SECURITY_DISABLED without an authorizer (handlers/create_acls.py)",
    ),
    31: Rule(
        "DeleteAcls",
        ((("Alter", "Cluster"),),),
        "CLUSTER_AUTHORIZATION_FAILED",
        HANDLER,
        "SECURITY_DISABLED without an authorizer (handlers/delete_acls.py)",
    ),
    32: Rule(
        "DescribeConfigs",
        ((("DescribeConfigs", "Topic"),), (("DescribeConfigs", "Cluster"),)),
        "TOPIC_AUTHORIZATION_FAILED / CLUSTER_AUTHORIZATION_FAILED per resource",
        HANDLER,
        "DescribeConfigs on the Topic (TOPIC) or the Cluster (BROKER), per resource (handlers/describe_configs.py)",
    ),
    33: Rule(
        "AlterConfigs",
        ((("AlterConfigs", "Topic"),), (("AlterConfigs", "Cluster"),)),
        "TOPIC_AUTHORIZATION_FAILED / CLUSTER_AUTHORIZATION_FAILED per resource",
        BEFORE,
        "AlterConfigs on the Topic (TOPIC resources) or the Cluster (BROKER resources), before any lookup",
        _alter_configs,
    ),
    35: Rule(
        "DescribeLogDirs",
        ((("Describe", "Cluster"),),),
        "no error: an empty answer",
        HANDLER,
        "handlers/describe_log_dirs.py",
    ),
    36: Rule("SaslAuthenticate", (), "-", NO_CHECK, "served before authentication"),
    37: Rule(
        "CreatePartitions",
        ((("Alter", "Topic"),),),
        "TOPIC_AUTHORIZATION_FAILED per topic",
        BEFORE,
        "a topic named twice is INVALID_REQUEST whoever asks; a count above 10,000 "
        "(topic_admin.MAX_PARTITIONS_PER_TOPIC) is INVALID_PARTITIONS",
        _create_partitions,
    ),
    42: Rule(
        "DeleteGroups", ((("Delete", "Group"),),), "GROUP_AUTHORIZATION_FAILED per group", BEFORE, "", _delete_groups
    ),
    43: Rule(
        "ElectLeaders",
        ((("Alter", "Cluster"),),),
        "CLUSTER_AUTHORIZATION_FAILED",
        HANDLER,
        "handlers/elect_leaders.py",
    ),
    44: Rule(
        "IncrementalAlterConfigs",
        ((("AlterConfigs", "Topic"),), (("AlterConfigs", "Cluster"),)),
        "TOPIC_AUTHORIZATION_FAILED / CLUSTER_AUTHORIZATION_FAILED per resource",
        BEFORE,
        "as AlterConfigs",
        _alter_configs,
    ),
}


def authorize(az: Authorizer, api_key: int, ctx: RequestContext, body: Message) -> Result:
    """Check one request against :data:`TABLE` (the rules enforced before the handler). Raises
    :class:`Refused` when the connection must be closed instead of answered."""
    rule = TABLE.get(api_key)
    if rule is None or rule.check is None:
        return None, body, None
    return rule.check(az, ctx, body)


def _needs_text(rule: Rule) -> str:
    if not rule.needs:
        return "-"
    return " or ".join(" and ".join(f"{op} on {res}" for op, res in alt) for alt in rule.needs)


def markdown_table() -> str:
    """:data:`TABLE` as the Markdown table of docs/security.md (a test keeps the two equal)."""
    lines = [
        "| key | API | needs (any one line of `or`) | refused with | checked | notes |",
        "|---|---|---|---|---|---|",
    ]
    for key in sorted(TABLE):
        r = TABLE[key]
        lines.append(f"| {key} | {r.api} | {_needs_text(r)} | {r.denied} | {r.where} | {r.note} |")
    return "\n".join(lines) + "\n"
