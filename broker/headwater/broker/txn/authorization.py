"""How Kafka 2.3's KafkaApis authorizes the transaction APIs, as checks for the authorizer's table.

Each check takes (authorizer, request context, decoded request) and returns the authorizer's
``Result``: a response to send instead of calling the handler (refused), or None and the request.

=====================  ===========================================================================
API                    needs (else)
=====================  ===========================================================================
FindCoordinator kt 1   Describe on the TransactionalId (TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
AddPartitionsToTxn     Write on the TransactionalId (TRANSACTIONAL_ID_AUTHORIZATION_FAILED on every
                       partition), then Write on each Topic (TOPIC_AUTHORIZATION_FAILED on those,
                       UNKNOWN_TOPIC_OR_PARTITION on the others the cluster does not have,
                       OPERATION_NOT_ATTEMPTED on the rest: nothing is added)
AddOffsetsToTxn        Write on the TransactionalId, then Read on the Group (GROUP_AUTHORIZATION_FAILED)
EndTxn                 Write on the TransactionalId
WriteTxnMarkers        ClusterAction on the Cluster (CLUSTER_AUTHORIZATION_FAILED on every partition)
TxnOffsetCommit        Write on the TransactionalId, Read on the Group (either refuses every
                       partition), Read on each Topic (TOPIC_AUTHORIZATION_FAILED on those; the
                       others are committed)
=====================  ===========================================================================

InitProducerId (Write on the TransactionalId, or IdempotentWrite on the Cluster without one) and
Produce (Write on the request's TransactionalId for transactional batches) are the authorizer's own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from headwater.acls import CLUSTER_NAME
from headwater.protocol.errors import ErrorCode
from headwater.protocol.schema import Message

#: the request context the authorizer passes through (typed loosely: this module sits below the
#: handlers and the authorizer, which import it)
RequestContext = Any


class Authorizer(Protocol):
    """The one call these checks make of the broker's authorizer."""

    def allowed(self, ctx: RequestContext, operation: str, resource_type: str, name: str) -> bool: ...


TXN_DENIED = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
TOPIC_DENIED = ErrorCode.TOPIC_AUTHORIZATION_FAILED
#: a key the AddPartitionsToTxn check adds to the request when it refused a topic: the handler then
#: adds nothing (Kafka 2.3's KafkaApis checks every partition before calling the coordinator)
NOT_ATTEMPTED = "_others_not_attempted"
Result = tuple[Message | None, Message, Callable[[Message], Message] | None]


def find_coordinator(az: Authorizer, ctx: RequestContext, body: Message) -> Result | None:
    """None when the request is not for a transaction coordinator (the group check applies)."""
    if body.get("key_type", 0) != 1:
        return None
    if az.allowed(ctx, "Describe", "TransactionalId", body["key"]):
        return None, body, None
    refused = {
        "throttle_time_ms": 0,
        "error_code": TXN_DENIED,
        "error_message": "Transactional Id authorization failed.",
        "node_id": -1,
        "host": "",
        "port": -1,
    }
    return refused, body, None


def add_partitions_answer(topics: list[Message], codes: dict[tuple[str, int], ErrorCode]) -> Message:
    """An AddPartitionsToTxn response with ``codes`` per partition (the handler's too)."""
    return {
        "throttle_time_ms": 0,
        "results": [
            {
                "name": t["name"],
                "results_by_partition": [
                    {"partition_index": p, "partition_error_code": codes[(t["name"], p)]} for p in t["partitions"]
                ],
            }
            for t in topics
        ],
    }


def add_partitions_to_txn(az: Authorizer, ctx: RequestContext, body: Message) -> Result:
    tps = [(t["name"], p) for t in body["topics"] for p in t["partitions"]]
    if not az.allowed(ctx, "Write", "TransactionalId", body["transactional_id"]):
        codes = dict.fromkeys(tps, TXN_DENIED)
    else:
        denied = {t for t, _ in tps if not az.allowed(ctx, "Write", "Topic", t)}
        if not denied:
            return None, body, None
        # the handler answers the partitions of the permitted topics (UNKNOWN_TOPIC_OR_PARTITION for
        # those the cluster does not have, OPERATION_NOT_ATTEMPTED for the others: it adds nothing);
        # the refused topics' partitions are TOPIC_AUTHORIZATION_FAILED, added after
        permitted = [t for t in body["topics"] if t["name"] not in denied]
        refused = [t for t in body["topics"] if t["name"] in denied]

        def post(resp: Message) -> Message:
            codes = dict.fromkeys([(t["name"], p) for t in refused for p in t["partitions"]], TOPIC_DENIED)
            resp["results"] = list(resp["results"]) + add_partitions_answer(refused, codes)["results"]
            return resp

        return None, {**body, "topics": permitted, NOT_ATTEMPTED: True}, post
    return add_partitions_answer(body["topics"], codes), body, None


def add_offsets_to_txn(az: Authorizer, ctx: RequestContext, body: Message) -> Result:
    if not az.allowed(ctx, "Write", "TransactionalId", body["transactional_id"]):
        return {"throttle_time_ms": 0, "error_code": TXN_DENIED}, body, None
    if not az.allowed(ctx, "Read", "Group", body["group_id"]):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED}, body, None
    return None, body, None


def end_txn(az: Authorizer, ctx: RequestContext, body: Message) -> Result:
    if not az.allowed(ctx, "Write", "TransactionalId", body["transactional_id"]):
        return {"throttle_time_ms": 0, "error_code": TXN_DENIED}, body, None
    return None, body, None


def write_txn_markers(az: Authorizer, ctx: RequestContext, body: Message) -> Result:
    if az.allowed(ctx, "ClusterAction", "Cluster", CLUSTER_NAME):
        return None, body, None
    refused = {
        "markers": [
            {
                "producer_id": m["producer_id"],
                "topics": [
                    {
                        "name": t["name"],
                        "partitions": [
                            {"partition_index": p, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED}
                            for p in t["partition_indexes"]
                        ],
                    }
                    for t in m["topics"]
                ],
            }
            for m in body["markers"]
        ]
    }
    return refused, body, None


def txn_offset_commit(az: Authorizer, ctx: RequestContext, body: Message) -> Result:
    def answer(topics: list[Any], code: Callable[[str], ErrorCode]) -> Message:
        return {
            "throttle_time_ms": 0,
            "topics": [
                {
                    "name": t["name"],
                    "partitions": [
                        {"partition_index": p["partition_index"], "error_code": code(t["name"])}
                        for p in t["partitions"]
                    ],
                }
                for t in topics
            ],
        }

    if not az.allowed(ctx, "Write", "TransactionalId", body["transactional_id"]):
        return answer(body["topics"], lambda _: TXN_DENIED), body, None
    if not az.allowed(ctx, "Read", "Group", body["group_id"]):
        return answer(body["topics"], lambda _: ErrorCode.GROUP_AUTHORIZATION_FAILED), body, None
    ok = [t for t in body["topics"] if az.allowed(ctx, "Read", "Topic", t["name"])]
    denied = [t for t in body["topics"] if t not in ok]
    if not denied:
        return None, body, None
    if not ok:
        return answer(denied, lambda _: ErrorCode.TOPIC_AUTHORIZATION_FAILED), body, None

    def post(resp: Message) -> Message:
        extra = answer(denied, lambda _: ErrorCode.TOPIC_AUTHORIZATION_FAILED)["topics"]
        resp["topics"] = list(resp["topics"]) + extra
        return resp

    return None, {**body, "topics": ok}, post
