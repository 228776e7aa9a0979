"""ElectLeaders (key 43), v0-1 (Kafka 2.3's ElectPreferredLeaders v0; v1 as Kafka 2.4, KIP-460).

- Answered by the active controller only (clients send it there); any other broker answers
  NOT_CONTROLLER (v1: also as the top-level error_code).
- ``election_type`` 0 (v0 always): the preferred replica (the first of the assignment) becomes
  leader if it is alive and in the ISR; 1: a partition without a live leader gets the first live
  replica, in the ISR or not (an unclean election, whatever the topic's config says).
- ``topic_partitions`` null: every partition of the cluster.
- Per partition: NONE (elected), ELECTION_NOT_NEEDED (the leader already is the one the election
  would choose; v0 clients, which predate that code, get NONE), PREFERRED_LEADER_NOT_AVAILABLE /
  ELIGIBLE_LEADERS_NOT_AVAILABLE, UNKNOWN_TOPIC_OR_PARTITION, INVALID_TOPIC_EXCEPTION (being
  deleted), REQUEST_TIMED_OUT (elected, but this broker's metadata did not show it within
  ``timeout_ms``).
- With an authorizer: Alter on Cluster, else CLUSTER_AUTHORIZATION_FAILED for every partition.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from headwater.acls import CLUSTER_NAME
from headwater.protocol.apis.elect_leaders import PREFERRED, UNCLEAN
from headwater.protocol.errors import ErrorCode
from headwater.protocol.schema import Message

if TYPE_CHECKING:
    from headwater.broker.request import RequestContext
    from headwater.broker.services import HandlerServices

log = logging.getLogger(__name__)

TP = tuple[str, int]


async def handle(broker: HandlerServices, ctx: RequestContext, request: Message) -> Message:
    asked: list[TP] | None = None
    if request["topic_partitions"] is not None:
        asked = [(t["topic"], p) for t in request["topic_partitions"] for p in t["partitions"]]
    election_type = request["election_type"] if ctx.version >= 1 else PREFERRED
    if election_type not in (PREFERRED, UNCLEAN):
        return _answer(asked or [], ErrorCode.INVALID_REQUEST, f"Unknown election type {election_type}")
    if broker.authorizer is not None and not broker.authorizer.allowed(ctx, "Alter", "Cluster", CLUSTER_NAME):
        return _answer(asked or [], ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None)
    results = await broker.controller.elect_leaders(asked, unclean=election_type == UNCLEAN)
    if results is None:
        return _answer(asked or [], ErrorCode.NOT_CONTROLLER, f"Broker {broker.broker_id} is not the controller")
    elected = {
        tp: state.leader_epoch
        for tp, (code, _) in results.items()
        if code == ErrorCode.NONE and (state := broker.controller.ctx.states.get(tp)) is not None
    }
    if elected:
        log.info(
            "ElectLeaders (%s) from %s: %d partition(s) got a new leader",
            "unclean" if election_type == UNCLEAN else "preferred",
            ctx.peer,
            len(elected),
        )
    # As Kafka's DelayedElectLeader: answer once the new leaders are in this broker's metadata.
    deadline = time.monotonic() + request["timeout_ms"] / 1000.0
    while True:
        waiting = [tp for tp, epoch in elected.items() if not _shown(broker, tp, epoch)]
        if not waiting or time.monotonic() >= deadline:
            break
        await broker.wait_for_metadata(min(0.5, deadline - time.monotonic()))
    by_topic: dict[str, list[Message]] = {}
    for (topic, partition), (code, message) in results.items():
        if (topic, partition) in waiting:
            code, message = ErrorCode.REQUEST_TIMED_OUT, "The election did not complete within timeout_ms"
        if code == ErrorCode.ELECTION_NOT_NEEDED and ctx.version == 0:
            code, message = ErrorCode.NONE, None
        by_topic.setdefault(topic, []).append({"partition_id": partition, "error_code": code, "error_message": message})
    return {
        "throttle_time_ms": 0,
        "error_code": ErrorCode.NONE,
        "replica_election_results": [{"topic": t, "partition_result": ps} for t, ps in by_topic.items()],
    }


def _shown(broker: HandlerServices, tp: TP, leader_epoch: int) -> bool:
    info = broker.cache.partition(*tp)
    return info is not None and info.leader_epoch >= leader_epoch


def _answer(partitions: list[TP], code: ErrorCode, message: str | None) -> Message:
    """Every partition asked for gets ``code`` (v1 also carries it at the top)."""
    by_topic: dict[str, list[Message]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append({"partition_id": partition, "error_code": code, "error_message": message})
    return {
        "throttle_time_ms": 0,
        "error_code": code,
        "replica_election_results": [{"topic": t, "partition_result": ps} for t, ps in by_topic.items()],
    }
