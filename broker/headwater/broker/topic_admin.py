"""Creating and deleting topics in ZooKeeper (what CreateTopics / DeleteTopics and auto-creation do).

Any broker may take the request (as Kafka's AdminZkClient does): it writes the topic's config
and replica assignment in one ZooKeeper transaction; the controller sees the new topic, creates
each partition's state (leader, ISR, leader epoch 0) and tells the replicas. Deletion only marks
the topic under ``/admin/delete_topics``; the controller stops the replicas, has them delete
their logs and removes the znodes.

Replica assignment is Kafka's: round-robin from a random start broker with followers shifted,
and, when brokers have a ``broker.rack``, a rack-alternating broker order so that replicas of a
partition land on as many racks as possible.
"""

from __future__ import annotations

import random

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from headwater.broker.config import validate_topic_config
from headwater.broker.metadata_cache import MetadataCache, parse_broker_registration
from headwater.broker.storage.log import LogConfig
from headwater.broker.zk import ZooKeeper, to_json
from headwater.protocol.errors import ErrorCode, KafkaError
from headwater.zk import paths as zkpaths
from headwater.zk.topics import topic_name_error

#: CreatePartitions' and CreateTopics' bound on a topic's partition count (Headwater's; Kafka has none): assigning
#: them runs on the event loop (~1.3 us a partition) and ``/brokers/topics/<t>`` must stay well
#: under ZooKeeper's 1 MiB znode limit (10,000 partitions of 3 replicas are ~200 KB of JSON)
MAX_PARTITIONS_PER_TOPIC = 10_000


def validate_topic_name(name: str) -> None:
    """Kafka's topic-name rule (one copy, in headwater.zk.topics) as INVALID_TOPIC_EXCEPTION."""
    reason = topic_name_error(name)
    if reason is not None:
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, reason)


def _replica_index(first: int, second_shift: int, index: int, n: int) -> int:
    shift = 1 + (second_shift + index) % (n - 1)
    return (first + shift) % n


def rack_alternated(racks: dict[int, str]) -> list[int]:
    """Brokers ordered by taking one broker from each rack in turn (racks and ids sorted)."""
    by_rack: dict[str, list[int]] = {}
    for b in sorted(racks):
        by_rack.setdefault(racks[b], []).append(b)
    queues = [by_rack[r] for r in sorted(by_rack)]
    out: list[int] = []
    while any(queues):
        for q in queues:
            if q:
                out.append(q.pop(0))
    return out


