"""The idempotent producer through the wire: InitProducerId, duplicates, gaps, and a restart."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from headwater.broker.producer_ids import PRODUCER_ID_BLOCK_PATH, ProducerIdManager
from headwater.broker.zk import ZooKeeper
from headwater.protocol.apis import INIT_PRODUCER_ID, PRODUCE
from headwater.protocol.errors import ErrorCode
from headwater.protocol.records.record import encode_batch
from tests.broker.test_bad_input import _create, _latest
from tests.broker.wire import Wire
from tests.harness.broker import BrokerProcess
from tests.harness.clock import RECENT_MS

RETRIABLE = {
    ErrorCode.NOT_LEADER_FOR_PARTITION,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode.LEADER_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS,
    ErrorCode.REQUEST_TIMED_OUT,
}


def _init_producer_id(w: Wire, transactional_id: str | None = None, version: int = 1) -> dict[str, Any]:
    return w.request(INIT_PRODUCER_ID, version, {"transactional_id": transactional_id, "transaction_timeout_ms": 60000})


def _pbatch(pid: int, seq: int, n: int = 1, epoch: int = 0) -> bytes:
    return encode_batch(
        [(None, f"{pid}-{seq + i}".encode(), RECENT_MS, ()) for i in range(n)],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
    )


def _produce(w: Wire, topic: str, records: bytes, timeout: float = 30.0, acks: int = 1) -> dict[str, Any]:
    """Produce (v7), retrying while the partition has no leader yet (a retry is idempotent)."""
    deadline = time.monotonic() + timeout
    while True:
        resp = w.request(
            PRODUCE,
            7,
            {
                "acks": acks,
                "timeout_ms": 5000,
                "topics": [{"name": topic, "partitions": [{"partition_index": 0, "records": records}]}],
            },
        )
        part: dict[str, Any] = resp["responses"][0]["partitions"][0]
        if part["error_code"] not in RETRIABLE or time.monotonic() > deadline:
            return part
        time.sleep(0.05)


def test_init_producer_id_gives_distinct_ids(broker: BrokerProcess) -> None:
    w = Wire(broker.bootstrap)
    first, second = _init_producer_id(w, version=0), _init_producer_id(w)
    assert first["error_code"] == second["error_code"] == ErrorCode.NONE
    assert first["producer_id"] >= 0 and second["producer_id"] >= 0
    assert first["producer_id"] != second["producer_id"]
    assert first["producer_epoch"] == second["producer_epoch"] == 0


def test_a_duplicate_is_written_once_and_a_gap_refused(broker: BrokerProcess) -> None:
    w = Wire(broker.bootstrap)
    _create(w, "idem")
    pid = _init_producer_id(w)["producer_id"]
    assert _produce(w, "idem", _pbatch(pid, 0, 3))["base_offset"] == 0
    second = _pbatch(pid, 3, 2)
    first = _produce(w, "idem", second)
    assert first["error_code"] == ErrorCode.NONE and first["base_offset"] == 3
    again = _produce(w, "idem", second)
    assert again["error_code"] == ErrorCode.NONE and again["base_offset"] == 3
    assert _latest(w, "idem") == 5, "the duplicate must not be written"
    gap = _produce(w, "idem", _pbatch(pid, 9))
    assert gap["error_code"] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    unknown = _produce(w, "idem", _pbatch(pid + 1, 4))
    assert unknown["error_code"] == ErrorCode.UNKNOWN_PRODUCER_ID
    assert _latest(w, "idem") == 5


def test_a_duplicate_is_recognised_after_kill9_and_restart(broker: BrokerProcess) -> None:
    w = Wire(broker.bootstrap)
    _create(w, "idem-restart")
    pid = _init_producer_id(w)["producer_id"]
    batches = [_pbatch(pid, seq, 2) for seq in range(0, 20, 2)]
    for i, b in enumerate(batches):
        assert _produce(w, "idem-restart", b)["base_offset"] == 2 * i
    w.close()
    broker.kill9()
    broker.start()
    w = Wire(broker.bootstrap)
    again = _produce(w, "idem-restart", batches[-1])
    assert again["error_code"] == ErrorCode.NONE and again["base_offset"] == 18
    assert _produce(w, "idem-restart", _pbatch(pid, 21))["error_code"] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert _produce(w, "idem-restart", _pbatch(pid, 20))["base_offset"] == 20
    # a new producer id after the restart is not one handed out before it
    assert _init_producer_id(w)["producer_id"] > pid


def test_producer_id_blocks_never_overlap_between_brokers(zk_connect: str) -> None:
    """Two brokers' managers claiming blocks at once (a block is 1000 ids): every id handed out once."""

    async def go() -> tuple[list[int], Any]:
        zks = [ZooKeeper(zk_connect, 10000, 10000) for _ in range(2)]
        for zk in zks:
            await zk.start()
        try:
            managers = [ProducerIdManager(zk, broker_id) for broker_id, zk in enumerate(zks)]
            ids = await asyncio.gather(*(managers[i % 2].next_id() for i in range(2500)))
            got = await zks[0].get_json(PRODUCER_ID_BLOCK_PATH)
            return list(ids), got[0] if got else None
        finally:
            for zk in zks:
                await zk.stop()

    ids, block = asyncio.run(go())
    assert len(set(ids)) == len(ids) == 2500
    # Kafka's JSON: the ids are strings; the last block claimed ends where the ids end
    assert block["version"] == 1 and isinstance(block["block_start"], str) and isinstance(block["block_end"], str)
    assert max(ids) <= int(block["block_end"]) and int(block["block_end"]) - int(block["block_start"]) == 999
