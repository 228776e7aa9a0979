"""FindCoordinator (key 10), v0-2.

- key_type 0 (group): the coordinator is the leader of the group's partition of
  ``__consumer_offsets``; answered with its endpoint on the listener the request came in on.
- The offsets topic is created on the first lookup, as Kafka does (``offsets.topic.num.partitions``,
  ``offsets.topic.replication.factor``, ``offsets.topic.segment.bytes``, ``cleanup.policy=compact``);
  while it has fewer live brokers than that replication factor, or the partition has no leader
  yet, the answer is COORDINATOR_NOT_AVAILABLE (retriable: clients ask again).
- key_type 1 (transaction): INVALID_REQUEST -- transactions are not supported.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from headwater.broker import topic_admin
from headwater.broker.group.formats import OFFSETS_TOPIC
from headwater.protocol.errors import ErrorCode, KafkaError
from headwater.protocol.schema import Message

if TYPE_CHECKING:
    from headwater.broker.request import RequestContext
    from headwater.broker.services import HandlerServices

log = logging.getLogger(__name__)


def _error(code: ErrorCode, message: str | None = None) -> Message:
    return {"throttle_time_ms": 0, "error_code": code, "error_message": message, "node_id": -1, "host": "", "port": -1}


async def handle(broker: HandlerServices, ctx: RequestContext, request: Message) -> Message:
    if request["key_type"] != 0:
        return _error(ErrorCode.INVALID_REQUEST, "transactions are not supported: no transaction coordinator")
    if not request["key"]:
        return _error(ErrorCode.INVALID_GROUP_ID, "the group id must not be empty")
    info = broker.cache.topics.get(OFFSETS_TOPIC)
    if info is None or not info.partitions:
        return await _create_offsets_topic(broker)
    p = broker.groups.partition_for(request["key"])
    state = broker.cache.partition(OFFSETS_TOPIC, p)
    leader = broker.cache.brokers.get(state.leader) if state is not None else None
    endpoint = leader.endpoints.get(ctx.listener_name) if leader is not None else None
    if leader is None or endpoint is None:
        return _error(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{OFFSETS_TOPIC}-{p} has no live leader")
    return {
        "throttle_time_ms": 0,
        "error_code": ErrorCode.NONE,
        "error_message": None,
        "node_id": leader.broker_id,
        "host": endpoint[0],
        "port": endpoint[1],
    }


async def _create_offsets_topic(broker: HandlerServices) -> Message:
    cfg = broker.config
    live = len(broker.cache.brokers)
    if live < cfg.offsets_topic_replication_factor:
        why = (
            f"{OFFSETS_TOPIC} needs offsets.topic.replication.factor={cfg.offsets_topic_replication_factor} "
            f"live brokers, and {live} are alive"
        )
        log.warning("cannot create %s yet: %s", OFFSETS_TOPIC, why)
        return _error(ErrorCode.COORDINATOR_NOT_AVAILABLE, why)
    configs = {"cleanup.policy": "compact", "segment.bytes": str(cfg.offsets_topic_segment_bytes)}
    try:
        await topic_admin.create_topic(
            broker.zk,
            broker.cache,
            OFFSETS_TOPIC,
            cfg.offsets_topic_num_partitions,
            cfg.offsets_topic_replication_factor,
            None,
            configs,
        )
        log.info(
            "created %s with %d partition(s), replication factor %d",
            OFFSETS_TOPIC,
            cfg.offsets_topic_num_partitions,
            cfg.offsets_topic_replication_factor,
        )
    except KafkaError as e:
        if e.code != ErrorCode.TOPIC_ALREADY_EXISTS:
            log.warning("creating %s failed: %s", OFFSETS_TOPIC, e)
    return _error(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{OFFSETS_TOPIC} is being created")