def assign_replicas(
    brokers: list[int],
    num_partitions: int,
    replication_factor: int,
    racks: dict[int, str | None] | None = None,
    rng: random.Random | None = None,
    start_index: int | None = None,
    start_partition: int = 0,
) -> dict[int, list[int]]:
    """Kafka's assignment: round-robin from a random start, followers shifted; rack-aware when every broker has a rack.

    Partitions added to an existing topic (CreatePartitions) continue its pattern, as Kafka's
    ``addPartitions`` does: ``start_partition`` is the first new partition id and ``start_index``
    the position of partition 0's leader in the (sorted or rack-alternated) broker list, used as
    both the start and the follower shift."""
    n = len(brokers)
    if replication_factor > n:
        raise KafkaError(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"Replication factor: {replication_factor} larger than available brokers: {n}.",
        )
    rng = rng or random.Random()
    known = {b: r for b, r in (racks or {}).items() if b in brokers and r is not None}
    if known and len(known) != n:
        raise KafkaError(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            "Not all brokers have rack information for replica rack aware assignment.",
        )
    start = rng.randrange(n) if start_index is None else start_index
    shift = rng.randrange(n) if start_index is None else start_index
    partition_ids = range(start_partition, start_partition + num_partitions)
    out: dict[int, list[int]] = {}
    if not known:
        ordered = sorted(brokers)
        for p in partition_ids:
            if p > 0 and p % n == 0:
                shift += 1
            first = (p + start) % n
            out[p] = [ordered[first]] + [
                ordered[_replica_index(first, shift, j, n)] for j in range(replication_factor - 1)
            ]
        return out
    ordered = rack_alternated(known)
    num_racks = len(set(known.values()))
    for p in partition_ids:
        if p > 0 and p % n == 0:
            shift += 1
        first = (p + start) % n
        leader = ordered[first]
        replicas = [leader]
        racks_used = {known[leader]}
        brokers_used = {leader}
        k = 0
        for _ in range(replication_factor - 1):
            while True:
                b = ordered[_replica_index(first, shift * num_racks, k, n)]
                k += 1
                rack = known[b]
                if (rack not in racks_used or len(racks_used) == num_racks) and (
                    b not in brokers_used or len(brokers_used) == n
                ):
                    replicas.append(b)
                    racks_used.add(rack)
                    brokers_used.add(b)
                    break
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
    log_defaults: LogConfig | None = None,
) -> dict[int, list[int]]:
    """Validate and (unless ``validate_only``) write a new topic. Raises KafkaError.

    ``configs`` are checked over ``log_defaults`` (the broker's), so a topic whose overrides
    conflict with a broker default (min.compaction.lag.ms above log.cleaner.max.compaction.lag.ms)
    is refused here rather than failing when its partitions are created. More partitions than
    :data:`MAX_PARTITIONS_PER_TOPIC` are INVALID_PARTITIONS before any work, as for add_partitions."""
    validate_topic_name(name)
    if num_partitions > MAX_PARTITIONS_PER_TOPIC:
        raise KafkaError(
            ErrorCode.INVALID_PARTITIONS,
            f"Requested {num_partitions} partitions for topic '{name}': at most {MAX_PARTITIONS_PER_TOPIC} "
            "partitions per topic are allowed.",
        )
    if name in cache.topics:
        raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
    collision = _collides(name, cache)
    if collision:
        raise KafkaError(
            ErrorCode.INVALID_TOPIC_EXCEPTION,
            f"Topic '{name}' collides with existing topic: {collision} ('.' and '_' are equivalent in metric names)",
        )
    racks = await registered_brokers(zk)
    live = sorted(racks)
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
        assignment = assign_replicas(live, num_partitions, replication_factor, racks)
    problem = validate_topic_config(configs, log_defaults)
    if problem:
        raise KafkaError(ErrorCode.INVALID_CONFIG, problem)
    if validate_only:
        return assignment
    if await zk.call(zk.client.exists, zkpaths.delete_topic_path(name)) is not None:
        # its deletion waits for a replica that is down: the old logs must go first (Kafka 2.3's check)
        raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' is marked for deletion.")

    tx = zk.client.transaction()
    tx.create(zkpaths.topic_config_path(name), to_json({"version": 1, "config": configs}))
    tx.create(
        zkpaths.topic_path(name),
        to_json({"version": 1, "partitions": {str(p): r for p, r in assignment.items()}}),
    )
    results = await zk.call(tx.commit)
    failures = [r for r in results if isinstance(r, Exception)]
    if any(isinstance(r, NodeExistsError) for r in failures):
        raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
    if failures:
        raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"ZooKeeper refused the topic: {failures[0]!r}")
    return assignment


