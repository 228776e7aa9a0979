"""CreateTopics (key 19), v0-5.

- Validates name (INVALID_TOPIC_EXCEPTION), partitions (INVALID_PARTITIONS), replication
  factor against the live brokers (INVALID_REPLICATION_FACTOR), a manual assignment
  (INVALID_REPLICA_ASSIGNMENT), configs (INVALID_CONFIG); an existing topic gets
  TOPIC_ALREADY_EXISTS; a name given twice in one request gets INVALID_REQUEST.
- v4+ (KIP-464): num_partitions / replication_factor -1 without a manual assignment take the
  broker's ``num.partitions`` / ``default.replication.factor`` (librdkafka and kafkajs send -1
  for "broker default"); below v4, -1 is refused as before (INVALID_PARTITIONS /
  INVALID_REPLICATION_FACTOR), as a Kafka 2.3 broker refuses it.
- v5 (flexible, KIP-525): each created (or validated) topic's result also carries its
  partition count, replication factor and every topic config with its value and source (as
  DescribeConfigs gives them); a refused topic's carry -1, -1 and no configs.
- validate_only (v1+) checks everything and writes nothing.
- With timeout_ms > 0 the answer waits (up to timeout_ms) until every new partition has a
  leader in this broker's metadata, so an immediate Metadata request sees the topic; a
  topic still without leaders at the deadline gets REQUEST_TIMED_OUT, as in Kafka.
- error_message (v1+) says what was wrong. Accepted by any broker (no controller yet).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from typing import TYPE_CHECKING

from headwater.broker import topic_admin
from headwater.broker.handlers.describe_configs import topic_config_entries
from headwater.protocol.errors import ErrorCode, KafkaError
from headwater.protocol.schema import Message

if TYPE_CHECKING:
    from headwater.broker.request import RequestContext
    from headwater.broker.services import HandlerServices

log = logging.getLogger(__name__)


async def handle(broker: HandlerServices, ctx: RequestContext, request: Message) -> Message:
    counts = Counter(t["name"] for t in request["topics"])
    results: list[Message] = []
    created: list[str] = []
    validate_only = bool(request["validate_only"])
    for t in request["topics"]:
        name = t["name"]
        if counts[name] > 1:
            results.append(
                _result(
                    name, ErrorCode.INVALID_REQUEST, f"Create topics request from client has a duplicate topic {name}."
                )
            )
            continue
        assignment = {a["partition_index"]: list(a["broker_ids"]) for a in t["assignments"]}
        num_partitions, replication_factor = t["num_partitions"], t["replication_factor"]
        if ctx.version >= 4 and not assignment:
            if num_partitions == -1:
                num_partitions = broker.config.num_partitions
            if replication_factor == -1:
                replication_factor = broker.config.default_replication_factor
        configs = {c["name"]: c["value"] for c in t["configs"] if c["value"] is not None}
        try:
            placed = await topic_admin.create_topic(
                broker.zk,
                broker.cache,
                name,
                num_partitions,
                replication_factor,
                assignment or None,
                configs,
                validate_only,
                broker.config.log_defaults,
            )
        except KafkaError as e:
            if e.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                log.warning("CreateTopics %s from %s refused: %s", name, ctx.peer, e)
            results.append(_result(name, e.code, e.message))
            continue
        if not validate_only:
            log.info("created topic %s (client %r)", name, ctx.client_id)
            created.append(name)
        result = _result(name, ErrorCode.NONE, None)
        if ctx.version >= 5:
            result["num_partitions"] = len(placed)
            result["replication_factor"] = len(next(iter(placed.values()), []))
            result["configs"] = topic_config_entries(broker, configs)
        results.append(result)
    if created and request["timeout_ms"] > 0:
        ready = await _wait_for_leaders(broker, created, request["timeout_ms"] / 1000.0)
        for r in results:
            if r["name"] in created and r["name"] not in ready:
                r["error_code"] = ErrorCode.REQUEST_TIMED_OUT
                r["error_message"] = "Topic was created but its leaders were not known before the timeout"
    return {"throttle_time_ms": 0, "topics": results}


def _result(name: str, code: ErrorCode, message: str | None) -> Message:
    return {"name": name, "error_code": code, "error_message": message}


async def _wait_for_leaders(broker: HandlerServices, names: list[str], timeout_s: float) -> set[str]:
    deadline = time.monotonic() + timeout_s

    def ready() -> set[str]:
        out = set()
        for n in names:
            info = broker.cache.topics.get(n)
            if info and info.partitions and all(p.leader >= 0 for p in info.partitions.values()):
                out.add(n)
        return out

    while len(ready()) < len(names) and time.monotonic() < deadline:
        await broker.wait_for_metadata(deadline - time.monotonic())
    return ready()
