"""Creating and deleting topics in ZooKeeper (what CreateTopics / DeleteTopics and auto-creation do).

Until the controller exists (a later issue), the broker that receives the request writes the
whole topic in one ZooKeeper transaction: config, replica assignment and each partition's
initial state (leader = first replica, leader epoch 0). Deletion marks the topic under
``/admin/delete_topics`` and removes its znodes; every broker deletes its local logs when it
sees the topic leave ``/brokers/topics``.
"""

from __future__ import annotations

import random
import re

from kazoo.exceptions import NodeExistsError, NoNodeError

from headwater.broker import zk as zkpaths
from headwater.broker.config import validate_topic_config
from headwater.broker.metadata_cache import MetadataCache
from headwater.broker.zk import ZooKeeper, to_json
from headwater.protocol.errors import ErrorCode, KafkaError

MAX_NAME_LENGTH = 249
_LEGAL = re.compile(r"^[a-zA-Z0-9._-]+$")


def validate_topic_name(name: str) -> None:
    if not name:
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, "Topic name is illegal, it can't be empty")
    if name in (".", ".."):
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, 'Topic name cannot be "." or ".."')
    if len(name) > MAX_NAME_LENGTH:
        raise KafkaError(
            ErrorCode.INVALID_TOPIC_EXCEPTION,
            f"Topic name is illegal, it can't be longer than {MAX_NAME_LENGTH} characters, topic name: {name}",
        )
    if not _LEGAL.match(name):
        raise KafkaError(
            ErrorCode.INVALID_TOPIC_EXCEPTION,
            f"Topic name {name!r} is illegal, it contains a character other than ASCII alphanumerics, '.', '_' and '-'",
        )


def assign_replicas(brokers: list[int], num_partitions: int, replication_factor: int) -> dict[int, list[int]]:
    """Kafka's rack-unaware assignment: round-robin from a random start, followers shifted."""
    n = len(brokers)
    if replication_factor > n:
        raise KafkaError(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"Replication factor: {replication_factor} larger than available brokers: {n}.",
        )
    brokers = sorted(brokers)
    start = random.randrange(n)
    shift = random.randrange(n)
    out: dict[int, list[int]] = {}
    for p in range(num_partitions):
        if p > 0 and p % n == 0:
            shift += 1
        first = (p + start) % n
        replicas = [brokers[first]]
        for j in range(replication_factor - 1):
            replicas.append(brokers[(first + 1 + (shift + j) % (n - 1)) % n])
        out[p] = replicas
    return out


async def create_topic(
    zk: ZooKeeper,
    cache: MetadataCache,
    name: str,
    num_partitions: int,
    replication_factor: int,
    assignment: dict[int, list[int]] | None,
    configs: dict[str, str],
    validate_only: bool = False,
) -> dict[int, list[int]]:
    """Validate and (unless ``validate_only``) write a new topic. Raises KafkaError."""
    validate_topic_name(name)
    if name in cache.topics:
        raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
    collision = _collides(name, cache)
    if collision:
        raise KafkaError(
            ErrorCode.INVALID_TOPIC_EXCEPTION,
            f"Topic '{name}' collides with existing topic: {collision} ('.' and '_' are equivalent in metric names)",
        )
    live = cache.live_broker_ids()
    if assignment:
        if num_partitions != -1 or replication_factor != -1:
            raise KafkaError(
                ErrorCode.INVALID_REQUEST,
                "Both numPartitions or replicationFactor and replicasAssignment were set. Both cannot be used at the same time.",
            )
        if sorted(assignment) != list(range(len(assignment))):
            raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "Partitions must be numbered from 0 without gaps")
        sizes = {len(r) for r in assignment.values()}
        if len(sizes) != 1 or 0 in sizes:
            raise KafkaError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT, "All partitions must have the same, non-zero, number of replicas"
            )
        for p, replicas in assignment.items():
            if len(set(replicas)) != len(replicas):
                raise KafkaError(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"Duplicate replica in partition {p}: {replicas}"
                )
            unknown = [r for r in replicas if r not in live]
            if unknown:
                raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"Unknown broker(s) {unknown} in partition {p}")
    else:
        if num_partitions <= 0:
            raise KafkaError(ErrorCode.INVALID_PARTITIONS, "Number of partitions must be larger than 0.")
        if replication_factor <= 0:
            raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0.")
        if not live:
            raise KafkaError(ErrorCode.BROKER_NOT_AVAILABLE, "No live brokers")
        assignment = assign_replicas(live, num_partitions, replication_factor)
    problem = validate_topic_config(configs)
    if problem:
        raise KafkaError(ErrorCode.INVALID_CONFIG, problem)
    if validate_only:
        return assignment

    tx = zk.client.transaction()
    tx.create(zkpaths.topic_config_path(name), to_json({"version": 1, "config": configs}))
    tx.create(
        zkpaths.topic_path(name),
        to_json({"version": 1, "partitions": {str(p): r for p, r in assignment.items()}}),
    )
    tx.create(f"{zkpaths.topic_path(name)}/partitions")
    for p, replicas in assignment.items():
        tx.create(f"{zkpaths.topic_path(name)}/partitions/{p}")
        state = {"controller_epoch": 0, "leader": replicas[0], "version": 1, "leader_epoch": 0, "isr": [replicas[0]]}
        tx.create(zkpaths.partition_state_path(name, p), to_json(state))
    results = await zk.call(tx.commit)
    failures = [r for r in results if isinstance(r, Exception)]
    if any(isinstance(r, NodeExistsError) for r in failures):
        raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
    if failures:
        raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"ZooKeeper refused the topic: {failures[0]!r}")
    return assignment


def _collides(name: str, cache: MetadataCache) -> str | None:
    if "." not in name and "_" not in name:
        return None
    key = name.replace(".", "_")
    for other in cache.topics:
        if other != name and other.replace(".", "_") == key:
            return other
    return None


async def delete_topic(zk: ZooKeeper, cache: MetadataCache, name: str, deletion_enabled: bool) -> None:
    if not deletion_enabled:
        raise KafkaError(ErrorCode.TOPIC_DELETION_DISABLED, "Topic deletion is disabled (delete.topic.enable=false)")
    exists = name in cache.topics or await zk.call(zk.client.exists, zkpaths.topic_path(name)) is not None
    if not exists:
        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition.")
    marker = f"{zkpaths.DELETE_TOPICS}/{name}"
    try:
        await zk.call(zk.client.create, marker, b"", makepath=True)
    except NodeExistsError:
        pass
    for path in (zkpaths.topic_path(name), zkpaths.topic_config_path(name), marker):
        try:
            await zk.call(zk.client.delete, path, recursive=True)
        except NoNodeError:
            pass
