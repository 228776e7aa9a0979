"""The transaction coordinator and the partition side through the wire, on one real broker:
InitProducerId with a transactional id (epoch bumps, fencing), AddPartitionsToTxn / EndTxn errors,
the LSO and aborted_transactions of read_committed fetches, the coordinator aborting a transaction
that timed out, ``__transaction_state`` in Kafka's record format, and reloading it after a restart."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from headwater.broker.txn import formats
from headwater.broker.txn.state import TxnState
from headwater.protocol.apis import (
    ADD_PARTITIONS_TO_TXN,
    END_TXN,
    FETCH,
    FIND_COORDINATOR,
    INIT_PRODUCER_ID,
    LIST_OFFSETS,
)
from headwater.protocol.errors import ErrorCode
from headwater.protocol.records.record import encode_batch, iter_batches
from tests.broker.test_bad_input import _create
from tests.broker.test_idempotence import _produce
from tests.broker.wire import Wire
from tests.harness.broker import BrokerProcess

FAST = {
    "transaction_state_log_num_partitions": 2,
    "transaction_abort_timed_out_transaction_cleanup_interval_ms": 200,
}


def wait_for(cond: Callable[[], Any], what: str, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = cond()
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def coordinator_ready(w: Wire, txn_id: str) -> None:
    wait_for(
        lambda: w.request(FIND_COORDINATOR, 1, {"key": txn_id, "key_type": 1})["error_code"] == ErrorCode.NONE,
        "the transaction coordinator",
    )


def init(w: Wire, txn_id: str, timeout_ms: int = 60000) -> dict[str, Any]:
    """InitProducerId, retrying the retriable answers (loading, a fencing abort in progress)."""

    def attempt() -> dict[str, Any] | None:
        r = w.request(INIT_PRODUCER_ID, 1, {"transactional_id": txn_id, "transaction_timeout_ms": timeout_ms})
        if r["error_code"] in (
            ErrorCode.CONCURRENT_TRANSACTIONS,
            ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
            ErrorCode.NOT_COORDINATOR,
        ):
            return None
        return r

    result: dict[str, Any] = wait_for(attempt, "InitProducerId")
    return result


def add(w: Wire, txn_id: str, pid: int, epoch: int, topic: str = "tx") -> int:
    r = w.request(
        ADD_PARTITIONS_TO_TXN,
        1,
        {
            "transactional_id": txn_id,
            "producer_id": pid,
            "producer_epoch": epoch,
            "topics": [{"name": topic, "partitions": [0]}],
        },
    )
    return int(r["results"][0]["results_by_partition"][0]["partition_error_code"])


def settled(call: Callable[[], int]) -> int:
    """The call's answer once it is not CONCURRENT_TRANSACTIONS (the previous transaction's markers
    and Complete record may still be in flight: clients retry that answer)."""
    code: int = wait_for(lambda: (c := call()) != ErrorCode.CONCURRENT_TRANSACTIONS and (c,), "a settled answer")[0]
    return code


def end(w: Wire, txn_id: str, pid: int, epoch: int, commit: bool) -> int:
    r = w.request(
        END_TXN, 1, {"transactional_id": txn_id, "producer_id": pid, "producer_epoch": epoch, "committed": commit}
    )
    return int(r["error_code"])


def txn_batch(pid: int, epoch: int, seq: int, n: int, tag: str) -> bytes:
    return encode_batch(
        [(None, f"{tag}{i}".encode(), int(time.time() * 1000), ()) for i in range(n)],  # now: not retention's
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        transactional=True,
    )


def fetch(w: Wire, topic: str, isolation: int, offset: int = 0) -> dict[str, Any]:
    r = w.request(
        FETCH,
        11,
        {
            "replica_id": -1,
            "max_wait_ms": 0,
            "min_bytes": 0,
            "max_bytes": 1 << 20,
            "isolation_level": isolation,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [
                {
                    "topic": topic,
                    "partitions": [{"partition": 0, "fetch_offset": offset, "partition_max_bytes": 1 << 20}],
                }
            ],
            "forgotten_topics_data": [],
            "rack_id": "",
        },
    )
    part: dict[str, Any] = r["responses"][0]["partitions"][0]
    return part


def values(part: dict[str, Any]) -> list[bytes]:
    data = part["records"]
    return [r.value for _, records in iter_batches(bytes(data or b"")) for r in records if r.value is not None]


def latest(w: Wire, topic: str, isolation: int) -> int:
    r = w.request(
        LIST_OFFSETS,
        5,
        {
            "replica_id": -1,
            "isolation_level": isolation,
            "topics": [
                {"name": topic, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}
            ],
        },
    )
    return int(r["topics"][0]["partitions"][0]["offset"])


def test_commit_abort_lso_and_aborted_transactions(broker_factory: Callable[..., BrokerProcess]) -> None:
    broker = broker_factory(0, **FAST)
    w = Wire(broker.bootstrap)
    _create(w, "tx")
    coordinator_ready(w, "app")
    first = init(w, "app")
    assert first["error_code"] == ErrorCode.NONE and first["producer_epoch"] == 0
    again = init(w, "app")
    assert (again["producer_id"], again["producer_epoch"]) == (first["producer_id"], 1), "the epoch is bumped"
    pid, epoch = again["producer_id"], again["producer_epoch"]

    assert add(w, "app", pid, 0) == ErrorCode.INVALID_PRODUCER_EPOCH, "the previous producer is fenced"
    assert add(w, "app", pid + 1, epoch) == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert add(w, "app", pid, epoch, topic="no-such-topic") == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert end(w, "app", pid, epoch, True) == ErrorCode.INVALID_TXN_STATE, "no transaction is open"

    # a committed transaction: invisible to read_committed until the marker is in
    assert add(w, "app", pid, epoch) == ErrorCode.NONE
    assert _produce(w, "tx", txn_batch(pid, epoch, 0, 3, "c"))["error_code"] == ErrorCode.NONE
    assert latest(w, "tx", 0) == 3 and latest(w, "tx", 1) == 0
    assert fetch(w, "tx", 1)["last_stable_offset"] == 0 and values(fetch(w, "tx", 1)) == []
    assert end(w, "app", pid, epoch, True) == ErrorCode.NONE
    wait_for(lambda: latest(w, "tx", 1) == 4, "the LSO to pass the commit marker")
    assert settled(lambda: end(w, "app", pid, epoch, True)) == ErrorCode.NONE, "a retried EndTxn of a completed commit"

    # an aborted transaction: read_committed fetches name it in aborted_transactions
    assert settled(lambda: add(w, "app", pid, epoch)) == ErrorCode.NONE
    assert _produce(w, "tx", txn_batch(pid, epoch, 3, 2, "a"))["error_code"] == ErrorCode.NONE
    assert end(w, "app", pid, epoch, False) == ErrorCode.NONE
    wait_for(lambda: latest(w, "tx", 1) == 7, "the LSO to pass the abort marker")
    committed = fetch(w, "tx", 1)
    assert committed["aborted_transactions"] == [{"producer_id": pid, "first_offset": 4}]
    assert values(committed) == [b"c0", b"c1", b"c2", b"a0", b"a1"]  # the client drops the aborted ones
    assert fetch(w, "tx", 0)["aborted_transactions"] in ([], None), "read_uncommitted gets none"
    assert fetch(w, "tx", 1, offset=7)["aborted_transactions"] in ([], None), "the abort lies below the fetch"

    # the aborted-transaction index on disk: one 34-byte entry (Kafka's layout)
    index = [f for f in os.listdir(broker.log_dir / "tx-0") if f.endswith(".txnindex")]
    assert len(index) == 1 and (broker.log_dir / "tx-0" / index[0]).stat().st_size == 34

    # __transaction_state holds the id's last state in Kafka's format (CompleteAbort follows the markers)
    wait_for(lambda: _stored_states(broker, "app")[-1].status == TxnState.COMPLETE_ABORT, "CompleteAbort stored")
    states = _stored_states(broker, "app")
    assert states[-1].producer_id == pid
    assert TxnState.PREPARE_COMMIT in [s.status for s in states]


def _stored_states(broker: BrokerProcess, txn_id: str) -> list[formats.TxnValue]:
    out = []
    for d in broker.log_dir.glob(f"{formats.TRANSACTION_STATE_TOPIC}-*"):
        for seg in sorted(d.glob("*.log")):
            for _, records in iter_batches(seg.read_bytes()):
                for r in records:
                    if r.key is not None and formats.decode_key(r.key) == txn_id and r.value is not None:
                        out.append(formats.decode_value(r.value))
    return out


def test_a_timed_out_transaction_is_aborted_and_its_producer_fenced(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    broker = broker_factory(0, **FAST)
    w = Wire(broker.bootstrap)
    _create(w, "tx")
    coordinator_ready(w, "slow")
    r = init(w, "slow", timeout_ms=1000)
    pid, epoch = r["producer_id"], r["producer_epoch"]
    assert add(w, "slow", pid, epoch) == ErrorCode.NONE
    assert _produce(w, "tx", txn_batch(pid, epoch, 0, 2, "x"))["error_code"] == ErrorCode.NONE
    wait_for(lambda: latest(w, "tx", 1) == 3, "the coordinator to abort the hanging transaction")
    assert fetch(w, "tx", 1)["aborted_transactions"] == [{"producer_id": pid, "first_offset": 0}]
    assert end(w, "slow", pid, epoch, True) == ErrorCode.INVALID_PRODUCER_EPOCH, "the producer was fenced"
    # the producer's batches under its old epoch are refused by the partition too
    assert _produce(w, "tx", txn_batch(pid, epoch, 2, 1, "y"))["error_code"] == ErrorCode.INVALID_PRODUCER_EPOCH


def test_a_new_producer_aborts_the_open_transaction_and_state_survives_a_restart(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    broker = broker_factory(0, **FAST)
    w = Wire(broker.bootstrap)
    _create(w, "tx")
    coordinator_ready(w, "zombie")
    r = init(w, "zombie")
    pid, epoch = r["producer_id"], r["producer_epoch"]
    assert add(w, "zombie", pid, epoch) == ErrorCode.NONE
    assert _produce(w, "tx", txn_batch(pid, epoch, 0, 2, "z"))["error_code"] == ErrorCode.NONE
    first_answer = w.request(INIT_PRODUCER_ID, 1, {"transactional_id": "zombie", "transaction_timeout_ms": 60000})
    assert first_answer["error_code"] == ErrorCode.CONCURRENT_TRANSACTIONS, "the open transaction is aborted first"
    fenced = init(w, "zombie")
    assert (fenced["producer_id"], fenced["producer_epoch"]) == (pid, epoch + 2)
    assert latest(w, "tx", 1) == 3 and fetch(w, "tx", 1)["aborted_transactions"] == [
        {"producer_id": pid, "first_offset": 0}
    ]

    broker.stop()
    broker.start()
    w = Wire(broker.bootstrap)
    coordinator_ready(w, "zombie")
    after = init(w, "zombie")
    assert (after["producer_id"], after["producer_epoch"]) == (pid, epoch + 3), "loaded from __transaction_state"
    assert fetch(w, "tx", 1)["aborted_transactions"] == [{"producer_id": pid, "first_offset": 0}]


def test_the_next_transaction_waits_for_the_previous_ones_markers(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    """AddPartitionsToTxn sent as soon as EndTxn answered (what a producer committing every few
    records does) is held until the previous transaction's markers and Complete record are written,
    then answered NONE, rather than CONCURRENT_TRANSACTIONS: librdkafka backs off ~60-80 ms on that
    answer, which made a 100-record transaction cost ~40 ms (the bench's txn scenario)."""
    broker = broker_factory(0, **FAST)
    w = Wire(broker.bootstrap)
    _create(w, "tx")
    coordinator_ready(w, "eager")
    r = init(w, "eager")
    pid, epoch = r["producer_id"], r["producer_epoch"]
    answers = []
    for t in range(5):
        assert settled(lambda: add(w, "eager", pid, epoch)) == ErrorCode.NONE
        assert _produce(w, "tx", txn_batch(pid, epoch, 2 * t, 2, f"t{t}-"))["error_code"] == ErrorCode.NONE
        assert end(w, "eager", pid, epoch, True) == ErrorCode.NONE
        answers.append(add(w, "eager", pid, epoch))  # at once: the commit is completing
        if answers[-1] == ErrorCode.NONE:  # an open transaction (no records): commit it
            assert end(w, "eager", pid, epoch, True) == ErrorCode.NONE
    assert answers == [ErrorCode.NONE] * 5, [ErrorCode(a).name for a in answers]