async def add_partitions(
    zk: ZooKeeper,
    name: str,
    count: int,
    assignment: list[list[int]] | None,
    validate_only: bool = False,
) -> dict[int, list[int]]:
    """Grow ``name`` to ``count`` partitions (CreatePartitions, kafka-topics --alter --partitions).

    Reads the topic's assignment from ``/brokers/topics/<name>`` (not the metadata cache, so a
    second request right after the first sees its partitions), assigns the new partitions as topic
    creation does (continuing the topic's pattern, rack-aware when every broker has a rack) unless
    ``assignment`` gives one broker list per new partition, and rewrites the znode with every
    partition, conditional on the version read. The controller's watch on that znode creates the
    new partitions' state and leaders. Returns the new partitions' assignment; raises KafkaError.

    ``count`` above :data:`MAX_PARTITIONS_PER_TOPIC` is INVALID_PARTITIONS before anything is read
    or assigned (validate_only too): Kafka has no bound, and a request for 2**31 - 1 partitions
    would otherwise hold the event loop for most of an hour assigning them.
    """
    if count > MAX_PARTITIONS_PER_TOPIC:
        raise KafkaError(
            ErrorCode.INVALID_PARTITIONS,
            f"Requested {count} partitions for topic '{name}': at most {MAX_PARTITIONS_PER_TOPIC} partitions "
            "per topic are allowed.",
        )
    got = await zk.get_json(zkpaths.topic_path(name))
    if got is None or not isinstance(got[0], dict) or not isinstance(got[0].get("partitions"), dict):
        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist.")
    if await zk.call(zk.client.exists, zkpaths.delete_topic_path(name)) is not None:
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"The topic '{name}' is queued for deletion.")
    value, stat = got
    existing = {int(p): [int(r) for r in rs] for p, rs in value["partitions"].items()}
    current = len(existing)
    if count < current:
        raise KafkaError(
            ErrorCode.INVALID_PARTITIONS,
            f"Topic currently has {current} partitions, which is higher than the requested {count}.",
        )
    if count == current:
        raise KafkaError(ErrorCode.INVALID_PARTITIONS, f"Topic already has {current} partitions.")
    racks = await registered_brokers(zk)
    live = sorted(racks)
    rf = len(existing[0]) if 0 in existing else len(next(iter(existing.values())))
    added = count - current
    if assignment is not None:
        if len(assignment) != added:
            raise KafkaError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"Increasing the number of partitions by {added} but {len(assignment)} assignments provided.",
            )
        new: dict[int, list[int]] = {}
        for i, replicas in enumerate(assignment):
            p = current + i
            if len(replicas) != rf:
                raise KafkaError(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"Inconsistent replication factor between partitions, partition 0 has {rf} while partition "
                    f"{p} has replicas {replicas}.",
                )
            if len(set(replicas)) != len(replicas):
                raise KafkaError(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"Duplicate replica in partition {p}: {replicas}"
                )
            unknown = sorted(r for r in replicas if r not in live)
            if unknown:
                raise KafkaError(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"Unknown broker(s) in replica assignment: {unknown}."
                )
            new[p] = list(replicas)
    else:
        if not live:
            raise KafkaError(ErrorCode.BROKER_NOT_AVAILABLE, "No live brokers")
        first_leader = existing.get(0, [live[0]])[0]
        start_index = next((i for i, b in enumerate(live) if b >= first_leader), 0)
        new = assign_replicas(live, added, rf, racks, start_index=start_index, start_partition=current)
    if validate_only:
        return new
    partitions = {**existing, **new}
    body = {**value, "version": 1, "partitions": {str(p): partitions[p] for p in sorted(partitions)}}
    try:
        await zk.call(zk.client.set, zkpaths.topic_path(name), to_json(body), version=stat.version)
    except BadVersionError:
        raise KafkaError(
            ErrorCode.INVALID_PARTITIONS, f"The partitions of topic '{name}' changed meanwhile; describe it and retry."
        ) from None
    except NoNodeError:
        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist.") from None
    return new


async def registered_brokers(zk: ZooKeeper) -> dict[int, str | None]:
    """Live broker id -> rack, read from ``/brokers/ids`` (as Kafka's admin code does, so a topic
    can be created before this broker's metadata cache has heard from the controller)."""
    out: dict[int, str | None] = {}
    for child in await zk.children(zkpaths.BROKER_IDS):
        if not child.isdigit():
            continue
        got = await zk.get_data(zkpaths.broker_path(int(child)))
        if got is not None:
            info = parse_broker_registration(int(child), got[0])
            if info is not None:
                out[info.broker_id] = info.rack
    return out


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
    try:
        await zk.call(zk.client.create, zkpaths.delete_topic_path(name), b"", makepath=True)
    except NodeExistsError:
        pass
