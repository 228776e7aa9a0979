"""Admin requests kept in ZooKeeper until the controller completes them.

``/admin/delete_topics/<t>``: no data; the topic is deleted when every replica deleted its log.

``/admin/reassign_partitions`` (Kafka 2.3's ReassignPartitionsZNode, version 1)::

    {"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,2,3],"log_dirs":["any","any","any"]}]}

(``log_dirs`` is optional; kafka-reassign-partitions writes it only when one is named.)

``/admin/preferred_replica_election`` (PreferredReplicaElectionZNode, version 1)::

    {"version":1,"partitions":[{"topic":"t","partition":0}]}
"""

from __future__ import annotations

from headwater.zk.json import ZnodeFormatError, json_object, to_json

VERSION = 1

TopicPartition = tuple[str, int]


def encode_reassignment(moves: dict[TopicPartition, list[int]]) -> bytes:
    parts = [{"topic": t, "partition": p, "replicas": list(r)} for (t, p), r in sorted(moves.items())]
    return to_json({"version": VERSION, "partitions": parts})


def decode_reassignment(data: bytes | None) -> dict[TopicPartition, list[int]]:
    moves, malformed = decode_reassignment_entries(data)
    if malformed:
        raise ZnodeFormatError(f"/admin/reassign_partitions: malformed entry {malformed[0]!r}")
    return moves


def decode_reassignment_entries(data: bytes | None) -> tuple[dict[TopicPartition, list[int]], list[object]]:
    """The moves of every well-formed entry, and the malformed entries (the controller skips those)."""
    doc = json_object(data, "/admin/reassign_partitions")
    out: dict[TopicPartition, list[int]] = {}
    malformed: list[object] = []
    entries = doc.get("partitions")
    for entry in entries if isinstance(entries, list) else []:
        try:
            out[(str(entry["topic"]), int(entry["partition"]))] = [int(b) for b in entry["replicas"]]
        except (KeyError, TypeError, ValueError):
            malformed.append(entry)
    return out, malformed


def encode_preferred_election(partitions: list[TopicPartition]) -> bytes:
    return to_json({"version": VERSION, "partitions": [{"topic": t, "partition": p} for t, p in partitions]})


def decode_partition_list(path: str, data: bytes | None) -> list[TopicPartition]:
    """``{"version":1,"partitions":[{"topic":..,"partition":..}]}`` documents (preferred election,
    ISR change notifications)."""
    doc = json_object(data, path)
    out = []
    for entry in doc.get("partitions") or []:
        try:
            out.append((str(entry["topic"]), int(entry["partition"])))
        except (KeyError, TypeError, ValueError):
            raise ZnodeFormatError(f"{path}: malformed entry {entry!r}") from None
    return out
