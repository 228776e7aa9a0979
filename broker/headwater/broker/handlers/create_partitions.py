"""CreatePartitions (key 37), v0-1.

- Grows each named topic to ``count`` partitions (topic_admin.add_partitions): an unknown topic
  gets UNKNOWN_TOPIC_OR_PARTITION, a count not above the current one INVALID_PARTITIONS, a manual
  assignment of the wrong length, replication factor or with unknown brokers
  INVALID_REPLICA_ASSIGNMENT; a topic named twice INVALID_REQUEST.
- New partitions are assigned as topic creation assigns them (rack-aware when every broker has a
  rack) and written to ``/brokers/topics/<t>``; the controller creates their state and leaders.
- A count above ``topic_admin.MAX_PARTITIONS_PER_TOPIC`` (10,000; Kafka has no bound) is
  INVALID_PARTITIONS with a message naming the limit, before anything is read or assigned.
- validate_only checks everything and writes nothing.
- With an authorizer (authorizer.TABLE, before this handler): Alter on each Topic, else
  TOPIC_AUTHORIZATION_FAILED for that topic before its existence is looked at.
- With timeout_ms > 0 the answer waits (up to timeout_ms) until every new partition has a leader
  in this broker's metadata; REQUEST_TIMED_OUT otherwise, as in Kafka.
- Accepted by any broker (Kafka sends it to the controller; clients do, and any broker may write).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from typing import TYPE_CHECKING

from headwater.broker import topic_admin
from headwater.protocol.errors import ErrorCode, KafkaError
from headwater.protocol.schema import Message

if TYPE_CHECKING:
    from headwater.broker.request import RequestContext
    from headwater.broker.services import HandlerServices

log = logging.getLogger(__name__)


async def handle(broker: HandlerServices, ctx: RequestContext, request: Message) -> Message:
    counts = Counter(t["name"] for t in request["topics"])
    results: list[Message] = []
    grown: dict[str, int] = {}
    validate_only = bool(request["validate_only"])
    for t in request["topics"]:
        name = t["name"]
        if counts[name] > 1:
            results.append(_result(name, ErrorCode.INVALID_REQUEST, f"Duplicate topic in request: {name}"))
            continue
        assignments = t["assignments"]
        manual = None if assignments is None else [list(a["broker_ids"]) for a in assignments]
        try:
            new = await topic_admin.add_partitions(broker.zk, name, t["count"], manual, validate_only)
        except KafkaError as e:
            log.warning("CreatePartitions %s -> %d from %s refused: %s", name, t["count"], ctx.peer, e)
            results.append(_result(name, e.code, e.message))
            continue
        if not validate_only:
            log.info("topic %s: added partitions %s (client %r)", name, new, ctx.client_id)
            grown[name] = t["count"]
        results.append(_result(name, ErrorCode.NONE, None))
    if grown and request["timeout_ms"] > 0:
        ready = await _wait_for_leaders(broker, grown, request["timeout_ms"] / 1000.0)
        for r in results:
            if r["name"] in grown and r["name"] not in ready:
                r["error_code"] = ErrorCode.REQUEST_TIMED_OUT
                r["error_message"] = "Partitions were added but their leaders were not known before the timeout"
    return {"throttle_time_ms": 0, "results": results}


def _result(name: str, code: ErrorCode, message: str | None) -> Message:
    return {"name": name, "error_code": code, "error_message": message}


async def _wait_for_leaders(broker: HandlerServices, grown: dict[str, int], timeout_s: float) -> set[str]:
    deadline = time.monotonic() + timeout_s

    def ready() -> set[str]:
        out = set()
        for name, count in grown.items():
            info = broker.cache.topics.get(name)
            if info and all(p in info.partitions and info.partitions[p].leader >= 0 for p in range(count)):
                out.add(name)
        return out

    while len(ready()) < len(grown) and time.monotonic() < deadline:
        await broker.wait_for_metadata(deadline - time.monotonic())
    return ready()
