"""Partition reassignment as Kafka 2.3's kafka-reassign-partitions does it, through ZooKeeper.

Formats shared by the CLI, the controller (which reads ``/admin/reassign_partitions``) and the
brokers (which read the throttle configs):

- the reassignment JSON (``--reassignment-json-file`` and ``/admin/reassign_partitions``)::

      {"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[4,2]}, ...]}

- ``--topics-to-move-json-file``: ``{"version":1,"topics":[{"topic":"t"}]}``;
- entity configs ``/config/topics/<t>`` and ``/config/brokers/<id>``
  (``{"version":1,"config":{...}}``), each change announced by a
  ``/config/changes/config_change_<seq>`` ``{"version":2,"entity_path":"<type>/<name>"}`` written
  in the same transaction.

A throttle (``--throttle N``) sets, as Kafka 2.3: ``leader.replication.throttled.replicas`` of each
topic to the current replicas of its moving partitions and ``follower.replication.throttled.replicas``
to the replicas being added (``partition:broker`` lists), and ``leader.replication.throttled.rate``
/ ``follower.replication.throttled.rate`` = N on every broker taking part. ``--verify`` removes
them once nothing is in progress. Everything here uses a started kazoo client (sync).
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Mapping
from typing import Any

from headwater.zk import admin as zkadmin
from headwater.zk import config as zkconfig
from headwater.zk import topics as zktopics
from headwater.zk.paths import (
    BROKER_IDS,
    CONFIG_CHANGE_PREFIX,
    CONFIG_CHANGES,
    REASSIGN_PARTITIONS,
    config_entity_path,
    partition_state_path,
    topic_path,
)

LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"

TP = tuple[str, int]
Assignment = dict[TP, list[int]]


class ReassignmentError(ValueError):
    """Bad input or a cluster state the reassignment cannot start from; the message says which."""


def parse_reassignment_json(text: str) -> Assignment:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise ReassignmentError(f"the reassignment JSON is not JSON: {e}") from None
    if not isinstance(value, dict) or not isinstance(value.get("partitions"), list):
        raise ReassignmentError('the reassignment JSON must be {"version":1,"partitions":[...]}')
    out: Assignment = {}
    for entry in value["partitions"]:
        if not (
            isinstance(entry, dict)
            and isinstance(entry.get("topic"), str)
            and type(entry.get("partition")) is int
            and isinstance(entry.get("replicas"), list)
            and all(type(r) is int for r in entry["replicas"])
        ):
            raise ReassignmentError(f"each partition needs a topic, a partition and a list of broker ids: {entry!r}")
        tp = (entry["topic"], entry["partition"])
        if tp in out:
            raise ReassignmentError(f"partition {tp[0]}-{tp[1]} is listed twice")
        replicas = list(entry["replicas"])
        if not replicas:
            raise ReassignmentError(f"partition {tp[0]}-{tp[1]} has an empty replica list")
        if len(set(replicas)) != len(replicas):
            raise ReassignmentError(f"partition {tp[0]}-{tp[1]} names a broker twice: {replicas}")
        out[tp] = replicas
    if not out:
        raise ReassignmentError("the reassignment JSON lists no partitions")
    return out


def format_reassignment(assignment: Mapping[TP, list[int]]) -> str:
    """The reassignment JSON kafka-reassign-partitions prints and reads: the znode's own document."""
    return zkadmin.encode_reassignment(dict(assignment)).decode()


def parse_topics_to_move(text: str) -> list[str]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise ReassignmentError(f"the topics-to-move JSON is not JSON: {e}") from None
    topics = value.get("topics") if isinstance(value, dict) else None
    if not isinstance(topics, list) or not all(isinstance(t, dict) and isinstance(t.get("topic"), str) for t in topics):
        raise ReassignmentError('the topics-to-move JSON must be {"version":1,"topics":[{"topic":"t"},...]}')
    names = [t["topic"] for t in topics]
    if not names:
        raise ReassignmentError("the topics-to-move JSON lists no topics")
    return names


def assign(
    brokers: list[int], partitions: int, replication_factor: int, rng: random.Random | None = None
) -> dict[int, list[int]]:
    """Kafka's rack-unaware ``assignReplicasToBrokers``: leaders round-robin from a random broker,
    followers shifted so no two partitions share the same replica pair pattern."""
    n = len(brokers)
    if replication_factor > n:
        raise ReassignmentError(f"replication factor {replication_factor} is larger than the {n} brokers given")
    rng = rng or random.Random()
    start = rng.randrange(n)
    shift = rng.randrange(n)
    out: dict[int, list[int]] = {}
    for p in range(partitions):
        if p > 0 and p % n == 0:
            shift += 1
        first = (p + start) % n
        replicas = [brokers[first]]
        for j in range(replication_factor - 1):
            replicas.append(brokers[(first + 1 + (shift + j) % (n - 1)) % n])
        out[p] = replicas
    return out


