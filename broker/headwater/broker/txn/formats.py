"""The records of ``__transaction_state``: Kafka 2.3's TransactionLog formats, so its tools read ours.

Every record has a key and a value, each starting with an int16 schema version, then the
protocol's primitives (big-endian ints, int16-length strings)::

    key    v0: transactional_id string
    value  v0: producer_id int64, producer_epoch int16, transaction_timeout_ms int32,
               transaction_status int8   (the state's id, see state.py),
               transaction_partitions nullable array of [topic string, partition_ids array of int32]
                                         (null in state Empty, as Kafka writes it),
               transaction_last_update_timestamp_ms int64, transaction_start_timestamp_ms int64

A null value is a tombstone: the transactional id expired (``transactional.id.expiration.ms``).
The partition of a transactional id is ``abs(java_string_hash(id)) % partitions``, as for groups.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from headwater.broker.group.formats import partition_for as _partition_for
from headwater.protocol.errors import DecodeError
from headwater.protocol.primitives import Reader, Writer
from headwater.protocol.schema import INT8, INT16, INT32, INT64, STRING, Array, Field, Struct

TRANSACTION_STATE_TOPIC = "__transaction_state"
KEY_VERSION = 0
VALUE_VERSION = 0

_KEY = Struct(Field("transactional_id", STRING))
_PARTITIONS = Struct(Field("topic", STRING), Field("partition_ids", Array(INT32)))
_VALUE = Struct(
    Field("producer_id", INT64),
    Field("producer_epoch", INT16),
    Field("transaction_timeout_ms", INT32),
    Field("transaction_status", INT8),
    Field("transaction_partitions", Array(_PARTITIONS, nullable_since=0)),
    Field("transaction_last_update_timestamp_ms", INT64),
    Field("transaction_start_timestamp_ms", INT64),
)


class TxnValue(NamedTuple):
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    status: int
    partitions: frozenset[tuple[str, int]]
    last_update_ms: int
    start_ms: int


def partition_for(transactional_id: str, num_partitions: int) -> int:
    """Kafka's ``Utils.abs(transactionalId.hashCode) % transactionTopicPartitionCount``."""
    return _partition_for(transactional_id, num_partitions)


def key(transactional_id: str) -> bytes:
    w = Writer()
    w.int16(KEY_VERSION)
    _KEY.encode(w, KEY_VERSION, {"transactional_id": transactional_id})
    return w.getvalue()


def value(v: TxnValue, *, empty_state: bool) -> bytes:
    by_topic: dict[str, list[int]] = {}
    for t, p in sorted(v.partitions):
        by_topic.setdefault(t, []).append(p)
    w = Writer()
    w.int16(VALUE_VERSION)
    _VALUE.encode(
        w,
        VALUE_VERSION,
        {
            "producer_id": v.producer_id,
            "producer_epoch": v.producer_epoch,
            "transaction_timeout_ms": v.timeout_ms,
            "transaction_status": v.status,
            "transaction_partitions": None
            if empty_state
            else [{"topic": t, "partition_ids": ps} for t, ps in by_topic.items()],
            "transaction_last_update_timestamp_ms": v.last_update_ms,
            "transaction_start_timestamp_ms": v.start_ms,
        },
    )
    return w.getvalue()


def decode_key(data: bytes) -> str:
    """The transactional id; DecodeError for another version or damaged bytes."""
    r = Reader(data)
    version = r.int16()
    if version != KEY_VERSION:
        raise DecodeError(f"unknown {TRANSACTION_STATE_TOPIC} key version {version}")
    out: str = _KEY.decode(r, version)["transactional_id"]
    return out


def decode_value(data: bytes) -> TxnValue:
    r = Reader(data)
    version = r.int16()
    if version != VALUE_VERSION:
        raise DecodeError(f"unknown {TRANSACTION_STATE_TOPIC} value version {version}")
    v: dict[str, Any] = _VALUE.decode(r, version)
    parts = frozenset((p["topic"], i) for p in (v["transaction_partitions"] or []) for i in p["partition_ids"])
    return TxnValue(
        v["producer_id"],
        v["producer_epoch"],
        v["transaction_timeout_ms"],
        v["transaction_status"],
        parts,
        v["transaction_last_update_timestamp_ms"],
        v["transaction_start_timestamp_ms"],
    )
