"""The records of ``__consumer_offsets``: Kafka's own formats, so its tools read ours and ours read theirs.

Every record has a key and a value, each starting with an int16 schema version; the rest uses
the protocol's primitives (big-endian ints, int16-length strings, int32-length bytes)::

    offset commit  key   v0/v1: group string, topic string, partition int32
                   value v0: offset int64, metadata string, commit_timestamp int64
                         v1: offset, metadata, commit_timestamp, expire_timestamp int64
                         v2: offset, metadata, commit_timestamp
                         v3: offset, leader_epoch int32, metadata, commit_timestamp   (written)
    group metadata key   v2: group string
                   value v0: protocol_type string, generation int32, protocol nullable string,
                             leader nullable string, members[member_id, client_id, client_host,
                             session_timeout int32, subscription bytes, assignment bytes]
                         v1: members add rebalance_timeout int32 before session_timeout
                         v2: adds current_state_timestamp int64 before members
                         v3: members add group_instance_id nullable string after member_id  (written)

A null value is a tombstone: the offset (or the whole group) was deleted. The partition of a
group is ``abs(java_string_hash(group_id)) % offsets.topic.num.partitions``, Java's
``String.hashCode`` over UTF-16 code units, as Kafka computes it, so a group lands on the same
partition number it would in Kafka.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from headwater.protocol.errors import DecodeError
from headwater.protocol.primitives import Reader, Writer
from headwater.protocol.schema import (
    BYTES,
    INT32,
    INT64,
    NULLABLE_STRING,
    STRING,
    Array,
    Field,
    Message,
    Struct,
)

OFFSETS_TOPIC = "__consumer_offsets"

OFFSET_KEY_VERSION = 1
GROUP_KEY_VERSION = 2
OFFSET_VALUE_VERSION = 3
GROUP_VALUE_VERSION = 3

_OFFSET_KEY = Struct(Field("group", STRING), Field("topic", STRING), Field("partition", INT32))
_GROUP_KEY = Struct(Field("group", STRING))
_OFFSET_VALUE = Struct(
    Field("offset", INT64),
    Field("leader_epoch", INT32, since=3, default=-1),
    Field("metadata", STRING),
    Field("commit_timestamp", INT64),
    Field("expire_timestamp", INT64, since=1, until=1, default=-1),
)
_MEMBER = Struct(
    Field("member_id", STRING),
    Field("group_instance_id", NULLABLE_STRING, since=3),
    Field("client_id", STRING),
    Field("client_host", STRING),
    Field("rebalance_timeout", INT32, since=1, default=-1),
    Field("session_timeout", INT32),
    Field("subscription", BYTES),
    Field("assignment", BYTES),
)
_GROUP_VALUE = Struct(
    Field("protocol_type", STRING),
    Field("generation", INT32),
    Field("protocol", NULLABLE_STRING),
    Field("leader", NULLABLE_STRING),
    Field("current_state_timestamp", INT64, since=2, default=-1),
    Field("members", Array(_MEMBER)),
)


@dataclass(frozen=True, slots=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupKey:
    group: str


def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode``: s[0]*31^(n-1) + ... over UTF-16 code units, as a signed int32."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for(group_id: str, num_partitions: int) -> int:
    """Kafka's ``Utils.abs(groupId.hashCode) % groupMetadataTopicPartitionCount``."""
    h = java_string_hash(group_id)
    return (0 if h == -(2**31) else abs(h)) % num_partitions


def _encode(version: int, struct: Struct, value: Message) -> bytes:
    w = Writer()
    w.int16(version)
    struct.encode(w, version, value)
    return w.getvalue()


def offset_key(group: str, topic: str, partition: int) -> bytes:
    return _encode(OFFSET_KEY_VERSION, _OFFSET_KEY, {"group": group, "topic": topic, "partition": partition})


def group_key(group: str) -> bytes:
    return _encode(GROUP_KEY_VERSION, _GROUP_KEY, {"group": group})


def offset_value(offset: int, leader_epoch: int, metadata: str, commit_timestamp: int) -> bytes:
    return _encode(
        OFFSET_VALUE_VERSION,
        _OFFSET_VALUE,
        {"offset": offset, "leader_epoch": leader_epoch, "metadata": metadata, "commit_timestamp": commit_timestamp},
    )


def group_value(value: Message) -> bytes:
    """``value`` holds the group fields above (members as dicts of the member fields)."""
    return _encode(GROUP_VALUE_VERSION, _GROUP_VALUE, value)


def decode_key(data: bytes) -> OffsetKey | GroupKey:
    """Raises DecodeError for a key of a version we do not know (or damaged bytes)."""
    r = Reader(data)
    version = r.int16()
    if version in (0, 1):
        k = _OFFSET_KEY.decode(r, version)
        return OffsetKey(k["group"], k["topic"], k["partition"])
    if version == 2:
        return GroupKey(_GROUP_KEY.decode(r, version)["group"])
    raise DecodeError(f"unknown {OFFSETS_TOPIC} key version {version}")


def _decode_value(data: bytes, struct: Struct, max_version: int, what: str) -> Message:
    r = Reader(data)
    version = r.int16()
    if not 0 <= version <= max_version:
        raise DecodeError(f"unknown {what} value version {version}")
    out: dict[str, Any] = struct.decode(r, version)
    return out


def decode_offset_value(data: bytes) -> Message:
    """offset, leader_epoch (-1 before v3), metadata, commit_timestamp, expire_timestamp (-1 but v1)."""
    return _decode_value(data, _OFFSET_VALUE, 3, "offset commit")


def decode_group_value(data: bytes) -> Message:
    return _decode_value(data, _GROUP_VALUE, 3, "group metadata")
