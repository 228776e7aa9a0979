"""FindCoordinator (key 10), v0-2.

- key_type 0 (group): the coordinator is the leader of the group's partition of
  ``__consumer_offsets``; answered with its endpoint on the listener the request came in on.
- The offsets topic is created on the first lookup, as Kafka does (``offsets.topic.num.partitions``,
  ``offsets.topic.replication.factor``, ``offsets.topic.segment.bytes``, ``cleanup.policy=compact``);
  while it has fewer live brokers than that replication factor, or the partition has no leader
  yet, the answer is COORDINATOR_NOT_AVAILABLE (retriable: clients ask again).
- key_type 1 (transaction): the leader of the transactional id's partition of
  ``__transaction_state``, created on the first lookup as Kafka does
  (``transaction.state.log.num.partitions``, ``transaction.state.log.replication.factor`` capped by the
  live brokers, ``min.insync.replicas`` = ``transaction.state.log.min.isr`` capped by that factor,
  ``transaction.state.log.segment.bytes``, ``cleanup.policy=compact``,
  ``unclean.leader.election.enable=false``); COORDINATOR_NOT_AVAILABLE until it has a leader.
- Any other key_type: INVALID_REQUEST.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from headwater.broker import topic_admin
from headwater.broker.group.formats import OFFSETS_TOPIC
from headwater.broker.txn.formats import TRANSACTION_STATE_TOPIC
from headwater.protocol.errors import ErrorCode, KafkaError
from headwater.protocol.schema import Message

if TYPE_CHECKING:
    from headwater.broker.request import RequestContext
    from headwater.broker.services import HandlerServices

log = logging.getLogger(__name__)


def _error(code: ErrorCode, message: str | None = None) -> Message:
    return {"throttle_time_ms": 0, "error_code": code, "error_message": message, "node_id": -1, "host": "", "port": -1}


async def handle(broker: HandlerServices, ctx: RequestContext, request: Message) -> Message:
    if request["key_type"] == 1:  # the empty id too, as Kafka 2.3 (InitProducerId refuses it)
        topic = TRANSACTION_STATE_TOPIC
        info = broker.cache.topics.get(topic)
        if info is None or not info.partitions:
            return await _create_transaction_state_topic(broker)
        p = broker.txns.partition_for(request["key"])
    elif request["key_type"] == 0:
        if not request["key"]:
            return _error(ErrorCode.INVALID_GROUP_ID, "the group id must not be empty")
        topic = OFFSETS_TOPIC
        info = broker.cache.topics.get(topic)
        if info is None or not info.partitions:
            return await _create_offsets_topic(broker)
        p = broker.groups.partition_for(request["key"])
    else:
        return _error(ErrorCode.INVALID_REQUEST, f"unknown coordinator key type {request['key_type']}")
    state = broker.cache.partition(topic, p)
    leader = broker.cache.brokers.get(state.leader) if state is not None else None
    endpoint = leader.endpoints.get(ctx.listener_name) if leader is not None else None
    if leader is None or endpoint is None:
        return _error(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{topic}-{p} has no live leader")
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


async def _create_transaction_state_topic(broker: HandlerServices) -> Message:
    cfg = broker.config
    live = len(broker.cache.brokers)
    rf = min(cfg.transaction_state_log_replication_factor, live)
    if rf < 1:
        return _error(ErrorCode.COORDINATOR_NOT_AVAILABLE, "no live brokers")
    configs = {
        "cleanup.policy": "compact",
        "segment.bytes": str(cfg.transaction_state_log_segment_bytes),
        "min.insync.replicas": str(min(cfg.transaction_state_log_min_isr, rf)),
        "unclean.leader.election.enable": "false",
    }
    try:
        await topic_admin.create_topic(
            broker.zk,
            broker.cache,
            TRANSACTION_STATE_TOPIC,
            cfg.transaction_state_log_num_partitions,
            rf,
            None,
            configs,
        )
        log.info(
            "created %s with %d partition(s), replication factor %d",
            TRANSACTION_STATE_TOPIC,
            cfg.transaction_state_log_num_partitions,
            rf,
        )
    except KafkaError as e:
        if e.code != ErrorCode.TOPIC_ALREADY_EXISTS:
            log.warning("creating %s failed: %s", TRANSACTION_STATE_TOPIC, e)
    return _error(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{TRANSACTION_STATE_TOPIC} is being created")
