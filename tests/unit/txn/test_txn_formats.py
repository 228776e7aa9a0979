"""``__transaction_state`` records in Kafka's TransactionLog format (hand-checked bytes), the
transaction state machine table (Kafka's TransactionMetadata transitions), and the partition of a
transactional id (Java's String.hashCode)."""

from __future__ import annotations

import pytest

from headwater.broker.txn import formats
from headwater.broker.txn.state import VALID_PREVIOUS, WRITTEN, TxnState, check_transition
from headwater.protocol.errors import DecodeError, ErrorCode, KafkaError


def hexdump(text: str) -> bytes:
    return bytes.fromhex("".join(line.split("#", 1)[0].replace(" ", "") for line in text.splitlines()))


def test_key_and_value_bytes_as_kafka_writes_them() -> None:
    assert formats.key("tx") == hexdump("0000 0002 7478  # version 0, string 'tx'")
    v = formats.TxnValue(7, 3, 60000, int(TxnState.ONGOING), frozenset({("t", 1), ("t", 0)}), 1000, 900)
    assert formats.value(v, empty_state=False) == hexdump(
        """
        0000                  # version 0
        0000000000000007      # producer_id 7
        0003                  # producer_epoch 3
        0000ea60              # transaction_timeout_ms 60000
        01                    # transaction_status 1 Ongoing
        00000001 0001 74      # transaction_partitions[1] topic 't'
        00000002 00000000 00000001  # partition_ids [0, 1]
        00000000000003e8      # transaction_last_update_timestamp_ms 1000
        0000000000000384      # transaction_start_timestamp_ms 900
        """
    )
    empty = v._replace(status=int(TxnState.EMPTY), partitions=frozenset())
    assert formats.value(empty, empty_state=True)[2 + 8 + 2 + 4 + 1 : 2 + 8 + 2 + 4 + 1 + 4] == b"\xff\xff\xff\xff"
    assert formats.decode_value(formats.value(v, empty_state=False)) == v
    assert formats.decode_value(formats.value(empty, empty_state=True)) == empty
    assert formats.decode_key(formats.key("tx")) == "tx"
    with pytest.raises(DecodeError):
        formats.decode_key(b"\x00\x01\x00\x02tx")
    with pytest.raises(DecodeError):
        formats.decode_value(b"\x00\x00\x00")


def test_the_partition_is_kafkas() -> None:
    # Java (jshell): "orders-app".hashCode() == 772757305
    assert formats.partition_for("orders-app", 50) == 772757305 % 50
    assert formats.partition_for("orders-app", 1) == 0


def test_state_ids_and_transitions_are_kafkas() -> None:
    assert [(s.kafka_name, int(s)) for s in TxnState] == [
        ("Empty", 0),
        ("Ongoing", 1),
        ("PrepareCommit", 2),
        ("PrepareAbort", 3),
        ("CompleteCommit", 4),
        ("CompleteAbort", 5),
        ("Dead", 6),
        ("PrepareEpochFence", 7),
    ]
    assert TxnState.PREPARE_EPOCH_FENCE not in WRITTEN
    allowed = {(a, b) for b, prev in VALID_PREVIOUS.items() for a in prev}
    for a in TxnState:
        for b in TxnState:
            if (a, b) in allowed:
                check_transition(a, b, "x")
            else:
                with pytest.raises(KafkaError) as e:
                    check_transition(a, b, "x")
                assert e.value.code == ErrorCode.INVALID_TXN_STATE
    # the decision is final: nothing leads from a Prepare state but its Complete state (or Abort after a fence)
    assert {b for a, b in allowed if a == TxnState.PREPARE_COMMIT} == {TxnState.COMPLETE_COMMIT}
    assert {b for a, b in allowed if a == TxnState.PREPARE_ABORT} == {TxnState.COMPLETE_ABORT}