# -- ZooKeeper ---------------------------------------------------------------------------------


def live_brokers(zk: Any) -> list[int]:
    return sorted(int(c) for c in zk.get_children(BROKER_IDS) if c.isdigit()) if zk.exists(BROKER_IDS) else []


def current_assignment(zk: Any, topics: Iterable[str]) -> Assignment:
    """The replicas of every partition of ``topics`` (unknown topics are absent)."""
    out: Assignment = {}
    for t in sorted(set(topics)):
        path = topic_path(t)
        if not zk.exists(path):
            continue
        for p, rs in zktopics.decode_assignment(t, zk.get(path)[0]).partitions.items():
            out[(t, p)] = rs
    return out


def in_progress(zk: Any) -> Assignment:
    if not zk.exists(REASSIGN_PARTITIONS):
        return {}
    return zkadmin.decode_reassignment(zk.get(REASSIGN_PARTITIONS)[0])


def isr(zk: Any, tp: TP) -> list[int]:
    path = partition_state_path(*tp)
    if not zk.exists(path):
        return []
    return list(zktopics.decode_partition_state(tp[0], tp[1], zk.get(path)[0]).isr)


def change_entity_config(
    zk: Any, entity_type: str, name: str, set_configs: Mapping[str, str], delete: Iterable[str] = ()
) -> bool:
    """Set and delete keys of ``/config/<entity_type>/<name>`` with a change notification, in one
    transaction conditional on the version read (re-read on a conflict). False: nothing to change."""
    from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

    path = config_entity_path(entity_type, name)
    zk.ensure_path(CONFIG_CHANGES)
    zk.ensure_path(path.rsplit("/", 1)[0])
    for _ in range(10):
        try:
            data, stat = zk.get(path)
            config = zkconfig.decode_entity_config(path, data)
            version: int | None = stat.version
        except NoNodeError:
            config, version = {}, None
        updated = {k: v for k, v in config.items() if k not in set(delete)}
        updated.update(set_configs)
        if updated == config:
            return False
        value = zkconfig.encode_entity_config(updated)
        tx = zk.transaction()
        if version is None:
            tx.create(path, value)
        else:
            tx.set_data(path, value, version=version)
        tx.create(CONFIG_CHANGE_PREFIX, zkconfig.encode_change(entity_type, name), sequence=True)
        results = tx.commit()
        if any(isinstance(r, BadVersionError | NodeExistsError | NoNodeError) for r in results):
            continue
        failures = [r for r in results if isinstance(r, Exception)]
        if failures:
            raise ReassignmentError(f"ZooKeeper refused the config change of {path}: {failures[0]!r}")
        return True
    raise ReassignmentError(f"could not change {path}: concurrent writers")


def throttled_replicas(current: Assignment, proposed: Assignment) -> tuple[dict[str, str], dict[str, str]]:
    """Per topic, the leader and follower ``*.replication.throttled.replicas`` values for the
    partitions that move: the current replicas lead-throttled, the added ones follow-throttled."""
    leader: dict[str, list[str]] = {}
    follower: dict[str, list[str]] = {}
    for tp, new in sorted(proposed.items()):
        old = current.get(tp, [])
        if new == old:
            continue
        leader.setdefault(tp[0], []).extend(f"{tp[1]}:{b}" for b in old)
        follower.setdefault(tp[0], []).extend(f"{tp[1]}:{b}" for b in new if b not in old)
    return {t: ",".join(v) for t, v in leader.items()}, {t: ",".join(v) for t, v in follower.items() if v}


def set_throttle(zk: Any, current: Assignment, proposed: Assignment, rate: int) -> None:
    leader, follower = throttled_replicas(current, proposed)
    for topic in sorted(set(leader) | set(follower)):
        configs = {LEADER_REPLICAS: leader.get(topic, ""), FOLLOWER_REPLICAS: follower.get(topic, "")}
        change_entity_config(zk, "topics", topic, {k: v for k, v in configs.items() if v})
    brokers = {b for tp, rs in proposed.items() if rs != current.get(tp) for b in [*rs, *current.get(tp, [])]}
    for b in sorted(brokers):
        change_entity_config(zk, "brokers", str(b), {LEADER_RATE: str(rate), FOLLOWER_RATE: str(rate)})


def remove_throttle(zk: Any, topics: Iterable[str]) -> None:
    """What --verify does once nothing is in progress: the rates off every broker, the replica
    lists off the topics."""
    for b in live_brokers(zk):
        change_entity_config(zk, "brokers", str(b), {}, [LEADER_RATE, FOLLOWER_RATE])
    for t in sorted(set(topics)):
        if zk.exists(topic_path(t)):
            change_entity_config(zk, "topics", t, {}, [LEADER_REPLICAS, FOLLOWER_REPLICAS])
