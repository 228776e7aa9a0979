"""Control batches: the commit and abort markers of transactions (KIP-98), in Kafka's format.

A control batch is a magic-2 batch with attribute bits 4 (transactional) and 5 (control) set,
the producer id and epoch of the transaction it ends, base_sequence -1 and exactly one record::

    key    (int16 version = 0, int16 type)       type 0 = ABORT, 1 = COMMIT
    value  (int16 version = 0, int32 coordinator_epoch)

Only a partition leader writes one (on WriteTxnMarkers from the transaction coordinator); a
client's produce request may not carry one. Consumers skip control batches; read_committed ones
use the ABORT markers to end the aborted transactions a Fetch announced.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from headwater.protocol.errors import ErrorCode, KafkaError
from headwater.protocol.records.compression import DEFAULT_MAX_OUTPUT
from headwater.protocol.records.record import RecordInput, decode_batch, encode_batch

ABORT = 0
COMMIT = 1
_KEY = struct.Struct(">hh")  # version, type
_VALUE = struct.Struct(">hi")  # version, coordinator_epoch
CONTROL_KEY_VERSION = 0
CONTROL_VALUE_VERSION = 0


class Marker(NamedTuple):
    """The marker of one control batch."""

    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int


def encode_marker(
    producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int, timestamp_ms: int
) -> bytes:
    """One control batch at base offset 0 (the leader's append assigns the real offset)."""
    key = _KEY.pack(CONTROL_KEY_VERSION, COMMIT if commit else ABORT)
    value = _VALUE.pack(CONTROL_VALUE_VERSION, coordinator_epoch)
    return encode_batch(
        [RecordInput(key, value, timestamp_ms)],
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=-1,
        transactional=True,
        control=True,
    )


def decode_marker(batch: bytes | bytearray | memoryview, pos: int = 0) -> Marker:
    """The marker of the control batch at ``pos``; KafkaError(CORRUPT_MESSAGE) when it is not one."""
    h, records = decode_batch(batch, pos, verify_crc=False, max_output=DEFAULT_MAX_OUTPUT)
    if not h.is_control or len(records) != 1 or records[0].key is None or len(records[0].key) < _KEY.size:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "not a control batch with one marker record")
    version, kind = _KEY.unpack_from(records[0].key)
    if version != CONTROL_KEY_VERSION or kind not in (ABORT, COMMIT):
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"unknown control record version {version} type {kind}")
    value = records[0].value or b""
    coordinator_epoch = _VALUE.unpack_from(value)[1] if len(value) >= _VALUE.size else -1
    return Marker(h.producer_id, h.producer_epoch, kind == COMMIT, coordinator_epoch)
