"""Metadata (key 3), v0-8.

- The whole cluster's brokers (with the endpoint of the listener the request arrived on),
  topics, and per partition: leader, leader epoch (v7+), replicas, ISR, offline replicas (v5+).
- ``topics`` null (v1+) or empty (v0) means every topic.
- An unknown topic is created when ``auto.create.topics.enable`` and, from v4, the request's
  ``allow_auto_topic_creation`` allow it; it is answered LEADER_NOT_AVAILABLE until its
  leaders are known, as Kafka does; an illegal name then gets INVALID_TOPIC_EXCEPTION (the
  failed creation's error). Without auto-creation any unknown name, legal or not, gets
  UNKNOWN_TOPIC_OR_PARTITION, as in Kafka 2.3.
- With an authorizer: Describe on each Topic is checked before this handler (authorizer.TABLE);
  creating a topic that does not exist needs Create on the Cluster or on that Topic, decided per
  topic here, else that topic alone gets TOPIC_AUTHORIZATION_FAILED and is not created.
- controller_id: the active controller; until the controller exists, the lowest live broker id.
- Authorized operations (v8) are not computed: we answer Kafka's "not requested" sentinel.

The answer for an existing topic is kept (``cache.answers``, a lean.MetadataTopic that the codec
encodes once per API version) until the metadata cache changes that topic or the set of live
brokers (metadata_cache.py drops it then): an all-topics request at 10,000 partitions concatenates
kept blocks instead of building and encoding 10,000 partitions (docs/performance.md). The answer
does not depend on the request's version, listener or principal; authorization still filters per
topic per request (authorizer._metadata), and brokers, cluster id, controller id and throttle are
built per request. Missing topics (auto-creation, unknown, no partitions yet) are never kept.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from headwater.acls import CLUSTER_NAME
from headwater.broker import topic_admin
from headwater.broker.group.formats import OFFSETS_TOPIC
from headwater.protocol.errors import ErrorCode, KafkaError
from headwater.protocol.lean import MetadataTopic
from headwater.protocol.schema import Message

if TYPE_CHECKING:
    from headwater.broker.metadata_cache import MetadataCache
    from headwater.broker.request import RequestContext
    from headwater.broker.services import HandlerServices

log = logging.getLogger(__name__)

NOT_REQUESTED = -(2**31)
NONE = ErrorCode.NONE
LEADER_NOT_AVAILABLE = ErrorCode.LEADER_NOT_AVAILABLE


async def handle(broker: HandlerServices, ctx: RequestContext, request: Message) -> Message:
    cache = broker.cache
    requested = request["topics"]
    if requested is None or (ctx.version == 0 and not requested):
        names = sorted(cache.topics)
    else:
        names = list(dict.fromkeys(t["name"] for t in requested))
    allow_auto = broker.config.auto_create_topics_enable and (ctx.version < 4 or request["allow_auto_topic_creation"])

    topics: list[Message] = []
    answers = cache.answers
    for name in names:
        kept = answers.get(name)
        if kept is not None:
            topics.append(kept)
            continue
        info = cache.topics.get(name)
        if info is None or not info.partitions:
            # __consumer_offsets is created by FindCoordinator with its own settings, never auto-created
            create = allow_auto and info is None and name != OFFSETS_TOPIC
            if create and not _may_create(broker, ctx, name):
                topics.append(_answer(name, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
                continue
            topics.append(await _missing_topic(broker, name, create))
            continue
        answers[name] = answer = _topic_answer(cache, name)
        topics.append(answer)

    brokers = []
    for b in sorted(cache.brokers.values(), key=lambda b: b.broker_id):
        endpoint = b.endpoints.get(ctx.listener_name)
        if endpoint is None:
            continue  # Kafka omits brokers without an endpoint for this listener
        brokers.append({"node_id": b.broker_id, "host": endpoint[0], "port": endpoint[1], "rack": b.rack})
    controller = cache.controller_id
    if controller < 0 and cache.brokers:
        controller = min(cache.brokers)
    return {
        "throttle_time_ms": 0,
        "brokers": brokers,
        "cluster_id": broker.cluster_id,
        "controller_id": controller,
        "topics": topics,
        "cluster_authorized_operations": NOT_REQUESTED,
    }


def _topic_answer(cache: MetadataCache, name: str) -> MetadataTopic:
    """An existing topic's answer, from the cache as it is now (kept until it changes)."""
    info = cache.topics[name]
    live = cache.brokers
    partitions = []
    for index in sorted(info.partitions):
        p = info.partitions[index]
        replicas, leader = p.replicas, p.leader
        leader_live = leader in live  # -1 is never a live broker
        partitions.append(
            {
                "error_code": NONE if leader_live else LEADER_NOT_AVAILABLE,
                "partition_index": index,
                "leader_id": leader if leader_live else -1,
                "leader_epoch": p.leader_epoch,
                "replica_nodes": replicas,
                "isr_nodes": p.isr,
                "offline_replicas": [r for r in replicas if r not in live or r in p.offline_replicas],
            }
        )
    return MetadataTopic(
        {
            "error_code": ErrorCode.NONE,
            "name": name,
            "is_internal": name == OFFSETS_TOPIC,
            "partitions": partitions,
            "topic_authorized_operations": NOT_REQUESTED,
        }
    )


def _may_create(broker: HandlerServices, ctx: RequestContext, name: str) -> bool:
    """Automatic creation with an authorizer: Create on the Cluster or on this Topic, decided per
    topic (KafkaApis.handleTopicMetadataRequest); the others are TOPIC_AUTHORIZATION_FAILED."""
    az = broker.authorizer
    return az is None or az.allowed(ctx, "Create", "Cluster", CLUSTER_NAME) or az.allowed(ctx, "Create", "Topic", name)


def _answer(name: str, code: ErrorCode) -> Message:
    return {
        "error_code": code,
        "name": name,
        "is_internal": False,
        "partitions": [],
        "topic_authorized_operations": NOT_REQUESTED,
    }


async def _missing_topic(broker: HandlerServices, name: str, create: bool) -> Message:
    def answer(code: ErrorCode) -> Message:
        return _answer(name, code)

    if not create:
        # Kafka 2.3 (KafkaApis.getTopicMetadata) checks the name only when it tries to create the
        # topic: without auto-creation an illegal name is simply a topic that does not exist.
        return answer(
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if name not in broker.cache.topics else ErrorCode.LEADER_NOT_AVAILABLE
        )
    try:
        topic_admin.validate_topic_name(name)
    except KafkaError:
        return answer(ErrorCode.INVALID_TOPIC_EXCEPTION)
    cfg = broker.config
    try:
        await topic_admin.create_topic(
            broker.zk, broker.cache, name, cfg.num_partitions, cfg.default_replication_factor, None, {}
        )
        log.info("auto-created topic %s with %d partition(s)", name, cfg.num_partitions)
    except KafkaError as e:
        if e.code != ErrorCode.TOPIC_ALREADY_EXISTS:
            log.warning("auto-creation of topic %s failed: %s", name, e)
            return answer(e.code)
    return answer(ErrorCode.LEADER_NOT_AVAILABLE)
